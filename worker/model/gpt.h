// The GPT decoder of DESIGN.md §6 on CPU: token + position embeddings, pre-norm blocks
// (causal multi-head self-attention, GELU MLP), final layer norm, LM head tied to the token
// embedding, cross-entropy. One process, one replica; parallel strategies build on top.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <vector>

namespace tessera::model {

// Shape of the model. Defaults are a tiny configuration for tests.
struct GptConfig {
  int layers = 2;
  int d_model = 64;  // C
  int heads = 4;     // NH; divides d_model
  int seq_len = 64;  // maximum T (size of the position embedding)
  int vocab = 256;   // V
};

// Named preset ("gpt2-124m": 12 layers, 768, 12 heads, 1024, vocab 50257). Returns false
// when the name is unknown.
bool GptPreset(const std::string& name, GptConfig* out);

// Checks a configuration: every field positive, heads divides d_model. Returns an empty
// string when valid, otherwise one line naming the field, e.g.
// "model.heads: 5 does not divide dModel 64".
std::string ValidateGptConfig(const GptConfig& config);

// Number of float parameters of a configuration (the size of the flat buffer).
int64_t GptParameterCount(const GptConfig& config);

// One named tensor inside the flat parameter (and gradient) buffer. The buffer holds wte,
// wpe, then each block's tensors contiguously (block 0 first), then the final layer norm,
// so a block, or a run of blocks, is one contiguous range.
struct ParameterTensor {
  std::string name;  // "wte", "wpe", "h3.attn.qkv.weight", ..., "lnf.bias"
  int64_t offset;    // in floats from the start of the buffer
  int64_t size;      // in floats
  int layer;         // block index; -1 for the embeddings and the final layer norm
  bool decays;       // true for matrices and embeddings (weight decay applies), false for
                     // biases and layer-norm gains
};

// The tensors of a configuration in buffer order; their sizes sum to GptParameterCount.
std::vector<ParameterTensor> GptParameterTensors(const GptConfig& config);

// Called during Gpt::Backward each time a suffix of the flat gradient buffer holds its final
// value for this pass: `first` is the offset (in floats) from which every gradient up to the
// end of the buffer is final. Calls come in decreasing order of `first`: after the final layer
// norm and block L-1, after each block down to 0, and last with 0 once the embeddings are done
// (wte is shared with the LM head, so the front of the buffer completes last). Data
// parallelism starts a bucket's reduction from here while backward continues.
using GradientsReadyFn = std::function<void(int64_t first)>;

// Number of threads the CPU kernels use, process-wide (default: OpenMP's, i.e.
// OMP_NUM_THREADS or the number of CPUs). Call it before training from the thread that runs
// Forward/Backward. Matrix products are split over these threads with one single-threaded
// OpenBLAS call each, so creating a Gpt sets OpenBLAS to one thread for the process.
// Results are bit-identical from run to run for a fixed thread count.
void SetKernelThreads(int threads);

// Not thread-safe: one trainer owns a Gpt. Kernels use several threads internally.
class Gpt {
 public:
  // Throws std::invalid_argument with ValidateGptConfig's message for an invalid config.
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
  // Throws std::invalid_argument for bad shapes and std::out_of_range for an id >= vocab.
  float Forward(std::span<const int32_t> tokens, std::span<const int32_t> targets, int B, int T);

  // Backward pass of the last Forward (which must have had targets); *adds* into
  // gradients(), so call ZeroGradients() first unless accumulating micro-batches.
  // The loss gradient is scaled by `loss_scale` (1/micro_batches when accumulating).
  // `on_ready`, when set, is called from this thread as gradients become final (see
  // GradientsReadyFn); it must not touch gradients() before them.
  // Throws std::logic_error when there is no such Forward (or Backward already ran on it).
  void Backward(float loss_scale = 1.0f, const GradientsReadyFn& on_ready = {});

  void ZeroGradients();

  // Logits of the last Forward: (B, T, vocab), row-major. Backward() reuses this buffer for
  // the logits' gradient, so read the logits before calling Backward().
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
