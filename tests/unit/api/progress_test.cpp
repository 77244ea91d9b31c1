// The /progress document (api/progress.h): what rank 0 writes is what the controller and
// `tessera run` read back, and both readers refuse the same bodies.
#include "api/progress.h"

#include <gtest/gtest.h>

#include <cstdint>
#include <limits>
#include <string>

#include <nlohmann/json.hpp>

namespace tessera::api {
namespace {

TEST(ProgressDocument, DecodesTheTrainersDocument) {
  const auto p = DecodeProgressJson(
      R"({"step": 120, "totalSteps": 300, "loss": 2.5, "valLoss": 2.75,
          "tokensPerSecond": 12345.5, "updatedAt": "2026-01-01T00:00:00Z"})");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->step, 120);
  EXPECT_EQ(p->total_steps, 300);
  EXPECT_DOUBLE_EQ(p->loss, 2.5);
  ASSERT_TRUE(p->val_loss.has_value());
  EXPECT_DOUBLE_EQ(*p->val_loss, 2.75);
  EXPECT_DOUBLE_EQ(p->tokens_per_second, 12345.5);
  EXPECT_EQ(p->updated_at, "2026-01-01T00:00:00Z");
}

TEST(ProgressDocument, EncodeThenDecodeGivesTheSameDocument) {
  ProgressDocument before{.step = 7,
                          .total_steps = 9007199254740993,  // above 2^53: kept exact, not a double
                          .loss = 3.25,
                          .val_loss = std::nullopt,
                          .tokens_per_second = 0.5,
                          .updated_at = "2026-12-06T08:00:00Z"};
  const std::string text = EncodeProgress(before);
  EXPECT_TRUE(nlohmann::json::parse(text)["valLoss"].is_null()) << text;
  EXPECT_EQ(DecodeProgressJson(text), before);
  before.val_loss = 3.5;
  EXPECT_EQ(DecodeProgressJson(EncodeProgress(before)), before);
}

TEST(ProgressDocument, NullOrMissingValidationLossIsAbsent) {
  for (const char* body :
       {R"({"step": 0, "valLoss": null})", R"({"step": 0})", R"({"step": 0, "valLoss": "1.5"})"}) {
    const auto p = DecodeProgressJson(body);
    ASSERT_TRUE(p.has_value()) << body;
    EXPECT_FALSE(p->val_loss.has_value()) << body;
  }
}

TEST(ProgressDocument, RefusesWhatIsNotAProgressDocument) {
  for (const char* body :
       {"", "not json", "[]", "3", R"({"loss": 1})", R"({"step": "3"})", R"({"step": 2.5})",
        R"({"step": -1})", R"({"step": 18446744073709551615})", R"({"step": 1e30})"}) {
    EXPECT_FALSE(DecodeProgressJson(body).has_value()) << body;
  }
  EXPECT_FALSE(DecodeProgress(nlohmann::json::array()).has_value());
}

// Converting a float past int64's range was undefined (found by fuzzing the readers).
TEST(ProgressDocument, TotalStepsIsAnInt64OrUnknown) {
  for (const char* total : {"2.001e+80", "18446744073709551615", "12.5", "\"300\""}) {
    const auto p = DecodeProgressJson(std::string(R"({"step": 3, "totalSteps": )") + total + "}");
    ASSERT_TRUE(p.has_value()) << total;
    EXPECT_EQ(p->total_steps, 0) << total;
  }
  const auto max = DecodeProgressJson(R"({"step": 3, "totalSteps": 9223372036854775807})");
  ASSERT_TRUE(max.has_value());
  EXPECT_EQ(max->total_steps, std::numeric_limits<int64_t>::max());
}

TEST(ProgressDocument, MistypedOptionalFieldsReadAsUnknown) {
  const auto p = DecodeProgressJson(
      R"({"step": 4, "loss": "high", "tokensPerSecond": null, "updatedAt": 12})");
  ASSERT_TRUE(p.has_value());
  EXPECT_EQ(p->step, 4);
  EXPECT_EQ(p->loss, 0);
  EXPECT_EQ(p->tokens_per_second, 0);
  EXPECT_EQ(p->updated_at, "");
}

}  // namespace
}  // namespace tessera::api
