// The GPT decoder of DESIGN.md §6 on CPU: token + position embeddings, pre-norm blocks
// (causal multi-head self-attention, GELU MLP), final layer norm, LM head tied to the token
// embedding, cross-entropy. One process, one replica; parallel strategies build on top.
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <span>
#include <string>
#include <utility>
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

// The part of the model one rank holds under model parallelism (DESIGN.md §6). A pipeline
// stage holds blocks [first_layer, end_layer); the first stage also the embeddings (it reads
// tokens), the last the final layer norm and the LM head (it computes the loss). The head is
// tied to the token embedding, so both ends hold `wte` and keep it in sync. Within a stage,
// tensor_size ranks split every block Megatron-style: attention heads and the first MLP
// matrix by output rows (column-parallel), the two output projections by input columns
// (row-parallel); embeddings, layer norms and the projections' biases are replicated. The
// default is the whole model on one rank.
struct GptShard {
  int first_layer = 0;
  int end_layer = -1;  // -1: config.layers
  bool embedding = true;
  bool head = true;
  int tensor_rank = 0;
  int tensor_size = 1;
  int end(const GptConfig& config) const { return end_layer < 0 ? config.layers : end_layer; }
};

// Checks a shard against a configuration: layers in range, tensor_size dividing the heads,
// tensor_rank in range. Empty when valid, else one line naming the problem.
std::string ValidateGptShard(const GptConfig& config, const GptShard& shard);

// One tensor of a shard's buffer and where it comes from in the whole model's tensor of the
// same name: viewing that tensor as a row-major (rows, cols) matrix, the shard's tensor is
// the rows in `row_ranges` (in order) restricted to columns [col_begin, col_end).
struct ShardTensor {
  ParameterTensor local;  // name, offset and size in the shard's buffer, layer, decays
  int whole_index = 0;    // index into GptParameterTensors(config)
  int64_t whole_rows = 0, whole_cols = 0;
  std::vector<std::pair<int64_t, int64_t>> row_ranges;  // [begin, end) rows of the whole
  int64_t col_begin = 0, col_end = 0;
  bool replicated = false;  // every tensor rank of the stage holds the same whole tensor
};

// The tensors of a shard in its buffer order: wte (when it has the embedding or the head),
// wpe (embedding), its blocks (sliced for tensor parallelism), lnf (head).
std::vector<ShardTensor> GptShardTensors(const GptConfig& config, const GptShard& shard);

// Copies a shard tensor's values out of the whole model's flat buffer.
void CopyFromWhole(const ShardTensor& t, std::span<const float> whole_tensor, std::span<float> out);

// Sums `count` floats in place over the tensor-parallel ranks of a stage (every rank ends
// with the same sum). Required when GptShard::tensor_size > 1.
using TensorSumFn = std::function<void(float* data, int64_t count)>;

// Called during Gpt::Backward each time a suffix of the flat gradient buffer holds its final
// value for this pass: `first` is the offset (in floats) from which every gradient up to the
// end of the buffer is final. Calls come in decreasing order of `first`: after the final layer
// norm and block L-1, after each block down to 0, and last with 0 once the embeddings are done
// (wte is shared with the LM head, so the front of the buffer completes last). Data
// parallelism starts a bucket's reduction from here while backward continues.
using GradientsReadyFn = std::function<void(int64_t first)>;

// The offsets Backward reports, in its order, for a buffer of `tensors` (a shard's, or
// GptShardTensors(config, {}) for the whole model, whose layout GptCuda shares): the first
// offset of each block from the last to the first, then 0. Gradient buckets are cut there.
std::vector<int64_t> GradientReadyOffsets(const std::vector<ShardTensor>& tensors);

// Number of threads the CPU kernels use, process-wide (default: OpenMP's, i.e.
// OMP_NUM_THREADS or the number of CPUs). Call it before training from the thread that runs
// Forward/Backward. Matrix products are split over these threads with one single-threaded
// OpenBLAS call each, so creating a Gpt sets OpenBLAS to one thread for the process.
// Results are bit-identical from run to run for a fixed thread count.
void SetKernelThreads(int threads);

// Not thread-safe: one trainer owns a Gpt. Kernels use several threads internally.
//
// A Gpt holds a GptShard of the model (the whole one by default). Forward and backward work
// on activation slots: a pipeline stage keeps several micro-batches in flight, each in its
// own slot (allocated on first use and kept); the whole model needs only slot 0.
class Gpt {
 public:
  // Throws std::invalid_argument with ValidateGptConfig's (or ValidateGptShard's) message
  // for an invalid config or shard, or when a tensor-parallel shard has no `tensor_sum`.
  explicit Gpt(const GptConfig& config, const GptShard& shard = {}, TensorSumFn tensor_sum = {});
  ~Gpt();
  Gpt(const Gpt&) = delete;
  Gpt& operator=(const Gpt&) = delete;

  const GptConfig& config() const { return config_; }
  const GptShard& shard() const { return shard_; }
  // The shard's tensors in buffer order (GptParameterTensors' for the whole model).
  const std::vector<ShardTensor>& tensors() const { return tensors_; }

  // Fills the parameters deterministically from `seed` (GPT-2 style: normal(0, 0.02),
  // residual projections scaled by 1/sqrt(2*layers), layer-norm gains 1, biases 0). A shard
  // gets exactly its part of the whole model's values for the same seed.
  void InitParameters(uint64_t seed);

  // All parameters and their gradients of this shard, each one contiguous flat buffer
  // (GptParameterCount(config) floats for the whole model); optimizer, checkpoint and
  // communication use these.
  std::span<float> parameters();
  std::span<const float> parameters() const;
  std::span<float> gradients();

  // Forward pass over B sequences of T tokens (T <= seq_len). tokens and targets hold B*T
  // ids in [0, vocab). Returns the mean cross-entropy loss and keeps the activations for
  // Backward(). `targets` may be empty: then only logits() are computed and the loss is 0.
  // Throws std::invalid_argument for bad shapes and std::out_of_range for an id >= vocab.
  //
  // For a shard: `tokens` are needed with the embedding, `targets` with the head (else they
  // may be empty), and `input` — the previous stage's output(), B*T*dModel floats — without
  // the embedding. Without the head the result is 0 and output(slot) holds the activations
  // for the next stage.
  float Forward(std::span<const int32_t> tokens, std::span<const int32_t> targets, int B, int T,
                int slot = 0, std::span<const float> input = {});

  // Backward pass of the last Forward (which must have had targets); *adds* into
  // gradients(), so call ZeroGradients() first unless accumulating micro-batches.
  // The loss gradient is scaled by `loss_scale` (1/micro_batches when accumulating).
  // `on_ready`, when set, is called from this thread as gradients become final (see
  // GradientsReadyFn); it must not touch gradients() before them.
  // Throws std::logic_error when there is no such Forward (or Backward already ran on it).
  //
  // A shard without the head needs `dout`, the gradient of its output() (the next stage's
  // input_gradient()); without the embedding it leaves the gradient of its input in
  // input_gradient(slot). Offsets given to `on_ready` are in this shard's buffer.
  void Backward(float loss_scale = 1.0f, const GradientsReadyFn& on_ready = {}, int slot = 0,
                std::span<const float> dout = {});

  // The activations a shard without the head passes on: (B, T, dModel) of the slot's Forward.
  std::span<const float> output(int slot = 0) const;
  // The gradient of the slot's input after Backward of a shard without the embedding.
  std::span<const float> input_gradient(int slot = 0) const;
  // Bytes held by the activation slots allocated so far (each sized for its last B, T).
  int64_t activation_bytes() const;

  void ZeroGradients();

  // Logits of the last Forward: (B, T, vocab), row-major. Backward() reuses this buffer for
  // the logits' gradient, so read the logits before calling Backward().
  std::span<const float> logits(int slot = 0) const;

 private:
  struct Slot;
  Slot& SlotAt(int slot);
  const Slot& SlotAt(int slot) const;

  GptConfig config_;
  GptShard shard_;
  TensorSumFn tensor_sum_;
  std::vector<ShardTensor> tensors_;
  std::vector<float> params_;
  std::vector<float> grads_;
  std::vector<std::unique_ptr<Slot>> slots_;
};

}  // namespace tessera::model
