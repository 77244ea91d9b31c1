// The hand-written kernels of the GPT's layers (all but the matrix products, which are
// cuBLASLt's, and the fused attention, flash_*), and the host code that chooses a kernel and
// its launch shape for each layers_cuda.h call. Element-wise work is computed in fp32 and
// rounded to bf16 once; reductions run in fp32 (warp shuffles, then shared memory).
//
// Written against warp_mma.cuh only, and each launch goes through a Launcher, so the same
// source runs on a GPU (layers.cu: a launcher that enqueues on a stream) and on the CPU under
// the SIMT emulator of tests/unit/gpu_emulation (a launcher that runs the kernel's threads
// there), where every kernel and every choice between kernels is tested in CI.
//
// A Launcher is called as launch(what, shape, kernel, args...): run kernel(args...) on
// shape.grid_x * shape.grid_y blocks of shape.threads threads with shape.shared_bytes of
// dynamic shared memory; `what` names the launch in errors.
#pragma once

#include <cmath>
#include <cstddef>
#include <cstdint>

#include "worker/model/cuda/kernel_args.h"
#include "worker/model/cuda/warp_mma.cuh"

namespace tessera::model::cuda::layer_kernels {

using warp::Bf16Bits;
using warp::kWarpSize;

struct LaunchShape {
  unsigned grid_x = 1, grid_y = 1;
  unsigned threads = 256;
  size_t shared_bytes = 0;
};

inline unsigned Blocks(int64_t n, int per_block) {
  return static_cast<unsigned>((n + per_block - 1) / per_block);
}

inline bool Aligned16(const void* p) {
  return reinterpret_cast<uintptr_t>(p) % 16 == 0;
}

// ---------------------------------------------------------------------------------------
// Device helpers.

TESSERA_DEVICE int64_t GlobalThread() {
  return static_cast<int64_t>(warp::BlockIdxX()) * warp::BlockDimX() + warp::ThreadIdx();
}
TESSERA_DEVICE int Lane() {
  return static_cast<int>(warp::ThreadIdx() % kWarpSize);
}
TESSERA_DEVICE float ToFloat(Bf16Bits x) {
  return warp::Bf16ToFloat(x);
}
TESSERA_DEVICE Bf16Bits ToBf16(float x) {
  return warp::FloatToBf16(x);
}

TESSERA_DEVICE float WarpSum(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    v += warp::ShflXor(v, offset);
  return v;
}

TESSERA_DEVICE float WarpMax(float v) {
  for (int offset = kWarpSize / 2; offset > 0; offset /= 2)
    v = warp::Max(v, warp::ShflXor(v, offset));
  return v;
}

// Block reductions over kWarpSize floats of shared memory (the launch's dynamic shared memory:
// kBlockReduceBytes); BlockDimX() a multiple of 32, at most 1024. Every thread gets the result.
constexpr size_t kBlockReduceBytes = kWarpSize * sizeof(float);

TESSERA_DEVICE float BlockReduce(float v, bool max, float* scratch) {
  const int lane = Lane();
  const int warp_index = static_cast<int>(warp::ThreadIdx() / kWarpSize);
  const int warps = static_cast<int>(warp::BlockDimX() / kWarpSize);
  v = max ? WarpMax(v) : WarpSum(v);
  warp::SyncThreads();  // scratch may still be read by a previous call
  if (lane == 0)
    scratch[warp_index] = v;
  warp::SyncThreads();
  v = lane < warps ? scratch[lane] : (max ? -INFINITY : 0.0f);
  return max ? WarpMax(v) : WarpSum(v);
}
TESSERA_DEVICE float BlockSum(float v, float* scratch) {
  return BlockReduce(v, false, scratch);
}
TESSERA_DEVICE float BlockMax(float v, float* scratch) {
  return BlockReduce(v, true, scratch);
}

// Eight bf16 values moved as one 16-byte access: the element-wise and row kernels are bound by
// memory traffic, and 2-byte accesses left them at about a third of the H200's bandwidth
// (bench/gpu/profile.sh). Used where the addresses are 16-byte aligned (Aligned16 on the host).
constexpr int kPack = 8;
struct alignas(16) Pack8 {
  Bf16Bits v[kPack];
};
TESSERA_DEVICE Pack8 LoadPack(const Bf16Bits* p) {
  Pack8 r;
  warp::Copy16(&r, p);
  return r;
}
TESSERA_DEVICE void StorePack(Bf16Bits* p, const Pack8& r) {
  warp::Copy16(p, &r);
}

// ---------------------------------------------------------------------------------------
// Embeddings.

TESSERA_GLOBAL EncoderForwardKernel(Bf16Bits* out, const int32_t* tokens, const Bf16Bits* wte,
                                    const Bf16Bits* wpe, int T, int C, int64_t total) {
  const int64_t idx = GlobalThread();
  if (idx >= total)
    return;
  const int64_t n = idx / C;
  const int c = static_cast<int>(idx % C);
  const int t = static_cast<int>(n % T);
  const int64_t token = tokens[n];
  out[idx] = ToBf16(ToFloat(wte[token * C + c]) + ToFloat(wpe[static_cast<int64_t>(t) * C + c]));
}

TESSERA_GLOBAL EncoderBackwardWteKernel(float* dwte, const Bf16Bits* dout, const int32_t* tokens,
                                        int C, int64_t total) {
  const int64_t idx = GlobalThread();
  if (idx >= total)
    return;
  const int64_t n = idx / C;
  const int c = static_cast<int>(idx % C);
  warp::AtomicAdd(dwte + static_cast<int64_t>(tokens[n]) * C + c, ToFloat(dout[idx]));
}

// One thread per (t, c): sums over the batch in order.
TESSERA_GLOBAL EncoderBackwardWpeKernel(float* dwpe, const Bf16Bits* dout, int B, int T, int C) {
  const int64_t idx = GlobalThread();
  if (idx >= static_cast<int64_t>(T) * C)
    return;
  float sum = 0.0f;
  for (int b = 0; b < B; b++)
    sum += ToFloat(dout[static_cast<int64_t>(b) * T * C + idx]);
  dwpe[idx] += sum;
}

// ---------------------------------------------------------------------------------------
// Layer norm.

// One warp per row.
TESSERA_GLOBAL LayerNormForwardKernel(Bf16Bits* out, float* mean, float* rstd, const Bf16Bits* inp,
                                      const Bf16Bits* weight, const Bf16Bits* bias, int N, int C) {
  const int lane = Lane();
  const int64_t row = GlobalThread() / kWarpSize;
  if (row >= N)
    return;
  const Bf16Bits* x = inp + row * C;
  float sum = 0.0f;
  for (int i = lane; i < C; i += kWarpSize)
    sum += ToFloat(x[i]);
  const float m = WarpSum(sum) / C;
  float var = 0.0f;
  for (int i = lane; i < C; i += kWarpSize) {
    const float d = ToFloat(x[i]) - m;
    var += d * d;
  }
  const float s = warp::Rsqrt(WarpSum(var) / C + 1e-5f);
  Bf16Bits* o = out + row * C;
  for (int i = lane; i < C; i += kWarpSize)
    o[i] = ToBf16((ToFloat(x[i]) - m) * s * ToFloat(weight[i]) + ToFloat(bias[i]));
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// The same, for C % 8 == 0 and C <= 8 * 32 * kPacksPerLane (rows 16-byte aligned): lane l of
// the row's warp holds packs l, l + 32, ... in registers, so the row is read once, 16 bytes at
// a time, and written the same way (the kernel above reads it three times, 2 bytes at a time).
template <int kPacksPerLane>
TESSERA_GLOBAL LayerNormForwardPackedKernel(Bf16Bits* out, float* mean, float* rstd,
                                            const Bf16Bits* inp, const Bf16Bits* weight,
                                            const Bf16Bits* bias, int N, int C) {
  const int lane = Lane();
  const int64_t row = GlobalThread() / kWarpSize;
  if (row >= N)
    return;
  const int packs = C / kPack;
  float x[kPacksPerLane][kPack];
  float sum = 0.0f;
  TESSERA_UNROLL
  for (int k = 0; k < kPacksPerLane; k++) {
    const int p = lane + k * kWarpSize;
    if (p >= packs)
      continue;
    const Pack8 v = LoadPack(inp + row * C + p * kPack);
    TESSERA_UNROLL
    for (int j = 0; j < kPack; j++) {
      x[k][j] = ToFloat(v.v[j]);
      sum += x[k][j];
    }
  }
  const float m = WarpSum(sum) / C;
  float var = 0.0f;
  TESSERA_UNROLL
  for (int k = 0; k < kPacksPerLane; k++) {
    if (lane + k * kWarpSize >= packs)
      continue;
    TESSERA_UNROLL
    for (int j = 0; j < kPack; j++) {
      const float d = x[k][j] - m;
      var += d * d;
    }
  }
  const float s = warp::Rsqrt(WarpSum(var) / C + 1e-5f);
  TESSERA_UNROLL
  for (int k = 0; k < kPacksPerLane; k++) {
    const int p = lane + k * kWarpSize;
    if (p >= packs)
      continue;
    const Pack8 w = LoadPack(weight + p * kPack);
    const Pack8 b = LoadPack(bias + p * kPack);
    Pack8 o;
    TESSERA_UNROLL
    for (int j = 0; j < kPack; j++)
      o.v[j] = ToBf16((x[k][j] - m) * s * ToFloat(w.v[j]) + ToFloat(b.v[j]));
    StorePack(out + row * C + p * kPack, o);
  }
  if (lane == 0) {
    mean[row] = m;
    rstd[row] = s;
  }
}

// One warp per row, several rows per block; the parameter gradients are summed per block in
// shared memory (2C floats), then added to global memory once per block.
TESSERA_GLOBAL LayerNormBackwardKernel(Bf16Bits* dinp, float* dweight, float* dbias,
                                       const Bf16Bits* dout, const Bf16Bits* inp,
                                       const Bf16Bits* weight, const float* mean, const float* rstd,
                                       int N, int C) {
  float* sdw = reinterpret_cast<float*>(warp::SharedMemory());  // dweight (C) | dbias (C)
  float* sdb = sdw + C;
  for (int i = static_cast<int>(warp::ThreadIdx()); i < 2 * C;
       i += static_cast<int>(warp::BlockDimX()))
    sdw[i] = 0.0f;
  warp::SyncThreads();
  const int lane = Lane();
  const int warps_per_block = static_cast<int>(warp::BlockDimX() / kWarpSize);
  const int64_t warp0 = GlobalThread() / kWarpSize;
  const int64_t warp_stride = static_cast<int64_t>(warp::GridDimX()) * warps_per_block;
  for (int64_t row = warp0; row < N; row += warp_stride) {
    const Bf16Bits* dy = dout + row * C;
    const Bf16Bits* x = inp + row * C;
    Bf16Bits* dx = dinp + row * C;
    const float m = mean[row];
    const float s = rstd[row];
    float dnorm_mean = 0.0f;
    float dnorm_norm_mean = 0.0f;
    for (int i = lane; i < C; i += kWarpSize) {
      const float dnorm = ToFloat(weight[i]) * ToFloat(dy[i]);
      dnorm_mean += dnorm;
      dnorm_norm_mean += dnorm * (ToFloat(x[i]) - m) * s;
    }
    dnorm_mean = WarpSum(dnorm_mean) / C;
    dnorm_norm_mean = WarpSum(dnorm_norm_mean) / C;
    for (int i = lane; i < C; i += kWarpSize) {
      const float norm = (ToFloat(x[i]) - m) * s;
      const float g = ToFloat(dy[i]);
      const float d = (ToFloat(weight[i]) * g - dnorm_mean - norm * dnorm_norm_mean) * s;
      dx[i] = ToBf16(ToFloat(dx[i]) + d);
      warp::AtomicAdd(sdw + i, norm * g);
      warp::AtomicAdd(sdb + i, g);
    }
  }
  warp::SyncThreads();
  for (int i = static_cast<int>(warp::ThreadIdx()); i < C;
       i += static_cast<int>(warp::BlockDimX())) {
    warp::AtomicAdd(dweight + i, sdw[i]);
    warp::AtomicAdd(dbias + i, sdb[i]);
  }
}

// The same, for C % 8 == 0 and C <= 8 * 32 * kPacksPerLane: lane l of a warp owns packs l,
// l + 32, ... of every row, so the row stays in registers between the two passes and the lane's
// share of dweight and dbias is summed in registers over all the rows its warp takes; then once
// per warp into shared memory and once per block into global memory. (The kernel above adds
// to shared memory for every value of every row, with 2-byte accesses.)
constexpr int kLayerNormBackwardThreads = 256;
template <int kPacksPerLane>
TESSERA_KERNEL_MAX_THREADS(kLayerNormBackwardThreads)
LayerNormBackwardPackedKernel(Bf16Bits* dinp, float* dweight, float* dbias, const Bf16Bits* dout,
                              const Bf16Bits* inp, const Bf16Bits* weight, const float* mean,
                              const float* rstd, int N, int C) {
  float* shared = reinterpret_cast<float*>(warp::SharedMemory());  // dweight (C) | dbias (C)
  for (int i = static_cast<int>(warp::ThreadIdx()); i < 2 * C;
       i += static_cast<int>(warp::BlockDimX()))
    shared[i] = 0.0f;
  warp::SyncThreads();
  const int lane = Lane();
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
  const int warps_per_block = static_cast<int>(warp::BlockDimX() / kWarpSize);
  const int64_t warp0 = GlobalThread() / kWarpSize;
  const int64_t warp_stride = static_cast<int64_t>(warp::GridDimX()) * warps_per_block;
  for (int64_t row = warp0; row < N; row += warp_stride) {
    const float m = mean[row];
    const float s = rstd[row];
    Pack8 dy[kPacksPerLane];
    Pack8 x[kPacksPerLane];
    float dnorm_mean = 0.0f;
    float dnorm_norm_mean = 0.0f;
    for (int k = 0; k < kPacksPerLane; k++) {
      const int p = lane + k * kWarpSize;
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
      const int p = lane + k * kWarpSize;
      if (p >= packs)
        continue;
      const Pack8 w = LoadPack(weight + p * kPack);
      Bf16Bits* dx_ptr = dinp + row * C + p * kPack;
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
    const int p = lane + k * kWarpSize;
    if (p >= packs)
      continue;
    for (int j = 0; j < kPack; j++) {
      warp::AtomicAdd(shared + p * kPack + j, dw[k][j]);
      warp::AtomicAdd(shared + C + p * kPack + j, db[k][j]);
    }
  }
  warp::SyncThreads();
  for (int i = static_cast<int>(warp::ThreadIdx()); i < C;
       i += static_cast<int>(warp::BlockDimX())) {
    warp::AtomicAdd(dweight + i, shared[i]);
    warp::AtomicAdd(dbias + i, shared[C + i]);
  }
}

// ---------------------------------------------------------------------------------------
// Bias gradient: threads own columns (coalesced along a row); each block sums a band of rows,
// then adds.
constexpr int kBiasRowsPerBlock = 128;
TESSERA_GLOBAL BiasBackwardKernel(float* dbias, const Bf16Bits* dout, int N, int OC) {
  const int64_t col = GlobalThread();
  if (col >= OC)
    return;
  const int64_t row0 = static_cast<int64_t>(warp::BlockIdxY()) * kBiasRowsPerBlock;
  const int64_t row1 = row0 + kBiasRowsPerBlock < N ? row0 + kBiasRowsPerBlock : N;
  float sum = 0.0f;
  for (int64_t r = row0; r < row1; r++)
    sum += ToFloat(dout[r * OC + col]);
  warp::AtomicAdd(dbias + col, sum);
}

// ---------------------------------------------------------------------------------------
// The matmul attention's layout changes. Index idx of a (B,NH,T,hs) array: its (b, h, t, i).
struct HeadIndex {
  int64_t b;
  int h, t, i;
};
TESSERA_DEVICE HeadIndex SplitHeadIndex(int64_t idx, int T, int NH, int hs) {
  HeadIndex r;
  r.i = static_cast<int>(idx % hs);
  r.t = static_cast<int>((idx / hs) % T);
  r.h = static_cast<int>((idx / (static_cast<int64_t>(hs) * T)) % NH);
  r.b = idx / (static_cast<int64_t>(hs) * T * NH);
  return r;
}

// (B,T,3,NH,hs) -> q, k, v (B,NH,T,hs) each.
TESSERA_GLOBAL PermuteKernel(Bf16Bits* q, Bf16Bits* k, Bf16Bits* v, const Bf16Bits* inp, int B,
                             int T, int NH, int hs) {
  const int64_t idx = GlobalThread();
  if (idx >= static_cast<int64_t>(B) * NH * T * hs)
    return;
  const HeadIndex x = SplitHeadIndex(idx, T, NH, hs);
  const int64_t C = static_cast<int64_t>(NH) * hs;
  const int64_t src = (x.b * T + x.t) * 3 * C + x.h * hs + x.i;
  q[idx] = inp[src];
  k[idx] = inp[src + C];
  v[idx] = inp[src + 2 * C];
}

// Inverse of PermuteKernel: dq, dk, dv (B,NH,T,hs) -> dinp (B,T,3C).
TESSERA_GLOBAL PermuteBackwardKernel(Bf16Bits* dinp, const Bf16Bits* dq, const Bf16Bits* dk,
                                     const Bf16Bits* dv, int B, int T, int NH, int hs) {
  const int64_t idx = GlobalThread();
  if (idx >= static_cast<int64_t>(B) * NH * T * hs)
    return;
  const HeadIndex x = SplitHeadIndex(idx, T, NH, hs);
  const int64_t C = static_cast<int64_t>(NH) * hs;
  const int64_t dst = (x.b * T + x.t) * 3 * C + x.h * hs + x.i;
  dinp[dst] = dq[idx];
  dinp[dst + C] = dk[idx];
  dinp[dst + 2 * C] = dv[idx];
}

// y (B,NH,T,hs) -> out (B,T,NH,hs) = (B,T,C).
TESSERA_GLOBAL UnpermuteKernel(Bf16Bits* out, const Bf16Bits* y, int B, int T, int NH, int hs) {
  const int64_t idx = GlobalThread();
  if (idx >= static_cast<int64_t>(B) * NH * T * hs)
    return;
  const HeadIndex x = SplitHeadIndex(idx, T, NH, hs);
  const int64_t C = static_cast<int64_t>(NH) * hs;
  out[(x.b * T + x.t) * C + x.h * hs + x.i] = y[idx];
}

// Inverse of UnpermuteKernel: dout (B,T,C) -> dy (B,NH,T,hs).
TESSERA_GLOBAL UnpermuteBackwardKernel(Bf16Bits* dy, const Bf16Bits* dout, int B, int T, int NH,
                                       int hs) {
  const int64_t idx = GlobalThread();
  if (idx >= static_cast<int64_t>(B) * NH * T * hs)
    return;
  const HeadIndex x = SplitHeadIndex(idx, T, NH, hs);
  const int64_t C = static_cast<int64_t>(NH) * hs;
  dy[idx] = dout[(x.b * T + x.t) * C + x.h * hs + x.i];
}

// ---------------------------------------------------------------------------------------
// Attention softmax. One warp per row of scores: scale, causal mask (t2 <= t), softmax, in
// place; zeros above the diagonal so that the product with the values may read whole rows.
TESSERA_GLOBAL SoftmaxForwardKernel(Bf16Bits* att, int64_t rows, int T, float scale) {
  const int lane = Lane();
  const int64_t row = GlobalThread() / kWarpSize;
  if (row >= rows)
    return;
  const int t = static_cast<int>(row % T);
  Bf16Bits* x = att + row * T;
  float maxval = -INFINITY;
  for (int i = lane; i <= t; i += kWarpSize)
    maxval = warp::Max(maxval, scale * ToFloat(x[i]));
  maxval = WarpMax(maxval);
  float sum = 0.0f;
  for (int i = lane; i <= t; i += kWarpSize)
    sum += warp::Exp(scale * ToFloat(x[i]) - maxval);
  const float inv = 1.0f / WarpSum(sum);
  for (int i = lane; i < T; i += kWarpSize)
    x[i] = i <= t ? ToBf16(warp::Exp(scale * ToFloat(x[i]) - maxval) * inv) : ToBf16(0.0f);
}

TESSERA_GLOBAL SoftmaxBackwardKernel(Bf16Bits* datt, const Bf16Bits* att, int64_t rows, int T,
                                     float scale) {
  const int lane = Lane();
  const int64_t row = GlobalThread() / kWarpSize;
  if (row >= rows)
    return;
  const int t = static_cast<int>(row % T);
  Bf16Bits* d = datt + row * T;
  const Bf16Bits* p = att + row * T;
  float weighted = 0.0f;
  for (int i = lane; i <= t; i += kWarpSize)
    weighted += ToFloat(p[i]) * ToFloat(d[i]);
  weighted = WarpSum(weighted);
  for (int i = lane; i < T; i += kWarpSize)
    d[i] = i <= t ? ToBf16(scale * ToFloat(p[i]) * (ToFloat(d[i]) - weighted)) : ToBf16(0.0f);
}

// The two kernels above with 16-byte accesses, for T % 8 == 0 (rows 16-byte aligned): packs
// 0..t/8 hold the row's live positions 0..t, the packs after them are written as zeros.
TESSERA_GLOBAL SoftmaxForwardPackedKernel(Bf16Bits* att, int64_t rows, int T, float scale) {
  const int lane = Lane();
  const int64_t row = GlobalThread() / kWarpSize;
  if (row >= rows)
    return;
  const int t = static_cast<int>(row % T);
  Bf16Bits* x = att + row * T;
  const int packs = T / kPack;
  const int live = t / kPack + 1;
  float maxval = -INFINITY;
  for (int p = lane; p < live; p += kWarpSize) {
    const Pack8 v = LoadPack(x + p * kPack);
    for (int j = 0; j < kPack; j++) {
      if (p * kPack + j <= t)
        maxval = warp::Max(maxval, scale * ToFloat(v.v[j]));
    }
  }
  maxval = WarpMax(maxval);
  float sum = 0.0f;
  for (int p = lane; p < live; p += kWarpSize) {
    const Pack8 v = LoadPack(x + p * kPack);
    for (int j = 0; j < kPack; j++) {
      if (p * kPack + j <= t)
        sum += warp::Exp(scale * ToFloat(v.v[j]) - maxval);
    }
  }
  const float inv = 1.0f / WarpSum(sum);
  for (int p = lane; p < packs; p += kWarpSize) {
    Pack8 out;
    if (p < live) {
      const Pack8 v = LoadPack(x + p * kPack);
      for (int j = 0; j < kPack; j++) {
        out.v[j] = p * kPack + j <= t ? ToBf16(warp::Exp(scale * ToFloat(v.v[j]) - maxval) * inv)
                                      : ToBf16(0.0f);
      }
    } else {
      for (int j = 0; j < kPack; j++)
        out.v[j] = ToBf16(0.0f);
    }
    StorePack(x + p * kPack, out);
  }
}

TESSERA_GLOBAL SoftmaxBackwardPackedKernel(Bf16Bits* datt, const Bf16Bits* att, int64_t rows, int T,
                                           float scale) {
  const int lane = Lane();
  const int64_t row = GlobalThread() / kWarpSize;
  if (row >= rows)
    return;
  const int t = static_cast<int>(row % T);
  Bf16Bits* d = datt + row * T;
  const Bf16Bits* p_row = att + row * T;
  const int packs = T / kPack;
  const int live = t / kPack + 1;
  float weighted = 0.0f;
  for (int p = lane; p < live; p += kWarpSize) {
    const Pack8 prob = LoadPack(p_row + p * kPack);
    const Pack8 grad = LoadPack(d + p * kPack);
    for (int j = 0; j < kPack; j++) {
      if (p * kPack + j <= t)
        weighted += ToFloat(prob.v[j]) * ToFloat(grad.v[j]);
    }
  }
  weighted = WarpSum(weighted);
  for (int p = lane; p < packs; p += kWarpSize) {
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
// GELU, tanh approximation.
constexpr float kGeluScale = 0.7978845608028654f;  // sqrt(2 / pi)

TESSERA_DEVICE float Gelu(float x) {
  return 0.5f * x * (1.0f + warp::Tanh(kGeluScale * (x + 0.044715f * x * x * x)));
}

TESSERA_DEVICE float GeluGrad(float x) {
  const float th = warp::Tanh(kGeluScale * (x + 0.044715f * x * x * x));
  const float sech2 = 1.0f - th * th;
  return 0.5f * (1.0f + th) + 0.5f * x * sech2 * kGeluScale * (1.0f + 3.0f * 0.044715f * x * x);
}

// Each thread one pack of 8 (vectorized, the pointers 16-byte aligned) or, with vec false, one
// value; the last thread of a vectorized launch also takes the N % 8 values after the packs.
TESSERA_GLOBAL GeluForwardKernel(Bf16Bits* out, const Bf16Bits* inp, int64_t N, bool vec) {
  const int64_t t = GlobalThread();
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

TESSERA_GLOBAL GeluBackwardKernel(Bf16Bits* dinp, const Bf16Bits* inp, const Bf16Bits* dout,
                                  int64_t N, bool vec) {
  const int64_t t = GlobalThread();
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
// Cross-entropy. One block per row of logits: online max and sum of exponentials per thread,
// merged. With vec (the row starts 16-byte aligned: ld % 8 == 0, logits aligned) the first
// V - V % 8 values are read in packs of 8, the rest one by one.
TESSERA_GLOBAL CrossEntropyForwardKernel(float* losses, float* lse, const Bf16Bits* logits, int ld,
                                         const int32_t* targets, int V, bool vec) {
  float* scratch = reinterpret_cast<float*>(warp::SharedMemory());
  const int64_t row = warp::BlockIdxX();
  const int threads = static_cast<int>(warp::BlockDimX());
  const Bf16Bits* x = logits + row * ld;
  float maxval = -INFINITY;
  float sum = 0.0f;
  const int packed = vec ? V / kPack * kPack : 0;
  for (int i = static_cast<int>(warp::ThreadIdx()) * kPack; i < packed; i += threads * kPack) {
    const Pack8 p = LoadPack(x + i);
    float v[kPack];
    float pack_max = -INFINITY;
    for (int j = 0; j < kPack; j++) {
      v[j] = ToFloat(p.v[j]);
      pack_max = warp::Max(pack_max, v[j]);
    }
    const float new_max = warp::Max(maxval, pack_max);
    float s = sum * warp::Exp(maxval - new_max);  // 0 while sum is 0 (maxval -inf)
    for (int j = 0; j < kPack; j++)
      s += warp::Exp(v[j] - new_max);
    sum = s;
    maxval = new_max;
  }
  for (int i = packed + static_cast<int>(warp::ThreadIdx()); i < V; i += threads) {
    const float v = ToFloat(x[i]);
    if (v > maxval) {
      sum = sum * warp::Exp(maxval - v) + 1.0f;
      maxval = v;
    } else {
      sum += warp::Exp(v - maxval);
    }
  }
  const float block_max = BlockMax(maxval, scratch);
  const float scaled = maxval == -INFINITY ? 0.0f : sum * warp::Exp(maxval - block_max);
  const float block_sum = BlockSum(scaled, scratch);
  if (warp::ThreadIdx() == 0) {
    const float l = block_max + warp::Log(block_sum);
    lse[row] = l;
    losses[row] = l - ToFloat(x[targets[row]]);
  }
}

TESSERA_GLOBAL CrossEntropyBackwardKernel(Bf16Bits* logits, int ld, const float* lse,
                                          const int32_t* targets, float dloss, int V, bool vec) {
  const int64_t row = warp::BlockIdxX();
  const int threads = static_cast<int>(warp::BlockDimX());
  Bf16Bits* x = logits + row * ld;
  const float l = lse[row];
  const int target = targets[row];
  const int packed = vec ? V / kPack * kPack : 0;  // packs end before V: the padding stays
  for (int i = static_cast<int>(warp::ThreadIdx()) * kPack; i < packed; i += threads * kPack) {
    Pack8 p = LoadPack(x + i);
    for (int j = 0; j < kPack; j++) {
      const float prob = warp::Exp(ToFloat(p.v[j]) - l);
      p.v[j] = ToBf16((prob - (i + j == target ? 1.0f : 0.0f)) * dloss);
    }
    StorePack(x + i, p);
  }
  for (int i = packed + static_cast<int>(warp::ThreadIdx()); i < V; i += threads) {
    const float p = warp::Exp(ToFloat(x[i]) - l);
    x[i] = ToBf16((p - (i == target ? 1.0f : 0.0f)) * dloss);
  }
}

TESSERA_GLOBAL MeanReduceKernel(float* out, const float* values, int N) {
  float sum = 0.0f;
  for (int i = static_cast<int>(warp::ThreadIdx()); i < N; i += static_cast<int>(warp::BlockDimX()))
    sum += values[i];
  sum = BlockSum(sum, reinterpret_cast<float*>(warp::SharedMemory()));
  if (warp::ThreadIdx() == 0)
    out[0] = sum / N;
}

// ---------------------------------------------------------------------------------------
// Parameters and optimizer.

TESSERA_GLOBAL ConvertKernel(Bf16Bits* out, const float* inp, int64_t N) {
  const int64_t i = GlobalThread();
  if (i < N)
    out[i] = ToBf16(inp[i]);
}

// One block per chunk: its sum of squares.
TESSERA_GLOBAL SumSquaresKernel(float* partials, const float* values, const ParamChunk* chunks) {
  const ParamChunk chunk = chunks[warp::BlockIdxX()];
  const float* x = values + chunk.offset;
  float sum = 0.0f;
  for (int i = static_cast<int>(warp::ThreadIdx()); i < chunk.count;
       i += static_cast<int>(warp::BlockDimX()))
    sum += x[i] * x[i];
  sum = BlockSum(sum, reinterpret_cast<float*>(warp::SharedMemory()));
  if (warp::ThreadIdx() == 0)
    partials[warp::BlockIdxX()] = sum;
}

// One block (a power of two threads; a double of shared memory each): the partial sums in
// order, in double; writes the square root.
constexpr LaunchShape kNormFinishShape{1, 1, 1024, 1024 * sizeof(double)};
TESSERA_GLOBAL NormFinishKernel(float* norm, const float* partials, int num_chunks) {
  double* shared = reinterpret_cast<double*>(warp::SharedMemory());
  const int thread = static_cast<int>(warp::ThreadIdx());
  double sum = 0.0;
  for (int i = thread; i < num_chunks; i += static_cast<int>(warp::BlockDimX()))
    sum += partials[i];
  shared[thread] = sum;
  warp::SyncThreads();
  for (int stride = static_cast<int>(warp::BlockDimX()) / 2; stride > 0; stride /= 2) {
    if (thread < stride)
      shared[thread] += shared[thread + stride];
    warp::SyncThreads();
  }
  if (thread == 0)
    norm[0] = static_cast<float>(warp::Sqrt(shared[0]));
}

TESSERA_GLOBAL AdamWKernel(float* params, Bf16Bits* params_bf16, float* m, float* v,
                           const float* grads, const float* norm, const ParamChunk* chunks,
                           AdamWArgs a) {
  const ParamChunk chunk = chunks[warp::BlockIdxX()];
  float factor = 1.0f;
  if (a.max_norm > 0.0f && norm != nullptr && *norm > a.max_norm)
    factor = a.max_norm / (*norm + 1e-6f);
  const float wd = chunk.decays ? a.weight_decay : 0.0f;
  for (int j = static_cast<int>(warp::ThreadIdx()); j < chunk.count;
       j += static_cast<int>(warp::BlockDimX())) {
    const int64_t i = chunk.offset + j;
    const float g = grads[i] * factor;
    const float mi = a.beta1 * m[i] + (1.0f - a.beta1) * g;
    const float vi = a.beta2 * v[i] + (1.0f - a.beta2) * g * g;
    m[i] = mi;
    v[i] = vi;
    const float m_hat = mi / a.correction1;
    const float v_hat = vi / a.correction2;
    const float p = params[i];
    const float updated = p - a.lr * (m_hat / (warp::Sqrt(v_hat) + a.eps) + wd * p);
    params[i] = updated;
    params_bf16[i] = ToBf16(updated);
  }
}

// ---------------------------------------------------------------------------------------
// Host side: the kernel and launch shape of each layers_cuda.h call (same arguments, bf16 as
// its bits; the streams are the launcher's).

// The packed layer-norm kernels: rows of C % 8 == 0 values, 1 to kMaxPacksPerLane packs of 8 a
// lane (C <= 1024).
constexpr int kMaxPacksPerLane = 4;
inline int PacksPerLane(int C) {
  return (C / kPack + kWarpSize - 1) / kWarpSize;
}
inline bool PackedRows(int C) {
  return C > 0 && C % kPack == 0 && PacksPerLane(C) <= kMaxPacksPerLane;
}

template <class Launcher>
void EncoderForward(const Launcher& launch, Bf16Bits* out, const int32_t* tokens,
                    const Bf16Bits* wte, const Bf16Bits* wpe, int B, int T, int C) {
  const int64_t total = static_cast<int64_t>(B) * T * C;
  launch("encoder_forward", LaunchShape{Blocks(total, 256), 1, 256, 0}, EncoderForwardKernel, out,
         tokens, wte, wpe, T, C, total);
}

template <class Launcher>
void EncoderBackward(const Launcher& launch, float* dwte, float* dwpe, const Bf16Bits* dout,
                     const int32_t* tokens, int B, int T, int C) {
  const int64_t total = static_cast<int64_t>(B) * T * C;
  launch("encoder_backward (wte)", LaunchShape{Blocks(total, 256), 1, 256, 0},
         EncoderBackwardWteKernel, dwte, dout, tokens, C, total);
  launch("encoder_backward (wpe)", LaunchShape{Blocks(static_cast<int64_t>(T) * C, 256), 1, 256, 0},
         EncoderBackwardWpeKernel, dwpe, dout, B, T, C);
}

template <class Launcher>
void LayerNormForward(const Launcher& launch, Bf16Bits* out, float* mean, float* rstd,
                      const Bf16Bits* inp, const Bf16Bits* weight, const Bf16Bits* bias, int N,
                      int C) {
  constexpr int kThreads = 256;
  const LaunchShape shape{Blocks(static_cast<int64_t>(N) * kWarpSize, kThreads), 1, kThreads, 0};
  if (PackedRows(C) && Aligned16(out) && Aligned16(inp) && Aligned16(weight) && Aligned16(bias)) {
    decltype(&LayerNormForwardPackedKernel<1>) const kernels[kMaxPacksPerLane] = {
        LayerNormForwardPackedKernel<1>, LayerNormForwardPackedKernel<2>,
        LayerNormForwardPackedKernel<3>, LayerNormForwardPackedKernel<4>};
    launch("layernorm_forward (packed)", shape, kernels[PacksPerLane(C) - 1], out, mean, rstd, inp,
           weight, bias, N, C);
    return;
  }
  launch("layernorm_forward", shape, LayerNormForwardKernel, out, mean, rstd, inp, weight, bias, N,
         C);
}

template <class Launcher>
void LayerNormBackward(const Launcher& launch, Bf16Bits* dinp, float* dweight, float* dbias,
                       const Bf16Bits* dout, const Bf16Bits* inp, const Bf16Bits* weight,
                       const float* mean, const float* rstd, int N, int C) {
  const size_t shared = 2 * static_cast<size_t>(C) * sizeof(float);
  if (PackedRows(C) && Aligned16(dinp) && Aligned16(dout) && Aligned16(inp) && Aligned16(weight)) {
    // 8 warps a block, each taking about 8 rows: the per-block flush of 2C atomics is shared
    // by some 64 rows. C <= 1024: 8 KiB of shared memory.
    constexpr int kThreads = kLayerNormBackwardThreads;
    const LaunchShape shape{Blocks(N, kThreads / kWarpSize * 8), 1, kThreads, shared};
    decltype(&LayerNormBackwardPackedKernel<1>) const kernels[kMaxPacksPerLane] = {
        LayerNormBackwardPackedKernel<1>, LayerNormBackwardPackedKernel<2>,
        LayerNormBackwardPackedKernel<3>, LayerNormBackwardPackedKernel<4>};
    launch("layernorm_backward (packed)", shape, kernels[PacksPerLane(C) - 1], dinp, dweight, dbias,
           dout, inp, weight, mean, rstd, N, C);
    return;
  }
  constexpr int kThreads = 512;
  constexpr int kRowsPerBlock = 32;  // 2 rows per warp
  launch("layernorm_backward", LaunchShape{Blocks(N, kRowsPerBlock), 1, kThreads, shared},
         LayerNormBackwardKernel, dinp, dweight, dbias, dout, inp, weight, mean, rstd, N, C);
}

template <class Launcher>
void BiasBackward(const Launcher& launch, float* dbias, const Bf16Bits* dout, int N, int OC) {
  launch("bias_backward", LaunchShape{Blocks(OC, 256), Blocks(N, kBiasRowsPerBlock), 256, 0},
         BiasBackwardKernel, dbias, dout, N, OC);
}

// q, k, v (B,NH,T,hs) each from the qkv activation inp (B,T,3C).
template <class Launcher>
void Permute(const Launcher& launch, Bf16Bits* q, Bf16Bits* k, Bf16Bits* v, const Bf16Bits* inp,
             int B, int T, int NH, int hs) {
  const int64_t total = static_cast<int64_t>(B) * T * NH * hs;
  launch("attention (permute)", LaunchShape{Blocks(total, 256), 1, 256, 0}, PermuteKernel, q, k, v,
         inp, B, T, NH, hs);
}

template <class Launcher>
void PermuteBackward(const Launcher& launch, Bf16Bits* dinp, const Bf16Bits* dq, const Bf16Bits* dk,
                     const Bf16Bits* dv, int B, int T, int NH, int hs) {
  const int64_t total = static_cast<int64_t>(B) * T * NH * hs;
  launch("attention_backward (permute back)", LaunchShape{Blocks(total, 256), 1, 256, 0},
         PermuteBackwardKernel, dinp, dq, dk, dv, B, T, NH, hs);
}

template <class Launcher>
void Unpermute(const Launcher& launch, Bf16Bits* out, const Bf16Bits* y, int B, int T, int NH,
               int hs) {
  const int64_t total = static_cast<int64_t>(B) * T * NH * hs;
  launch("attention_forward (unpermute)", LaunchShape{Blocks(total, 256), 1, 256, 0},
         UnpermuteKernel, out, y, B, T, NH, hs);
}

template <class Launcher>
void UnpermuteBackward(const Launcher& launch, Bf16Bits* dy, const Bf16Bits* dout, int B, int T,
                       int NH, int hs) {
  const int64_t total = static_cast<int64_t>(B) * T * NH * hs;
  launch("attention_backward (unpermute)", LaunchShape{Blocks(total, 256), 1, 256, 0},
         UnpermuteBackwardKernel, dy, dout, B, T, NH, hs);
}

template <class Launcher>
void SoftmaxForward(const Launcher& launch, Bf16Bits* att, int BH, int T, float scale) {
  const int64_t rows = static_cast<int64_t>(BH) * T;
  const LaunchShape shape{Blocks(rows * kWarpSize, 256), 1, 256, 0};
  if (T % kPack == 0 && Aligned16(att)) {
    launch("attention_softmax_forward (packed)", shape, SoftmaxForwardPackedKernel, att, rows, T,
           scale);
    return;
  }
  launch("attention_softmax_forward", shape, SoftmaxForwardKernel, att, rows, T, scale);
}

template <class Launcher>
void SoftmaxBackward(const Launcher& launch, Bf16Bits* datt, const Bf16Bits* att, int BH, int T,
                     float scale) {
  const int64_t rows = static_cast<int64_t>(BH) * T;
  const LaunchShape shape{Blocks(rows * kWarpSize, 256), 1, 256, 0};
  if (T % kPack == 0 && Aligned16(datt) && Aligned16(att)) {
    launch("attention_softmax_backward (packed)", shape, SoftmaxBackwardPackedKernel, datt, att,
           rows, T, scale);
    return;
  }
  launch("attention_softmax_backward", shape, SoftmaxBackwardKernel, datt, att, rows, T, scale);
}

template <class Launcher>
void GeluForward(const Launcher& launch, Bf16Bits* out, const Bf16Bits* inp, int64_t N) {
  const bool vec = Aligned16(out) && Aligned16(inp);
  const int64_t threads = vec ? (N + kPack - 1) / kPack : N;
  launch("gelu_forward", LaunchShape{Blocks(threads, 256), 1, 256, 0}, GeluForwardKernel, out, inp,
         N, vec);
}

template <class Launcher>
void GeluBackward(const Launcher& launch, Bf16Bits* dinp, const Bf16Bits* inp, const Bf16Bits* dout,
                  int64_t N) {
  const bool vec = Aligned16(dinp) && Aligned16(inp) && Aligned16(dout);
  const int64_t threads = vec ? (N + kPack - 1) / kPack : N;
  launch("gelu_backward", LaunchShape{Blocks(threads, 256), 1, 256, 0}, GeluBackwardKernel, dinp,
         inp, dout, N, vec);
}

template <class Launcher>
void CrossEntropyForward(const Launcher& launch, float* losses, float* lse, const Bf16Bits* logits,
                         int ld, const int32_t* targets, int N, int V) {
  const bool vec = Aligned16(logits) && ld % kPack == 0;
  launch("crossentropy_forward", LaunchShape{static_cast<unsigned>(N), 1, 512, kBlockReduceBytes},
         CrossEntropyForwardKernel, losses, lse, logits, ld, targets, V, vec);
}

template <class Launcher>
void CrossEntropySoftmaxBackward(const Launcher& launch, Bf16Bits* logits, int ld, const float* lse,
                                 const int32_t* targets, float dloss, int N, int V) {
  const bool vec = Aligned16(logits) && ld % kPack == 0;
  launch("crossentropy_softmax_backward", LaunchShape{static_cast<unsigned>(N), 1, 512, 0},
         CrossEntropyBackwardKernel, logits, ld, lse, targets, dloss, V, vec);
}

template <class Launcher>
void MeanReduce(const Launcher& launch, float* out, const float* values, int N) {
  launch("mean_reduce", LaunchShape{1, 1, 1024, kBlockReduceBytes}, MeanReduceKernel, out, values,
         N);
}

template <class Launcher>
void ConvertToBf16(const Launcher& launch, Bf16Bits* out, const float* inp, int64_t N) {
  launch("convert_to_bf16", LaunchShape{Blocks(N, 256), 1, 256, 0}, ConvertKernel, out, inp, N);
}

template <class Launcher>
void GlobalNorm(const Launcher& launch, float* norm, float* partials, const float* values,
                const ParamChunk* chunks, int num_chunks) {
  launch("global_norm (chunks)",
         LaunchShape{static_cast<unsigned>(num_chunks), 1, 512, kBlockReduceBytes},
         SumSquaresKernel, partials, values, chunks);
  launch("global_norm (finish)", kNormFinishShape, NormFinishKernel, norm,
         static_cast<const float*>(partials), num_chunks);
}

template <class Launcher>
void AdamWUpdate(const Launcher& launch, float* params, Bf16Bits* params_bf16, float* m, float* v,
                 const float* grads, const float* norm, const ParamChunk* chunks, int num_chunks,
                 const AdamWArgs& args) {
  launch("adamw_update", LaunchShape{static_cast<unsigned>(num_chunks), 1, 512, 0}, AdamWKernel,
         params, params_bf16, m, v, grads, norm, chunks, args);
}

}  // namespace tessera::model::cuda::layer_kernels
