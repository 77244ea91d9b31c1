// Each CUDA layer of worker/model/cuda/layers_cuda.h, forward and backward, against the CPU
// reference of worker/model/cpu/layers.h on fresh random inputs. Inputs are rounded to bf16
// first, so both sides see the same values and the difference is the device's arithmetic:
// outputs stored in bf16 within kBf16Tolerance, fp32 outputs within kFp32Tolerance.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <random>
#include <stdexcept>
#include <vector>

#include "tests/unit/gpu/gpu_test_util.h"
#include "tests/unit/train/adamw_reference.h"
#include "worker/model/cpu/layers.h"
#include "worker/model/cuda/layers_cuda.h"

namespace tessera::model::cuda {
namespace {

using gpu_test::DeviceArray;
using gpu_test::DeviceBf16;
using gpu_test::kBf16Tolerance;
using gpu_test::kFp32Tolerance;
using gpu_test::RandomBf16;
using gpu_test::RelativeErrorWithin;

// cuBLASLt is opened at run time, not linked: wherever the CUDA code is built (CI included,
// no GPU needed) the library must be found through the binary's run path.
TEST(CudaLibraries, CublasLtIsFoundAtRunTime) {
  EXPECT_EQ(LoadCublasLt(), "");
}

// A fresh seed per test, so every run draws new inputs; printed for reproduction.
uint64_t FreshSeed() {
  const uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  return seed;
}

std::vector<int32_t> RandomIds(size_t n, int limit, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, limit - 1);
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids)
    id = dist(rng);
  return ids;
}

std::vector<float> RoundAll(std::vector<float> v) {
  for (float& x : v)
    x = gpu_test::RoundToBf16(x);
  return v;
}

constexpr int kB = 2, kT = 64, kC = 128, kNH = 4, kV = 1000;
constexpr int kN = kB * kT;

TEST(GpuLayers, EncoderForwardAndBackward) {
  TESSERA_SKIP_WITHOUT_GPU();
  const uint64_t seed = FreshSeed();
  const std::vector<int32_t> tokens = RandomIds(kN, kV, seed);
  const std::vector<float> wte = RandomBf16(size_t{kV} * kC, 1.0f, seed + 1);
  const std::vector<float> wpe = RandomBf16(size_t{kT} * kC, 1.0f, seed + 2);
  const std::vector<float> dout = RandomBf16(size_t{kN} * kC, 1.0f, seed + 3);
  std::vector<float> dwte = RandomBf16(wte.size(), 1.0f, seed + 4);  // += onto these
  std::vector<float> dwpe = RandomBf16(wpe.size(), 1.0f, seed + 5);

  DeviceArray<int32_t> d_tokens(tokens);
  DeviceBf16 d_wte(wte), d_wpe(wpe), d_out(size_t{kN} * kC), d_dout(dout);
  DeviceArray<float> d_dwte(dwte), d_dwpe(dwpe);
  encoder_forward(d_out.as<bf16>(), d_tokens.get(), d_wte.as<bf16>(), d_wpe.as<bf16>(), kB, kT, kC,
                  nullptr);
  encoder_backward(d_dwte.get(), d_dwpe.get(), d_dout.as<bf16>(), d_tokens.get(), kB, kT, kC,
                   nullptr);
  TESSERA_CUDA_OK(cudaDeviceSynchronize());

  std::vector<float> out(size_t{kN} * kC);
  cpu::encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), kB, kT, kC);
  cpu::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), kB, kT, kC);
  EXPECT_TRUE(RelativeErrorWithin(d_out.ToHost(), out, kBf16Tolerance));
  EXPECT_TRUE(RelativeErrorWithin(d_dwte.ToHost(), dwte, kFp32Tolerance));
  EXPECT_TRUE(RelativeErrorWithin(d_dwpe.ToHost(), dwpe, kFp32Tolerance));
}

// N rows of C values: C = 128 and 768 take the packed backward kernel (one and three packs of
// 8 per lane), C = 100 the general one.
void CheckLayerNorm(int N, int C) {
  const uint64_t seed = FreshSeed();
  std::vector<float> inp = RandomBf16(static_cast<size_t>(N) * C, 2.0f, seed);
  for (size_t i = 0; i < inp.size(); i++)
    inp[i] = gpu_test::RoundToBf16(inp[i] + 0.5f);  // a non-zero mean
  const std::vector<float> weight = RandomBf16(C, 1.0f, seed + 1);
  const std::vector<float> bias = RandomBf16(C, 1.0f, seed + 2);
  const std::vector<float> dout = RandomBf16(inp.size(), 1.0f, seed + 3);
  std::vector<float> dinp = RandomBf16(inp.size(), 1.0f, seed + 4);  // += onto these
  std::vector<float> dweight = RandomBf16(C, 1.0f, seed + 5);
  std::vector<float> dbias = RandomBf16(C, 1.0f, seed + 6);

  DeviceBf16 d_inp(inp), d_w(weight), d_b(bias), d_out(inp.size()), d_dout(dout), d_dinp(dinp);
  DeviceArray<float> d_mean(N), d_rstd(N), d_dw(dweight), d_db(dbias);
  layernorm_forward(d_out.as<bf16>(), d_mean.get(), d_rstd.get(), d_inp.as<bf16>(), d_w.as<bf16>(),
                    d_b.as<bf16>(), N, C, nullptr);
  TESSERA_CUDA_OK(cudaDeviceSynchronize());
  // Backward from the device's statistics, so that both sides start from the same values.
  const std::vector<float> mean = d_mean.ToHost();
  const std::vector<float> rstd = d_rstd.ToHost();
  layernorm_backward(d_dinp.as<bf16>(), d_dw.get(), d_db.get(), d_dout.as<bf16>(), d_inp.as<bf16>(),
                     d_w.as<bf16>(), d_mean.get(), d_rstd.get(), N, C, nullptr);
  TESSERA_CUDA_OK(cudaDeviceSynchronize());

  std::vector<float> out(inp.size()), cpu_mean(N), cpu_rstd(N);
  cpu::layernorm_forward(out.data(), cpu_mean.data(), cpu_rstd.data(), inp.data(), weight.data(),
                         bias.data(), N, C);
  EXPECT_TRUE(RelativeErrorWithin(d_out.ToHost(), out, kBf16Tolerance));
  EXPECT_TRUE(RelativeErrorWithin(mean, cpu_mean, kFp32Tolerance));
  EXPECT_TRUE(RelativeErrorWithin(rstd, cpu_rstd, kFp32Tolerance));
  cpu::layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                          weight.data(), mean.data(), rstd.data(), N, C);
  EXPECT_TRUE(RelativeErrorWithin(d_dinp.ToHost(), dinp, kBf16Tolerance));
  EXPECT_TRUE(RelativeErrorWithin(d_dw.ToHost(), dweight, kFp32Tolerance));
  EXPECT_TRUE(RelativeErrorWithin(d_db.ToHost(), dbias, kFp32Tolerance));
}

TEST(GpuLayers, LayerNormForwardAndBackward) {
  TESSERA_SKIP_WITHOUT_GPU();
  CheckLayerNorm(kN, kC);
}

TEST(GpuLayers, LayerNormAtGpt2WidthAndAnUnpackedWidth) {
  TESSERA_SKIP_WITHOUT_GPU();
  CheckLayerNorm(300, 768);
  CheckLayerNorm(50, 100);
}

// out = [residual +] inp @ W^T + b, and its backward, for the shapes of the model. With
// tune > 1 the engine times that many cuBLASLt candidates per shape: its trial runs must not
// disturb the outputs, the gradient accumulated onto (dweight += ...) included.
void CheckMatmul(int N, int C, int OC, bool with_bias, bool with_residual, int tune = 1) {
  const uint64_t seed = FreshSeed();
  const std::vector<float> inp = RandomBf16(size_t(N) * C, 1.0f, seed);
  const std::vector<float> weight = RandomBf16(size_t(OC) * C, 0.05f, seed + 1);
  const std::vector<float> bias = RandomBf16(OC, 0.5f, seed + 2);
  const std::vector<float> residual = RandomBf16(size_t(N) * OC, 1.0f, seed + 3);
  const std::vector<float> dout = RandomBf16(size_t(N) * OC, 1.0f, seed + 4);
  std::vector<float> dweight = RandomBf16(weight.size(), 0.5f, seed + 5);  // += onto these
  std::vector<float> dbias = RandomBf16(OC, 0.5f, seed + 6);

  DeviceBf16 d_inp(inp), d_w(weight), d_b(bias), d_res(residual), d_out(size_t(N) * OC);
  DeviceBf16 d_dout(dout), d_dinp(size_t(N) * C);
  DeviceArray<float> d_dw(dweight), d_db(dbias);
  MatmulEngine mm(tune);
  matmul_forward(mm, d_out.as<bf16>(), d_inp.as<bf16>(), d_w.as<bf16>(),
                 with_bias ? d_b.as<bf16>() : nullptr, with_residual ? d_res.as<bf16>() : nullptr,
                 N, C, OC, nullptr);
  matmul_backward(mm, d_dinp.as<bf16>(), d_dw.get(), d_db.get(), d_dout.as<bf16>(),
                  d_inp.as<bf16>(), d_w.as<bf16>(), N, C, OC, nullptr);
  ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);

  std::vector<float> out(size_t(N) * OC);
  std::vector<float> zero_bias(OC, 0.0f);
  const float* b = with_bias ? bias.data() : zero_bias.data();
  if (with_residual) {
    cpu::matmul_residual_forward(out.data(), residual.data(), inp.data(), weight.data(), b, N, C,
                                 OC);
  } else {
    cpu::matmul_forward(out.data(), inp.data(), weight.data(), b, N, C, OC);
  }
  EXPECT_TRUE(RelativeErrorWithin(d_out.ToHost(), out, kBf16Tolerance));
  std::vector<float> dinp(size_t(N) * C);
  cpu::matmul_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                       weight.data(), N, C, OC);
  EXPECT_TRUE(RelativeErrorWithin(d_dinp.ToHost(), dinp, kBf16Tolerance));
  EXPECT_TRUE(RelativeErrorWithin(d_dw.ToHost(), dweight, kFp32Tolerance));
  EXPECT_TRUE(RelativeErrorWithin(d_db.ToHost(), dbias, kFp32Tolerance));
}

TEST(GpuLayers, MatmulQkvWithBias) {
  TESSERA_SKIP_WITHOUT_GPU();
  CheckMatmul(kN, kC, 3 * kC, true, false);
}

TEST(GpuLayers, MatmulProjectionWithBiasAndResidual) {
  TESSERA_SKIP_WITHOUT_GPU();
  CheckMatmul(kN, 4 * kC, kC, true, true);
}

TEST(GpuLayers, MatmulWithoutBiasOddSizes) {
  TESSERA_SKIP_WITHOUT_GPU();
  CheckMatmul(96, 72, 40, false, false);
}

TEST(GpuLayers, MatmulsWithTunedAlgorithms) {
  TESSERA_SKIP_WITHOUT_GPU();
  CheckMatmul(kN, 4 * kC, kC, true, true, 8);
  CheckMatmul(kN, kC, 3 * kC, true, false, MatmulEngine::kMaxTuneCandidates);
}

// The GELU in the product's epilogue. Forward: pre = inp @ W^T + b, out = gelu(pre). Backward
// (the product after a GELU): dinp = gelu'(pre) * (dout @ W), on a pre-activation of its own.
void CheckMatmulGelu(int N, int C, int OC, int tune) {
  const uint64_t seed = FreshSeed();
  const std::vector<float> inp = RandomBf16(size_t(N) * C, 1.0f, seed);
  const std::vector<float> weight = RandomBf16(size_t(OC) * C, 0.1f, seed + 1);
  const std::vector<float> bias = RandomBf16(OC, 0.5f, seed + 2);
  const std::vector<float> dout = RandomBf16(size_t(N) * OC, 1.0f, seed + 3);
  const std::vector<float> pre_in = RandomBf16(size_t(N) * C, 2.0f, seed + 4);
  std::vector<float> dweight(weight.size(), 0.0f);

  DeviceBf16 d_inp(inp), d_w(weight), d_b(bias), d_out(size_t(N) * OC), d_pre(size_t(N) * OC);
  DeviceBf16 d_dout(dout), d_pre_in(pre_in), d_dinp(size_t(N) * C);
  DeviceArray<float> d_dw(dweight);
  MatmulEngine mm(tune);
  matmul_gelu_forward(mm, d_out.as<bf16>(), d_pre.as<bf16>(), d_inp.as<bf16>(), d_w.as<bf16>(),
                      d_b.as<bf16>(), N, C, OC, nullptr);
  matmul_backward(mm, d_dinp.as<bf16>(), d_dw.get(), nullptr, d_dout.as<bf16>(), d_inp.as<bf16>(),
                  d_w.as<bf16>(), N, C, OC, nullptr, d_pre_in.as<bf16>());
  TESSERA_CUDA_OK(cudaDeviceSynchronize());

  std::vector<float> pre(size_t(N) * OC), out(size_t(N) * OC);
  cpu::matmul_forward(pre.data(), inp.data(), weight.data(), bias.data(), N, C, OC);
  cpu::gelu_forward(out.data(), pre.data(), static_cast<int64_t>(pre.size()));
  EXPECT_TRUE(RelativeErrorWithin(d_pre.ToHost(), pre, kBf16Tolerance));
  EXPECT_TRUE(RelativeErrorWithin(d_out.ToHost(), out, kBf16Tolerance));
  std::vector<float> product(size_t(N) * C), dinp(size_t(N) * C), dbias(OC, 0.0f);
  cpu::matmul_backward(product.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                       weight.data(), N, C, OC);
  cpu::gelu_backward(dinp.data(), pre_in.data(), product.data(),
                     static_cast<int64_t>(product.size()));
  EXPECT_TRUE(RelativeErrorWithin(d_dinp.ToHost(), dinp, kBf16Tolerance));
  EXPECT_TRUE(RelativeErrorWithin(d_dw.ToHost(), dweight, kFp32Tolerance));
}

TEST(GpuLayers, MatmulWithGeluEpilogues) {
  TESSERA_SKIP_WITHOUT_GPU();
  CheckMatmulGelu(kN, kC, 4 * kC, 1);  // the MLP's first product
  CheckMatmulGelu(96, 40, 72, 1);      // rows of 72 and 40: divisible by 8, not by 16
  CheckMatmulGelu(kN, kC, 4 * kC, 8);  // timed candidates: trial runs write scratch only
}

// What no GELU epilogue takes is refused before cuBLASLt is called.
TEST(GpuLayers, GeluEpilogueRefusesWhatItCannotTake) {
  TESSERA_SKIP_WITHOUT_GPU();
  DeviceBf16 a(64 * 64), b(64 * 64), d(64 * 64), aux(64 * 64);
  MatmulEngine mm;
  GemmArgs g;
  g.m = 60;  // ldd 60: not divisible by 8
  g.n = 64;
  g.k = 64;
  g.a = a.as<bf16>();
  g.lda = 60;
  g.b = b.as<bf16>();
  g.ldb = 64;
  g.d = d.as<bf16>();
  g.ldd = 60;
  g.gelu = GemmGelu::kForward;
  g.gelu_aux = aux.as<bf16>();
  EXPECT_THROW(mm.Gemm(g, nullptr), std::invalid_argument);
  g.m = g.lda = g.ldd = 64;
  g.gelu_aux = nullptr;
  EXPECT_THROW(mm.Gemm(g, nullptr), std::invalid_argument);
  g.gelu_aux = aux.as<bf16>();
  g.gelu = GemmGelu::kBackward;
  g.bias = a.as<bf16>();
  EXPECT_THROW(mm.Gemm(g, nullptr), std::invalid_argument);
  g.bias = nullptr;
  EXPECT_NO_THROW(mm.Gemm(g, nullptr));
  TESSERA_CUDA_OK(cudaDeviceSynchronize());
}

// T % 8 == 0 takes the packed softmax kernels, other T the general ones.
void CheckAttention(int B, int T, int C, int NH) {
  const uint64_t seed = FreshSeed();
  const size_t qkv_size = static_cast<size_t>(B) * T * 3 * C;
  const size_t att_size = static_cast<size_t>(B) * NH * T * T;
  const std::vector<float> qkv = RandomBf16(qkv_size, 0.5f, seed);
  const std::vector<float> dout = RandomBf16(static_cast<size_t>(B) * T * C, 1.0f, seed + 1);

  DeviceBf16 d_qkv(qkv), d_out(static_cast<size_t>(B) * T * C), d_att(att_size), d_dout(dout);
  DeviceBf16 d_qkvr(qkv_size), d_dqkvr(qkv_size), d_datt(att_size), d_dqkv(qkv_size);
  MatmulEngine mm;
  attention_forward(mm, d_out.as<bf16>(), d_qkvr.as<bf16>(), d_att.as<bf16>(), d_qkv.as<bf16>(), B,
                    T, C, NH, nullptr);
  attention_backward(mm, d_dqkv.as<bf16>(), d_qkvr.as<bf16>(), d_dqkvr.as<bf16>(),
                     d_datt.as<bf16>(), d_dout.as<bf16>(), d_qkv.as<bf16>(), d_att.as<bf16>(), B, T,
                     C, NH, nullptr);
  TESSERA_CUDA_OK(cudaDeviceSynchronize());

  std::vector<float> out(static_cast<size_t>(B) * T * C), att(att_size, 0.0f), dqkv(qkv_size);
  cpu::attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  EXPECT_TRUE(RelativeErrorWithin(d_out.ToHost(), out, kBf16Tolerance));
  EXPECT_TRUE(RelativeErrorWithin(d_att.ToHost(), att, kBf16Tolerance));  // zero above diagonal
  cpu::attention_backward(dqkv.data(), dout.data(), qkv.data(), att.data(), B, T, C, NH);
  EXPECT_TRUE(RelativeErrorWithin(d_dqkv.ToHost(), dqkv, kBf16Tolerance));
}

TEST(GpuLayers, AttentionForwardAndBackward) {
  TESSERA_SKIP_WITHOUT_GPU();
  CheckAttention(kB, kT, kC, kNH);
}

TEST(GpuLayers, AttentionWithARaggedSequence) {
  TESSERA_SKIP_WITHOUT_GPU();
  CheckAttention(1, 100, kC, kNH);
}

// n not a multiple of 8: the vectorized kernels' packs, then the tail one by one.
TEST(GpuLayers, GeluForwardAndBackward) {
  TESSERA_SKIP_WITHOUT_GPU();
  const uint64_t seed = FreshSeed();
  const int64_t n = int64_t{kN} * 4 * kC + 5;
  const std::vector<float> inp = RandomBf16(n, 2.0f, seed);
  const std::vector<float> dout = RandomBf16(n, 1.0f, seed + 1);
  DeviceBf16 d_inp(inp), d_out(n), d_d(dout);
  gelu_forward(d_out.as<bf16>(), d_inp.as<bf16>(), n, nullptr);
  gelu_backward(d_d.as<bf16>(), d_inp.as<bf16>(), d_d.as<bf16>(), n, nullptr);  // in place
  TESSERA_CUDA_OK(cudaDeviceSynchronize());
  std::vector<float> out(n), dinp(n);
  cpu::gelu_forward(out.data(), inp.data(), n);
  cpu::gelu_backward(dinp.data(), inp.data(), dout.data(), n);
  EXPECT_TRUE(RelativeErrorWithin(d_out.ToHost(), out, kBf16Tolerance));
  EXPECT_TRUE(RelativeErrorWithin(d_d.ToHost(), dinp, kBf16Tolerance));
}

// V values of each row, rows ld apart (padded past V, as the model's logits).
void CheckCrossEntropy(int V, int ld) {
  const uint64_t seed = FreshSeed();
  const std::vector<int32_t> targets = RandomIds(kN, V, seed);
  const std::vector<float> logits = RandomBf16(size_t{kN} * V, 3.0f, seed + 1);
  std::vector<float> padded(size_t{kN} * ld, 7.0f);  // padding must be ignored
  for (int n = 0; n < kN; n++)
    std::copy_n(logits.begin() + static_cast<size_t>(V) * n, V,
                padded.begin() + static_cast<size_t>(ld) * n);
  const float dloss = 1.0f / kN;
  DeviceBf16 d_logits(padded);
  DeviceArray<int32_t> d_targets(targets);
  DeviceArray<float> d_losses(kN), d_lse(kN), d_mean(1);
  crossentropy_forward(d_losses.get(), d_lse.get(), d_logits.as<bf16>(), ld, d_targets.get(), kN, V,
                       nullptr);
  mean_reduce(d_mean.get(), d_losses.get(), kN, nullptr);
  crossentropy_softmax_backward(d_logits.as<bf16>(), ld, d_lse.get(), d_targets.get(), dloss, kN, V,
                                nullptr);
  TESSERA_CUDA_OK(cudaDeviceSynchronize());

  std::vector<float> losses(kN), lse(kN);
  cpu::crossentropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), kN, V);
  EXPECT_TRUE(RelativeErrorWithin(d_losses.ToHost(), losses, kFp32Tolerance));
  EXPECT_TRUE(RelativeErrorWithin(d_lse.ToHost(), lse, kFp32Tolerance));
  double sum = 0;
  for (float l : losses)
    sum += l;
  EXPECT_TRUE(RelativeErrorWithin(d_mean.ToHost(), {static_cast<float>(sum / kN)}, kFp32Tolerance));
  std::vector<float> dlogits = logits;
  cpu::crossentropy_softmax_backward(dlogits.data(), lse.data(), targets.data(), dloss, kN, V);
  const std::vector<float> got_padded = d_logits.ToHost();
  std::vector<float> got(size_t{kN} * V);
  for (int n = 0; n < kN; n++) {
    std::copy_n(got_padded.begin() + static_cast<size_t>(ld) * n, V,
                got.begin() + static_cast<size_t>(V) * n);
    EXPECT_EQ(got_padded[static_cast<size_t>(ld) * n + V], 7.0f)
        << "padding of row " << n << " written";
  }
  EXPECT_TRUE(RelativeErrorWithin(got, dlogits, kBf16Tolerance));
}

TEST(GpuLayers, CrossEntropyForwardAndBackward) {
  TESSERA_SKIP_WITHOUT_GPU();
  CheckCrossEntropy(kV, 1024);
}

// V % 8 != 0, as GPT-2's 50257: packs of 8, then the last values one by one; and a row stride
// that is not a multiple of 8, which takes the unvectorized path.
TEST(GpuLayers, CrossEntropyWithARaggedVocabulary) {
  TESSERA_SKIP_WITHOUT_GPU();
  CheckCrossEntropy(kV + 3, 1024);
  CheckCrossEntropy(kV + 3, kV + 5);
}

// The global norm and the AdamW step with clipping against the CPU trainer's
// (worker/train/adamw.h: SumOfSquares, ClipToNorm, AdamW::Step at step 3), for one flat buffer
// of chunks.
TEST(GpuLayers, GlobalNormAndAdamW) {
  TESSERA_SKIP_WITHOUT_GPU();
  const uint64_t seed = FreshSeed();
  // Two "tensors": one that decays, one that does not, split into chunks like the model's.
  const int64_t n = 200000;
  const int64_t split = 130000;
  std::vector<ParamChunk> chunks;
  auto add_tensor = [&](int64_t begin, int64_t end, int32_t decays) {
    for (int64_t i = begin; i < end; i += 65536)
      chunks.push_back({i, static_cast<int32_t>(std::min<int64_t>(65536, end - i)), decays});
  };
  add_tensor(0, split, 1);
  add_tensor(split, n, 0);
  std::vector<float> params = RandomBf16(n, 1.0f, seed);
  const std::vector<float> grads = RandomBf16(n, 0.01f, seed + 1);
  std::vector<float> m = RandomBf16(n, 0.01f, seed + 2);
  std::vector<float> v = RandomBf16(n, 1e-4f, seed + 3);
  for (float& x : v)
    x = std::abs(x);
  AdamWArgs a{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0.0f, 0.0f};
  const int t = 3;
  a.correction1 = static_cast<float>(1.0 - std::pow(0.9, t));
  a.correction2 = static_cast<float>(1.0 - std::pow(0.95, t));

  const std::vector<float> before = params;
  DeviceArray<float> d_params(params), d_grads(grads), d_m(m), d_v(v), d_norm(1);
  DeviceArray<float> d_partials(chunks.size());
  DeviceArray<ParamChunk> d_chunks(chunks);
  DeviceBf16 d_bf16(n);
  global_norm(d_norm.get(), d_partials.get(), d_grads.get(), d_chunks.get(),
              static_cast<int>(chunks.size()), nullptr);
  adamw_update(d_params.get(), d_bf16.as<bf16>(), d_m.get(), d_v.get(), d_grads.get(), d_norm.get(),
               d_chunks.get(), static_cast<int>(chunks.size()), a, nullptr);
  TESSERA_CUDA_OK(cudaDeviceSynchronize());

  const double norm = train::test::AdamWReferenceStep(params, grads, m, v, split, a, t);
  ASSERT_GT(norm, a.max_norm) << "the test means to exercise clipping";
  EXPECT_TRUE(RelativeErrorWithin(d_norm.ToHost(), {static_cast<float>(norm)}, kFp32Tolerance));
  EXPECT_TRUE(RelativeErrorWithin(d_m.ToHost(), m, kFp32Tolerance));
  EXPECT_TRUE(RelativeErrorWithin(d_v.ToHost(), v, kFp32Tolerance));
  const std::vector<float> got_params = d_params.ToHost();
  EXPECT_TRUE(RelativeErrorWithin(got_params, params, kFp32Tolerance));
  EXPECT_TRUE(RelativeErrorWithin(d_bf16.ToHost(), RoundAll(params), kBf16Tolerance));
  // The updates themselves (about 1e-3 of the parameters, so a wrong weight decay, 1e-4 of
  // them, hides in the comparison above), within what fp32 subtraction leaves of them.
  std::vector<float> got_update(n), want_update(n);
  for (int64_t i = 0; i < n; i++) {
    got_update[i] = got_params[i] - before[i];
    want_update[i] = params[i] - before[i];
  }
  EXPECT_TRUE(RelativeErrorWithin(got_update, want_update, 1e-3));
}

TEST(GpuLayers, ComparisonRejectsNaN) {
  TESSERA_SKIP_WITHOUT_GPU();
  EXPECT_FALSE(RelativeErrorWithin({1.0f, NAN}, {1.0f, 1.0f}, 1.0));
  EXPECT_FALSE(RelativeErrorWithin({NAN}, {NAN}, 1.0));
  EXPECT_FALSE(RelativeErrorWithin({1.0f, INFINITY}, {1.0f, 1.0f}, 1.0));
  EXPECT_FALSE(RelativeErrorWithin({1.1f}, {1.0f}, 1e-2));
  EXPECT_TRUE(RelativeErrorWithin({1.001f}, {1.0f}, 1e-2));
}

}  // namespace
}  // namespace tessera::model::cuda
