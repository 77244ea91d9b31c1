#include "worker/train/lr_schedule.h"

#include <algorithm>
#include <cmath>
#include <numbers>

namespace tessera::train {

double LearningRate(const LrSchedule& s, int64_t step) {
  if (step < s.warmup_steps) {
    return s.peak * static_cast<double>(step + 1) / static_cast<double>(s.warmup_steps);
  }
  if (s.decay == Decay::kConstant)
    return s.peak;
  const double min_lr = s.peak * s.min_ratio;
  const int64_t span = s.total_steps - 1 - s.warmup_steps;
  const double progress =
      span <= 0 ? 0.0
                : std::clamp(static_cast<double>(step - s.warmup_steps) / static_cast<double>(span),
                             0.0, 1.0);
  if (s.decay == Decay::kLinear)
    return min_lr + (s.peak - min_lr) * (1.0 - progress);
  return min_lr + (s.peak - min_lr) * 0.5 * (1.0 + std::cos(std::numbers::pi * progress));
}

}  // namespace tessera::train
