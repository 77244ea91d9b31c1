// The mma.sync flash-attention kernels (worker/model/cuda/flash_mma_kernels.cuh), run on the CPU
// by the SIMT emulator, against the CPU reference attention of worker/model/cpu/layers.h: the
// kernels' tiling, fragment indexing, causal masking, online softmax and dQ accumulation are
// checked here, in CI, without a GPU. (On a GPU, tests/unit/gpu/gpu_flash_attention_test.cpp
// runs the same source compiled by nvcc.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <vector>

#include "tests/unit/gpu_emulation/emulated_test_util.h"
#include "tests/unit/gpu_emulation/warp_emulator.h"
#include "worker/model/cpu/layers.h"
#include "worker/model/cuda/flash_mma_kernels.cuh"

namespace tessera::model::cuda::flash_mma {
namespace {

using warp_emu::test::Close;
using warp_emu::test::RandomBf16Values;
using warp_emu::test::ToBits;
using warp_emu::test::ToFloats;

// Elements past the end of each output that no kernel may write (on a device such a write lands
// in a neighbouring allocation, or in a row another block owns).
constexpr size_t kGuard = 512;           // past the last row: a whole row of 3C (C <= 128 here)
constexpr Bf16Bits kGuardBits = 0x7fbf;  // a bf16 NaN the kernels never produce
constexpr float kGuardFloat = 12345.0f;

template <class T>
bool GuardIntact(const std::vector<T>& values, T guard) {
  return std::all_of(values.end() - kGuard, values.end(), [guard](T v) { return v == guard; });
}

// The kernels of one set: kMma (kRowTiles 1, dQ by atomics in the dK/dV kernel) or kMma2
// (kRowTiles 2, dQ by FlashMmaDqKernel). With opposed_keys, q is drawn with standard deviation 6
// and each key is the negation of its own position's query: every score of row 0 (its only
// key is its own) and each diagonal score lie far below zero (about -200).
template <int HS, int kRowTiles = 1, bool kSplitDq = false>
void CheckAgainstCpu(int B, int T, int NH, uint64_t seed, bool opposed_keys = false) {
  const int C = NH * HS;
  const size_t N = static_cast<size_t>(B) * T;
  const size_t rows = static_cast<size_t>(B) * NH * T;
  std::vector<float> qkv = RandomBf16Values(N * 3 * C, seed);
  if (opposed_keys) {
    for (size_t n = 0; n < N; n++) {
      for (int c = 0; c < C; c++) {
        float& q = qkv[n * 3 * C + c];
        q = warp::Bf16ToFloat(warp::FloatToBf16(6.0f * q));
        qkv[n * 3 * C + C + c] = -q;
      }
    }
  }
  const std::vector<float> dout = RandomBf16Values(N * C, seed + 1);
  const std::vector<Bf16Bits> qkv_bits = ToBits(qkv);
  const std::vector<Bf16Bits> dout_bits = ToBits(dout);

  // Forward.
  std::vector<Bf16Bits> out_bits(N * C + kGuard, 0xffff);
  std::fill(out_bits.end() - kGuard, out_bits.end(), kGuardBits);
  std::vector<float> lse(rows + kGuard, NAN);
  std::fill(lse.end() - kGuard, lse.end(), kGuardFloat);
  const float scale = 1.0f / std::sqrt(static_cast<float>(HS));
  warp_emu::LaunchConfig forward;
  forward.grid_x = static_cast<unsigned>((T + kForwardQueries - 1) / kForwardQueries);
  forward.grid_y = static_cast<unsigned>(B * NH);
  forward.threads = ForwardThreads<kRowTiles>();
  forward.shared_bytes = ForwardSharedBytes<HS>();
  warp_emu::Launch(forward, [&] {
    FlashMmaForwardKernel<HS, kRowTiles>(out_bits.data(), lse.data(), qkv_bits.data(), T, NH,
                                         scale * kLog2e);
  });

  // Backward: D = rowsum(dout * out) (FlashDeltaKernel), dq accumulated in fp32, then rounded
  // into dinp's q columns (FlashDqConvertKernel).
  std::vector<float> delta(rows, NAN);
  warp_emu::LaunchConfig delta_launch;
  delta_launch.grid_x =
      static_cast<unsigned>((rows * warp::kWarpSize + kDeltaThreads - 1) / kDeltaThreads);
  delta_launch.threads = kDeltaThreads;
  warp_emu::Launch(delta_launch, [&] {
    FlashDeltaKernel(delta.data(), dout_bits.data(), out_bits.data(), B, T, NH, HS);
  });
  // dq_accum's guard is -0.0: even an atomic add of zero past its end turns one into +0.
  std::vector<float> dq_accum(N * C + kGuard, -0.0f);
  std::fill(dq_accum.begin(), dq_accum.end() - kGuard, 0.0f);
  std::vector<Bf16Bits> dinp_bits(N * 3 * C + kGuard, 0xffff);
  std::fill(dinp_bits.end() - kGuard, dinp_bits.end(), kGuardBits);
  warp_emu::LaunchConfig backward;
  backward.grid_x = static_cast<unsigned>((T + kBackwardKeys - 1) / kBackwardKeys);
  backward.grid_y = static_cast<unsigned>(B * NH);
  backward.threads = kBackwardThreads;
  backward.shared_bytes = BackwardSharedBytes<HS>();
  warp_emu::Launch(backward, [&] {
    FlashMmaBackwardKernel<HS, !kSplitDq>(dinp_bits.data(), kSplitDq ? nullptr : dq_accum.data(),
                                          dout_bits.data(), qkv_bits.data(), lse.data(),
                                          delta.data(), T, NH, scale);
  });
  if constexpr (kSplitDq) {
    warp_emu::LaunchConfig dq;
    dq.grid_x = static_cast<unsigned>((T + kDqQueries - 1) / kDqQueries);
    dq.grid_y = static_cast<unsigned>(B * NH);
    dq.threads = kDqThreads;
    dq.shared_bytes = DqSharedBytes<HS>();
    warp_emu::Launch(dq, [&] {
      FlashMmaDqKernel<HS>(dinp_bits.data(), dout_bits.data(), qkv_bits.data(), lse.data(),
                           delta.data(), T, NH, scale);
    });
  } else {
    warp_emu::LaunchConfig convert;
    convert.grid_x = static_cast<unsigned>((N * C + kDqConvertThreads - 1) / kDqConvertThreads);
    convert.threads = kDqConvertThreads;
    warp_emu::Launch(convert, [&] {
      FlashDqConvertKernel(dinp_bits.data(), dq_accum.data(), static_cast<int64_t>(N), C);
    });
  }

  // The CPU reference in fp32, and the log-sum-exp in double.
  std::vector<float> out(N * C), att(static_cast<size_t>(B) * NH * T * T, 0.0f), dqkv(N * 3 * C);
  cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
  std::vector<float> want_lse(rows);
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      for (int t = 0; t < T; t++) {
        std::vector<double> scores(t + 1);
        for (int t2 = 0; t2 <= t; t2++) {
          double dot = 0;
          for (int i = 0; i < HS; i++) {
            dot += static_cast<double>(qkv[(static_cast<size_t>(b) * T + t) * 3 * C + h * HS + i]) *
                   qkv[(static_cast<size_t>(b) * T + t2) * 3 * C + C + h * HS + i];
          }
          scores[t2] = dot / std::sqrt(static_cast<double>(HS));
        }
        const double max = *std::max_element(scores.begin(), scores.end());
        double sum = 0;
        for (double s : scores)
          sum += std::exp(s - max);
        want_lse[(static_cast<size_t>(b) * NH + h) * T + t] =
            static_cast<float>(max + std::log(sum));
      }
    }
  }

  EXPECT_TRUE(GuardIntact(out_bits, kGuardBits)) << "out";
  EXPECT_TRUE(GuardIntact(lse, kGuardFloat)) << "lse";
  EXPECT_TRUE(GuardIntact(dinp_bits, kGuardBits)) << "dinp";
  EXPECT_TRUE(std::all_of(dq_accum.end() - kGuard, dq_accum.end(), [](float v) {
    return v == 0.0f && std::signbit(v);
  })) << "dq_accum";
  out_bits.resize(N * C);
  lse.resize(rows);
  dinp_bits.resize(N * 3 * C);
  EXPECT_TRUE(Close("out", ToFloats(out_bits), out, 1e-2));
  EXPECT_TRUE(Close("lse", lse, want_lse, 1e-4));
  const std::vector<float> dinp = ToFloats(dinp_bits);
  // dq, dk and dv separately, so a wrong third cannot hide behind the other two.
  for (int part = 0; part < 3; part++) {
    std::vector<float> got, want;
    for (size_t n = 0; n < N; n++) {
      for (int c = 0; c < C; c++) {
        got.push_back(dinp[n * 3 * C + part * C + c]);
        want.push_back(dqkv[n * 3 * C + part * C + c]);
      }
    }
    const char* names[] = {"dq", "dk", "dv"};
    EXPECT_TRUE(Close(names[part], got, want, 1e-2));
  }
}

// One forward block and one key tile, head size 32.
TEST(FlashMmaEmulated, OneTileAtHeadSize32) {
  CheckAgainstCpu<32>(1, 64, 2, 11);
}

// T = 100: the forward block and the second key tile end past T.
TEST(FlashMmaEmulated, PartialTilesAtHeadSize64) {
  CheckAgainstCpu<64>(1, 100, 2, 12);
}

// Two sequences, two forward blocks (the second partial), four key tiles.
TEST(FlashMmaEmulated, SeveralBlocksAndSequences) {
  CheckAgainstCpu<64>(2, 200, 1, 13);
}

// A T below one 16-row warp slice: most warps of the forward block lie wholly past T.
TEST(FlashMmaEmulated, ShortSequence) {
  CheckAgainstCpu<32>(2, 5, 2, 14);
}

// T = 65: the last query row is the first of a key tile (64), which that row alone needs, in the
// forward and in the dQ kernel.
TEST(FlashMmaEmulated, LastRowAloneInItsKeyTile) {
  CheckAgainstCpu<32>(1, 65, 1, 16);
  CheckAgainstCpu<32, 2, true>(1, 65, 1, 27);
}

// Large activations: rows whose every score is far below zero, where exp of a score underflows
// unless the running maximum starts at -inf and follows the scores down.
TEST(FlashMmaEmulated, RowsWhoseScoresAreAllFarBelowZero) {
  CheckAgainstCpu<32>(1, 70, 2, 15, true);
  CheckAgainstCpu<32, 2, true>(1, 70, 2, 26, true);
}

// kMma2: the forward with two row tiles a warp and dQ in a kernel of its own, at the same
// shapes, so each row tile meets partial key tiles, warps past T, a second row tile past T while
// the first is not (T = 100 and T = 5), key tiles needed by the second row tile only (T = 24),
// and dQ blocks of 64 queries whose last key tile is partial.
TEST(FlashMmaEmulated, SecondVersion) {
  CheckAgainstCpu<32, 2, true>(1, 64, 2, 21);
  CheckAgainstCpu<64, 2, true>(1, 100, 2, 22);
  CheckAgainstCpu<64, 2, true>(2, 200, 1, 23);
  CheckAgainstCpu<32, 2, true>(2, 5, 2, 24);
  CheckAgainstCpu<32, 2, true>(1, 24, 1, 25);
}

}  // namespace
}  // namespace tessera::model::cuda::flash_mma
