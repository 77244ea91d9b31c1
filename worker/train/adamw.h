// AdamW (Loshchilov & Hutter) with decoupled weight decay over one flat span of parameters,
// and clipping by global gradient norm. The optimizer owns only its moment buffers for the
// span it was built for, so ZeRO can run it on a shard; it knows nothing of tensors or ranks.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

namespace tessera::train {

struct AdamWOptions {
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1.0e-8f;
  float weight_decay = 0.1f;
};

// Not thread-safe: one trainer owns it.
class AdamW {
 public:
  // State for `size` parameters (moments start at zero, step count 0).
  AdamW(size_t size, const AdamWOptions& options);

  // One update with learning rate `lr`; params, grads and decay_mask have size() elements.
  // For each i, with t the step count after increment:
  //   m = b1*m + (1-b1)*g;  v = b2*v + (1-b2)*g^2
  //   p -= lr * ( (m / (1-b1^t)) / (sqrt(v / (1-b2^t)) + eps)  +  wd * p * decay_mask[i] )
  // decay_mask[i] is 1 for weights that decay, 0 for biases, gains and the like.
  void Step(std::span<float> params, std::span<const float> grads,
            std::span<const uint8_t> decay_mask, float lr);

  size_t size() const { return m_.size(); }
  int64_t step_count() const { return t_; }

  // The state, for checkpoints: first and second moments and the step count.
  std::span<float> first_moment() { return m_; }
  std::span<float> second_moment() { return v_; }
  std::span<const float> first_moment() const { return m_; }
  std::span<const float> second_moment() const { return v_; }
  void set_step_count(int64_t t) { t_ = t; }

 private:
  AdamWOptions options_;
  std::vector<float> m_;
  std::vector<float> v_;
  int64_t t_ = 0;
};

// Sum of squares of `values`, accumulated in double (ranks add theirs before the square root).
double SumOfSquares(std::span<const float> values);

// Scales `grads` so that their global L2 norm `norm` becomes at most `max_norm` (no-op when
// norm <= max_norm or max_norm <= 0). Returns the factor applied (1 when none).
float ClipToNorm(std::span<float> grads, double norm, double max_norm);

}  // namespace tessera::train
