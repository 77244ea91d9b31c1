#include "cli/run/progress.h"

#include <gtest/gtest.h>

namespace tessera::cli {
namespace {

TEST(ProgressFetch, NothingListeningIsAbsentNotAHang) {
  // Port 1 on loopback is never a trainer; the call must come back with nothing.
  EXPECT_FALSE(FetchProgress(1, 200).has_value());
}

struct DurationCase {
  double seconds;
  std::string want;
};

TEST(FormatDuration, MinutesAndHours) {
  for (const DurationCase& c : std::vector<DurationCase>{
           {0, "0:00"}, {7.4, "0:07"}, {245, "4:05"}, {3723, "1:02:03"}, {-3, "0:00"}}) {
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

}  // namespace
}  // namespace tessera::cli
