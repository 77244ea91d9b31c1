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

// The final progress line of a termination message (the worker writes it, the controller
// reads it): taken apart from the failure's text only when it is the last line and decodes.
TEST(TerminationMessage, SplitsOffAFinalProgressLine) {
  const std::string doc = R"({"step":40,"totalSteps":100,"loss":2.5})";
  TerminationMessage both = SplitTerminationMessage("loss is NaN\nfinal progress: " + doc);
  EXPECT_EQ(both.text, "loss is NaN");
  EXPECT_EQ(both.progress_json, doc);
  ASSERT_TRUE(both.progress.has_value());
  EXPECT_EQ(both.progress->step, 40);
  EXPECT_EQ(both.progress->total_steps, 100);

  TerminationMessage alone = SplitTerminationMessage("final progress: " + doc);
  EXPECT_EQ(alone.text, "");
  ASSERT_TRUE(alone.progress.has_value());
  EXPECT_EQ(alone.progress->step, 40);

  for (const std::string& other :
       {std::string("rank 1 exited with code 4"), "final progress: " + doc + "\nthen this",
        std::string("a\nfinal progress: {\"step\": -1}"), std::string("a\nfinal progress: [1]"),
        std::string("progress: ") + doc, std::string("")}) {
    TerminationMessage m = SplitTerminationMessage(other);
    EXPECT_EQ(m.text, other);
    EXPECT_FALSE(m.progress.has_value()) << other;
    EXPECT_EQ(m.progress_json, "") << other;
  }
}

TEST(TerminationMessage, JoinKeepsTheProgressLineWithinTheLimit) {
  const std::string doc = R"({"step":3})";
  EXPECT_EQ(JoinTerminationMessage("failed", doc, 4096), "failed\nfinal progress: " + doc);
  EXPECT_EQ(JoinTerminationMessage("", doc, 4096), "final progress: " + doc);
  EXPECT_EQ(JoinTerminationMessage("failed", "", 4096), "failed");
  EXPECT_EQ(JoinTerminationMessage("failed", "", 3), "fai");
  // Room for the line and two bytes of the text, not three.
  const size_t line = std::string("final progress: ").size() + doc.size();
  EXPECT_EQ(JoinTerminationMessage("failed", doc, line + 3), "fa\nfinal progress: " + doc);
  EXPECT_EQ(JoinTerminationMessage("failed", doc, line + 1), "final progress: " + doc);
  EXPECT_EQ(JoinTerminationMessage("failed", doc, line), "final progress: " + doc);
  // A line that cannot fit is left out rather than cut (a cut one would not decode).
  EXPECT_EQ(JoinTerminationMessage("failed", doc, line - 1), "failed");
  // Cut between characters: "é" is two bytes.
  EXPECT_EQ(JoinTerminationMessage("\xc3\xa9\xc3\xa9", doc, line + 4),
            "\xc3\xa9\nfinal progress: " + doc);
  const TerminationMessage round =
      SplitTerminationMessage(JoinTerminationMessage("x\ny", doc, 4096));
  EXPECT_EQ(round.text, "x\ny");
  EXPECT_EQ(round.progress_json, doc);
}

}  // namespace
}  // namespace tessera::api
