#include "worker/train/adamw.h"

#include <cassert>
#include <cmath>

namespace tessera::train {

AdamW::AdamW(size_t size, const AdamWOptions& options)
    : options_(options), m_(size, 0.0f), v_(size, 0.0f) {}

void AdamW::Step(std::span<float> params, std::span<const float> grads,
                 std::span<const uint8_t> decay_mask, float lr) {
  assert(params.size() == m_.size() && grads.size() == m_.size() && decay_mask.size() == m_.size());
  ++t_;
  const float b1 = options_.beta1;
  const float b2 = options_.beta2;
  const auto correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(b1), t_));
  const auto correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(b2), t_));
  const float eps = options_.eps;
  const float wd = options_.weight_decay;
  float* p = params.data();
  const float* g = grads.data();
  const uint8_t* mask = decay_mask.data();
  float* m = m_.data();
  float* v = v_.data();
  const size_t n = m_.size();
  for (size_t i = 0; i < n; ++i) {
    m[i] = b1 * m[i] + (1.0f - b1) * g[i];
    v[i] = b2 * v[i] + (1.0f - b2) * g[i] * g[i];
    const float m_hat = m[i] / correction1;
    const float v_hat = v[i] / correction2;
    const float decay = mask[i] ? wd * p[i] : 0.0f;
    p[i] -= lr * (m_hat / (std::sqrt(v_hat) + eps) + decay);
  }
}

double SumOfSquares(std::span<const float> values) {
  // Four partial sums: independent of threads, fixed order, so the result is reproducible.
  double s[4] = {0, 0, 0, 0};
  const size_t n = values.size();
  size_t i = 0;
  for (; i + 4 <= n; i += 4) {
    for (int k = 0; k < 4; ++k) {
      const double x = values[i + k];
      s[k] += x * x;
    }
  }
  for (; i < n; ++i)
    s[0] += static_cast<double>(values[i]) * values[i];
  return (s[0] + s[1]) + (s[2] + s[3]);
}

float ClipToNorm(std::span<float> grads, double norm, double max_norm) {
  if (max_norm <= 0.0 || !(norm > max_norm))
    return 1.0f;
  const auto factor = static_cast<float>(max_norm / (norm + 1e-6));
  for (float& g : grads)
    g *= factor;
  return factor;
}

}  // namespace tessera::train
