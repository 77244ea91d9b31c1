#include "cli/run/progress.h"

#include <gtest/gtest.h>

#include <chrono>
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

// A column is filled once its share of the steps is done: the bar is full only at the end.
TEST(FormatProgressBar, AColumnIsFilledWhenItsStepsAreDone) {
  EXPECT_EQ(FormatProgressBar(View(299), 100).rfind("[#############################.] ", 0), 0u)
      << FormatProgressBar(View(299), 100);
  EXPECT_EQ(FormatProgressBar(View(9), 100).rfind("[..............................] ", 0), 0u)
      << FormatProgressBar(View(9), 100);
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

using TrackerClock = ProgressTracker::Clock;

// An instant of the test's own clock: the tracker is given the time of every report and never
// reads a clock itself (far from now, so a tracker that did would be found out).
TrackerClock::time_point At(double seconds) {
  return TrackerClock::time_point{} + std::chrono::hours(100000) +
         std::chrono::duration_cast<TrackerClock::duration>(std::chrono::duration<double>(seconds));
}

api::ProgressDocument Report(int64_t step, double tokens_per_second) {
  api::ProgressDocument r;
  r.step = step;
  r.total_steps = 300;
  r.loss = 2.5;
  r.tokens_per_second = tokens_per_second;
  return r;
}

// The rate runs from the attempt's first report with a step to the latest report, so the ETA
// is that of the latest report whenever it is shown (it was once measured to the moment it was
// shown, with the step of the last poll, and grew between polls).
TEST(ProgressTracker, TheEtaIsTheStepsLeftAtTheRateFromTheFirstStepToTheLatestReport) {
  ProgressTracker tracker;
  tracker.Record(Report(0, 0), /*attempt=*/0, At(-20));  // loading the data: not an origin
  tracker.Record(Report(10, 1000), 0, At(0));
  tracker.Record(Report(30, 1000), 0, At(10));  // 20 steps in 10 s, 270 left
  ASSERT_TRUE(tracker.EtaSeconds().has_value());
  EXPECT_DOUBLE_EQ(*tracker.EtaSeconds(), 135);
}

TEST(ProgressTracker, TheEtaIsUnknownUntilAStepWasTrainedSinceTheFirstReport) {
  ProgressTracker tracker;
  EXPECT_FALSE(tracker.EtaSeconds().has_value());
  tracker.Record(Report(10, 1000), 0, At(0));
  EXPECT_FALSE(tracker.EtaSeconds().has_value());
  tracker.Record(Report(10, 1000), 0, At(5));  // the same step, read again
  EXPECT_FALSE(tracker.EtaSeconds().has_value());
}

// After a gang restart nothing is shown until the new attempt reports, and its rate starts at
// the step it resumed from: neither the steps lost nor the time the restart took count.
TEST(ProgressTracker, ARestartedAttemptShowsItsOwnProgressAtItsOwnRate) {
  ProgressTracker tracker;
  tracker.Record(Report(10, 1000), 0, At(0));
  tracker.Record(Report(110, 1000), 0, At(100));
  ASSERT_TRUE(tracker.EtaSeconds().has_value());
  EXPECT_DOUBLE_EQ(*tracker.EtaSeconds(), 190);
  tracker.Restarted();
  EXPECT_FALSE(tracker.latest().has_value());
  EXPECT_FALSE(tracker.EtaSeconds().has_value());
  tracker.Record(Report(50, 0), /*attempt=*/1, At(200));  // resumed from the checkpoint at 50
  ASSERT_TRUE(tracker.latest().has_value());
  EXPECT_EQ(tracker.latest()->step, 50);
  EXPECT_EQ(tracker.attempt(), 1);
  EXPECT_FALSE(tracker.EtaSeconds().has_value());
  tracker.Record(Report(60, 1000), 1, At(205));  // 10 steps in 5 s, 240 left
  ASSERT_TRUE(tracker.EtaSeconds().has_value());
  EXPECT_DOUBLE_EQ(*tracker.EtaSeconds(), 120);
}

// The summary's tokens/s: each step trained counts once, however often it is read; the report
// of a resumed attempt before its first step (the checkpoint's step, 0 tokens/s) does not.
TEST(ProgressTracker, TheMeanThroughputCountsEveryStepTrainedOnce) {
  ProgressTracker tracker;
  EXPECT_FALSE(tracker.MeanTokensPerSecond().has_value());
  tracker.Record(Report(0, 0), 0, At(0));
  EXPECT_FALSE(tracker.MeanTokensPerSecond().has_value());
  tracker.Record(Report(10, 100), 0, At(1));
  tracker.Record(Report(10, 100), 0, At(2));
  tracker.Record(Report(20, 400), 0, At(3));
  tracker.Restarted();
  tracker.Record(Report(15, 0), 1, At(4));
  tracker.Record(Report(16, 700), 1, At(5));
  EXPECT_EQ(tracker.MeanTokensPerSecond(), std::optional<double>((100 + 400 + 700) / 3.0));
}

}  // namespace
}  // namespace tessera::cli
