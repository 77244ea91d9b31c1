// CUDA kernels of the GPT decoder: the same `x_forward` / `x_backward` pairs as
// worker/model/cpu/layers.h, on device arrays, enqueued on a stream (no host
// synchronisation). Activations are bf16; layer-norm statistics, losses, gradients of
// parameters and optimizer state are fp32. Every function only enqueues work: errors of the
// launch are reported by TESSERA_CUDA_CHECK on the launch, errors of the kernel by the next
// synchronising call. Includable from host C++ (C++20) and CUDA (C++17) translation units.
// Not thread-safe: a MatmulEngine belongs to one stream's owner.
#pragma once

#include <cublasLt.h>

#include <cuda_bf16.h>
#include <cuda_runtime.h>
#include <string>

#include <cstddef>
#include <cstdint>
#include <map>
#include <string>
#include <tuple>

#include "worker/model/cuda/kernel_args.h"

namespace tessera::model::cuda {

using bf16 = __nv_bfloat16;

// The hand-written kernels (layer_kernels.cuh, flash_mma_kernels.cuh) take bf16 as its bits, so
// that they also compile as host C++ for the CPU emulator.
inline const uint16_t* Bits(const bf16* p) {
  return reinterpret_cast<const uint16_t*>(p);
}
inline uint16_t* Bits(bf16* p) {
  return reinterpret_cast<uint16_t*>(p);
}

// Throw std::runtime_error("<what> failed at <file>:<line>: <reason>") unless status is success.
void CheckCuda(cudaError_t status, const char* what, const char* file, int line);
void CheckCublas(cublasStatus_t status, const char* what, const char* file, int line);
#define TESSERA_CUDA_CHECK(call) \
  ::tessera::model::cuda::CheckCuda((call), #call, __FILE__, __LINE__)
#define TESSERA_CUBLAS_CHECK(call) \
  ::tessera::model::cuda::CheckCublas((call), #call, __FILE__, __LINE__)

// ---- matrix products through cuBLASLt ----
// One column-major product (cuBLAS convention; see matmul_forward for the row-major view):
//   D (m,n) = op(A) (m,k) @ op(B) (k,n) + beta * C + bias (m, broadcast over columns)
// A and B are bf16, accumulation fp32, D (and C) bf16 or fp32. With batch > 1 the operands
// are `batch` matrices `stride_*` elements apart.
//
// A GELU (tanh approximation) in the epilogue, for the MLP, on a bf16 D of one matrix with
// ldd % 8 == 0 and an aux matrix of D's shape and leading dimension:
//   kForward:  aux = product + bias (the pre-activation, written), D = gelu(aux);
//   kBackward: D = gelu'(aux) * product (aux read; no bias).
enum class GemmGelu { kNone, kForward, kBackward };
struct GemmArgs {
  bool trans_a = false;
  bool trans_b = false;
  int m = 0, n = 0, k = 0;
  const bf16* a = nullptr;
  int lda = 0;
  int64_t stride_a = 0;
  const bf16* b = nullptr;
  int ldb = 0;
  int64_t stride_b = 0;
  void* d = nullptr;  // bf16 or fp32 (d_fp32)
  int ldd = 0;
  int64_t stride_d = 0;
  bool d_fp32 = false;
  const void* c = nullptr;  // same type and layout as d; null: C is D itself (when beta != 0)
  float beta = 0.0f;
  const bf16* bias = nullptr;  // (m) bf16, D must be bf16; null: no bias epilogue
  int batch = 1;
  GemmGelu gelu = GemmGelu::kNone;
  bf16* gelu_aux = nullptr;  // (m,n), leading dimension ldd; see GemmGelu
};

// A cuBLASLt handle, its workspace and the algorithm chosen for each shape (heuristics run once
// per shape and alignment, then cached). With tune_candidates = 1 the algorithm is the
// heuristics' first. With n > 1 (at most kMaxTuneCandidates) the first product of each shape
// also times the heuristics' n best on scratch outputs (no result is disturbed; without device
// memory for them it keeps the first) and keeps the fastest: that call waits for the device,
// and since the choice depends on timings, two runs may differ in the last bits.
class MatmulEngine {
 public:
  static constexpr int kMaxTuneCandidates = 16;
  explicit MatmulEngine(int tune_candidates = 1, size_t workspace_bytes = size_t{32} << 20);
  ~MatmulEngine();
  MatmulEngine(const MatmulEngine&) = delete;
  MatmulEngine& operator=(const MatmulEngine&) = delete;

  // Enqueues one product on `stream`. Throws std::invalid_argument for arguments no epilogue
  // takes, std::runtime_error when cuBLASLt has no algorithm for them.
  void Gemm(const GemmArgs& args, cudaStream_t stream);

  int tune_candidates() const { return tune_candidates_; }

 private:
  struct Plan;
  // Index of the fastest of `candidates` for the product `args` (timed on `stream`).
  size_t Fastest(const Plan& plan, const GemmArgs& args,
                 const cublasLtMatmulHeuristicResult_t* candidates, int count, cudaStream_t stream);
  using Key = std::tuple<int, int, int, int, int, int, int, int, int64_t, int64_t, int64_t, int,
                         int, int, int, int>;
  cublasLtHandle_t handle_ = nullptr;
  void* workspace_ = nullptr;
  size_t workspace_bytes_ = 0;
  int tune_candidates_ = 1;
  std::map<Key, Plan*> plans_;
};

// Opens cuBLASLt (dlopen, once; MatmulEngine does it on first use). Empty when it is there,
// else why not (the library's name and the loader's message).
std::string LoadCublasLt();

// ---- encoder: token + position embedding ----
// out (B,T,C) = wte[tokens[b,t]] + wpe[t]; tokens (B,T) on the device, wte (V,C), wpe (maxT,C).
void encoder_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int B,
                     int T, int C, cudaStream_t stream);
// dwte (V,C) += scatter of dout by token (atomic adds); dwpe (maxT,C) += sum over b of dout.
void encoder_backward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens, int B,
                      int T, int C, cudaStream_t stream);

// ---- layer norm over the last dimension (eps 1e-5) ----
// out (N,C) = (inp - mean) * rstd * weight + bias; mean (N), rstd (N) fp32, kept for backward.
void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* weight,
                       const bf16* bias, int N, int C, cudaStream_t stream);
// dinp (N,C) += d/dinp (bf16); dweight (C), dbias (C) += their gradients (fp32).
void layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                        const bf16* weight, const float* mean, const float* rstd, int N, int C,
                        cudaStream_t stream);

// ---- fully connected layer, weights stored (OC, C) like torch.nn.Linear ----
// out (N,OC) = [residual (N,OC) +] inp (N,C) @ weight^T + bias (OC): one cuBLASLt call, the bias
// and the residual in its epilogue. bias and residual may be null.
void matmul_forward(MatmulEngine& mm, bf16* out, const bf16* inp, const bf16* weight,
                    const bf16* bias, const bf16* residual, int N, int C, int OC,
                    cudaStream_t stream);
// The same with a GELU after it, in the product's epilogue: pre (N,OC) = inp @ weight^T + bias
// (kept for backward), out (N,OC) = gelu(pre). OC % 8 == 0.
void matmul_gelu_forward(MatmulEngine& mm, bf16* out, bf16* pre, const bf16* inp,
                         const bf16* weight, const bf16* bias, int N, int C, int OC,
                         cudaStream_t stream);
// dinp (N,C) = dout @ weight (overwritten; skipped when null); dweight (OC,C) += dout^T @ inp
// (fp32, accumulated by cuBLASLt); dbias (OC) += column sums of dout (fp32; skipped when null).
// With gelu_pre (N,C), the pre-activation of a GELU whose output was inp: dinp = gelu'(gelu_pre)
// * (dout @ weight), the GELU's backward in the product's epilogue (C % 8 == 0).
void matmul_backward(MatmulEngine& mm, bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                     const bf16* inp, const bf16* weight, int N, int C, int OC, cudaStream_t stream,
                     const bf16* gelu_pre = nullptr);
// dbias (OC) += column sums of dout (N,OC).
void bias_backward(float* dbias, const bf16* dout, int N, int OC, cudaStream_t stream);

// ---- causal multi-head self-attention, NH heads of size hs = C / NH ----
// inp (B,T,3C) holds q | k | v per position (head h at columns [h*hs, (h+1)*hs) of each).
// out (B,T,C); att (B,NH,T,T) keeps the probabilities (zero above the diagonal); qkvr is
// scratch of 3*B*T*C. Products by batched cuBLASLt, the scaled causal softmax fused.
void attention_forward(MatmulEngine& mm, bf16* out, bf16* qkvr, bf16* att, const bf16* inp, int B,
                       int T, int C, int NH, cudaStream_t stream);
// dinp (B,T,3C) = gradient of inp (overwritten) from dout (B,T,C). Scratch: qkvr and dqkvr of
// 3*B*T*C each, datt of B*NH*T*T.
void attention_backward(MatmulEngine& mm, bf16* dinp, bf16* qkvr, bf16* dqkvr, bf16* datt,
                        const bf16* dout, const bf16* inp, const bf16* att, int B, int T, int C,
                        int NH, cudaStream_t stream);
// The fused softmax alone, for tests: att (rows of T, BH*T rows, row t of each T×T block masked
// to 0..t) = softmax(scale * preatt), in place.
void attention_softmax_forward(bf16* att, int BH, int T, float scale, cudaStream_t stream);
// In place: datt becomes scale * att * (datt - sum(att * datt)) on 0..t, 0 above.
void attention_softmax_backward(bf16* datt, const bf16* att, int BH, int T, float scale,
                                cudaStream_t stream);

// ---- fused (flash-style) causal attention, the same function as attention_forward ----
// No (T,T) matrix in memory: scores are computed per 64-key tile on tensor cores (bf16 inputs,
// fp32 accumulation) with an online softmax in fp32. Two implementations (FlashKernels):
// kWmma (flash_attention.cu: nvcuda::wmma, every score tile through shared memory) and kMma
// (flash_mma_kernels.cuh: mma.sync with scores and probabilities in registers); kMma2 is a
// second mma.sync version, timed against kMma by bench/gpu/flash_bench before the model takes
// either: a forward of 4 warps of 32 query rows instead of 8 of 16 (each k and v fragment read
// from shared memory feeds twice the products), and a backward whose dQ has a kernel of its own
// (S and dP recomputed; no atomics, no dq_scratch, the same bits every run). Supports head
// sizes hs = C / NH of 32 and 64, any T >= 1, a device of compute capability >= 8.0, and
// 16-byte aligned bf16 arrays; otherwise throws std::invalid_argument naming the shape, before
// any launch.
enum class FlashKernels { kWmma, kMma, kMma2 };
// "wmma", "mma", "mma2": how flash_bench and the tests name a set.
inline const char* FlashKernelsName(FlashKernels kernels) {
  switch (kernels) {
    case FlashKernels::kWmma:
      return "wmma";
    case FlashKernels::kMma:
      return "mma";
    case FlashKernels::kMma2:
      return "mma2";
  }
  return "?";
}
// inp (B,T,3C) as attention_forward; out (B,T,C); lse (B,NH,T) fp32 = log-sum-exp of each
// row's scaled (1/sqrt(hs)), causally masked scores, kept for backward.
void flash_attention_forward(bf16* out, float* lse, const bf16* inp, int B, int T, int C, int NH,
                             cudaStream_t stream, FlashKernels kernels = FlashKernels::kWmma);
// dinp (B,T,3C) = gradient of inp (overwritten: dq | dk | dv in inp's layout) from dout (B,T,C),
// given the forward's inp, out and lse. Scratch: delta_scratch (B,NH,T) fp32 holds
// D = rowsum(dout * out); dq_scratch (B,T,C) fp32 accumulates dq by atomic adds over key tiles
// (zeroed here), so dq may differ in the last bits from run to run; dk and dv do not (kMma2
// needs no dq_scratch, which may then be null, and its dq does not vary).
void flash_attention_backward(bf16* dinp, float* delta_scratch, float* dq_scratch, const bf16* dout,
                              const bf16* inp, const bf16* out, const float* lse, int B, int T,
                              int C, int NH, cudaStream_t stream,
                              FlashKernels kernels = FlashKernels::kWmma);

// ---- GELU, tanh approximation ----
void gelu_forward(bf16* out, const bf16* inp, int64_t N, cudaStream_t stream);
// dinp = gelu'(inp) * dout (dinp may alias dout).
void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, int64_t N, cudaStream_t stream);

// ---- softmax + cross-entropy, fused ----
// logits (N, ld) bf16, V valid columns per row; targets (N). losses (N) = logsumexp - target's
// logit, lse (N) kept for backward, both fp32.
void crossentropy_forward(float* losses, float* lse, const bf16* logits, int ld,
                          const int32_t* targets, int N, int V, cudaStream_t stream);
// In place: logits become (softmax - onehot(target)) * dloss.
void crossentropy_softmax_backward(bf16* logits, int ld, const float* lse, const int32_t* targets,
                                   float dloss, int N, int V, cudaStream_t stream);
// out[0] = mean of values (N), one block, fixed order (deterministic).
void mean_reduce(float* out, const float* values, int N, cudaStream_t stream);

// ---- parameters and optimizer over the flat fp32 buffer (ParamChunk: kernel_args.h) ----
// bf16 copy of fp32 values.
void convert_to_bf16(bf16* out, const float* inp, int64_t N, cudaStream_t stream);
// norm[0] = L2 norm of values over the chunks; partials holds one float per chunk (scratch).
void global_norm(float* norm, float* partials, const float* values, const ParamChunk* chunks,
                 int num_chunks, cudaStream_t stream);
// One AdamW step, as worker/train/adamw.h (m, v fp32), on gradients first scaled by
// max_norm / (norm + 1e-6) when max_norm > 0 and *norm (device) > max_norm (the gradients are
// not modified). Writes params (fp32 master) and params_bf16 (AdamWArgs: kernel_args.h).
void adamw_update(float* params, bf16* params_bf16, float* m, float* v, const float* grads,
                  const float* norm, const ParamChunk* chunks, int num_chunks,
                  const AdamWArgs& args, cudaStream_t stream);

}  // namespace tessera::model::cuda
