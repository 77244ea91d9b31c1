// Fused causal attention (flash-attention 2 style) for the GPT decoder; see layers_cuda.h for
// the contract. Tensor cores through nvcuda::wmma (bf16 16x16x16 tiles, fp32 accumulators).
// The fragments' element layout is opaque, so every step that needs a score's row or column
// (softmax, masking, rescaling) goes through a per-warp fp32 tile in shared memory whose
// layout the code chooses.
//
// Forward: one block of kWarps warps per (64 queries, b, h); each warp owns 16 query rows. Key
// tiles of 64 above the diagonal are skipped; the diagonal tile is masked. Online softmax in
// fp32 (running max, running sum, rescaled output held in registers), in base 2.
// Backward: D = rowsum(dO * O) first; then one block per (64 keys, b, h) walking the query
// tiles on and below the diagonal, recomputing P from the forward's log-sum-exp. dK and dV
// stay in fragments for the whole walk; dQ is summed over key tiles by fp32 atomics into a
// (B,T,C) scratch, then converted into dinp by a small kernel (so dQ is not bit-deterministic
// from run to run; dK and dV are).
#include <cuda_bf16.h>
#include <mma.h>

#include <cmath>
#include <cstdint>
#include <stdexcept>
#include <string>

#include "worker/model/cuda/flash_mma_kernels.cuh"
#include "worker/model/cuda/layers_cuda.h"

namespace tessera::model::cuda {
namespace {

namespace wmma = nvcuda::wmma;

constexpr int kWarp = 32;
constexpr int kWarps = 4;                     // per block
constexpr int kThreads = kWarps * kWarp;      // 128
constexpr int kTile = 64;                     // queries per forward block, keys per backward block
constexpr int kRowsPerWarp = kTile / kWarps;  // 16: one fragment row
constexpr int kFrag = 16;                     // wmma tile edge
constexpr int kPad = 8;                       // bf16 row padding (keeps ldm a multiple of 8)
constexpr int kLdTile = kTile + kPad;         // ld of a (rows, 64) bf16 tile of P or dS
constexpr int kLdScratch = kTile + 4;         // ld of a per-warp (16, <=64) fp32 tile
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

template <int HS>
__host__ __device__ constexpr int LdHead() {
  return HS + kPad;  // ld of a (64, HS) bf16 tile of q, k, v or dO
}

__host__ __device__ constexpr size_t Align128(size_t bytes) {
  return (bytes + 127) / 128 * 128;
}
template <int HS>
__host__ __device__ constexpr size_t HeadTileBytes() {
  return Align128(sizeof(bf16) * kTile * LdHead<HS>());
}
__host__ __device__ constexpr size_t PTileBytes() {
  return Align128(sizeof(bf16) * kTile * kLdTile);
}
__host__ __device__ constexpr size_t ScratchBytes() {
  return Align128(sizeof(float) * kWarps * kRowsPerWarp * kLdScratch);
}
__host__ __device__ constexpr size_t RowValuesBytes() {
  return Align128(sizeof(float) * kTile);
}

// Forward: k, v tiles | p (q staged here first) | scratch.
template <int HS>
__host__ __device__ constexpr size_t ForwardSharedBytes() {
  static_assert(PTileBytes() >= HeadTileBytes<HS>(), "q is staged in the p tile");
  return 2 * HeadTileBytes<HS>() + PTileBytes() + ScratchBytes();
}
// Backward: k, q, dO tiles | p / dS (keys, queries) | scratch | lse, D of the query tile.
template <int HS>
__host__ __device__ constexpr size_t BackwardSharedBytes() {
  return 3 * HeadTileBytes<HS>() + PTileBytes() + ScratchBytes() + 2 * RowValuesBytes();
}

inline unsigned Blocks(int64_t n, int threads) {
  return static_cast<unsigned>((n + threads - 1) / threads);
}

void CheckLaunch(const char* what) {
  CheckCuda(cudaGetLastError(), what, __FILE__, __LINE__);
}

// rows [row0, row0 + 64) of a (T, HS) matrix whose rows lie `stride` elements apart, into a
// shared (64, LdHead) tile; rows at or past T become zeros. 16-byte vectors: every row start
// is 16-byte aligned (checked on the host).
template <int HS>
__device__ inline void LoadHeadTile(bf16* tile, const bf16* src, int64_t stride, int row0, int T) {
  constexpr int kVecsPerRow = HS / 8;
  for (int v = threadIdx.x; v < kTile * kVecsPerRow; v += kThreads) {
    const int r = v / kVecsPerRow;
    const int c = (v % kVecsPerRow) * 8;
    uint4 value = make_uint4(0, 0, 0, 0);
    if (row0 + r < T)
      value = *reinterpret_cast<const uint4*>(src + (row0 + r) * stride + c);
    *reinterpret_cast<uint4*>(tile + r * LdHead<HS>() + c) = value;
  }
}

// ---------------------------------------------------------------------------------------
// Grid (query tiles, B*NH), kThreads threads. The heaviest tiles (last queries) go first.
template <int HS>
__global__ void __launch_bounds__(kThreads)
    FlashForwardKernel(bf16* out, float* lse, const bf16* inp, int T, int NH, float scale_log2) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();  // bf16 tensor cores need sm_80; the host refuses such devices first
#else
  constexpr int kLd = LdHead<HS>();
  constexpr int kOutPerLane = HS / 2;
  extern __shared__ __align__(128) unsigned char shared[];
  bf16* sk = reinterpret_cast<bf16*>(shared);
  bf16* sv = reinterpret_cast<bf16*>(shared + HeadTileBytes<HS>());
  bf16* sp = reinterpret_cast<bf16*>(shared + 2 * HeadTileBytes<HS>());
  float* scratch = reinterpret_cast<float*>(shared + 2 * HeadTileBytes<HS>() + PTileBytes());

  const int qtile = gridDim.x - 1 - blockIdx.x;
  const int bh = blockIdx.y;
  const int b = bh / NH;
  const int h = bh % NH;
  const int C = NH * HS;
  const int64_t stride = 3 * static_cast<int64_t>(C);
  const bf16* q = inp + static_cast<int64_t>(b) * T * stride + h * HS;
  const bf16* k = q + C;
  const bf16* v = q + 2 * C;
  const int q0 = qtile * kTile;

  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  // The softmax and output layout of a lane: row r of the warp's 16, half of the columns.
  const int r = lane / 2;
  const int half = lane % 2;
  const int row = q0 + warp * kRowsPerWarp + r;  // this lane's query position
  bf16* sp_warp = sp + warp * kRowsPerWarp * kLdTile;
  float* scratch_warp = scratch + warp * kRowsPerWarp * kLdScratch;

  // Queries, staged through the p tile, into fragments held for the whole block.
  LoadHeadTile<HS>(sp, q, stride, q0, T);
  __syncthreads();
  wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, bf16, wmma::row_major> qf[HS / kFrag];
  for (int kk = 0; kk < HS / kFrag; kk++)
    wmma::load_matrix_sync(qf[kk], sp + warp * kRowsPerWarp * kLd + kk * kFrag, kLd);

  float o[kOutPerLane];
  for (int i = 0; i < kOutPerLane; i++)
    o[i] = 0.0f;
  float m_run = -INFINITY;  // running max of the scaled scores, base 2
  float l_run = 0.0f;       // running sum of exp2(score - m_run)

  for (int ktile = 0; ktile <= qtile; ktile++) {
    const int k0 = ktile * kTile;
    __syncthreads();  // every warp is done with the previous k, v (and the staged q)
    LoadHeadTile<HS>(sk, k, stride, k0, T);
    LoadHeadTile<HS>(sv, v, stride, k0, T);
    __syncthreads();

    // S (16, 64) = q k^T for this warp's rows, into the scratch tile.
    for (int n = 0; n < kTile / kFrag; n++) {
      wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float> sf;
      wmma::fill_fragment(sf, 0.0f);
      for (int kk = 0; kk < HS / kFrag; kk++) {
        wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, bf16, wmma::col_major> kf;
        wmma::load_matrix_sync(kf, sk + n * kFrag * kLd + kk * kFrag, kLd);
        wmma::mma_sync(sf, qf[kk], kf, sf);
      }
      wmma::store_matrix_sync(scratch_warp + n * kFrag, sf, kLdScratch, wmma::mem_row_major);
    }
    __syncwarp();

    // Online softmax over this lane's 32 columns; the two lanes of a row combine by shuffle.
    const bool diagonal = ktile == qtile;
    const float* srow = scratch_warp + r * kLdScratch + half * (kTile / 2);
    float tile_max = -INFINITY;
    for (int i = 0; i < kTile / 2; i++) {
      const int key = k0 + half * (kTile / 2) + i;
      if (!diagonal || key <= row)
        tile_max = fmaxf(tile_max, srow[i] * scale_log2);
    }
    tile_max = fmaxf(tile_max, __shfl_xor_sync(0xffffffffu, tile_max, 1));
    // Finite: key k0 <= row whenever this is the diagonal tile, and no key is masked otherwise.
    const float m_new = fmaxf(m_run, tile_max);
    const float alpha = exp2f(m_run - m_new);  // 0 on the first tile (m_run = -inf)
    float sum = 0.0f;
    bf16* prow = sp_warp + r * kLdTile + half * (kTile / 2);
    for (int i = 0; i < kTile / 2; i++) {
      const int key = k0 + half * (kTile / 2) + i;
      const float p = !diagonal || key <= row ? exp2f(srow[i] * scale_log2 - m_new) : 0.0f;
      sum += p;
      prow[i] = __float2bfloat16_rn(p);
    }
    sum += __shfl_xor_sync(0xffffffffu, sum, 1);
    l_run = l_run * alpha + sum;
    m_run = m_new;
    for (int i = 0; i < kOutPerLane; i++)
      o[i] *= alpha;
    __syncwarp();  // p written, scores read: the scratch may be overwritten

    // P V (16, HS) into the scratch tile, then added to this lane's share of the output.
    for (int n = 0; n < HS / kFrag; n++) {
      wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float> of;
      wmma::fill_fragment(of, 0.0f);
      for (int kk = 0; kk < kTile / kFrag; kk++) {
        wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, bf16, wmma::row_major> pf;
        wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, bf16, wmma::row_major> vf;
        wmma::load_matrix_sync(pf, sp_warp + kk * kFrag, kLdTile);
        wmma::load_matrix_sync(vf, sv + kk * kFrag * kLd + n * kFrag, kLd);
        wmma::mma_sync(of, pf, vf, of);
      }
      wmma::store_matrix_sync(scratch_warp + n * kFrag, of, kLdScratch, wmma::mem_row_major);
    }
    __syncwarp();
    const float* pv = scratch_warp + r * kLdScratch + half * kOutPerLane;
    for (int i = 0; i < kOutPerLane; i++)
      o[i] += pv[i];
    __syncwarp();  // read before the next tile's scores overwrite the scratch
  }

  if (row < T) {
    const float inv = 1.0f / l_run;  // l_run >= 1: the row's maximum contributes exp2(0)
    bf16* dst = out + (static_cast<int64_t>(b) * T + row) * C + h * HS + half * kOutPerLane;
    for (int i = 0; i < kOutPerLane; i += 2) {
      *reinterpret_cast<__nv_bfloat162*>(dst + i) =
          __floats2bfloat162_rn(o[i] * inv, o[i + 1] * inv);
    }
    if (half == 0)
      lse[static_cast<int64_t>(bh) * T + row] = (m_run + log2f(l_run)) * kLn2;
  }
#endif
}

// Grid (key tiles, B*NH), kThreads threads; each warp owns 16 keys of the tile. The first key
// tiles see the most queries, and go first.
template <int HS>
__global__ void __launch_bounds__(kThreads)
    FlashBackwardKernel(bf16* dinp, float* dq_accum, const bf16* dout, const bf16* inp,
                        const float* lse, const float* delta, int T, int NH, float scale) {
#if defined(__CUDA_ARCH__) && __CUDA_ARCH__ < 800
  __trap();
#else
  constexpr int kLd = LdHead<HS>();
  constexpr int kCols = kTile / 2;  // query columns per lane
  extern __shared__ __align__(128) unsigned char shared[];
  bf16* sk = reinterpret_cast<bf16*>(shared);
  bf16* sq = reinterpret_cast<bf16*>(shared + HeadTileBytes<HS>());
  bf16* sdo = reinterpret_cast<bf16*>(shared + 2 * HeadTileBytes<HS>());
  bf16* sp = reinterpret_cast<bf16*>(shared + 3 * HeadTileBytes<HS>());  // (keys, queries)
  float* scratch = reinterpret_cast<float*>(shared + 3 * HeadTileBytes<HS>() + PTileBytes());
  float* slse = reinterpret_cast<float*>(shared + 3 * HeadTileBytes<HS>() + PTileBytes() +
                                         ScratchBytes());  // base 2
  float* sdelta = slse + RowValuesBytes() / sizeof(float);

  const int ktile = blockIdx.x;
  const int bh = blockIdx.y;
  const int b = bh / NH;
  const int h = bh % NH;
  const int C = NH * HS;
  const int64_t stride = 3 * static_cast<int64_t>(C);
  const int64_t row_base = static_cast<int64_t>(b) * T;  // first row of this sequence
  const bf16* q = inp + row_base * stride + h * HS;
  const bf16* k = q + C;
  const bf16* v = q + 2 * C;
  const bf16* dout_bh = dout + row_base * C + h * HS;
  const float* lse_bh = lse + static_cast<int64_t>(bh) * T;
  const float* delta_bh = delta + static_cast<int64_t>(bh) * T;
  const int k0 = ktile * kTile;
  const float scale_log2 = scale * kLog2e;
  const int num_qtiles = (T + kTile - 1) / kTile;

  const int warp = threadIdx.x / kWarp;
  const int lane = threadIdx.x % kWarp;
  const int r = lane / 2;
  const int half = lane % 2;
  const int key = k0 + warp * kRowsPerWarp + r;  // this lane's key position
  bf16* sp_warp = sp + warp * kRowsPerWarp * kLdTile;
  float* scratch_warp = scratch + warp * kRowsPerWarp * kLdScratch;

  // Values of this warp's keys, staged through the dO tile, into fragments for the block.
  LoadHeadTile<HS>(sk, k, stride, k0, T);
  LoadHeadTile<HS>(sdo, v, stride, k0, T);
  __syncthreads();
  wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, bf16, wmma::row_major> vf[HS / kFrag];
  for (int kk = 0; kk < HS / kFrag; kk++)
    wmma::load_matrix_sync(vf[kk], sdo + warp * kRowsPerWarp * kLd + kk * kFrag, kLd);

  wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float> dkf[HS / kFrag];
  wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float> dvf[HS / kFrag];
  for (int n = 0; n < HS / kFrag; n++) {
    wmma::fill_fragment(dkf[n], 0.0f);
    wmma::fill_fragment(dvf[n], 0.0f);
  }

  for (int qtile = ktile; qtile < num_qtiles; qtile++) {
    const int q0 = qtile * kTile;
    __syncthreads();  // every warp is done with the previous q, dO, dS (and the staged v)
    LoadHeadTile<HS>(sq, q, stride, q0, T);
    LoadHeadTile<HS>(sdo, dout_bh, C, q0, T);
    for (int i = threadIdx.x; i < kTile; i += kThreads) {
      const bool valid = q0 + i < T;
      slse[i] = valid ? lse_bh[q0 + i] * kLog2e : 0.0f;
      sdelta[i] = valid ? delta_bh[q0 + i] : 0.0f;
    }
    __syncthreads();

    // S^T (16 keys, 64 queries) = k q^T, into the scratch tile.
    for (int n = 0; n < kTile / kFrag; n++) {
      wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float> sf;
      wmma::fill_fragment(sf, 0.0f);
      for (int kk = 0; kk < HS / kFrag; kk++) {
        wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, bf16, wmma::row_major> kf;
        wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, bf16, wmma::col_major> qf;
        wmma::load_matrix_sync(kf, sk + warp * kRowsPerWarp * kLd + kk * kFrag, kLd);
        wmma::load_matrix_sync(qf, sq + n * kFrag * kLd + kk * kFrag, kLd);
        wmma::mma_sync(sf, kf, qf, sf);
      }
      wmma::store_matrix_sync(scratch_warp + n * kFrag, sf, kLdScratch, wmma::mem_row_major);
    }
    __syncwarp();

    // P^T = exp2(S^T scale log2e - lse log2e), zero where the query precedes the key or lies
    // past T; kept in registers (for dS) and as bf16 (for dV).
    float p[kCols];
    {
      const float* srow = scratch_warp + r * kLdScratch + half * kCols;
      bf16* prow = sp_warp + r * kLdTile + half * kCols;
      for (int i = 0; i < kCols; i++) {
        const int c = half * kCols + i;
        const int query = q0 + c;
        p[i] = query >= key && query < T ? exp2f(srow[i] * scale_log2 - slse[c]) : 0.0f;
        prow[i] = __float2bfloat16_rn(p[i]);
      }
    }
    __syncwarp();

    // dV (16, HS) += P^T dO.
    for (int n = 0; n < HS / kFrag; n++) {
      for (int kk = 0; kk < kTile / kFrag; kk++) {
        wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, bf16, wmma::row_major> pf;
        wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, bf16, wmma::row_major> df;
        wmma::load_matrix_sync(pf, sp_warp + kk * kFrag, kLdTile);
        wmma::load_matrix_sync(df, sdo + kk * kFrag * kLd + n * kFrag, kLd);
        wmma::mma_sync(dvf[n], pf, df, dvf[n]);
      }
    }
    // dP^T (16 keys, 64 queries) = v dO^T, into the scratch tile.
    for (int n = 0; n < kTile / kFrag; n++) {
      wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float> df;
      wmma::fill_fragment(df, 0.0f);
      for (int kk = 0; kk < HS / kFrag; kk++) {
        wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, bf16, wmma::col_major> of;
        wmma::load_matrix_sync(of, sdo + n * kFrag * kLd + kk * kFrag, kLd);
        wmma::mma_sync(df, vf[kk], of, df);
      }
      wmma::store_matrix_sync(scratch_warp + n * kFrag, df, kLdScratch, wmma::mem_row_major);
    }
    __syncwarp();  // dP^T stored, and every lane has read P^T for dV

    // dS^T = P^T (dP^T - D), as bf16 over P^T.
    {
      const float* dprow = scratch_warp + r * kLdScratch + half * kCols;
      bf16* dsrow = sp_warp + r * kLdTile + half * kCols;
      for (int i = 0; i < kCols; i++)
        dsrow[i] = __float2bfloat16_rn(p[i] * (dprow[i] - sdelta[half * kCols + i]));
    }
    __syncwarp();

    // dK (16, HS) += dS^T q (the scale at the end).
    for (int n = 0; n < HS / kFrag; n++) {
      for (int kk = 0; kk < kTile / kFrag; kk++) {
        wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, bf16, wmma::row_major> dsf;
        wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, bf16, wmma::row_major> qf;
        wmma::load_matrix_sync(dsf, sp_warp + kk * kFrag, kLdTile);
        wmma::load_matrix_sync(qf, sq + kk * kFrag * kLd + n * kFrag, kLd);
        wmma::mma_sync(dkf[n], dsf, qf, dkf[n]);
      }
    }
    __syncthreads();  // dS^T of all 64 keys is in place

    // dQ of this warp's 16 queries (16, HS) = dS (16 queries, 64 keys) k, read as the
    // transpose of the (keys, queries) tile; added to the fp32 accumulator with the scale.
    for (int n = 0; n < HS / kFrag; n++) {
      wmma::fragment<wmma::accumulator, kFrag, kFrag, kFrag, float> qacc;
      wmma::fill_fragment(qacc, 0.0f);
      for (int kk = 0; kk < kTile / kFrag; kk++) {
        wmma::fragment<wmma::matrix_a, kFrag, kFrag, kFrag, bf16, wmma::col_major> dsf;
        wmma::fragment<wmma::matrix_b, kFrag, kFrag, kFrag, bf16, wmma::row_major> kf;
        wmma::load_matrix_sync(dsf, sp + kk * kFrag * kLdTile + warp * kRowsPerWarp, kLdTile);
        wmma::load_matrix_sync(kf, sk + kk * kFrag * kLd + n * kFrag, kLd);
        wmma::mma_sync(qacc, dsf, kf, qacc);
      }
      wmma::store_matrix_sync(scratch_warp + n * kFrag, qacc, kLdScratch, wmma::mem_row_major);
    }
    __syncwarp();
    for (int e = lane; e < kRowsPerWarp * HS; e += kWarp) {
      const int qr = e / HS;
      const int c = e % HS;
      const int query = q0 + warp * kRowsPerWarp + qr;
      if (query < T) {
        atomicAdd(dq_accum + (row_base + query) * C + h * HS + c,
                  scratch_warp[qr * kLdScratch + c] * scale);
      }
    }
    __syncwarp();  // read before the next tile's scores overwrite the scratch
  }

  // dK (with the scale) and dV of this warp's keys, through the scratch tile, into dinp.
  for (int part = 1; part <= 2; part++) {
    for (int n = 0; n < HS / kFrag; n++) {
      if (part == 1) {
        for (int i = 0; i < dkf[n].num_elements; i++)
          dkf[n].x[i] *= scale;
        wmma::store_matrix_sync(scratch_warp + n * kFrag, dkf[n], kLdScratch, wmma::mem_row_major);
      } else {
        wmma::store_matrix_sync(scratch_warp + n * kFrag, dvf[n], kLdScratch, wmma::mem_row_major);
      }
    }
    __syncwarp();
    if (key < T) {
      const float* src = scratch_warp + r * kLdScratch + half * (HS / 2);
      bf16* dst = dinp + (row_base + key) * stride + part * C + h * HS + half * (HS / 2);
      for (int i = 0; i < HS / 2; i += 2)
        *reinterpret_cast<__nv_bfloat162*>(dst + i) = __floats2bfloat162_rn(src[i], src[i + 1]);
    }
    __syncwarp();
  }
#endif
}

}  // namespace

namespace {

// Throws std::invalid_argument naming the shape unless this kernel supports it.
int CheckFlashShape(const char* what, int B, int T, int C, int NH) {
  if (B < 1 || T < 1 || NH < 1 || C < 1 || C % NH != 0) {
    throw std::invalid_argument(std::string(what) + ": unsupported shape B=" + std::to_string(B) +
                                " T=" + std::to_string(T) + " C=" + std::to_string(C) +
                                " NH=" + std::to_string(NH) +
                                " (need B, T, NH >= 1 and C a multiple of NH)");
  }
  const int hs = C / NH;
  if (hs != 32 && hs != 64) {
    throw std::invalid_argument(std::string(what) + ": head size C/NH = " + std::to_string(hs) +
                                " (C=" + std::to_string(C) + ", NH=" + std::to_string(NH) +
                                ") is not supported; flash attention supports 32 and 64");
  }
  return hs;
}

void CheckAligned(const char* what, const char* name, const void* p) {
  if (reinterpret_cast<uintptr_t>(p) % 16 != 0) {
    throw std::invalid_argument(std::string(what) + ": " + name +
                                " must be 16-byte aligned (the kernels read 16-byte vectors)");
  }
}

// bf16 tensor cores need compute capability 8.0 or later.
void CheckDevice(const char* what) {
  int device = 0;
  int major = 0;
  CheckCuda(cudaGetDevice(&device), what, __FILE__, __LINE__);
  CheckCuda(cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, device), what,
            __FILE__, __LINE__);
  if (major < 8) {
    throw std::invalid_argument(std::string(what) +
                                ": needs a GPU of compute capability 8.0 "
                                "or later (bf16 tensor cores); device " +
                                std::to_string(device) + " is " + std::to_string(major) + ".x");
  }
}

// Opts a kernel into more than 48 KiB of dynamic shared memory when it needs it.
template <typename Kernel>
void SetSharedBytes(Kernel kernel, size_t bytes, const char* what) {
  if (bytes > 48 * 1024) {
    CheckCuda(cudaFuncSetAttribute(kernel, cudaFuncAttributeMaxDynamicSharedMemorySize,
                                   static_cast<int>(bytes)),
              what, __FILE__, __LINE__);
  }
}

template <int HS>
void LaunchForward(bf16* out, float* lse, const bf16* inp, int B, int T, int NH,
                   cudaStream_t stream) {
  constexpr size_t bytes = ForwardSharedBytes<HS>();
  SetSharedBytes(FlashForwardKernel<HS>, bytes, "flash_attention_forward shared memory");
  const dim3 grid(Blocks(T, kTile), static_cast<unsigned>(B * NH));
  const float scale_log2 = kLog2e / sqrtf(static_cast<float>(HS));
  FlashForwardKernel<HS><<<grid, kThreads, bytes, stream>>>(out, lse, inp, T, NH, scale_log2);
  CheckLaunch("flash_attention_forward");
}

template <int HS>
void LaunchBackward(bf16* dinp, float* dq_accum, const bf16* dout, const bf16* inp,
                    const float* lse, const float* delta, int B, int T, int NH,
                    cudaStream_t stream) {
  constexpr size_t bytes = BackwardSharedBytes<HS>();
  SetSharedBytes(FlashBackwardKernel<HS>, bytes, "flash_attention_backward shared memory");
  const dim3 grid(Blocks(T, kTile), static_cast<unsigned>(B * NH));
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  FlashBackwardKernel<HS>
      <<<grid, kThreads, bytes, stream>>>(dinp, dq_accum, dout, inp, lse, delta, T, NH, scale);
  CheckLaunch("flash_attention_backward");
}

template <int HS, int kRowTiles>
void LaunchMmaForward(bf16* out, float* lse, const bf16* inp, int B, int T, int NH,
                      cudaStream_t stream) {
  constexpr size_t bytes = flash_mma::ForwardSharedBytes<HS>();
  SetSharedBytes(flash_mma::FlashMmaForwardKernel<HS, kRowTiles>, bytes,
                 "flash_attention_forward shared memory");
  const dim3 grid(Blocks(T, flash_mma::kForwardQueries), static_cast<unsigned>(B * NH));
  const float scale_log2 = kLog2e / sqrtf(static_cast<float>(HS));
  flash_mma::FlashMmaForwardKernel<HS, kRowTiles>
      <<<grid, flash_mma::ForwardThreads<kRowTiles>(), bytes, stream>>>(Bits(out), lse, Bits(inp),
                                                                        T, NH, scale_log2);
  CheckLaunch("flash_attention_forward (mma)");
}

template <int HS>
void LaunchMmaBackward(bf16* dinp, float* dq_accum, const bf16* dout, const bf16* inp,
                       const float* lse, const float* delta, int B, int T, int NH,
                       cudaStream_t stream) {
  constexpr size_t bytes = flash_mma::BackwardSharedBytes<HS>();
  SetSharedBytes(flash_mma::FlashMmaBackwardKernel<HS>, bytes,
                 "flash_attention_backward shared memory");
  const dim3 grid(Blocks(T, flash_mma::kBackwardKeys), static_cast<unsigned>(B * NH));
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  flash_mma::FlashMmaBackwardKernel<HS><<<grid, flash_mma::kBackwardThreads, bytes, stream>>>(
      Bits(dinp), dq_accum, Bits(dout), Bits(inp), lse, delta, T, NH, scale);
  CheckLaunch("flash_attention_backward (mma)");
}

// kMma2's backward: dK and dV (the kernel above without dQ), then dQ by FlashMmaDqKernel
// straight into dinp (no scratch, no atomics).
template <int HS>
void LaunchMmaBackwardSplit(bf16* dinp, const bf16* dout, const bf16* inp, const float* lse,
                            const float* delta, int B, int T, int NH, cudaStream_t stream) {
  const float scale = 1.0f / sqrtf(static_cast<float>(HS));
  constexpr size_t kv_bytes = flash_mma::BackwardSharedBytes<HS>();
  SetSharedBytes(flash_mma::FlashMmaBackwardKernel<HS, false>, kv_bytes,
                 "flash_attention_backward shared memory");
  const dim3 kv_grid(Blocks(T, flash_mma::kBackwardKeys), static_cast<unsigned>(B * NH));
  flash_mma::FlashMmaBackwardKernel<HS, false>
      <<<kv_grid, flash_mma::kBackwardThreads, kv_bytes, stream>>>(
          Bits(dinp), nullptr, Bits(dout), Bits(inp), lse, delta, T, NH, scale);
  CheckLaunch("flash_attention_backward (mma2, dk and dv)");
  constexpr size_t q_bytes = flash_mma::DqSharedBytes<HS>();
  SetSharedBytes(flash_mma::FlashMmaDqKernel<HS>, q_bytes,
                 "flash_attention_backward shared memory");
  const dim3 q_grid(Blocks(T, flash_mma::kDqQueries), static_cast<unsigned>(B * NH));
  flash_mma::FlashMmaDqKernel<HS><<<q_grid, flash_mma::kDqThreads, q_bytes, stream>>>(
      Bits(dinp), Bits(dout), Bits(inp), lse, delta, T, NH, scale);
  CheckLaunch("flash_attention_backward (mma2, dq)");
}

}  // namespace

void flash_attention_forward(bf16* out, float* lse, const bf16* inp, int B, int T, int C, int NH,
                             cudaStream_t stream, FlashKernels kernels) {
  const char* what = "flash_attention_forward";
  const int hs = CheckFlashShape(what, B, T, C, NH);
  CheckAligned(what, "inp", inp);
  CheckAligned(what, "out", out);
  CheckDevice(what);
  if (kernels == FlashKernels::kMma && hs == 32)
    LaunchMmaForward<32, 1>(out, lse, inp, B, T, NH, stream);
  else if (kernels == FlashKernels::kMma)
    LaunchMmaForward<64, 1>(out, lse, inp, B, T, NH, stream);
  else if (kernels == FlashKernels::kMma2 && hs == 32)
    LaunchMmaForward<32, 2>(out, lse, inp, B, T, NH, stream);
  else if (kernels == FlashKernels::kMma2)
    LaunchMmaForward<64, 2>(out, lse, inp, B, T, NH, stream);
  else if (hs == 32)
    LaunchForward<32>(out, lse, inp, B, T, NH, stream);
  else
    LaunchForward<64>(out, lse, inp, B, T, NH, stream);
}

void flash_attention_backward(bf16* dinp, float* delta_scratch, float* dq_scratch, const bf16* dout,
                              const bf16* inp, const bf16* out, const float* lse, int B, int T,
                              int C, int NH, cudaStream_t stream, FlashKernels kernels) {
  const char* what = "flash_attention_backward";
  const int hs = CheckFlashShape(what, B, T, C, NH);
  CheckAligned(what, "dinp", dinp);
  CheckAligned(what, "dout", dout);
  CheckAligned(what, "inp", inp);
  CheckDevice(what);
  const int64_t N = static_cast<int64_t>(B) * T;
  const int64_t rows = N * NH;
  flash_mma::FlashDeltaKernel<<<Blocks(rows * kWarp, flash_mma::kDeltaThreads),
                                flash_mma::kDeltaThreads, 0, stream>>>(delta_scratch, Bits(dout),
                                                                       Bits(out), B, T, NH, hs);
  CheckLaunch("flash_attention_backward (delta)");
  if (kernels == FlashKernels::kMma2) {
    if (hs == 32)
      LaunchMmaBackwardSplit<32>(dinp, dout, inp, lse, delta_scratch, B, T, NH, stream);
    else
      LaunchMmaBackwardSplit<64>(dinp, dout, inp, lse, delta_scratch, B, T, NH, stream);
    return;
  }
  CheckCuda(cudaMemsetAsync(dq_scratch, 0, static_cast<size_t>(N) * C * sizeof(float), stream),
            "flash_attention_backward (zero dq)", __FILE__, __LINE__);
  if (kernels == FlashKernels::kMma && hs == 32)
    LaunchMmaBackward<32>(dinp, dq_scratch, dout, inp, lse, delta_scratch, B, T, NH, stream);
  else if (kernels == FlashKernels::kMma)
    LaunchMmaBackward<64>(dinp, dq_scratch, dout, inp, lse, delta_scratch, B, T, NH, stream);
  else if (hs == 32)
    LaunchBackward<32>(dinp, dq_scratch, dout, inp, lse, delta_scratch, B, T, NH, stream);
  else
    LaunchBackward<64>(dinp, dq_scratch, dout, inp, lse, delta_scratch, B, T, NH, stream);
  flash_mma::FlashDqConvertKernel<<<Blocks(N * C, flash_mma::kDqConvertThreads),
                                    flash_mma::kDqConvertThreads, 0, stream>>>(Bits(dinp),
                                                                               dq_scratch, N, C);
  CheckLaunch("flash_attention_backward (dq)");
}

}  // namespace tessera::model::cuda
