// The CPU trainer's optimizer step (worker/train/adamw.h: SumOfSquares, ClipToNorm,
// AdamW::Step) on one flat buffer, as the reference for the device's global-norm and AdamW
// kernels (tests/unit/gpu, tests/unit/gpu_emulation).
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <vector>

#include "worker/model/cuda/kernel_args.h"
#include "worker/train/adamw.h"

namespace tessera::train::test {

// Steps params, m and v in place as the trainer does at step t (a.correction1/2 are ignored:
// AdamW computes them from t), with decay for elements [0, decay_end) only; returns the global
// norm of grads before clipping.
inline double AdamWReferenceStep(std::vector<float>& params, const std::vector<float>& grads,
                                 std::vector<float>& m, std::vector<float>& v, size_t decay_end,
                                 const model::cuda::AdamWArgs& a, int t) {
  const double norm = std::sqrt(SumOfSquares(grads));
  std::vector<float> clipped = grads;
  ClipToNorm(clipped, norm, a.max_norm);
  AdamW adamw(params.size(), {a.beta1, a.beta2, a.eps, a.weight_decay});
  std::copy(m.begin(), m.end(), adamw.first_moment().begin());
  std::copy(v.begin(), v.end(), adamw.second_moment().begin());
  adamw.set_step_count(t - 1);
  std::vector<uint8_t> decays(params.size(), 0);
  std::fill(decays.begin(), decays.begin() + static_cast<std::ptrdiff_t>(decay_end), 1);
  adamw.Step(params, clipped, decays, a.lr);
  m.assign(adamw.first_moment().begin(), adamw.first_moment().end());
  v.assign(adamw.second_moment().begin(), adamw.second_moment().end());
  return norm;
}

}  // namespace tessera::train::test
