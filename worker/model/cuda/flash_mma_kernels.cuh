// The fused causal attention (flash-attention 2 style) on mma.sync tensor-core instructions,
// with scores, probabilities and their gradients held in registers. The same function and
// contract as the wmma kernels of flash_attention.cu (see layers_cuda.h): inp (B,T,3C) holds
// q | k | v, out (B,T,C), lse (B,NH,T) the natural log-sum-exp of each row's scaled scores.
//
// Why a second implementation: nvcuda::wmma hides which lane holds which element, so the wmma
// kernels write every score tile to shared memory and read it back for the softmax. The
// m16n8k16 instruction's layouts are documented (warp_mma.cuh), and the accumulator layout of
// one product is, two 8-column tiles at a time, the A-operand layout of the next: the
// probabilities go from the QK^T accumulators into the PV product without leaving registers.
//
// Written against warp_mma.cuh only, so the same source runs on a GPU (included by
// flash_attention.cu) and on the CPU under the SIMT emulator of tests/unit/gpu_emulation.
//
// Shapes: head size HS of 32 or 64; any T >= 1 (rows past T are read as zeros, never written);
// shared tiles have rows padded by 8 bf16 so the 8 row addresses of an ldmatrix fall in
// different banks.
#pragma once

#include <cmath>
#include <cstdint>

#include "worker/model/cuda/warp_mma.cuh"

namespace tessera::model::cuda::flash_mma {

using warp::Bf16Bits;

constexpr int kKeyTile = 64;          // keys per shared tile (forward)
constexpr int kQueryTile = 64;        // queries per shared tile (backward)
constexpr int kForwardQueries = 128;  // per block
constexpr int kBackwardWarps = 8;
constexpr int kBackwardThreads = kBackwardWarps * warp::kWarpSize;
constexpr int kBackwardKeys = 16 * kBackwardWarps;  // per block: 16 keys a warp
constexpr int kPad = 8;
constexpr int kLdScores = kQueryTile + kPad;  // row stride of the backward's dS^T tile
constexpr float kLog2e = 1.4426950408889634f;
constexpr float kLn2 = 0.6931471805599453f;

// Forward warps own kRowTiles tiles of 16 query rows each: 8 warps of one tile (kMma), or 4
// warps of two (kMma2), which use each k and v fragment loaded from shared memory for twice
// the products.
template <int kRowTiles>
TESSERA_HOST_DEVICE constexpr int ForwardThreads() {
  return kForwardQueries / (16 * kRowTiles) * warp::kWarpSize;
}
template <int HS>
TESSERA_HOST_DEVICE constexpr int LdHead() {
  return HS + kPad;  // row stride of a (rows, HS) tile of q, k, v or dO
}
TESSERA_HOST_DEVICE constexpr size_t Align128(size_t bytes) {
  return (bytes + 127) / 128 * 128;
}
template <int HS>
TESSERA_HOST_DEVICE constexpr size_t HeadTileBytes(int rows) {
  return Align128(sizeof(Bf16Bits) * rows * LdHead<HS>());
}
// Forward: two stages of (k tile, v tile), one computed on while the next is copied in (the
// block's queries are staged through stage 1 first).
template <int HS>
TESSERA_HOST_DEVICE constexpr size_t ForwardSharedBytes() {
  static_assert(2 * kKeyTile >= kForwardQueries, "q is staged in a stage's k and v tiles");
  static_assert(HeadTileBytes<HS>(kKeyTile) == sizeof(Bf16Bits) * kKeyTile * LdHead<HS>(),
                "a stage's k and v tiles are contiguous rows");
  return 4 * HeadTileBytes<HS>(kKeyTile);
}
// Backward: the block's k rows | stage 0 (q tile, dO tile) | stage 1 (q tile, dO tile) | dS^T
// (keys, queries) | two stages of (lse, D) of the query tile. The block's v rows are staged
// through stage 1 (its q and dO tiles are contiguous) first.
template <int HS>
TESSERA_HOST_DEVICE constexpr size_t BackwardSharedBytes() {
  static_assert(2 * kQueryTile == kBackwardKeys, "v is staged in a stage's q and dO tiles");
  static_assert(HeadTileBytes<HS>(kQueryTile) == sizeof(Bf16Bits) * kQueryTile * LdHead<HS>(),
                "a stage's q and dO tiles are contiguous rows");
  return HeadTileBytes<HS>(kBackwardKeys) + 4 * HeadTileBytes<HS>(kQueryTile) +
         Align128(sizeof(Bf16Bits) * kBackwardKeys * kLdScores) +
         4 * Align128(sizeof(float) * kQueryTile);
}

// Starts copying rows [row0, row0 + rows) of a (T, HS) matrix whose rows lie `stride` elements
// apart into a shared (rows, LdHead) tile, 16 bytes per cp.async; rows at or past T are
// zeroed at once. The copies belong to the next CpAsyncCommit group.
template <int HS>
TESSERA_DEVICE void LoadRowsAsync(Bf16Bits* tile, const Bf16Bits* src, int64_t stride, int row0,
                                  int rows, int T, int threads) {
  constexpr int kVecsPerRow = HS / 8;
  for (int i = static_cast<int>(warp::ThreadIdx()); i < rows * kVecsPerRow; i += threads) {
    const int r = i / kVecsPerRow;
    const int c = (i % kVecsPerRow) * 8;
    Bf16Bits* dst = tile + r * LdHead<HS>() + c;
    if (row0 + r < T)
      warp::CpAsync16(dst, src + (row0 + r) * stride + c);
    else
      warp::Zero16(dst);
  }
}

// The head a block works on (BlockIdxY() = b * NH + h) and where its rows are: the q, k and v
// rows of inp (B,T,3C), `stride` = 3C elements apart, from its sequence's first row.
struct BlockHead {
  int bh, b, h, C;
  int64_t stride;
  int64_t row_base;  // b * T
  const Bf16Bits* q;
  const Bf16Bits* k;
  const Bf16Bits* v;
};
template <int HS>
TESSERA_DEVICE BlockHead HeadOfBlock(const Bf16Bits* inp, int T, int NH) {
  BlockHead head;
  head.bh = static_cast<int>(warp::BlockIdxY());
  head.b = head.bh / NH;
  head.h = head.bh % NH;
  head.C = NH * HS;
  head.stride = 3 * static_cast<int64_t>(head.C);
  head.row_base = static_cast<int64_t>(head.b) * T;
  head.q = inp + head.row_base * head.stride + head.h * HS;
  head.k = head.q + head.C;
  head.v = head.q + 2 * head.C;
  return head;
}

// Two stages of (k tile, v tile) of kKeyTile rows in shared memory, from `shared`: stage s's k
// tile is tile 2s, its v tile 2s + 1. Addressed by arithmetic, not arrays of pointers, which a
// runtime index would put in local memory.
template <int HS>
struct KeyValueStages {
  unsigned char* shared;
  TESSERA_DEVICE Bf16Bits* k(int stage) const {
    return reinterpret_cast<Bf16Bits*>(shared + 2 * stage * HeadTileBytes<HS>(kKeyTile));
  }
  TESSERA_DEVICE Bf16Bits* v(int stage) const {
    return reinterpret_cast<Bf16Bits*>(shared + (2 * stage + 1) * HeadTileBytes<HS>(kKeyTile));
  }
  // Starts copying the k and v rows of key tile kt into stage kt % 2 (for the next commit).
  TESSERA_DEVICE void LoadKeyTile(int kt, const BlockHead& head, int T, int threads) const {
    const int k0 = kt * kKeyTile;
    LoadRowsAsync<HS>(k(kt % 2), head.k, head.stride, k0, kKeyTile, T, threads);
    LoadRowsAsync<HS>(v(kt % 2), head.v, head.stride, k0, kKeyTile, T, threads);
  }
  // Every thread of the block, before computing on key tile kt: once every warp is done with the
  // other stage, starts copying tile kt + 1 into it (up to last_tile), then waits for tile kt
  // (tile kt + 1 may stay in flight). Returns tile kt's stage.
  TESSERA_DEVICE int Advance(int kt, int last_tile, const BlockHead& head, int T,
                             int threads) const {
    warp::SyncThreads();
    if (kt < last_tile)
      LoadKeyTile(kt + 1, head, T, threads);
    warp::CpAsyncCommit();
    warp::CpAsyncWait<1>();
    warp::SyncThreads();
    return kt % 2;
  }
};

// The lane's address for an ldmatrix .x4 giving the A fragment of the 16x16 block at
// (row0, col0) of a row-major tile (matrices: rows 0-7 | 8-15, then columns 8-15).
TESSERA_DEVICE const Bf16Bits* AFragmentRow(const Bf16Bits* tile, int ld, int row0, int col0,
                                            int lane) {
  return tile + (row0 + lane % 8 + 8 * ((lane / 8) % 2)) * ld + col0 + 8 * (lane / 16);
}
// For B fragments of two 8-column chunks (n0, n0 + 8) over k [k0, k0 + 16), where B[k][n] =
// tile[n][k] (the tile holds B's columns as rows: keys of K, queries of Q or dO): plain
// ldmatrix. Registers 0, 1: chunk n0; 2, 3: chunk n0 + 8.
TESSERA_DEVICE const Bf16Bits* BFragmentRowsAsColumns(const Bf16Bits* tile, int ld, int n0, int k0,
                                                      int lane) {
  return tile + (n0 + lane % 8 + 8 * (lane / 16)) * ld + k0 + 8 * ((lane / 8) % 2);
}
// For B fragments of two 8-column chunks when B[k][n] = tile[k][n] (V or dO or K by rows of
// keys/queries): ldmatrix .trans. Registers 0, 1: chunk n0; 2, 3: chunk n0 + 8.
TESSERA_DEVICE const Bf16Bits* BFragmentRows(const Bf16Bits* tile, int ld, int k0, int n0,
                                             int lane) {
  return tile + (k0 + lane % 8 + 8 * ((lane / 8) % 2)) * ld + n0 + 8 * (lane / 16);
}
// The A fragments of a product whose left operand is an accumulator tile just computed: the
// 16x16 block kk of a (16, 8 * chunks) accumulator (chunks 2kk and 2kk + 1), as bf16.
TESSERA_DEVICE void AccumulatorToA(uint32_t a[4], const float (&lo)[4], const float (&hi)[4]) {
  a[0] = warp::PackBf16x2(lo[0], lo[1]);
  a[1] = warp::PackBf16x2(lo[2], lo[3]);
  a[2] = warp::PackBf16x2(hi[0], hi[1]);
  a[3] = warp::PackBf16x2(hi[2], hi[3]);
}
// For each of M row tiles m: acc[m] (16, 8 * N) += A_m (16, HS) as fragments a[m][HS / 16] x B,
// where B's (HS, 8 * N) chunks are rows of `tile` (see BFragmentRowsAsColumns). Each B
// fragment is loaded once for the M tiles.
template <int HS, int M, int N>
TESSERA_DEVICE void MmaRowsAsColumns(float (&acc)[M][N][4], const uint32_t (&a)[M][HS / 16][4],
                                     const Bf16Bits* tile, int lane) {
  TESSERA_UNROLL
  for (int nn = 0; nn < N / 2; nn++) {
    TESSERA_UNROLL
    for (int kk = 0; kk < HS / 16; kk++) {
      uint32_t b[4];
      warp::LdMatrixX4(b, BFragmentRowsAsColumns(tile, LdHead<HS>(), nn * 16, kk * 16, lane));
      TESSERA_UNROLL
      for (int m = 0; m < M; m++) {
        warp::Mma16816(acc[m][2 * nn], a[m][kk], b);
        warp::Mma16816(acc[m][2 * nn + 1], a[m][kk], b + 2);
      }
    }
  }
}
// For each of M row tiles m: acc[m] (16, 8N) += A_m (16, 16K) x tile rows [0, 16K), columns
// [col0, col0 + 8N) of a tile with rows of HS (row stride LdHead<HS>); A_m given as 16x16
// blocks a[m][K]. Each B fragment is loaded once for the M tiles.
template <int HS, int M, int K, int N>
TESSERA_DEVICE void MmaTimesRows(float (&acc)[M][N][4], const uint32_t (&a)[M][K][4],
                                 const Bf16Bits* tile, int lane, int col0 = 0) {
  static_assert(N % 2 == 0, "column chunks come in pairs");
  TESSERA_UNROLL
  for (int kk = 0; kk < K; kk++) {
    TESSERA_UNROLL
    for (int nd = 0; nd < N / 2; nd++) {
      uint32_t b[4];
      warp::LdMatrixX4Trans(b, BFragmentRows(tile, LdHead<HS>(), kk * 16, col0 + nd * 16, lane));
      TESSERA_UNROLL
      for (int m = 0; m < M; m++) {
        warp::Mma16816(acc[m][2 * nd], a[m][kk], b);
        warp::Mma16816(acc[m][2 * nd + 1], a[m][kk], b + 2);
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
// Forward. Grid (query blocks of kForwardQueries, B*NH), ForwardThreads<kRowTiles>() threads;
// the heaviest blocks (last queries) go first. Warp w owns query rows r0 = q0 + 16 kRowTiles w
// .. + 16 kRowTiles - 1, in kRowTiles tiles of 16, and holds their q as A fragments; for each
// key tile of 64 at or below its rows: S = q k^T (16 x 64 a row tile) in accumulators, scale,
// causal mask, online softmax (base 2) on the lane's rows g and g + 8 of each row tile (the
// four lanes of a row combine by shuffles), then O += P v with P straight from the
// accumulators.
template <int HS, int kRowTiles>
TESSERA_KERNEL(ForwardThreads<kRowTiles>(), 2)
FlashMmaForwardKernel(Bf16Bits* out, float* lse, const Bf16Bits* inp, int T, int NH,
                      float scale_log2) {
  static_assert(HS == 32 || HS == 64, "head sizes 32 and 64");
  static_assert(kRowTiles == 1 || kRowTiles == 2, "one or two row tiles a warp");
  static_assert(kKeyTile % (16 * kRowTiles) == 0, "a processed key tile starts at or before r0");
  constexpr int kThreads = ForwardThreads<kRowTiles>();
  constexpr int kWarpRows = 16 * kRowTiles;
  constexpr int kLd = LdHead<HS>();
  constexpr int kKeyChunks = kKeyTile / 8;  // 8-key accumulator chunks of S
  const KeyValueStages<HS> stages{warp::SharedMemory()};
  const int qblock = static_cast<int>(warp::GridDimX() - 1 - warp::BlockIdxX());
  const BlockHead head = HeadOfBlock<HS>(inp, T, NH);
  const int q0 = qblock * kForwardQueries;

  const int warp_id = static_cast<int>(warp::ThreadIdx()) / warp::kWarpSize;
  const int lane = static_cast<int>(warp::ThreadIdx()) % warp::kWarpSize;
  const int g = lane / 4;
  const int t = lane % 4;
  const int r0 = q0 + kWarpRows * warp_id;  // the warp's first query row
  int row[kRowTiles][2];                    // the lane's rows g and g + 8 of each row tile
  TESSERA_UNROLL
  for (int i = 0; i < kRowTiles; i++) {
    row[i][0] = r0 + 16 * i + g;
    row[i][1] = r0 + 16 * i + g + 8;
  }

  // Key tiles: the block needs those up to its last valid row, the warp those up to its own.
  const int block_last = (q0 + kForwardQueries < T ? q0 + kForwardQueries : T) - 1;
  const int last_tile = block_last / kKeyTile;
  const int warp_last_tile =
      r0 < T ? ((r0 + kWarpRows - 1 < T ? r0 + kWarpRows - 1 : T - 1) / kKeyTile) : -1;

  // q of the block through stage 1 (its k and v tiles are contiguous) into A fragments, while
  // key tile 0 comes into stage 0.
  LoadRowsAsync<HS>(stages.k(1), head.q, head.stride, q0, kForwardQueries, T, kThreads);
  stages.LoadKeyTile(0, head, T, kThreads);
  warp::CpAsyncCommit();
  warp::CpAsyncWait<0>();
  warp::SyncThreads();
  uint32_t qa[kRowTiles][HS / 16][4];
  TESSERA_UNROLL
  for (int i = 0; i < kRowTiles; i++) {
    TESSERA_UNROLL
    for (int kk = 0; kk < HS / 16; kk++) {
      warp::LdMatrixX4(qa[i][kk],
                       AFragmentRow(stages.k(1), kLd, kWarpRows * warp_id + 16 * i, kk * 16, lane));
    }
  }

  float o[kRowTiles][HS / 8][4] = {};
  float m[kRowTiles][2];  // running row maxima of the scaled scores, base 2
  float l[kRowTiles][2];  // this lane's share of the running row sums
  TESSERA_UNROLL
  for (int i = 0; i < kRowTiles; i++) {
    m[i][0] = m[i][1] = -INFINITY;
    l[i][0] = l[i][1] = 0.0f;
  }

  for (int kt = 0; kt <= last_tile; kt++) {
    const int k0 = kt * kKeyTile;
    // (The other stage held the staged q before tile 1.)
    const int stage = stages.Advance(kt, last_tile, head, T, kThreads);
    if (kt > warp_last_tile)
      continue;  // warp-uniform: every key of the tile lies after the warp's rows

    float s[kRowTiles][kKeyChunks][4] = {};
    MmaRowsAsColumns<HS>(s, qa, stages.k(stage), lane);

    uint32_t pa[kRowTiles][kKeyTile / 16][4];
    TESSERA_UNROLL
    for (int i = 0; i < kRowTiles; i++) {
      // Scale and mask (keys after the row; only tiles reaching past the row tile's first row
      // have any), row maxima.
      const bool masked = k0 + kKeyTile - 1 > r0 + 16 * i;
      float tile_max[2] = {-INFINITY, -INFINITY};
      TESSERA_UNROLL
      for (int j = 0; j < kKeyChunks; j++) {
        TESSERA_UNROLL
        for (int e = 0; e < 4; e++) {
          const int key = k0 + 8 * j + 2 * t + (e & 1);
          float x = s[i][j][e] * scale_log2;
          if (masked && key > row[i][e / 2])
            x = -INFINITY;
          s[i][j][e] = x;
          tile_max[e / 2] = warp::Max(tile_max[e / 2], x);
        }
      }
      float alpha[2];
      TESSERA_UNROLL
      for (int r = 0; r < 2; r++) {
        tile_max[r] = warp::Max(tile_max[r], warp::ShflXor(tile_max[r], 1));
        tile_max[r] = warp::Max(tile_max[r], warp::ShflXor(tile_max[r], 2));
        // Finite: k0 <= r0 (both multiples of 16 kRowTiles, k0 <= the warp's last row), so
        // key k0 precedes every row.
        const float m_new = warp::Max(m[i][r], tile_max[r]);
        alpha[r] = warp::Exp2(m[i][r] - m_new);  // 0 on the first tile (m = -inf)
        m[i][r] = m_new;
        l[i][r] *= alpha[r];
      }
      TESSERA_UNROLL
      for (int j = 0; j < kKeyChunks; j++) {
        TESSERA_UNROLL
        for (int e = 0; e < 4; e++) {
          const float p = warp::Exp2(s[i][j][e] - m[i][e / 2]);  // exp2(-inf) = 0 where masked
          s[i][j][e] = p;
          l[i][e / 2] += p;
        }
      }
      TESSERA_UNROLL
      for (int n = 0; n < HS / 8; n++) {
        o[i][n][0] *= alpha[0];
        o[i][n][1] *= alpha[0];
        o[i][n][2] *= alpha[1];
        o[i][n][3] *= alpha[1];
      }
      TESSERA_UNROLL
      for (int kk = 0; kk < kKeyTile / 16; kk++)
        AccumulatorToA(pa[i][kk], s[i][2 * kk], s[i][2 * kk + 1]);
    }
    // O (16, HS) += P (16, 64) v (64, HS) for each row tile.
    MmaTimesRows<HS>(o, pa, stages.v(stage), lane);
  }

  // Whole-row sums, then out = O / l and lse = (m + log2 l) ln 2 for the valid rows.
  TESSERA_UNROLL
  for (int i = 0; i < kRowTiles; i++) {
    TESSERA_UNROLL
    for (int r = 0; r < 2; r++) {
      l[i][r] += warp::ShflXor(l[i][r], 1);
      l[i][r] += warp::ShflXor(l[i][r], 2);
    }
    TESSERA_UNROLL
    for (int r = 0; r < 2; r++) {
      if (row[i][r] >= T)
        continue;
      const float inv = 1.0f / l[i][r];  // l >= 1: the row's maximum contributes exp2(0)
      Bf16Bits* dst = out + (head.row_base + row[i][r]) * head.C + head.h * HS + 2 * t;
      TESSERA_UNROLL
      for (int n = 0; n < HS / 8; n++) {
        warp::Store32(dst + 8 * n,
                      warp::PackBf16x2(o[i][n][2 * r] * inv, o[i][n][2 * r + 1] * inv));
      }
      if (t == 0)
        lse[static_cast<int64_t>(head.bh) * T + row[i][r]] = (m[i][r] + warp::Log2(l[i][r])) * kLn2;
    }
  }
}

// ---------------------------------------------------------------------------------------
// Backward. Grid (key blocks of kBackwardKeys = 128, B*NH), kBackwardThreads threads; the
// first key blocks see the most queries and go first. Warp w owns keys k0 + 16w .. +15 and
// holds their k and v as A fragments, dK and dV as accumulators. For each query tile of 64 on
// or after the block's first key (double-buffered by cp.async):
//   S^T = k q^T, P^T = exp2(S^T scale log2e - lse log2e) (masked), dV += P^T dO,
//   dP^T = v dO^T, dS^T = P^T (dP^T - D), dK += dS^T q,
// all on the warp's 16 keys (a warp whose keys all follow the tile's queries only writes zeros);
// then dS^T goes to shared memory, and warp w computes dQ of the tile's queries
// 16 (w % 4) .. +15, head columns (w / 4) HS/2 .. +HS/2, over all 128 keys (dS k), and adds it,
// scaled, to the fp32 dq_accum (B,T,C) by float2 atomics: 128 keys a block halve the atomics
// of 64. delta (B,NH,T) = rowsum(dO * O) is computed before (FlashDeltaKernel). With kWithDq
// false, only dK and dV (FlashMmaDqKernel computes dQ; dq_accum is not used).
template <int HS, bool kWithDq = true>
TESSERA_KERNEL(kBackwardThreads, 1)
FlashMmaBackwardKernel(Bf16Bits* dinp, float* dq_accum, const Bf16Bits* dout, const Bf16Bits* inp,
                       const float* lse, const float* delta, int T, int NH, float scale) {
  static_assert(HS == 32 || HS == 64, "head sizes 32 and 64");
  constexpr int kLd = LdHead<HS>();
  constexpr int kQueryChunks = kQueryTile / 8;
  constexpr size_t kKeyBytes = HeadTileBytes<HS>(kBackwardKeys);
  constexpr size_t kTileBytes = HeadTileBytes<HS>(kQueryTile);
  constexpr size_t kRowValues = Align128(sizeof(float) * kQueryTile) / sizeof(float);
  unsigned char* shared = warp::SharedMemory();
  // k rows first; then stage s's q tile at kKeyBytes + 2s tiles, its dO tile one tile later;
  // dS^T; lse of stage s at s, D at 2 + s (in kRowValues floats from slse0).
  Bf16Bits* const sk = reinterpret_cast<Bf16Bits*>(shared);
  auto sq = [shared](int stage) {
    return reinterpret_cast<Bf16Bits*>(shared + kKeyBytes + 2 * stage * kTileBytes);
  };
  auto sdo = [shared](int stage) {
    return reinterpret_cast<Bf16Bits*>(shared + kKeyBytes + (2 * stage + 1) * kTileBytes);
  };
  Bf16Bits* const sds = reinterpret_cast<Bf16Bits*>(shared + kKeyBytes + 4 * kTileBytes);
  float* const slse0 = reinterpret_cast<float*>(
      shared + kKeyBytes + 4 * kTileBytes + Align128(sizeof(Bf16Bits) * kBackwardKeys * kLdScores));
  auto slse = [slse0](int stage) { return slse0 + stage * kRowValues; };
  auto sdelta = [slse0](int stage) { return slse0 + (2 + stage) * kRowValues; };

  const int ktile = static_cast<int>(warp::BlockIdxX());
  const BlockHead head = HeadOfBlock<HS>(inp, T, NH);
  const int C = head.C;
  const Bf16Bits* dout_bh = dout + head.row_base * C + head.h * HS;
  const float* lse_bh = lse + static_cast<int64_t>(head.bh) * T;
  const float* delta_bh = delta + static_cast<int64_t>(head.bh) * T;
  const int k0 = ktile * kBackwardKeys;
  const float scale_log2 = scale * kLog2e;

  const int warp_id = static_cast<int>(warp::ThreadIdx()) / warp::kWarpSize;
  const int lane = static_cast<int>(warp::ThreadIdx()) % warp::kWarpSize;
  const int g = lane / 4;
  const int t = lane % 4;
  const int key[2] = {k0 + 16 * warp_id + g, k0 + 16 * warp_id + g + 8};

  // The query tiles on and after the diagonal; tile qt goes to stage (qt - first) % 2.
  const int first_qtile = k0 / kQueryTile;
  const int num_qtiles = (T + kQueryTile - 1) / kQueryTile;
  auto load_query_tile = [&](int qt, int stage) {
    const int q0 = qt * kQueryTile;
    LoadRowsAsync<HS>(sq(stage), head.q, head.stride, q0, kQueryTile, T, kBackwardThreads);
    LoadRowsAsync<HS>(sdo(stage), dout_bh, C, q0, kQueryTile, T, kBackwardThreads);
    for (int i = static_cast<int>(warp::ThreadIdx()); i < kQueryTile; i += kBackwardThreads) {
      const bool valid = q0 + i < T;
      slse(stage)[i] = valid ? lse_bh[q0 + i] * kLog2e : 0.0f;
      sdelta(stage)[i] = valid ? delta_bh[q0 + i] : 0.0f;
    }
  };

  // k and v of the block (v staged through stage 1) and the first query tile; the warp's rows
  // of k and v into A fragments.
  LoadRowsAsync<HS>(sk, head.k, head.stride, k0, kBackwardKeys, T, kBackwardThreads);
  LoadRowsAsync<HS>(sq(1), head.v, head.stride, k0, kBackwardKeys, T, kBackwardThreads);
  load_query_tile(first_qtile, 0);
  warp::CpAsyncCommit();
  warp::CpAsyncWait<0>();
  warp::SyncThreads();
  // One row tile of 16 keys a warp: the products' operands are arrays of one tile.
  uint32_t ka[1][HS / 16][4];
  uint32_t va[1][HS / 16][4];
  for (int kk = 0; kk < HS / 16; kk++) {
    warp::LdMatrixX4(ka[0][kk], AFragmentRow(sk, kLd, 16 * warp_id, kk * 16, lane));
    warp::LdMatrixX4(va[0][kk], AFragmentRow(sq(1), kLd, 16 * warp_id, kk * 16, lane));
  }
  float dk_tile[1][HS / 8][4] = {};
  float dv_tile[1][HS / 8][4] = {};
  auto& dk = dk_tile[0];
  auto& dv = dv_tile[0];

  for (int qt = first_qtile; qt < num_qtiles; qt++) {
    const int q0 = qt * kQueryTile;
    const int stage = (qt - first_qtile) % 2;
    // The other stage (the staged v, or tile qt - 1) and dS^T are consumed.
    warp::SyncThreads();
    if (qt + 1 < num_qtiles)
      load_query_tile(qt + 1, 1 - stage);
    warp::CpAsyncCommit();
    warp::CpAsyncWait<1>();  // tile qt is in (only tile qt + 1 may still be in flight)
    warp::SyncThreads();
    const Bf16Bits* const sq_t = sq(stage);
    const Bf16Bits* const sdo_t = sdo(stage);
    const float* const slse_t = slse(stage);
    const float* const sdelta_t = sdelta(stage);
    Bf16Bits* const sds_warp = sds + 16 * warp_id * kLdScores;

    if (k0 + 16 * warp_id > q0 + kQueryTile - 1) {
      // Every key of the warp follows every query of the tile: dS^T is zero (warp-uniform).
      if constexpr (kWithDq) {
        for (int j = 0; j < kQueryChunks; j++) {
          warp::Store32(sds_warp + g * kLdScores + 8 * j + 2 * t, 0);
          warp::Store32(sds_warp + (g + 8) * kLdScores + 8 * j + 2 * t, 0);
        }
      }
    } else {
      // S^T (16 keys, 64 queries) = k q^T, then P^T in place: zero where the query precedes
      // the key or lies past T.
      float p_tile[1][kQueryChunks][4] = {};
      auto& p = p_tile[0];
      MmaRowsAsColumns<HS>(p_tile, ka, sq_t, lane);
      for (int j = 0; j < kQueryChunks; j++) {
        for (int e = 0; e < 4; e++) {
          const int c = 8 * j + 2 * t + (e & 1);
          const int query = q0 + c;
          p[j][e] = query >= key[e / 2] && query < T ? warp::Exp2(p[j][e] * scale_log2 - slse_t[c])
                                                     : 0.0f;
        }
      }
      // dV (16, HS) += P^T dO.
      uint32_t pa[1][kQueryTile / 16][4];
      for (int kk = 0; kk < kQueryTile / 16; kk++)
        AccumulatorToA(pa[0][kk], p[2 * kk], p[2 * kk + 1]);
      MmaTimesRows<HS>(dv_tile, pa, sdo_t, lane);

      // dP^T (16 keys, 64 queries) = v dO^T, then dS^T = P^T (dP^T - D) in place.
      float ds_tile[1][kQueryChunks][4] = {};
      auto& ds = ds_tile[0];
      MmaRowsAsColumns<HS>(ds_tile, va, sdo_t, lane);
      for (int j = 0; j < kQueryChunks; j++) {
        for (int e = 0; e < 4; e++)
          ds[j][e] = p[j][e] * (ds[j][e] - sdelta_t[8 * j + 2 * t + (e & 1)]);
      }
      // dK (16, HS) += dS^T q (the scale at the end); dS^T into shared memory for dQ.
      uint32_t dsa[1][kQueryTile / 16][4];
      for (int kk = 0; kk < kQueryTile / 16; kk++)
        AccumulatorToA(dsa[0][kk], ds[2 * kk], ds[2 * kk + 1]);
      MmaTimesRows<HS>(dk_tile, dsa, sq_t, lane);
      if constexpr (kWithDq) {
        for (int j = 0; j < kQueryChunks; j++) {
          const int c = 8 * j + 2 * t;
          warp::Store32(sds_warp + g * kLdScores + c, dsa[0][j / 2][(j % 2) * 2]);
          warp::Store32(sds_warp + (g + 8) * kLdScores + c, dsa[0][j / 2][(j % 2) * 2 + 1]);
        }
      }
    }
    if constexpr (!kWithDq)
      continue;           // dQ is FlashMmaDqKernel's
    warp::SyncThreads();  // dS^T of all 128 keys is in place

    // dQ of queries q0 + 16 (w % 4) .. +15, head columns (w / 4) HS/2 .. +HS/2 = dS (16, 128
    // keys) k (128 keys, HS/2); dS's A fragments are ldmatrix .trans of the (keys, queries)
    // tile.
    const int q_slice = 16 * (warp_id % 4);
    const int d_half = (warp_id / 4) * (HS / 2);
    float dq_tile[1][HS / 16][4] = {};
    auto& dq = dq_tile[0];
    uint32_t dqa[1][kBackwardKeys / 16][4];
    for (int kk = 0; kk < kBackwardKeys / 16; kk++) {
      const Bf16Bits* row_address =
          sds + (16 * kk + lane % 8 + 8 * (lane / 16)) * kLdScores + q_slice + 8 * ((lane / 8) % 2);
      warp::LdMatrixX4Trans(dqa[0][kk], row_address);
    }
    MmaTimesRows<HS>(dq_tile, dqa, sk, lane, d_half);
    for (int i = 0; i < 2; i++) {
      const int query = q0 + q_slice + g + 8 * i;
      if (query >= T)
        continue;
      float* dst = dq_accum + (head.row_base + query) * C + head.h * HS + d_half + 2 * t;
      for (int n = 0; n < HS / 16; n++)
        warp::AtomicAdd2(dst + 8 * n, dq[n][2 * i] * scale, dq[n][2 * i + 1] * scale);
    }
  }

  // dK (with the scale) and dV of the warp's valid keys into dinp's k and v columns.
  for (int i = 0; i < 2; i++) {
    if (key[i] >= T)
      continue;
    Bf16Bits* dst = dinp + (head.row_base + key[i]) * head.stride + C + head.h * HS + 2 * t;
    for (int n = 0; n < HS / 8; n++) {
      warp::Store32(dst + 8 * n, warp::PackBf16x2(dk[n][2 * i] * scale, dk[n][2 * i + 1] * scale));
      warp::Store32(dst + C + 8 * n, warp::PackBf16x2(dv[n][2 * i], dv[n][2 * i + 1]));
    }
  }
}

// ---------------------------------------------------------------------------------------
// dQ in a kernel of its own (FlashKernels::kMma2, with FlashMmaBackwardKernel<HS, false> for dK
// and dV): no atomics, no fp32 scratch, the same bits every run, at the price of recomputing S
// and dP (7 products for the backward instead of 5). Grid (query blocks of kDqQueries, B*NH),
// kDqThreads threads; the heaviest blocks (last queries) go first. Warp w owns queries
// r0 = q0 + 16w .. +15 and holds their q and dO as A fragments; for each key tile of 64 at or
// below its rows (double-buffered by cp.async, as the forward's):
//   S = q k^T, P = exp2(S scale log2e - lse log2e) (masked), dP = dO v^T, dS = P (dP - D),
//   dQ += dS k,
// then dQ times the scale is rounded into dinp's q columns.
constexpr int kDqWarps = 4;
constexpr int kDqThreads = kDqWarps * warp::kWarpSize;
constexpr int kDqQueries = 16 * kDqWarps;  // per block

// Two stages of (k tile, v tile), as the forward; the block's q and dO are staged through
// stage 1's k and v tiles first.
template <int HS>
TESSERA_HOST_DEVICE constexpr size_t DqSharedBytes() {
  static_assert(kDqQueries == kKeyTile, "q and dO are staged in a stage's k and v tiles");
  return 4 * HeadTileBytes<HS>(kKeyTile);
}

template <int HS>
TESSERA_KERNEL(kDqThreads, 2)
FlashMmaDqKernel(Bf16Bits* dinp, const Bf16Bits* dout, const Bf16Bits* inp, const float* lse,
                 const float* delta, int T, int NH, float scale) {
  static_assert(HS == 32 || HS == 64, "head sizes 32 and 64");
  constexpr int kLd = LdHead<HS>();
  constexpr int kKeyChunks = kKeyTile / 8;
  const KeyValueStages<HS> stages{warp::SharedMemory()};
  const int qblock = static_cast<int>(warp::GridDimX() - 1 - warp::BlockIdxX());
  const BlockHead head = HeadOfBlock<HS>(inp, T, NH);
  const Bf16Bits* dout_bh = dout + head.row_base * head.C + head.h * HS;
  const int q0 = qblock * kDqQueries;
  const float scale_log2 = scale * kLog2e;

  const int warp_id = static_cast<int>(warp::ThreadIdx()) / warp::kWarpSize;
  const int lane = static_cast<int>(warp::ThreadIdx()) % warp::kWarpSize;
  const int g = lane / 4;
  const int t = lane % 4;
  const int r0 = q0 + 16 * warp_id;
  const int row[2] = {r0 + g, r0 + g + 8};
  float row_lse[2], row_delta[2];  // lse in base 2; rows past T: 0 (never written out)
  for (int i = 0; i < 2; i++) {
    const bool valid = row[i] < T;
    row_lse[i] = valid ? lse[static_cast<int64_t>(head.bh) * T + row[i]] * kLog2e : 0.0f;
    row_delta[i] = valid ? delta[static_cast<int64_t>(head.bh) * T + row[i]] : 0.0f;
  }

  const int block_last = (q0 + kDqQueries < T ? q0 + kDqQueries : T) - 1;
  const int last_tile = block_last / kKeyTile;
  const int warp_last_tile = r0 < T ? ((r0 + 15 < T ? r0 + 15 : T - 1) / kKeyTile) : -1;

  // q and dO of the block through stage 1 into A fragments, while key tile 0 comes into stage 0.
  LoadRowsAsync<HS>(stages.k(1), head.q, head.stride, q0, kDqQueries, T, kDqThreads);
  LoadRowsAsync<HS>(stages.v(1), dout_bh, head.C, q0, kDqQueries, T, kDqThreads);
  stages.LoadKeyTile(0, head, T, kDqThreads);
  warp::CpAsyncCommit();
  warp::CpAsyncWait<0>();
  warp::SyncThreads();
  uint32_t qa[1][HS / 16][4];
  uint32_t doa[1][HS / 16][4];
  TESSERA_UNROLL
  for (int kk = 0; kk < HS / 16; kk++) {
    warp::LdMatrixX4(qa[0][kk], AFragmentRow(stages.k(1), kLd, 16 * warp_id, kk * 16, lane));
    warp::LdMatrixX4(doa[0][kk], AFragmentRow(stages.v(1), kLd, 16 * warp_id, kk * 16, lane));
  }
  float dq_tile[1][HS / 8][4] = {};

  for (int kt = 0; kt <= last_tile; kt++) {
    const int k0 = kt * kKeyTile;
    // (The other stage held the staged q and dO before tile 1.)
    const int stage = stages.Advance(kt, last_tile, head, T, kDqThreads);
    if (kt > warp_last_tile)
      continue;  // warp-uniform: every key of the tile lies after the warp's rows

    // S (16, 64) = q k^T and dP (16, 64) = dO v^T, then dS = P (dP - D) in dP's place.
    float s[1][kKeyChunks][4] = {};
    float dp[1][kKeyChunks][4] = {};
    MmaRowsAsColumns<HS>(s, qa, stages.k(stage), lane);
    MmaRowsAsColumns<HS>(dp, doa, stages.v(stage), lane);
    const bool masked = k0 + kKeyTile - 1 > r0;
    TESSERA_UNROLL
    for (int j = 0; j < kKeyChunks; j++) {
      TESSERA_UNROLL
      for (int e = 0; e < 4; e++) {
        const int key = k0 + 8 * j + 2 * t + (e & 1);
        const int r = e / 2;
        const float p =
            masked && key > row[r] ? 0.0f : warp::Exp2(s[0][j][e] * scale_log2 - row_lse[r]);
        dp[0][j][e] = p * (dp[0][j][e] - row_delta[r]);
      }
    }
    // dQ (16, HS) += dS (16, 64) k (64, HS).
    uint32_t dsa[1][kKeyTile / 16][4];
    TESSERA_UNROLL
    for (int kk = 0; kk < kKeyTile / 16; kk++)
      AccumulatorToA(dsa[0][kk], dp[0][2 * kk], dp[0][2 * kk + 1]);
    MmaTimesRows<HS>(dq_tile, dsa, stages.k(stage), lane);
  }

  // dQ (with the scale) of the warp's valid rows into dinp's q columns.
  for (int i = 0; i < 2; i++) {
    if (row[i] >= T)
      continue;
    Bf16Bits* dst = dinp + (head.row_base + row[i]) * head.stride + head.h * HS + 2 * t;
    TESSERA_UNROLL
    for (int n = 0; n < HS / 8; n++) {
      warp::Store32(dst + 8 * n, warp::PackBf16x2(dq_tile[0][n][2 * i] * scale,
                                                  dq_tile[0][n][2 * i + 1] * scale));
    }
  }
}

// ---------------------------------------------------------------------------------------
// Before and after either backward (this one and flash_attention.cu's wmma one).

// D (B,NH,T) = rowsum(dout * out) per head; one warp per (b, t, h), kDeltaThreads a block.
constexpr int kDeltaThreads = 256;
TESSERA_GLOBAL
FlashDeltaKernel(float* delta, const Bf16Bits* dout, const Bf16Bits* out, int B, int T, int NH,
                 int hs) {
  const int64_t w = (static_cast<int64_t>(warp::BlockIdxX()) * kDeltaThreads + warp::ThreadIdx()) /
                    warp::kWarpSize;
  const int lane = static_cast<int>(warp::ThreadIdx()) % warp::kWarpSize;
  if (w >= static_cast<int64_t>(B) * T * NH)
    return;
  const int h = static_cast<int>(w % NH);
  const int64_t n = w / NH;  // b * T + t
  const int t = static_cast<int>(n % T);
  const int b = static_cast<int>(n / T);
  const int64_t offset = n * NH * hs + h * hs;
  float sum = 0.0f;
  for (int i = lane; i < hs; i += warp::kWarpSize)
    sum += warp::Bf16ToFloat(dout[offset + i]) * warp::Bf16ToFloat(out[offset + i]);
  for (int s = warp::kWarpSize / 2; s > 0; s /= 2)
    sum += warp::ShflXor(sum, s);
  if (lane == 0)
    delta[(static_cast<int64_t>(b) * NH + h) * T + t] = sum;
}

// dinp's q columns (B,T,3C) = the fp32 dQ accumulator (B,T,C), rounded; kDqConvertThreads a
// block, one value a thread.
constexpr int kDqConvertThreads = 256;
TESSERA_GLOBAL
FlashDqConvertKernel(Bf16Bits* dinp, const float* dq_accum, int64_t N, int C) {
  const int64_t idx =
      static_cast<int64_t>(warp::BlockIdxX()) * kDqConvertThreads + warp::ThreadIdx();
  if (idx >= N * C)
    return;
  const int64_t n = idx / C;
  const int c = static_cast<int>(idx % C);
  dinp[n * 3 * C + c] = warp::FloatToBf16(dq_accum[idx]);
}

}  // namespace tessera::model::cuda::flash_mma
