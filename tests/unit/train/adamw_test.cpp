#include "worker/train/adamw.h"

#include <gtest/gtest.h>

#include <cmath>
#include <numeric>
#include <vector>

namespace tessera::train {
namespace {

// Two AdamW steps on one parameter p0 = 1 with b1 = 0.9, b2 = 0.999, eps = 1e-8, wd = 0.1,
// lr = 0.1, gradients 0.5 then -0.25, worked by hand:
//   t=1: m = 0.05, v = 0.00025; m^ = 0.5, v^ = 0.25; m^/(sqrt(v^)+eps) = 1 (to 2e-8)
//        decayed:  p = 1 - 0.1*(1 + 0.1*1)   = 0.89
//        no decay: p = 1 - 0.1*1             = 0.90
//   t=2: m = 0.045 - 0.025 = 0.02, v = 0.00024975 + 0.0000625 = 0.00031225
//        m^ = 0.02/0.19 = 0.1052632, v^ = 0.00031225/0.001999 = 0.1562031, sqrt = 0.3952254
//        ratio = 0.2663373
//        decayed:  p = 0.89 - 0.1*(0.2663373 + 0.1*0.89) = 0.8544663
//        no decay: p = 0.90 - 0.1*0.2663373              = 0.8733663
TEST(AdamW, MatchesTwoHandComputedSteps) {
  AdamW opt(2, {.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.1f});
  std::vector<float> p = {1.0f, 1.0f};
  const std::vector<uint8_t> mask = {1, 0};
  opt.Step(p, std::vector<float>{0.5f, 0.5f}, mask, 0.1f);
  EXPECT_NEAR(p[0], 0.89f, 1e-6);
  EXPECT_NEAR(p[1], 0.90f, 1e-6);
  opt.Step(p, std::vector<float>{-0.25f, -0.25f}, mask, 0.1f);
  EXPECT_NEAR(p[0], 0.8544663f, 2e-6);
  EXPECT_NEAR(p[1], 0.8733663f, 2e-6);
  EXPECT_EQ(opt.step_count(), 2);
  EXPECT_NEAR(opt.first_moment()[0], 0.02f, 1e-7);
  EXPECT_NEAR(opt.second_moment()[0], 0.00031225f, 1e-8);
}

TEST(AdamW, ZeroGradientStillDecaysMaskedWeights) {
  AdamW opt(2, {.weight_decay = 0.5f});
  std::vector<float> p = {2.0f, 2.0f};
  opt.Step(p, std::vector<float>{0.0f, 0.0f}, std::vector<uint8_t>{1, 0}, 0.1f);
  EXPECT_FLOAT_EQ(p[0], 2.0f - 0.1f * 0.5f * 2.0f);
  EXPECT_FLOAT_EQ(p[1], 2.0f);
}

// Moments start at zero, and eps is added to sqrt(v^), not under the root: for a gradient far
// below eps the step is lr * g / (|g| + eps), a hundredth of lr here, not lr * g / sqrt(eps).
TEST(AdamW, EpsilonBoundsTheStepOfATinyGradient) {
  AdamW opt(1, {.beta1 = 0.9f, .beta2 = 0.999f, .eps = 1e-8f, .weight_decay = 0.0f});
  EXPECT_EQ(opt.step_count(), 0);
  EXPECT_EQ(opt.first_moment()[0], 0.0f);
  EXPECT_EQ(opt.second_moment()[0], 0.0f);
  std::vector<float> p = {1.0f};
  opt.Step(p, std::vector<float>{1e-10f}, std::vector<uint8_t>{1}, 0.1f);
  EXPECT_NEAR(p[0], 1.0 - 0.1 * 1e-10 / (1e-10 + 1e-8), 1e-6);
}

TEST(AdamW, RestoredStateContinuesBitForBit) {
  const AdamWOptions o;
  const std::vector<uint8_t> mask = {1, 0, 1};
  AdamW a(3, o);
  std::vector<float> pa = {0.3f, -0.2f, 0.9f};
  for (int i = 0; i < 3; ++i)
    a.Step(pa, std::vector<float>{0.1f * i, -0.3f, 0.7f}, mask, 0.01f);
  AdamW b(3, o);
  std::vector<float> pb = pa;
  std::copy(a.first_moment().begin(), a.first_moment().end(), b.first_moment().begin());
  std::copy(a.second_moment().begin(), a.second_moment().end(), b.second_moment().begin());
  b.set_step_count(a.step_count());
  const std::vector<float> g = {0.05f, 0.4f, -0.6f};
  a.Step(pa, g, mask, 0.02f);
  b.Step(pb, g, mask, 0.02f);
  EXPECT_EQ(pa, pb);
}

TEST(GradientNorm, SumOfSquaresAndClipping) {
  std::vector<float> g = {3.0f, 4.0f};
  EXPECT_DOUBLE_EQ(SumOfSquares(g), 25.0);
  struct Case {
    double max_norm;
    float want_factor;
  } cases[] = {{10.0, 1.0f}, {5.0, 1.0f}, {0.0, 1.0f}, {1.0, 0.2f}, {2.5, 0.5f}};
  for (const Case& c : cases) {
    std::vector<float> v = g;
    const float factor = ClipToNorm(v, std::sqrt(SumOfSquares(v)), c.max_norm);
    if (c.want_factor == 1.0f) {  // a no-op, exactly (the norm 5 is not above a limit of 5)
      EXPECT_EQ(factor, 1.0f) << "max " << c.max_norm;
      EXPECT_EQ(v, g) << "max " << c.max_norm;
      continue;
    }
    EXPECT_NEAR(factor, c.want_factor, 1e-6) << "max " << c.max_norm;
    EXPECT_NEAR(v[0], 3.0f * c.want_factor, 1e-6);
    EXPECT_NEAR(v[1], 4.0f * c.want_factor, 1e-6);
    EXPECT_NEAR(std::sqrt(SumOfSquares(v)), c.max_norm, 1e-5);
  }
}

// Every element counts, whether it falls in the blocks of four or in the tail.
TEST(GradientNorm, SumOfSquaresCountsEveryElement) {
  for (size_t n : {0u, 1u, 3u, 4u, 5u, 8u, 11u}) {
    std::vector<float> values(n);
    std::iota(values.begin(), values.end(), 1.0f);  // 1, 2, ..., n
    const double want = static_cast<double>(n * (n + 1) * (2 * n + 1)) / 6.0;
    EXPECT_EQ(SumOfSquares(values), want) << n << " values";
  }
}

TEST(GradientNorm, NonFiniteNormIsNotClippedSoTheCallerSeesIt) {
  std::vector<float> v = {1.0f, NAN};
  EXPECT_EQ(ClipToNorm(v, std::sqrt(SumOfSquares(v)), 1.0), 1.0f);
  EXPECT_TRUE(std::isnan(SumOfSquares(v)));
}

}  // namespace
}  // namespace tessera::train
