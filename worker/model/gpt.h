// The GPT decoder of DESIGN.md §6 on CPU: token + position embeddings, pre-norm blocks
// (causal multi-head self-attention, GELU MLP), final layer norm, LM head tied to the token
// embedding, cross-entropy. One process, one replica; parallel strategies build on top.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace tessera::model {

// Shape of the model. Defaults are a tiny configuration for tests.
struct GptConfig {
  int layers = 2;
  int d_model = 64;   // C
  int heads = 4;      // NH; divides d_model
  int seq_len = 64;   // maximum T (size of the position embedding)
  int vocab = 256;    // V
};

// Named preset ("gpt2-124m": 12 layers, 768, 12 heads, 1024, vocab 50257). Returns false
// when the name is unknown.
bool GptPreset(const std::string& name, GptConfig* out);

// Number of float parameters of a configuration (the size of the flat buffer).
int64_t GptParameterCount(const GptConfig& config);

// Not thread-safe: one trainer owns a Gpt. Kernels use several threads internally.
class Gpt {
 public:
  explicit Gpt(const GptConfig& config);
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  const GptConfig& config() const { return config_; }

  // Fills the parameters deterministically from `seed` (GPT-2 style: normal(0, 0.02),
  // residual projections scaled by 1/sqrt(2*layers), layer-norm gains 1, biases 0).
  void InitParameters(uint64_t seed);

  // All parameters and their gradients, each one contiguous flat buffer of
  // GptParameterCount(config) floats; optimizer, checkpoint and communication use these.
  std::span<float> parameters();
  std::span<const float> parameters() const;
  std::span<float> gradients();

  // Forward pass over B sequences of T tokens (T <= seq_len). tokens and targets hold B*T
  // ids in [0, vocab). Returns the mean cross-entropy loss and keeps the activations for
  // Backward(). `targets` may be empty: then only logits() are computed and the loss is 0.
  float Forward(std::span<const int32_t> tokens, std::span<const int32_t> targets, int B, int T);

  // Backward pass of the last Forward (which must have had targets); *adds* into
  // gradients(), so call ZeroGradients() first unless accumulating micro-batches.
  // The loss gradient is scaled by `loss_scale` (1/micro_batches when accumulating).
  void Backward(float loss_scale = 1.0f);

  void ZeroGradients();

  // Logits of the last Forward: (B, T, vocab), row-major.
  std::span<const float> logits() const;

 private:
  GptConfig config_;
  // Implementation-defined: the helper implementing this class owns everything below.
  struct State;
  std::vector<float> params_;
  std::vector<float> grads_;
  std::shared_ptr<State> state_;
};

}  // namespace tessera::model
