// The fused causal attention of worker/model/cuda/flash_attention.cu, forward and backward,
// against the CPU reference of worker/model/cpu/layers.h, as GpuLayers.AttentionForwardAndBackward
// checks the matmul attention: fresh random bf16 inputs, relative error within kBf16Tolerance.
// Shapes: the tests' head size (32), a T that is not a multiple of the 64-row tile, GPT-2's
// head size (64), and several sequences with a ragged end. Every kernel set (FlashKernels).
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cctype>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <ostream>
#include <random>
#include <stdexcept>
#include <string>
#include <vector>

#include "tests/unit/gpu/gpu_test_util.h"
#include "worker/model/cpu/layers.h"
#include "worker/model/cuda/layers_cuda.h"

namespace tessera::model::cuda {

// Test names and messages show the kernel set (found by argument-dependent lookup).
void PrintTo(FlashKernels kernels, std::ostream* os) {
  *os << FlashKernelsName(kernels);
}

namespace {

using gpu_test::DeviceArray;
using gpu_test::DeviceBf16;
using gpu_test::kBf16Tolerance;
using gpu_test::kFp32Tolerance;
using gpu_test::RandomBf16;
using gpu_test::RelativeErrorWithin;

// Forward and backward of one shape; the CPU's log-sum-exp is recomputed from its
// probabilities' normaliser (the scaled scores of each row).
void CheckFlashAttention(int B, int T, int C, int NH, FlashKernels kernels) {
  const uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const int64_t N = int64_t{B} * T;
  const size_t qkv_size = static_cast<size_t>(N) * 3 * C;
  const size_t out_size = static_cast<size_t>(N) * C;
  const size_t rows = static_cast<size_t>(B) * NH * T;
  const std::vector<float> qkv = RandomBf16(qkv_size, 1.0f, seed);
  const std::vector<float> dout = RandomBf16(out_size, 1.0f, seed + 1);

  DeviceBf16 d_qkv(qkv), d_out(out_size), d_dout(dout), d_dqkv(qkv_size);
  DeviceArray<float> d_lse(rows), d_delta(rows), d_dq(out_size);
  flash_attention_forward(d_out.as<bf16>(), d_lse.get(), d_qkv.as<bf16>(), B, T, C, NH, nullptr,
                          kernels);
  flash_attention_backward(d_dqkv.as<bf16>(), d_delta.get(), d_dq.get(), d_dout.as<bf16>(),
                           d_qkv.as<bf16>(), d_out.as<bf16>(), d_lse.get(), B, T, C, NH, nullptr,
                           kernels);
  TESSERA_CUDA_OK(cudaDeviceSynchronize());

  std::vector<float> out(out_size), att(static_cast<size_t>(B) * NH * T * T, 0.0f), dqkv(qkv_size);
  cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  EXPECT_TRUE(RelativeErrorWithin(d_out.ToHost(), out, kBf16Tolerance));
  cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
  EXPECT_TRUE(RelativeErrorWithin(d_dqkv.ToHost(), dqkv, kBf16Tolerance));

  // lse of row (b, h, t) = log sum_{t2 <= t} exp(scale q_t . k_t2), in double.
  const int hs = C / NH;
  const double scale = 1.0 / std::sqrt(static_cast<double>(hs));
  std::vector<float> lse(rows);
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      for (int t = 0; t < T; t++) {
        const float* q = qkv.data() + (static_cast<size_t>(b) * T + t) * 3 * C + h * hs;
        std::vector<double> s(t + 1);
        double max = -INFINITY;
        for (int t2 = 0; t2 <= t; t2++) {
          const float* k = qkv.data() + (static_cast<size_t>(b) * T + t2) * 3 * C + C + h * hs;
          double dot = 0;
          for (int i = 0; i < hs; i++)
            dot += static_cast<double>(q[i]) * k[i];
          s[t2] = dot * scale;
          max = std::max(max, s[t2]);
        }
        double sum = 0;
        for (double x : s)
          sum += std::exp(x - max);
        lse[(static_cast<size_t>(b) * NH + h) * T + t] = static_cast<float>(max + std::log(sum));
      }
    }
  }
  // Finite everywhere (RelativeErrorWithin fails on any NaN or infinity), and close.
  EXPECT_TRUE(RelativeErrorWithin(d_lse.ToHost(), lse, kFp32Tolerance));
}

// Each test runs both implementations: the wmma kernels (flash_attention.cu) and the mma.sync
// kernels (flash_mma_kernels.cuh; 128 queries a forward block, so T = 100 and 256 also leave
// forward blocks partly past T).
class GpuFlashAttention : public ::testing::TestWithParam<FlashKernels> {};

TEST_P(GpuFlashAttention, MatchesTheCpuReferenceAtHeadSize32) {
  TESSERA_SKIP_WITHOUT_GPU();
  CheckFlashAttention(2, 64, 128, 4, GetParam());
}

TEST_P(GpuFlashAttention, MatchesTheCpuReferenceWithAPartialTile) {
  TESSERA_SKIP_WITHOUT_GPU();
  CheckFlashAttention(1, 100, 128, 4, GetParam());
}

TEST_P(GpuFlashAttention, MatchesTheCpuReferenceAtGpt2HeadSize64) {
  TESSERA_SKIP_WITHOUT_GPU();
  CheckFlashAttention(1, 256, 768, 12, GetParam());
}

TEST_P(GpuFlashAttention, MatchesTheCpuReferenceWithSeveralSequencesAndARaggedEnd) {
  TESSERA_SKIP_WITHOUT_GPU();
  CheckFlashAttention(3, 200, 256, 4, GetParam());
}

INSTANTIATE_TEST_SUITE_P(Gpu, GpuFlashAttention,
                         ::testing::Values(FlashKernels::kWmma, FlashKernels::kMma,
                                           FlashKernels::kMma2),
                         [](const ::testing::TestParamInfo<FlashKernels>& info) {
                           std::string name = FlashKernelsName(info.param);
                           name[0] = static_cast<char>(std::toupper(name[0]));
                           return name;
                         });

// kMma2 writes each dQ once, without atomics: two backward passes give the same bits (the
// atomics of kMma may not), and the dq scratch is left alone.
TEST(GpuFlashAttentionShapes, SecondVersionBackwardIsDeterministic) {
  TESSERA_SKIP_WITHOUT_GPU();
  const int B = 2, T = 300, C = 768, NH = 12;
  const size_t qkv_size = size_t{B} * T * 3 * C, out_size = size_t{B} * T * C;
  const size_t rows = size_t{B} * NH * T;
  DeviceBf16 d_qkv(RandomBf16(qkv_size, 1.0f, 7)), d_dout(RandomBf16(out_size, 1.0f, 8));
  DeviceBf16 d_out(out_size), first(qkv_size), second(qkv_size);
  DeviceArray<float> lse(rows), delta(rows), dq(std::vector<float>(out_size, 42.0f));
  flash_attention_forward(d_out.as<bf16>(), lse.get(), d_qkv.as<bf16>(), B, T, C, NH, nullptr,
                          FlashKernels::kMma2);
  for (DeviceBf16* dqkv : {&first, &second}) {
    flash_attention_backward(dqkv->as<bf16>(), delta.get(), dq.get(), d_dout.as<bf16>(),
                             d_qkv.as<bf16>(), d_out.as<bf16>(), lse.get(), B, T, C, NH, nullptr,
                             FlashKernels::kMma2);
  }
  TESSERA_CUDA_OK(cudaDeviceSynchronize());
  const std::vector<float> a = first.ToHost(), b = second.ToHost();
  size_t differ = 0;
  for (size_t i = 0; i < a.size(); i++)
    differ += std::memcmp(&a[i], &b[i], sizeof(float)) != 0;
  EXPECT_EQ(differ, 0u);
  const std::vector<float> scratch = dq.ToHost();
  EXPECT_TRUE(std::all_of(scratch.begin(), scratch.end(), [](float x) { return x == 42.0f; }));
}

TEST(GpuFlashAttentionShapes, RefusesAnUnsupportedHeadSizeBeforeLaunching) {
  TESSERA_SKIP_WITHOUT_GPU();
  DeviceBf16 qkv(size_t{8} * 3 * 96), out(size_t{8} * 96), dout(size_t{8} * 96);
  DeviceBf16 dqkv(size_t{8} * 3 * 96);
  DeviceArray<float> lse(8), delta(8), dq(size_t{8} * 96);
  // hs = 96 / 6 = 16.
  for (FlashKernels kernels : {FlashKernels::kWmma, FlashKernels::kMma, FlashKernels::kMma2}) {
    EXPECT_THROW(flash_attention_forward(out.as<bf16>(), lse.get(), qkv.as<bf16>(), 1, 8, 96, 6,
                                         nullptr, kernels),
                 std::invalid_argument);
    EXPECT_THROW(flash_attention_backward(dqkv.as<bf16>(), delta.get(), dq.get(), dout.as<bf16>(),
                                          qkv.as<bf16>(), out.as<bf16>(), lse.get(), 1, 8, 96, 6,
                                          nullptr, kernels),
                 std::invalid_argument);
  }
  TESSERA_CUDA_OK(cudaGetLastError());
}

}  // namespace
}  // namespace tessera::model::cuda
