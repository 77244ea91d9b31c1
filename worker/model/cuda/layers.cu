// CUDA kernels of the GPT decoder; see layers_cuda.h for the contract of each. Element-wise
// work is computed in fp32 and rounded to bf16 once; reductions run in fp32 (warp shuffles,
// then shared memory). Compiled as C++17 (nvcc), so it includes no C++20 project header.
#include <cuda_bf16.h>

#include <cmath>
#include <cstdint>

#include "worker/model/cuda/layers_cuda.h"

namespace tessera::model::cuda {
namespace {

constexpr int kWarp = 32;

inline unsigned Blocks(int64_t n, int threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

__device__ inline float WarpSum(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v += __shfl_xor_sync(0xffffffffu, v, offset);
  return v;
}

__device__ inline float WarpMax(float v) {
  for (int offset = kWarp / 2; offset > 0; offset /= 2)
    v = fmaxf(v, __shfl_xor_sync(0xffffffffu, v, offset));
  return v;
}

// Sum over the block (blockDim.x a multiple of 32, at most 1024); every thread gets it.
__device__ float BlockSum(float v) {
  __shared__ float shared[kWarp];
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int warps = blockDim.x / kWarp;
  v = WarpSum(v);
  __syncthreads();  // shared may still be read by a previous call
  if (lane == 0)
    shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : 0.0f;
  return WarpSum(v);
}

__device__ float BlockMax(float v) {
  __shared__ float shared[kWarp];
  const int lane = threadIdx.x % kWarp;
  const int warp = threadIdx.x / kWarp;
  const int warps = blockDim.x / kWarp;
  v = WarpMax(v);
  __syncthreads();
  if (lane == 0)
    shared[warp] = v;
  __syncthreads();
  v = lane < warps ? shared[lane] : -INFINITY;
  return WarpMax(v);
}

__device__ inline float ToFloat(bf16 x) {
  return __bfloat162float(x);
}
__device__ inline bf16 ToBf16(float x) {
  return __float2bfloat16_rn(x);
}

// Eight bf16 values moved as one 16-byte access: the element-wise and row kernels are bound by
// memory traffic, and 2-byte accesses left them at about a third of the H200's bandwidth
// (bench/gpu/profile.sh). Used where the addresses are 16-byte aligned (Aligned16 on the host).
constexpr int kPack = 8;
struct alignas(16) Pack8 {
  bf16 v[kPack];
};
__device__ inline Pack8 LoadPack(const bf16* p) {
  Pack8 r;
  *reinterpret_cast<int4*>(&r) = *reinterpret_cast<const int4*>(p);
  return r;
}
__device__ inline void StorePack(bf16* p, const Pack8& r) {
  *reinterpret_cast<int4*>(p) = *reinterpret_cast<const int4*>(&r);
}

bool Aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// ---------------------------------------------------------------------------------------
__global__ void EncoderForwardKernel(bf16* out, const int32_t* tokens, const bf16* wte,
                                     const bf16* wpe, int T, int C, int64_t total) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= total)
    return;
  const int64_t n = idx / C;
  const int c = static_cast<int>(idx % C);
  const int t = static_cast<int>(n % T);
  const int64_t token = tokens[n];
  out[idx] = ToBf16(ToFloat(wte[token * C + c]) + ToFloat(wpe[static_cast<int64_t>(t) * C + c]));
}

__global__ void EncoderBackwardWteKernel(float* dwte, const bf16* dout, const int32_t* tokens,
                                         int C, int64_t total) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= total)
    return;
  const int64_t n = idx / C;
  const int c = static_cast<int>(idx % C);
  atomicAdd(dwte + static_cast<int64_t>(tokens[n]) * C + c, ToFloat(dout[idx]));
}

// One thread per (t, c): sums over the batch in order.
__global__ void EncoderBackwardWpeKernel(float* dwpe, const bf16* dout, int B, int T, int C) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (idx >= static_cast<int64_t>(T) * C)
    return;
  float sum = 0.0f;
  for (int b = 0; b < B; b++)
    sum += ToFloat(dout[static_cast<int64_t>(b) * T * C + idx]);
  dwpe[idx] += sum;
}

// ---------------------------------------------------------------------------------------
// One warp per row.
__global__ void LayerNormForwardKernel(bf16* out, float* mean, float* rstd, const bf16* inp,
                                       const bf16* weight, const bf16* bias, int N, int C) {
  const int lane = threadIdx.x % kWarp;
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  if (row >= N)
    return;
  const bf16* x = inp + row * C;
  float sum = 0.0f;
  for (int i = lane; i < C; i += kWarp)
    sum += ToFloat(x[i]);
  const float m = WarpSum(sum) / C;
  float var = 0.0f;
  for (int i = lane; i < C; i += kWarp) {
    const float d = ToFloat(x[i]) - m;
    var += d * d;
  }
  const float s = rsqrtf(WarpSum(var) / C + 1e-5f);
  bf16* o = out + row * C;
  for (int i = lane; i < C; i += kWarp) {
    o[i] = ToBf16((ToFloat(x[i]) - m) * s * ToFloat(weight[i]) + ToFloat(bias[i]));
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// One warp per row, several rows per block; the parameter gradients are summed per block in
// shared memory (2C floats), then added to global memory once per block.
__global__ void LayerNormBackwardKernel(bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                                        const bf16* inp, const bf16* weight, const float* mean,
                                        const float* rstd, int N, int C) {
  extern __shared__ float shared[];  // dweight (C) | dbias (C)
  float* sdw = shared;
  float* sdb = shared + C;
  for (int i = threadIdx.x; i < 2 * C; i += blockDim.x)
    shared[i] = 0.0f;
  __syncthreads();
  const int lane = threadIdx.x % kWarp;
  const int warps_per_block = blockDim.x / kWarp;
  const int64_t warp0 = static_cast<int64_t>(blockIdx.x) * warps_per_block + threadIdx.x / kWarp;
  const int64_t warp_stride = static_cast<int64_t>(gridDim.x) * warps_per_block;
  for (int64_t row = warp0; row < N; row += warp_stride) {
    const bf16* dy = dout + row * C;
    const bf16* x = inp + row * C;
    bf16* dx = dinp + row * C;
    const float m = mean[row];
    const float s = rstd[row];
    float dnorm_mean = 0.0f;
    float dnorm_norm_mean = 0.0f;
    for (int i = lane; i < C; i += kWarp) {
      const float dnorm = ToFloat(weight[i]) * ToFloat(dy[i]);
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * (ToFloat(x[i]) - m) * s;
    }
    dnorm_mean = WarpSum(dnorm_mean) / C;
    dnorm_norm_mean = WarpSum(dnorm_norm_mean) / C;
    for (int i = lane; i < C; i += kWarp) {
      const float norm = (ToFloat(x[i]) - m) * s;
      const float g = ToFloat(dy[i]);
      const float d = (ToFloat(weight[i]) * g - dnorm_mean - norm * dnorm_norm_mean) * s;
      dx[i] = ToBf16(ToFloat(dx[i]) + d);
      atomicAdd(sdw + i, norm * g);
      atomicAdd(sdb + i, g);
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    atomicAdd(dweight + i, sdw[i]);
    atomicAdd(dbias + i, sdb[i]);
  }
}

// The same, for C % 8 == 0 and C <= 8 * 32 * kPacksPerLane: lane l of a warp owns packs l,
// l + 32, ... of every row, so the row stays in registers between the two passes and the lane's
// share of dweight and dbias is summed in registers over all the rows its warp takes; then once
// per warp into shared memory and once per block into global memory. (The kernel above adds
// to shared memory for every value of every row, with 2-byte accesses.)
constexpr int kLayerNormBackwardThreads = 256;
template <int kPacksPerLane>
__global__ void __launch_bounds__(kLayerNormBackwardThreads)
    LayerNormBackwardPackedKernel(bf16* dinp, float* dweight, float* dbias, const bf16* dout,
                                  const bf16* inp, const bf16* weight, const float* mean,
                                  const float* rstd, int N, int C) {
  extern __shared__ float shared[];  // dweight (C) | dbias (C)
  for (int i = threadIdx.x; i < 2 * C; i += blockDim.x)
    shared[i] = 0.0f;
  __syncthreads();
  const int lane = threadIdx.x % kWarp;
  const int packs = C / kPack;
  // The row's values stay packed (4 registers per 8 values); the weights are re-read (L1).
  float dw[kPacksPerLane][kPack];
  float db[kPacksPerLane][kPack];
  for (int k = 0; k < kPacksPerLane; k++) {
    for (int j = 0; j < kPack; j++) {
      dw[k][j] = 0.0f;
      db[k][j] = 0.0f;
    }
  }
  const int warps_per_block = blockDim.x / kWarp;
  const int64_t warp0 = static_cast<int64_t>(blockIdx.x) * warps_per_block + threadIdx.x / kWarp;
  const int64_t warp_stride = static_cast<int64_t>(gridDim.x) * warps_per_block;
  for (int64_t row = warp0; row < N; row += warp_stride) {
    const float m = mean[row];
    const float s = rstd[row];
    Pack8 dy[kPacksPerLane];
    Pack8 x[kPacksPerLane];
    float dnorm_mean = 0.0f;
    float dnorm_norm_mean = 0.0f;
    for (int k = 0; k < kPacksPerLane; k++) {
      const int p = lane + k * kWarp;
      if (p >= packs)
        continue;
      dy[k] = LoadPack(dout + row * C + p * kPack);
      x[k] = LoadPack(inp + row * C + p * kPack);
      const Pack8 w = LoadPack(weight + p * kPack);
      for (int j = 0; j < kPack; j++) {
        const float dnorm = ToFloat(w.v[j]) * ToFloat(dy[k].v[j]);
        dnorm_mean += dnorm;
        dnorm_norm_mean += dnorm * (ToFloat(x[k].v[j]) - m) * s;
      }
    }
    dnorm_mean = WarpSum(dnorm_mean) / C;
    dnorm_norm_mean = WarpSum(dnorm_norm_mean) / C;
    for (int k = 0; k < kPacksPerLane; k++) {
      const int p = lane + k * kWarp;
      if (p >= packs)
        continue;
      const Pack8 w = LoadPack(weight + p * kPack);
      bf16* dx_ptr = dinp + row * C + p * kPack;
      Pack8 dx = LoadPack(dx_ptr);
      for (int j = 0; j < kPack; j++) {
        const float g = ToFloat(dy[k].v[j]);
        const float norm = (ToFloat(x[k].v[j]) - m) * s;
        const float d = (ToFloat(w.v[j]) * g - dnorm_mean - norm * dnorm_norm_mean) * s;
        dx.v[j] = ToBf16(ToFloat(dx.v[j]) + d);
        dw[k][j] += norm * g;
        db[k][j] += g;
      }
      StorePack(dx_ptr, dx);
    }
  }
  for (int k = 0; k < kPacksPerLane; k++) {
    const int p = lane + k * kWarp;
    if (p >= packs)
      continue;
    for (int j = 0; j < kPack; j++) {
      atomicAdd(shared + p * kPack + j, dw[k][j]);
      atomicAdd(shared + C + p * kPack + j, db[k][j]);
    }
  }
  __syncthreads();
  for (int i = threadIdx.x; i < C; i += blockDim.x) {
    atomicAdd(dweight + i, shared[i]);
    atomicAdd(dbias + i, shared[C + i]);
  }
}

// ---------------------------------------------------------------------------------------
// Threads own columns (coalesced along a row); each block sums a band of rows, then adds.
constexpr int kBiasRowsPerBlock = 128;
__global__ void BiasBackwardKernel(float* dbias, const bf16* dout, int N, int OC) {
  const int col = blockIdx.x * blockDim.x + threadIdx.x;
  if (col >= OC)
    return;
  const int64_t row0 = static_cast<int64_t>(blockIdx.y) * kBiasRowsPerBlock;
  const int64_t row1 = min(row0 + kBiasRowsPerBlock, static_cast<int64_t>(N));
  float sum = 0.0f;
  for (int64_t r = row0; r < row1; r++)
    sum += ToFloat(dout[r * OC + col]);
  atomicAdd(dbias + col, sum);
}

// ---------------------------------------------------------------------------------------
// (B,T,3,NH,hs) -> q, k, v (B,NH,T,hs) each.
__global__ void PermuteKernel(bf16* q, bf16* k, bf16* v, const bf16* inp, int B, int T, int NH,
                              int hs) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t total = static_cast<int64_t>(B) * NH * T * hs;
  if (idx >= total)
    return;
  const int i = static_cast<int>(idx % hs);
  const int t = static_cast<int>((idx / hs) % T);
  const int h = static_cast<int>((idx / (static_cast<int64_t>(hs) * T)) % NH);
  const int64_t b = idx / (static_cast<int64_t>(hs) * T * NH);
  const int64_t C = static_cast<int64_t>(NH) * hs;
  const int64_t src = (b * T + t) * 3 * C + h * hs + i;
  q[idx] = inp[src];
  k[idx] = inp[src + C];
  v[idx] = inp[src + 2 * C];
}

// Inverse of PermuteKernel: dq, dk, dv (B,NH,T,hs) -> dinp (B,T,3C).
__global__ void PermuteBackwardKernel(bf16* dinp, const bf16* dq, const bf16* dk, const bf16* dv,
                                      int B, int T, int NH, int hs) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t total = static_cast<int64_t>(B) * NH * T * hs;
  if (idx >= total)
    return;
  const int i = static_cast<int>(idx % hs);
  const int t = static_cast<int>((idx / hs) % T);
  const int h = static_cast<int>((idx / (static_cast<int64_t>(hs) * T)) % NH);
  const int64_t b = idx / (static_cast<int64_t>(hs) * T * NH);
  const int64_t C = static_cast<int64_t>(NH) * hs;
  const int64_t dst = (b * T + t) * 3 * C + h * hs + i;
  dinp[dst] = dq[idx];
  dinp[dst + C] = dk[idx];
  dinp[dst + 2 * C] = dv[idx];
}

// y (B,NH,T,hs) -> out (B,T,NH,hs) = (B,T,C).
__global__ void UnpermuteKernel(bf16* out, const bf16* y, int B, int T, int NH, int hs) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t total = static_cast<int64_t>(B) * NH * T * hs;
  if (idx >= total)
    return;
  const int i = static_cast<int>(idx % hs);
  const int t = static_cast<int>((idx / hs) % T);
  const int h = static_cast<int>((idx / (static_cast<int64_t>(hs) * T)) % NH);
  const int64_t b = idx / (static_cast<int64_t>(hs) * T * NH);
  const int64_t C = static_cast<int64_t>(NH) * hs;
  out[(b * T + t) * C + h * hs + i] = y[idx];
}

// Inverse of UnpermuteKernel: dout (B,T,C) -> dy (B,NH,T,hs).
__global__ void UnpermuteBackwardKernel(bf16* dy, const bf16* dout, int B, int T, int NH, int hs) {
  const int64_t idx = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  const int64_t total = static_cast<int64_t>(B) * NH * T * hs;
  if (idx >= total)
    return;
  const int i = static_cast<int>(idx % hs);
  const int t = static_cast<int>((idx / hs) % T);
  const int h = static_cast<int>((idx / (static_cast<int64_t>(hs) * T)) % NH);
  const int64_t b = idx / (static_cast<int64_t>(hs) * T * NH);
  const int64_t C = static_cast<int64_t>(NH) * hs;
  dy[idx] = dout[(b * T + t) * C + h * hs + i];
}

// One warp per row of scores: scale, causal mask (t2 <= t), softmax, in place; zeros above the
// diagonal so that the product with the values may read whole rows.
__global__ void SoftmaxForwardKernel(bf16* att, int64_t rows, int T, float scale) {
  const int lane = threadIdx.x % kWarp;
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  if (row >= rows)
    return;
  const int t = static_cast<int>(row % T);
  bf16* x = att + row * T;
  float maxval = -INFINITY;
  for (int i = lane; i <= t; i += kWarp)
    maxval = fmaxf(maxval, scale * ToFloat(x[i]));
  maxval = WarpMax(maxval);
  float sum = 0.0f;
  for (int i = lane; i <= t; i += kWarp)
    sum += expf(scale * ToFloat(x[i]) - maxval);
  const float inv = 1.0f / WarpSum(sum);
  for (int i = lane; i < T; i += kWarp)
    x[i] = i <= t ? ToBf16(expf(scale * ToFloat(x[i]) - maxval) * inv) : ToBf16(0.0f);
}

__global__ void SoftmaxBackwardKernel(bf16* datt, const bf16* att, int64_t rows, int T,
                                      float scale) {
  const int lane = threadIdx.x % kWarp;
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  if (row >= rows)
    return;
  const int t = static_cast<int>(row % T);
  bf16* d = datt + row * T;
  const bf16* p = att + row * T;
  float weighted = 0.0f;
  for (int i = lane; i <= t; i += kWarp)
    weighted += ToFloat(p[i]) * ToFloat(d[i]);
  weighted = WarpSum(weighted);
  for (int i = lane; i < T; i += kWarp) {
    d[i] = i <= t ? ToBf16(scale * ToFloat(p[i]) * (ToFloat(d[i]) - weighted)) : ToBf16(0.0f);
  }
}

// The two kernels above with 16-byte accesses, for T % 8 == 0 (rows 16-byte aligned): packs
// 0..t/8 hold the row's live positions 0..t, the packs after them are written as zeros.
__global__ void SoftmaxForwardPackedKernel(bf16* att, int64_t rows, int T, float scale) {
  const int lane = threadIdx.x % kWarp;
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  if (row >= rows)
    return;
  const int t = static_cast<int>(row % T);
  bf16* x = att + row * T;
  const int packs = T / kPack;
  const int live = t / kPack + 1;
  float maxval = -INFINITY;
  for (int p = lane; p < live; p += kWarp) {
    const Pack8 v = LoadPack(x + p * kPack);
    for (int j = 0; j < kPack; j++) {
      if (p * kPack + j <= t)
        maxval = fmaxf(maxval, scale * ToFloat(v.v[j]));
    }
  }
  maxval = WarpMax(maxval);
  float sum = 0.0f;
  for (int p = lane; p < live; p += kWarp) {
    const Pack8 v = LoadPack(x + p * kPack);
    for (int j = 0; j < kPack; j++) {
      if (p * kPack + j <= t)
        sum += expf(scale * ToFloat(v.v[j]) - maxval);
    }
  }
  const float inv = 1.0f / WarpSum(sum);
  for (int p = lane; p < packs; p += kWarp) {
    Pack8 out;
    if (p < live) {
      const Pack8 v = LoadPack(x + p * kPack);
      for (int j = 0; j < kPack; j++) {
        out.v[j] = p * kPack + j <= t ? ToBf16(expf(scale * ToFloat(v.v[j]) - maxval) * inv)
                                      : ToBf16(0.0f);
      }
    } else {
      for (int j = 0; j < kPack; j++)
        out.v[j] = ToBf16(0.0f);
    }
    StorePack(x + p * kPack, out);
  }
}

__global__ void SoftmaxBackwardPackedKernel(bf16* datt, const bf16* att, int64_t rows, int T,
                                            float scale) {
  const int lane = threadIdx.x % kWarp;
  const int64_t row = (static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x) / kWarp;
  if (row >= rows)
    return;
  const int t = static_cast<int>(row % T);
  bf16* d = datt + row * T;
  const bf16* p_row = att + row * T;
  const int packs = T / kPack;
  const int live = t / kPack + 1;
  float weighted = 0.0f;
  for (int p = lane; p < live; p += kWarp) {
    const Pack8 prob = LoadPack(p_row + p * kPack);
    const Pack8 grad = LoadPack(d + p * kPack);
    for (int j = 0; j < kPack; j++) {
      if (p * kPack + j <= t)
        weighted += ToFloat(prob.v[j]) * ToFloat(grad.v[j]);
    }
  }
  weighted = WarpSum(weighted);
  for (int p = lane; p < packs; p += kWarp) {
    Pack8 out;
    if (p < live) {
      const Pack8 prob = LoadPack(p_row + p * kPack);
      const Pack8 grad = LoadPack(d + p * kPack);
      for (int j = 0; j < kPack; j++) {
        out.v[j] = p * kPack + j <= t
                       ? ToBf16(scale * ToFloat(prob.v[j]) * (ToFloat(grad.v[j]) - weighted))
                       : ToBf16(0.0f);
      }
    } else {
      for (int j = 0; j < kPack; j++)
        out.v[j] = ToBf16(0.0f);
    }
    StorePack(d + p * kPack, out);
  }
}

// ---------------------------------------------------------------------------------------
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)

__device__ inline float Gelu(float x) {
  return 0.5f * x * (1.0f + tanhf(kGeluScale * (x + 0.044715f * x * x * x)));
}

__device__ inline float GeluGrad(float x) {
  const float th = tanhf(kGeluScale * (x + 0.044715f * x * x * x));
  const float sech2 = 1.0f - th * th;
  return 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
}

// Each thread one pack of 8 (vectorized, the pointers 16-byte aligned) or, with vec false, one
// value; the last thread of a vectorized launch also takes the N % 8 values after the packs.
__global__ void GeluForwardKernel(bf16* out, const bf16* inp, int64_t N, bool vec) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (!vec) {
    if (t < N)
      out[t] = ToBf16(Gelu(ToFloat(inp[t])));
    return;
  }
  const int64_t i = t * kPack;
  if (i + kPack <= N) {
    const Pack8 x = LoadPack(inp + i);
    Pack8 y;
    for (int j = 0; j < kPack; j++)
      y.v[j] = ToBf16(Gelu(ToFloat(x.v[j])));
    StorePack(out + i, y);
  } else {
    for (int64_t j = i; j < N; j++)
      out[j] = ToBf16(Gelu(ToFloat(inp[j])));
  }
}

__global__ void GeluBackwardKernel(bf16* dinp, const bf16* inp, const bf16* dout, int64_t N,
                                   bool vec) {
  const int64_t t = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (!vec) {
    if (t < N)
      dinp[t] = ToBf16(GeluGrad(ToFloat(inp[t])) * ToFloat(dout[t]));
    return;
  }
  const int64_t i = t * kPack;
  if (i + kPack <= N) {
    const Pack8 x = LoadPack(inp + i);
    const Pack8 d = LoadPack(dout + i);
    Pack8 y;
    for (int j = 0; j < kPack; j++)
      y.v[j] = ToBf16(GeluGrad(ToFloat(x.v[j])) * ToFloat(d.v[j]));
    StorePack(dinp + i, y);
  } else {
    for (int64_t j = i; j < N; j++)
      dinp[j] = ToBf16(GeluGrad(ToFloat(inp[j])) * ToFloat(dout[j]));
  }
}

// ---------------------------------------------------------------------------------------
// One block per row of logits: online max and sum of exponentials per thread, merged. With
// vec (the row starts 16-byte aligned: ld % 8 == 0, logits aligned) the first V - V % 8 values
// are read in packs of 8, the rest one by one.
__global__ void CrossEntropyForwardKernel(float* losses, float* lse, const bf16* logits, int ld,
                                          const int32_t* targets, int V, bool vec) {
  const int64_t row = blockIdx.x;
  const bf16* x = logits + row * ld;
  float maxval = -INFINITY;
  float sum = 0.0f;
  const int packed = vec ? V / kPack * kPack : 0;
  for (int i = threadIdx.x * kPack; i < packed; i += blockDim.x * kPack) {
    const Pack8 p = LoadPack(x + i);
    float v[kPack];
    float pack_max = -INFINITY;
    for (int j = 0; j < kPack; j++) {
      v[j] = ToFloat(p.v[j]);
      pack_max = fmaxf(pack_max, v[j]);
    }
    const float new_max = fmaxf(maxval, pack_max);
    float s = sum * expf(maxval - new_max);  // 0 while sum is 0 (maxval -inf)
    for (int j = 0; j < kPack; j++)
      s += expf(v[j] - new_max);
    sum = s;
    maxval = new_max;
  }
  for (int i = packed + threadIdx.x; i < V; i += blockDim.x) {
    const float v = ToFloat(x[i]);
    if (v > maxval) {
      sum = sum * expf(maxval - v) + 1.0f;
      maxval = v;
    } else {
      sum += expf(v - maxval);
    }
  }
  const float block_max = BlockMax(maxval);
  const float scaled = maxval == -INFINITY ? 0.0f : sum * expf(maxval - block_max);
  const float block_sum = BlockSum(scaled);
  if (threadIdx.x == 0) {
    const float l = block_max + logf(block_sum);
    lse[row] = l;
    losses[row] = l - ToFloat(x[targets[row]]);
  }
}

__global__ void CrossEntropyBackwardKernel(bf16* logits, int ld, const float* lse,
                                           const int32_t* targets, float dloss, int V, bool vec) {
  const int64_t row = blockIdx.x;
  bf16* x = logits + row * ld;
  const float l = lse[row];
  const int target = targets[row];
  const int packed = vec ? V / kPack * kPack : 0;  // packs end before V: the padding stays
  for (int i = threadIdx.x * kPack; i < packed; i += blockDim.x * kPack) {
    Pack8 p = LoadPack(x + i);
    for (int j = 0; j < kPack; j++) {
      const float prob = expf(ToFloat(p.v[j]) - l);
      p.v[j] = ToBf16((prob - (i + j == target ? 1.0f : 0.0f)) * dloss);
    }
    StorePack(x + i, p);
  }
  for (int i = packed + threadIdx.x; i < V; i += blockDim.x) {
    const float p = expf(ToFloat(x[i]) - l);
    x[i] = ToBf16((p - (i == target ? 1.0f : 0.0f)) * dloss);
  }
}

__global__ void MeanReduceKernel(float* out, const float* values, int N) {
  float sum = 0.0f;
  for (int i = threadIdx.x; i < N; i += blockDim.x)
    sum += values[i];
  sum = BlockSum(sum);
  if (threadIdx.x == 0)
    out[0] = sum / N;
}

// ---------------------------------------------------------------------------------------
__global__ void ConvertKernel(bf16* out, const float* inp, int64_t N) {
  const int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
  if (i < N)
    out[i] = ToBf16(inp[i]);
}

// One block per chunk: its sum of squares.
__global__ void SumSquaresKernel(float* partials, const float* values, const ParamChunk* chunks) {
  const ParamChunk chunk = chunks[blockIdx.x];
  const float* x = values + chunk.offset;
  float sum = 0.0f;
  for (int i = threadIdx.x; i < chunk.count; i += blockDim.x)
    sum += x[i] * x[i];
  sum = BlockSum(sum);
  if (threadIdx.x == 0)
    partials[blockIdx.x] = sum;
}

// One block: the partial sums in order, in double; writes the square root.
__global__ void NormFinishKernel(float* norm, const float* partials, int num_chunks) {
  __shared__ double shared[1024];
  double sum = 0.0;
  for (int i = threadIdx.x; i < num_chunks; i += blockDim.x)
    sum += partials[i];
  shared[threadIdx.x] = sum;
  __syncthreads();
  for (int stride = blockDim.x / 2; stride > 0; stride /= 2) {
    if (threadIdx.x < stride)
      shared[threadIdx.x] += shared[threadIdx.x + stride];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    norm[0] = static_cast<float>(sqrt(shared[0]));
}

__global__ void AdamWKernel(float* params, bf16* params_bf16, float* m, float* v,
                            const float* grads, const float* norm, const ParamChunk* chunks,
                            AdamWArgs a) {
  const ParamChunk chunk = chunks[blockIdx.x];
  float factor = 1.0f;
  if (a.max_norm > 0.0f && norm != nullptr && *norm > a.max_norm)
    factor = a.max_norm / (*norm + 1e-6f);
  const float wd = chunk.decays ? a.weight_decay : 0.0f;
  for (int j = threadIdx.x; j < chunk.count; j += blockDim.x) {
    const int64_t i = chunk.offset + j;
    const float g = grads[i] * factor;
    const float mi = a.beta1 * m[i] + (1.0f - a.beta1) * g;
    const float vi = a.beta2 * v[i] + (1.0f - a.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float m_hat = mi / a.correction1;
    const float v_hat = vi / a.correction2;
    const float p = params[i];
    const float updated = p - a.lr * (m_hat / (sqrtf(v_hat) + a.eps) + wd * p);
    params[i] = updated;
    params_bf16[i] = ToBf16(updated);
  }
}

void CheckLaunch(const char* what) {
  CheckCuda(cudaGetLastError(), what, __FILE__, __LINE__);
}

}  // namespace

// ---------------------------------------------------------------------------------------
void encoder_forward(bf16* out, const int32_t* tokens, const bf16* wte, const bf16* wpe, int B,
                     int T, int C, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(B) * T * C;
  EncoderForwardKernel<<<Blocks(total, 256), 256, 0, stream>>>(out, tokens, wte, wpe, T, C, total);
  CheckLaunch("encoder_forward");
}

void encoder_backward(float* dwte, float* dwpe, const bf16* dout, const int32_t* tokens, int B,
                      int T, int C, cudaStream_t stream) {
  const int64_t total = static_cast<int64_t>(B) * T * C;
  EncoderBackwardWteKernel<<<Blocks(total, 256), 256, 0, stream>>>(dwte, dout, tokens, C, total);
  CheckLaunch("encoder_backward (wte)");
  EncoderBackwardWpeKernel<<<Blocks(static_cast<int64_t>(T) * C, 256), 256, 0, stream>>>(dwpe, dout,
                                                                                         B, T, C);
  CheckLaunch("encoder_backward (wpe)");
}

void layernorm_forward(bf16* out, float* mean, float* rstd, const bf16* inp, const bf16* weight,
                       const bf16* bias, int N, int C, cudaStream_t stream) {
  const int threads = 256;
  LayerNormForwardKernel<<<Blocks(static_cast<int64_t>(N) * kWarp, threads), threads, 0, stream>>>(
      out, mean, rstd, inp, weight, bias, N, C);
  CheckLaunch("layernorm_forward");
}

void layernorm_backward(bf16* dinp, float* dweight, float* dbias, const bf16* dout, const bf16* inp,
                        const bf16* weight, const float* mean, const float* rstd, int N, int C,
                        cudaStream_t stream) {
  const int packs_per_lane = (C / kPack + kWarp - 1) / kWarp;
  if (C % kPack == 0 && packs_per_lane <= 4 && Aligned16(dinp) && Aligned16(dout) &&
      Aligned16(inp) && Aligned16(weight)) {
    // 8 warps a block, each taking about 8 rows: the per-block flush of 2C atomics is shared
    // by some 64 rows.
    const int threads = kLayerNormBackwardThreads;
    const unsigned blocks = Blocks(N, threads / kWarp * 8);
    const size_t shared = 2 * static_cast<size_t>(C) * sizeof(float);  // C <= 1024: 8 KiB
    auto launch = [&](auto kernel) {
      kernel<<<blocks, threads, shared, stream>>>(dinp, dweight, dbias, dout, inp, weight, mean,
                                                  rstd, N, C);
    };
    switch (packs_per_lane) {
      case 1:
        launch(LayerNormBackwardPackedKernel<1>);
        break;
      case 2:
        launch(LayerNormBackwardPackedKernel<2>);
        break;
      case 3:
        launch(LayerNormBackwardPackedKernel<3>);
        break;
      default:
        launch(LayerNormBackwardPackedKernel<4>);
        break;
    }
    CheckLaunch("layernorm_backward (packed)");
    return;
  }
  const int threads = 512;
  const int rows_per_block = 32;  // 2 rows per warp
  const unsigned blocks = Blocks(N, rows_per_block);
  const size_t shared = 2 * static_cast<size_t>(C) * sizeof(float);
  if (shared > 48 * 1024) {
    CheckCuda(
        cudaFuncSetAttribute(LayerNormBackwardKernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                             static_cast<int>(shared)),
        "layernorm_backward shared memory", __FILE__, __LINE__);
  }
  LayerNormBackwardKernel<<<blocks, threads, shared, stream>>>(dinp, dweight, dbias, dout, inp,
                                                               weight, mean, rstd, N, C);
  CheckLaunch("layernorm_backward");
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
  const dim3 grid(Blocks(OC, 256), Blocks(N, kBiasRowsPerBlock));
  BiasBackwardKernel<<<grid, 256, 0, stream>>>(dbias, dout, N, OC);
  CheckLaunch("bias_backward");
}

void attention_softmax_forward(bf16* att, int BH, int T, float scale, cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(BH) * T;
  if (T % kPack == 0 && Aligned16(att)) {
    SoftmaxForwardPackedKernel<<<Blocks(rows * kWarp, 256), 256, 0, stream>>>(att, rows, T, scale);
    CheckLaunch("attention_softmax_forward (packed)");
    return;
  }
  SoftmaxForwardKernel<<<Blocks(rows * kWarp, 256), 256, 0, stream>>>(att, rows, T, scale);
  CheckLaunch("attention_softmax_forward");
}

void attention_softmax_backward(bf16* datt, const bf16* att, int BH, int T, float scale,
                                cudaStream_t stream) {
  const int64_t rows = static_cast<int64_t>(BH) * T;
  if (T % kPack == 0 && Aligned16(datt) && Aligned16(att)) {
    SoftmaxBackwardPackedKernel<<<Blocks(rows * kWarp, 256), 256, 0, stream>>>(datt, att, rows, T,
                                                                               scale);
    CheckLaunch("attention_softmax_backward (packed)");
    return;
  }
  SoftmaxBackwardKernel<<<Blocks(rows * kWarp, 256), 256, 0, stream>>>(datt, att, rows, T, scale);
  CheckLaunch("attention_softmax_backward");
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
  PermuteKernel<<<Blocks(NC, 256), 256, 0, stream>>>(q, k, v, inp, B, T, NH, hs);
  CheckLaunch("attention_forward (permute)");
  ScoresProduct(mm, att, q, k, B * NH, T, hs, stream);
  attention_softmax_forward(att, B * NH, T, 1.0f / sqrtf(static_cast<float>(hs)), stream);
  bf16* y = q;  // q is no longer needed
  WeightedProduct(mm, y, att, v, false, B * NH, T, hs, stream);
  UnpermuteKernel<<<Blocks(NC, 256), 256, 0, stream>>>(out, y, B, T, NH, hs);
  CheckLaunch("attention_forward (unpermute)");
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
  PermuteKernel<<<Blocks(NC, 256), 256, 0, stream>>>(q, k, v, inp, B, T, NH, hs);
  CheckLaunch("attention_backward (permute)");
  UnpermuteBackwardKernel<<<Blocks(NC, 256), 256, 0, stream>>>(dy, dout, B, T, NH, hs);
  CheckLaunch("attention_backward (unpermute)");
  ScoresProduct(mm, datt, dy, v, BH, T, hs, stream);          // datt = dy v^T
  WeightedProduct(mm, dv, att, dy, true, BH, T, hs, stream);  // dv = att^T dy
  attention_softmax_backward(datt, att, BH, T, 1.0f / sqrtf(static_cast<float>(hs)), stream);
  WeightedProduct(mm, dq, datt, k, false, BH, T, hs, stream);  // dq = dscores k
  WeightedProduct(mm, dk, datt, q, true, BH, T, hs, stream);   // dk = dscores^T q
  PermuteBackwardKernel<<<Blocks(NC, 256), 256, 0, stream>>>(dinp, dq, dk, dv, B, T, NH, hs);
  CheckLaunch("attention_backward (permute back)");
}

void gelu_forward(bf16* out, const bf16* inp, int64_t N, cudaStream_t stream) {
  const bool vec = Aligned16(out) && Aligned16(inp);
  const int64_t threads = vec ? (N + kPack - 1) / kPack : N;
  GeluForwardKernel<<<Blocks(threads, 256), 256, 0, stream>>>(out, inp, N, vec);
  CheckLaunch("gelu_forward");
}

void gelu_backward(bf16* dinp, const bf16* inp, const bf16* dout, int64_t N, cudaStream_t stream) {
  const bool vec = Aligned16(dinp) && Aligned16(inp) && Aligned16(dout);
  const int64_t threads = vec ? (N + kPack - 1) / kPack : N;
  GeluBackwardKernel<<<Blocks(threads, 256), 256, 0, stream>>>(dinp, inp, dout, N, vec);
  CheckLaunch("gelu_backward");
}

void crossentropy_forward(float* losses, float* lse, const bf16* logits, int ld,
                          const int32_t* targets, int N, int V, cudaStream_t stream) {
  const bool vec = Aligned16(logits) && ld % kPack == 0;
  CrossEntropyForwardKernel<<<N, 512, 0, stream>>>(losses, lse, logits, ld, targets, V, vec);
  CheckLaunch("crossentropy_forward");
}

void crossentropy_softmax_backward(bf16* logits, int ld, const float* lse, const int32_t* targets,
                                   float dloss, int N, int V, cudaStream_t stream) {
  const bool vec = Aligned16(logits) && ld % kPack == 0;
  CrossEntropyBackwardKernel<<<N, 512, 0, stream>>>(logits, ld, lse, targets, dloss, V, vec);
  CheckLaunch("crossentropy_softmax_backward");
}

void mean_reduce(float* out, const float* values, int N, cudaStream_t stream) {
  MeanReduceKernel<<<1, 1024, 0, stream>>>(out, values, N);
  CheckLaunch("mean_reduce");
}

void convert_to_bf16(bf16* out, const float* inp, int64_t N, cudaStream_t stream) {
  ConvertKernel<<<Blocks(N, 256), 256, 0, stream>>>(out, inp, N);
  CheckLaunch("convert_to_bf16");
}

void global_norm(float* norm, float* partials, const float* values, const ParamChunk* chunks,
                 int num_chunks, cudaStream_t stream) {
  SumSquaresKernel<<<num_chunks, 512, 0, stream>>>(partials, values, chunks);
  CheckLaunch("global_norm (chunks)");
  NormFinishKernel<<<1, 1024, 0, stream>>>(norm, partials, num_chunks);
  CheckLaunch("global_norm (finish)");
}

void adamw_update(float* params, bf16* params_bf16, float* m, float* v, const float* grads,
                  const float* norm, const ParamChunk* chunks, int num_chunks,
                  const AdamWArgs& args, cudaStream_t stream) {
  AdamWKernel<<<num_chunks, 512, 0, stream>>>(params, params_bf16, m, v, grads, norm, chunks, args);
  CheckLaunch("adamw_update");
}

}  // namespace tessera::model::cuda
