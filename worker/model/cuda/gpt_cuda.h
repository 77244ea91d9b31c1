// The GPT decoder of worker/model/gpt.h on one CUDA device: the same function and the same
// flat parameter layout (GptParameterTensors), so checkpoints, buckets and shards are shared
// with the CPU model. Activations and matrix products in bf16 (cuBLASLt, fp32 accumulation),
// fp32 master weights, fp32 gradients and fp32 AdamW state, all resident on the device.
// Work is enqueued on the model's stream; nothing inside a step waits for the device except
// Loss() and GradNorm(), which read one number back. This header names no CUDA type: it is
// included by code built without CUDA, where CreateGptCuda says so and returns null.
#pragma once

#include <cstdint>
#include <cstdlib>
#include <functional>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>

#include "worker/model/gpt.h"

namespace tessera::model {

// How the attention of each block is computed. kMatmul: batched cuBLASLt products around a
// fused softmax, the (B,NH,T,T) probabilities kept for backward. kFlash: one fused kernel per
// pass (flash_attention_forward/backward, the nvcuda::wmma kernels), nothing of size T*T in
// memory, head sizes 32 and 64 only. kFlashMma: the same on mma.sync kernels that keep scores in
// registers (flash_mma_kernels.cuh); kFlashMma2: their second version (32 query rows a forward
// warp; dQ in a kernel of its own, no atomics). None is the default until measured faster
// (docs/gpu.md).
enum class GpuAttention { kMatmul, kFlash, kFlashMma, kFlashMma2 };

// The attentions' names, as TESSERA_ATTENTION and gpt_bench --attention spell them.
inline constexpr const char* kGpuAttentionNames = "matmul, flash, flash-mma or flash-mma2";
// Sets *attention from its name ("matmul", "flash", "flash-mma", "flash-mma2"); false for any
// other name.
inline bool ParseGpuAttention(std::string_view name, GpuAttention* attention) {
  if (name == "matmul")
    *attention = GpuAttention::kMatmul;
  else if (name == "flash")
    *attention = GpuAttention::kFlash;
  else if (name == "flash-mma")
    *attention = GpuAttention::kFlashMma;
  else if (name == "flash-mma2")
    *attention = GpuAttention::kFlashMma2;
  else
    return false;
  return true;
}

// TESSERA_GELU_FUSION's values: "1" on, "0" off; false for any other.
inline bool ParseGpuSwitch(std::string_view text, bool* on) {
  if (text != "0" && text != "1")
    return false;
  *on = text == "1";
  return true;
}

// The most cuBLASLt candidates GptCudaOptions::gemm_tune may time.
inline constexpr int kMaxGemmTune = 16;
// TESSERA_GEMM_TUNE's values: a count of candidates from 1 to kMaxGemmTune; false for any
// other text.
inline bool ParseGemmTune(std::string_view text, int* candidates) {
  if (text.empty() || text.size() > 2)
    return false;
  int n = 0;
  for (const char c : text) {
    if (c < '0' || c > '9')
      return false;
    n = n * 10 + (c - '0');
  }
  if (n < 1 || n > kMaxGemmTune)
    return false;
  *candidates = n;
  return true;
}

struct GptCudaOptions {
  int device = 0;  // CUDA device ordinal; the model makes it current in every call
  // Overridden by the environment variable TESSERA_ATTENTION=matmul|flash|flash-mma|flash-mma2 when
  // set.
  GpuAttention attention = GpuAttention::kMatmul;
  // The MLP's GELU in the epilogues of its two products (cuBLASLt GELU_AUX_BIAS forward, DGELU
  // backward) instead of two elementwise kernels. Overridden by TESSERA_GELU_FUSION=0|1.
  bool gelu_fusion = false;
  // The cuBLASLt algorithm of each product shape: 1 takes the heuristics' first; n > 1 times
  // their n best on the first step (which then waits for the device) and keeps the fastest, so
  // two runs may differ in the last bits (cuda::MatmulEngine). Overridden by TESSERA_GEMM_TUNE=n.
  int gemm_tune = 1;
};

// The optimizer's hyper-parameters, as worker/train/adamw.h, plus clipping by global norm.
struct GpuAdamWOptions {
  float lr = 3.0e-4f;
  float beta1 = 0.9f;
  float beta2 = 0.95f;
  float eps = 1.0e-8f;
  float weight_decay = 0.1f;  // applies to tensors with ParameterTensor::decays
  float grad_clip = 1.0f;     // maximum global L2 norm of the gradient; 0 disables clipping
};

// Like GradientsReadyFn, for a device model: gradients at [first, end) are final once
// `cuda_event` (a cudaEvent_t, recorded on the model's stream) has completed. Called from the
// thread running Backward, as the work is enqueued, not when it is done: a caller reduces
// a bucket on its own stream after cudaStreamWaitEvent(its_stream, event), with no host wait.
// The event is owned by the model and recorded again by the next Backward.
using GpuGradientsReadyFn = std::function<void(int64_t first, void* cuda_event)>;

// Not thread-safe: one trainer thread owns a GptCuda.
class GptCuda {
 public:
  ~GptCuda();
  GptCuda(const GptCuda&) = delete;
  GptCuda& operator=(const GptCuda&) = delete;

  const GptConfig& config() const;
  int64_t parameter_count() const;  // GptParameterCount(config())

  // Fills the parameters exactly as Gpt::InitParameters(seed) (on the CPU), then copies them
  // to the device; optimizer state is reset.
  void InitParameters(uint64_t seed);

  // Host copies of the flat buffers (parameter_count() floats each). Synchronous.
  void SetParameters(std::span<const float> host);
  void GetParameters(std::span<float> host) const;
  void GetGradients(std::span<float> host) const;
  // The AdamW moments (parameter_count() floats each) and step count, for checkpoints.
  // Synchronous. Set them after SetParameters, which resets them.
  void GetOptimizerState(std::span<float> first_moment, std::span<float> second_moment) const;
  void SetOptimizerState(std::span<const float> first_moment, std::span<const float> second_moment,
                         int64_t step_count);

  // Forward pass over B sequences of T tokens (T <= seq_len; ids in [0, vocab), checked on the
  // host). Enqueued: returns before the device has finished. `targets` may be empty: then only
  // the logits are computed. Throws std::invalid_argument / std::out_of_range like Gpt::Forward.
  void Forward(std::span<const int32_t> tokens, std::span<const int32_t> targets, int B, int T);

  // Mean cross-entropy of the last Forward with targets; waits for that Forward to finish
  // (the one host synchronisation of a step). NaN when the last Forward had no targets.
  float Loss();

  // Logits of the last Forward, (B, T, vocab) as floats (rounded from bf16). Synchronous; read
  // them before Backward, which turns them into their gradient.
  void GetLogits(std::span<float> host);

  // Backward pass of the last Forward (which must have had targets); adds
  // d(loss_scale * mean loss)/d(params) into the gradients. Enqueued. `on_ready`, when set, is
  // called as suffixes of the gradient buffer are enqueued to become final (see
  // GpuGradientsReadyFn), in the same order as Gpt::Backward's callback.
  // Throws std::logic_error when there is no such Forward.
  void Backward(float loss_scale = 1.0f, const GpuGradientsReadyFn& on_ready = {});

  void ZeroGradients();  // enqueued

  // One fused AdamW step on the device: global gradient norm, clipping, update of the fp32
  // master weights and their bf16 copy. `lr` overrides options.lr (for a schedule). Enqueued;
  // the gradients are not modified (clipping scales them inside the update).
  void Step(const GpuAdamWOptions& options, float lr);
  int64_t step_count() const;
  // Global L2 norm of the gradients before clipping, from the last Step. Waits for it.
  float GradNorm();

  // Waits until everything enqueued so far has finished.
  void Synchronize();

  // Device pointers and the stream, for collectives and checkpoints (float* / cudaStream_t).
  float* device_parameters();
  float* device_gradients();
  void* stream();

  // Bytes of device memory held for the activations of the current (B, T).
  int64_t activation_bytes() const;

 private:
  friend std::unique_ptr<GptCuda> CreateGptCuda(const GptConfig&, const GptCudaOptions&,
                                                std::string*);
  struct Impl;
  explicit GptCuda(std::unique_ptr<Impl> impl);
  std::unique_ptr<Impl> impl_;
};

// Creates the device model: parameters allocated, zero, on options.device. Returns null and
// sets *error to one line when it cannot: "built without CUDA" (a build with TESSERA_CUDA=OFF or
// no toolkit), "no CUDA device" (none visible), an invalid configuration (ValidateGptConfig's
// message), a TESSERA_ATTENTION other than matmul, flash, flash-mma or flash-mma2, a
// TESSERA_GELU_FUSION other than 0 or 1, a TESSERA_GEMM_TUNE other than 1..16, flash attention for
// a head size it does not support, or the CUDA error of the allocation.
std::unique_ptr<GptCuda> CreateGptCuda(const GptConfig& config, const GptCudaOptions& options,
                                       std::string* error);

// Whether this build has the CUDA model (false: CreateGptCuda always fails).
bool GptCudaCompiled();

// Number of visible CUDA devices (0 without CUDA, without a driver, or without a device).
int CudaDeviceCount();

// Bytes free on CUDA device `device` (cudaMemGetInfo, which makes it current); nullopt without
// CUDA or when the device cannot be asked.
std::optional<int64_t> CudaFreeMemory(int device);

// The attention a GptCuda created with `fallback` will use: TESSERA_ATTENTION when it names
// one, else `fallback` (CreateGptCuda refuses an unknown name).
inline GpuAttention GpuAttentionFromEnvironment(GpuAttention fallback = GpuAttention::kMatmul) {
  GpuAttention attention = fallback;
  if (const char* env = std::getenv("TESSERA_ATTENTION"); env != nullptr)
    ParseGpuAttention(env, &attention);
  return attention;
}

}  // namespace tessera::model
