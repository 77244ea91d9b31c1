// The GPT's layers on a CUDA device (layers_cuda.h): the host code of the matrix products
// (cuBLASLt, through MatmulEngine) and of the matmul attention, and each other layer's launch of
// its hand-written kernel (layer_kernels.cuh, where the kernels and the choice between them
// live, so that the CPU emulator of tests/unit/gpu_emulation runs them too). Compiled as C++17
// (nvcc), so it includes no C++20 project header.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "worker/model/cuda/layer_kernels.cuh"
#include "worker/model/cuda/layers_cuda.h"

namespace tessera::model::cuda {
namespace {

static_assert(sizeof(bf16) == sizeof(layer_kernels::Bf16Bits), "kernels take bf16 as its bits");

void CheckLaunch(const char* what) {
  CheckCuda(cudaGetLastError(), what, __FILE__, __LINE__);
}

// layer_kernels' Launcher for a device: enqueues on the stream; a launch error throws.
struct StreamLauncher {
  cudaStream_t stream;

  template <class... Params, class... Args>
  void operator()(const char* what, const layer_kernels::LaunchShape& shape,
                  void (*kernel)(Params...), Args... args) const {
    if (shape.shared_bytes > 48 * 1024) {
      CheckCuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                     static_cast<int>(shape.shared_bytes)),
                what, __FILE__, __LINE__);
    }
    kernel<<<dim3(shape.grid_x, shape.grid_y), shape.threads, shape.shared_bytes, stream>>>(
        args...);
    CheckLaunch(what);
  }
};

}  // namespace

// ---------------------------------------------------------------------------------------
void encoder_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int B,
                     int T, int C, cudaStream_t stream) {
  layer_kernels::EncoderForward(StreamLauncher{stream}, Bits(out), tokens, Bits(wte), Bits(wpe), B,
                                T, C);
}

void encoder_backward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens, int B,
                      int T, int C, cudaStream_t stream) {
  layer_kernels::EncoderBackward(StreamLauncher{stream}, dwte, dwpe, Bits(dout), tokens, B, T, C);
}

void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* weight,
                       const bf16* bias, int N, int C, cudaStream_t stream) {
  layer_kernels::LayerNormForward(StreamLauncher{stream}, Bits(out), mean, rstd, Bits(inp),
                                  Bits(weight), Bits(bias), N, C);
}

void layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                        const bf16* weight, const float* mean, const float* rstd, int N, int C,
                        cudaStream_t stream) {
  layer_kernels::LayerNormBackward(StreamLauncher{stream}, Bits(dinp), dweight, dbias, Bits(dout),
                                   Bits(inp), Bits(weight), mean, rstd, N, C);
}

namespace {
// out (N,OC) = inp (N,C) @ weight^T + bias, as the column-major product
// out^T (OC,N) = weight (C,OC)^T @ inp^T (C,N).
GemmArgs LinearProduct(bf16* out, const bf16* inp, const bf16* weight, const bf16* bias, int N,
                       int C, int OC) {
  GemmArgs g;
  g.trans_a = true;
  g.m = OC;
  g.n = N;
  g.k = C;
  g.a = weight;
  g.lda = C;
  g.b = inp;
  g.ldb = C;
  g.d = out;
  g.ldd = OC;
  g.bias = bias;
  return g;
}
}  // namespace

void matmul_forward(MatmulEngine& mm, bf16* out, const bf16* inp, const bf16* weight,
                    const bf16* bias, const bf16* residual, int N, int C, int OC,
                    cudaStream_t stream) {
  GemmArgs g = LinearProduct(out, inp, weight, bias, N, C, OC);
  if (residual != nullptr) {
    g.c = residual;
    g.beta = 1.0f;
  }
  mm.Gemm(g, stream);
}

void matmul_gelu_forward(MatmulEngine& mm, bf16* out, bf16* pre, const bf16* inp,
                         const bf16* weight, const bf16* bias, int N, int C, int OC,
                         cudaStream_t stream) {
  GemmArgs g = LinearProduct(out, inp, weight, bias, N, C, OC);
  g.gelu = GemmGelu::kForward;  // the epilogue writes the biased product to `pre`
  g.gelu_aux = pre;
  mm.Gemm(g, stream);
}

void matmul_backward(MatmulEngine& mm, bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                     const bf16* inp, const bf16* weight, int N, int C, int OC, cudaStream_t stream,
                     const bf16* gelu_pre) {
  if (dinp != nullptr) {
    // dinp^T (C,N) = weight^T... column-major: (C,OC) @ dout^T (OC,N).
    GemmArgs g;
    g.m = C;
    g.n = N;
    g.k = OC;
    g.a = weight;
    g.lda = C;
    g.b = dout;
    g.ldb = OC;
    g.d = dinp;
    g.ldd = C;
    if (gelu_pre != nullptr) {
      g.gelu = GemmGelu::kBackward;
      g.gelu_aux = const_cast<bf16*>(gelu_pre);  // only read by this epilogue
    }
    mm.Gemm(g, stream);
  }
  // dweight^T (C,OC) += inp^T (C,N) @ dout (N,OC), accumulated in fp32.
  GemmArgs g;
  g.trans_b = true;
  g.m = C;
  g.n = OC;
  g.k = N;
  g.a = inp;
  g.lda = C;
  g.b = dout;
  g.ldb = OC;
  g.d = dweight;
  g.ldd = C;
  g.d_fp32 = true;
  g.beta = 1.0f;
  mm.Gemm(g, stream);
  if (dbias != nullptr)
    bias_backward(dbias, dout, N, OC, stream);
}

void bias_backward(float* dbias, const bf16* dout, int N, int OC, cudaStream_t stream) {
  layer_kernels::BiasBackward(StreamLauncher{stream}, dbias, Bits(dout), N, OC);
}

void attention_softmax_forward(bf16* att, int BH, int T, float scale, cudaStream_t stream) {
  layer_kernels::SoftmaxForward(StreamLauncher{stream}, Bits(att), BH, T, scale);
}

void attention_softmax_backward(bf16* datt, const bf16* att, int BH, int T, float scale,
                                cudaStream_t stream) {
  layer_kernels::SoftmaxBackward(StreamLauncher{stream}, Bits(datt), Bits(att), BH, T, scale);
}

namespace {

// Batched products of one head each: (B*NH) matrices of (T,hs) or (T,T), row-major.
// scores (T,T)[t][t2] = sum_i x[t][i] * y[t2][i]   (q k^T, and dy v^T)
void ScoresProduct(MatmulEngine& mm, bf16* scores, const bf16* x, const bf16* y, int BH, int T,
                   int hs, cudaStream_t stream) {
  GemmArgs g;
  g.trans_a = true;
  g.m = T;
  g.n = T;
  g.k = hs;
  g.a = y;
  g.lda = hs;
  g.stride_a = static_cast<int64_t>(T) * hs;
  g.b = x;
  g.ldb = hs;
  g.stride_b = static_cast<int64_t>(T) * hs;
  g.d = scores;
  g.ldd = T;
  g.stride_d = static_cast<int64_t>(T) * T;
  g.batch = BH;
  mm.Gemm(g, stream);
}

// out (T,hs)[t][i] = sum_t2 p[t][t2] * x[t2][i]   (att v, and dscores k); with transposed_p,
// p[t2][t] instead (att^T dy, and dscores^T q).
void WeightedProduct(MatmulEngine& mm, bf16* out, const bf16* p, const bf16* x, bool transposed_p,
                     int BH, int T, int hs, cudaStream_t stream) {
  GemmArgs g;
  g.trans_b = transposed_p;
  g.m = hs;
  g.n = T;
  g.k = T;
  g.a = x;
  g.lda = hs;
  g.stride_a = static_cast<int64_t>(T) * hs;
  g.b = p;
  g.ldb = T;
  g.stride_b = static_cast<int64_t>(T) * T;
  g.d = out;
  g.ldd = hs;
  g.stride_d = static_cast<int64_t>(T) * hs;
  g.batch = BH;
  mm.Gemm(g, stream);
}

}  // namespace

void attention_forward(MatmulEngine& mm, bf16* out, bf16* qkvr, bf16* att, const bf16* inp, int B,
                       int T, int C, int NH, cudaStream_t stream) {
  const int hs = C / NH;
  const int64_t NC = static_cast<int64_t>(B) * T * C;
  bf16* q = qkvr;
  bf16* k = qkvr + NC;
  bf16* v = qkvr + 2 * NC;
  const StreamLauncher launch{stream};
  layer_kernels::Permute(launch, Bits(q), Bits(k), Bits(v), Bits(inp), B, T, NH, hs);
  ScoresProduct(mm, att, q, k, B * NH, T, hs, stream);
  attention_softmax_forward(att, B * NH, T, 1.0f / sqrtf(static_cast<float>(hs)), stream);
  bf16* y = q;  // q is no longer needed
  WeightedProduct(mm, y, att, v, false, B * NH, T, hs, stream);
  layer_kernels::Unpermute(launch, Bits(out), Bits(y), B, T, NH, hs);
}

void attention_backward(MatmulEngine& mm, bf16* dinp, bf16* qkvr, bf16* dqkvr, bf16* datt,
                        const bf16* dout, const bf16* inp, const bf16* att, int B, int T, int C,
                        int NH, cudaStream_t stream) {
  const int hs = C / NH;
  const int BH = B * NH;
  const int64_t NC = static_cast<int64_t>(B) * T * C;
  bf16* q = qkvr;
  bf16* k = qkvr + NC;
  bf16* v = qkvr + 2 * NC;
  bf16* dq = dqkvr;
  bf16* dk = dqkvr + NC;
  bf16* dv = dqkvr + 2 * NC;
  bf16* dy = dq;  // read before dq is written
  const StreamLauncher launch{stream};
  layer_kernels::Permute(launch, Bits(q), Bits(k), Bits(v), Bits(inp), B, T, NH, hs);
  layer_kernels::UnpermuteBackward(launch, Bits(dy), Bits(dout), B, T, NH, hs);
  ScoresProduct(mm, datt, dy, v, BH, T, hs, stream);          // datt = dy v^T
  WeightedProduct(mm, dv, att, dy, true, BH, T, hs, stream);  // dv = att^T dy
  attention_softmax_backward(datt, att, BH, T, 1.0f / sqrtf(static_cast<float>(hs)), stream);
  WeightedProduct(mm, dq, datt, k, false, BH, T, hs, stream);  // dq = dscores k
  WeightedProduct(mm, dk, datt, q, true, BH, T, hs, stream);   // dk = dscores^T q
  layer_kernels::PermuteBackward(launch, Bits(dinp), Bits(dq), Bits(dk), Bits(dv), B, T, NH, hs);
}

void gelu_forward(bf16* out, const bf16* inp, int64_t N, cudaStream_t stream) {
  layer_kernels::GeluForward(StreamLauncher{stream}, Bits(out), Bits(inp), N);
}

void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, int64_t N, cudaStream_t stream) {
  layer_kernels::GeluBackward(StreamLauncher{stream}, Bits(dinp), Bits(inp), Bits(dout), N);
}

void crossentropy_forward(float* losses, float* lse, const bf16* logits, int ld,
                          const int32_t* targets, int N, int V, cudaStream_t stream) {
  layer_kernels::CrossEntropyForward(StreamLauncher{stream}, losses, lse, Bits(logits), ld, targets,
                                     N, V);
}

void crossentropy_softmax_backward(bf16* logits, int ld, const float* lse, const int32_t* targets,
                                   float dloss, int N, int V, cudaStream_t stream) {
  layer_kernels::CrossEntropySoftmaxBackward(StreamLauncher{stream}, Bits(logits), ld, lse, targets,
                                             dloss, N, V);
}

void mean_reduce(float* out, const float* values, int N, cudaStream_t stream) {
  layer_kernels::MeanReduce(StreamLauncher{stream}, out, values, N);
}

void convert_to_bf16(bf16* out, const float* inp, int64_t N, cudaStream_t stream) {
  layer_kernels::ConvertToBf16(StreamLauncher{stream}, Bits(out), inp, N);
}

void global_norm(float* norm, float* partials, const float* values, const ParamChunk* chunks,
                 int num_chunks, cudaStream_t stream) {
  layer_kernels::GlobalNorm(StreamLauncher{stream}, norm, partials, values, chunks, num_chunks);
}

void adamw_update(float* params, bf16* params_bf16, float* m, float* v, const float* grads,
                  const float* norm, const ParamChunk* chunks, int num_chunks,
                  const AdamWArgs& args, cudaStream_t stream) {
  layer_kernels::AdamWUpdate(StreamLauncher{stream}, params, Bits(params_bf16), m, v, grads, norm,
                             chunks, num_chunks, args);
}

}  // namespace tessera::model::cuda
