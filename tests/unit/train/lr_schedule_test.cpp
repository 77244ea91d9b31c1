#include "worker/train/lr_schedule.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numbers>

namespace tessera::train {
namespace {

TEST(LearningRate, WarmupThenCosineToTheMinimum) {
  // peak 1, 10 warm-up steps, 111 steps: the cosine spans steps 10..110 (100 intervals).
  const LrSchedule s{.peak = 1.0,
                     .warmup_steps = 10,
                     .total_steps = 111,
                     .decay = Decay::kCosine,
                     .min_ratio = 0.1};
  struct Case {
    int64_t step;
    double want;
  } cases[] = {
      {0, 0.1},
      {4, 0.5},
      {9, 1.0},   // linear warm-up (step+1)/10
      {10, 1.0},  // cosine starts at the peak
      {35, 0.1 + 0.9 * 0.5 * (1 + std::cos(std::numbers::pi * 0.25))},
      {60, 0.55},  // half way: (peak + min) / 2
      {110, 0.1},  // last step: the minimum
      {500, 0.1},  // past the end: stays at the minimum
  };
  for (const Case& c : cases)
    EXPECT_NEAR(LearningRate(s, c.step), c.want, 1e-12) << c.step;
}

TEST(LearningRate, LinearDecayToTheMinimum) {
  const LrSchedule s{.peak = 1.0,
                     .warmup_steps = 10,
                     .total_steps = 111,
                     .decay = Decay::kLinear,
                     .min_ratio = 0.1};
  EXPECT_NEAR(LearningRate(s, 10), 1.0, 1e-12);
  EXPECT_NEAR(LearningRate(s, 35), 0.1 + 0.9 * 0.75, 1e-12);
  EXPECT_NEAR(LearningRate(s, 60), 0.55, 1e-12);
  EXPECT_NEAR(LearningRate(s, 110), 0.1, 1e-12);
}

TEST(LearningRate, ConstantAfterWarmupAndNoWarmup) {
  const LrSchedule constant{
      .peak = 0.5, .warmup_steps = 4, .total_steps = 100, .decay = Decay::kConstant};
  EXPECT_DOUBLE_EQ(LearningRate(constant, 1), 0.25);
  EXPECT_DOUBLE_EQ(LearningRate(constant, 4), 0.5);
  EXPECT_DOUBLE_EQ(LearningRate(constant, 99), 0.5);
  const LrSchedule no_warmup{.peak = 2.0, .warmup_steps = 0, .total_steps = 3, .min_ratio = 0.0};
  EXPECT_DOUBLE_EQ(LearningRate(no_warmup, 0), 2.0);
  EXPECT_NEAR(LearningRate(no_warmup, 1), 1.0, 1e-12);
  EXPECT_NEAR(LearningRate(no_warmup, 2), 0.0, 1e-12);
}

// With a peak other than 1, the ends of each phase: warm-up starts at peak/warmup and reaches
// the peak at its last step, decay starts at the peak and ends at peak * minRatio.
TEST(LearningRate, EachPhaseEndsAtItsFractionOfThePeak) {
  for (const Decay decay : {Decay::kCosine, Decay::kLinear}) {
    const LrSchedule s{
        .peak = 6.0e-4, .warmup_steps = 100, .total_steps = 1000, .decay = decay, .min_ratio = 0.1};
    const char* name = decay == Decay::kCosine ? "cosine" : "linear";
    EXPECT_NEAR(LearningRate(s, 0), 6.0e-6, 1e-15) << name;
    EXPECT_NEAR(LearningRate(s, 99), 6.0e-4, 1e-15) << name;
    EXPECT_NEAR(LearningRate(s, 100), 6.0e-4, 1e-15) << name;
    EXPECT_NEAR(LearningRate(s, 999), 6.0e-5, 1e-15) << name;
    EXPECT_NEAR(LearningRate(s, 5000), 6.0e-5, 1e-15) << name;
  }
}

TEST(LearningRate, OneStepRunUsesThePeak) {
  const LrSchedule s{.peak = 0.3, .warmup_steps = 0, .total_steps = 1};
  EXPECT_DOUBLE_EQ(LearningRate(s, 0), 0.3);
}

}  // namespace
}  // namespace tessera::train
