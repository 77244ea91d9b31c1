// The learning-rate schedule: linear warm-up, then cosine or linear decay, or a constant rate.
// A pure function of the step, so a resumed run gets the same rates without saved state.
#pragma once

#include <cstdint>

namespace tessera::train {

enum class Decay { kCosine, kLinear, kConstant };

struct LrSchedule {
  double peak = 3.0e-4;
  int64_t warmup_steps = 0;
  int64_t total_steps = 1;
  Decay decay = Decay::kCosine;
  double min_ratio = 0.1;  // cosine and linear decay end at peak * min_ratio
};

// Learning rate of optimizer step `step` (0-based):
//   step < warmup:  peak * (step + 1) / warmup
//   cosine:         min + (peak - min) * (1 + cos(pi * p)) / 2, with
//                   p = (step - warmup) / (total - 1 - warmup) clamped to [0, 1], so the
//                   first step after warm-up gets `peak` and the last step gets `min`
//                   (when the decay phase is a single step, it gets `peak`)
//   linear:         min + (peak - min) * (1 - p), with the same p
//   constant:       peak
double LearningRate(const LrSchedule& schedule, int64_t step);

}  // namespace tessera::train
