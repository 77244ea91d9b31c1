#include "cli/run/progress.h"

#include <gtest/gtest.h>

#include <memory>
#include <optional>

#include "worker/train/http_server.h"

namespace tessera::cli {
namespace {

TEST(ProgressFetch, NothingListeningIsAbsentNotAHang) {
  // Port 1 on loopback is never a trainer; the call must come back with nothing.
  EXPECT_FALSE(FetchProgress(1, 200).has_value());
}

// A trainer's /progress as its metrics server serves it (worker/train/http_server.h).
TEST(ProgressFetch, ReadsTheDocumentOfProgress) {
  const api::ProgressDocument served{.step = 12,
                                     .total_steps = 300,
                                     .loss = 2.5,
                                     .val_loss = 2.75,
                                     .tokens_per_second = 1234,
                                     .updated_at = "2026-01-02T03:04:05Z"};
  std::unique_ptr<train::HttpServer> server;
  ASSERT_TRUE(train::HttpServer::Start(
                  0,
                  {{"/metrics", "text/plain", [] { return "{\"step\": 1}"; }},
                   {"/progress", "application/json", [&] { return api::EncodeProgress(served); }}},
                  &server)
                  .ok());
  EXPECT_EQ(FetchProgress(server->port(), 10000), std::optional<api::ProgressDocument>(served));
}

struct DurationCase {
  double seconds;
  std::string want;
};

TEST(FormatDuration, MinutesAndHours) {
  for (const DurationCase& c : std::vector<DurationCase>{{0, "0:00"},
                                                         {7.4, "0:07"},
                                                         {59.6, "1:00"},  // rounded, not cut
                                                         {245, "4:05"},
                                                         {3599, "59:59"},
                                                         {3600, "1:00:00"},
                                                         {3723, "1:02:03"},
                                                         {-3, "0:00"}}) {
    EXPECT_EQ(FormatDuration(c.seconds), c.want) << c.seconds;
  }
}

ProgressView View(int64_t step) {
  ProgressView v;
  v.report.step = step;
  v.report.total_steps = 300;
  v.report.loss = 2.13456;
  v.report.tokens_per_second = 12345;
  return v;
}

TEST(FormatProgressBar, FillsInProportionAndFitsTheWidth) {
  ProgressView v = View(150);
  v.eta_seconds = 45;
  const std::string bar = FormatProgressBar(v, 100);
  EXPECT_LE(bar.size(), 100u);
  EXPECT_EQ(bar.rfind("[###############...............] ", 0), 0u) << bar;
  EXPECT_NE(bar.find("150/300"), std::string::npos) << bar;
  EXPECT_NE(bar.find("loss 2.1346"), std::string::npos) << bar;
  EXPECT_NE(bar.find("12.3k tok/s"), std::string::npos) << bar;
  EXPECT_NE(bar.find("ETA 0:45"), std::string::npos) << bar;
  EXPECT_EQ(bar.find("restarts"), std::string::npos) << bar;  // none yet
  EXPECT_EQ(bar.find("val"), std::string::npos) << bar;       // no evaluation yet
  v.report.val_loss = 2.25;
  EXPECT_NE(FormatProgressBar(v, 100).find("loss 2.1346  val 2.2500  12.3k tok/s"),
            std::string::npos)
      << FormatProgressBar(v, 100);
}

// The step is right-aligned to the total's width, so the figures do not move as it grows.
TEST(FormatProgressBar, StepKeepsItsColumn) {
  ProgressView v = View(5);
  EXPECT_NE(FormatProgressBar(v, 100).find("]   5/300  loss"), std::string::npos)
      << FormatProgressBar(v, 100);
  EXPECT_EQ(FormatProgressBar(v, 100).size(), FormatProgressBar(View(300), 100).size());
}

// The bar is drawn while it can be 10 columns wide, and dropped below.
TEST(FormatProgressBar, BarNeedsTenColumns) {
  const ProgressView v = View(150);
  // "[" + 30 columns + "] " + the figures, at a width that leaves room for all of them.
  const int figures = static_cast<int>(FormatProgressBar(v, 200).size()) - 33;
  ASSERT_GT(figures, 0);
  const std::string ten = FormatProgressBar(v, figures + 3 + 10);
  EXPECT_EQ(ten.rfind("[#####.....] ", 0), 0u) << ten;
  const std::string nine = FormatProgressBar(v, figures + 3 + 9);
  EXPECT_EQ(nine.find('['), std::string::npos) << nine;
}

// A step past the total (a resumed job whose steps were lowered) fills the bar, no more; a
// document without a total draws an empty one.
TEST(FormatProgressBar, StepOutsideTheTotal) {
  ProgressView v = View(400);
  EXPECT_EQ(FormatProgressBar(v, 100).rfind("[##############################] ", 0), 0u)
      << FormatProgressBar(v, 100);
  v.report.total_steps = 0;
  EXPECT_EQ(FormatProgressBar(v, 100).rfind("[..............................] ", 0), 0u)
      << FormatProgressBar(v, 100);
}

TEST(FormatProgressBar, CompactTokenRates) {
  struct Case {
    double rate;
    std::string want;
  } cases[] = {{999, " 999 tok/s"},       {9999, " 9999 tok/s"}, {10000, " 10.0k tok/s"},
               {999949, " 999.9k tok/s"}, {1e6, " 1.0M tok/s"},  {2.5e7, " 25.0M tok/s"}};
  for (const Case& c : cases) {
    ProgressView v = View(1);
    v.report.tokens_per_second = c.rate;
    EXPECT_NE(FormatProgressBar(v, 120).find(c.want), std::string::npos)
        << c.rate << ": " << FormatProgressBar(v, 120);
  }
}

TEST(FormatProgressBar, NarrowTerminalDropsTheBar) {
  const std::string bar = FormatProgressBar(View(10), 40);
  EXPECT_LE(bar.size(), 40u);
  EXPECT_EQ(bar.find('['), std::string::npos) << bar;
}

TEST(FormatProgressBar, ShowsRestartsAndUnknownEta) {
  ProgressView v = View(300);
  v.restarts = 1;
  const std::string bar = FormatProgressBar(v, 120);
  EXPECT_NE(bar.find("restarts 1"), std::string::npos) << bar;
  EXPECT_NE(bar.find("ETA -:--"), std::string::npos) << bar;
  EXPECT_NE(bar.find("[##############################]"), std::string::npos) << bar;
}

TEST(FormatProgressLine, PlainFields) {
  ProgressView v = View(120);
  v.report.val_loss = 2.2;
  v.eta_seconds = 61;
  EXPECT_EQ(FormatProgressLine(v),
            "step 120/300 loss 2.1346 val_loss 2.2000 tokens/s 12345 eta 1:01");
}

TEST(FormatProgressLine, AttemptAndRestartsAfterARestart) {
  ProgressView v = View(120);
  v.attempt = 2;
  v.restarts = 1;
  EXPECT_EQ(FormatProgressLine(v), "step 120/300 loss 2.1346 tokens/s 12345 attempt 2 restarts 1");
}

}  // namespace
}  // namespace tessera::cli
