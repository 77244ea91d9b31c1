// The hand-written layer kernels (worker/model/cuda/layer_kernels.cuh), run on the CPU by the
// SIMT emulator through the same host code that launches them on a GPU (the kernel choice, the
// grid, the shared memory), against the CPU reference of worker/model/cpu/layers.h. Each
// packed (16-byte) kernel and its general fallback are taken on purpose, and the test checks
// which one ran. (On a GPU, tests/unit/gpu/gpu_layers_test.cpp runs the same source compiled
// by nvcc.)
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <string>
#include <vector>

#include "tests/unit/gpu_emulation/emulated_test_util.h"
#include "tests/unit/gpu_emulation/warp_emulator.h"
#include "tests/unit/train/adamw_reference.h"
#include "worker/model/cpu/layers.h"
#include "worker/model/cuda/layer_kernels.cuh"

namespace tessera::model::cuda::layer_kernels {
namespace {

using warp_emu::test::Close;
using warp_emu::test::RandomBf16Values;
using warp_emu::test::ToBits;
using warp_emu::test::ToFloats;

constexpr double kBf16Tolerance = 1e-2;  // outputs stored in bf16
constexpr double kFp32Tolerance = 1e-4;  // outputs stored in fp32

// layer_kernels' Launcher for the emulator: runs the kernel's blocks there and records the name
// of each launch, so a test can tell which kernel the host code chose.
struct EmulatorLauncher {
  std::vector<std::string>* launched;

  template <class... Params, class... Args>
  void operator()(const char* what, const LaunchShape& shape, void (*kernel)(Params...),
                  Args... args) const {
    warp_emu::LaunchConfig config;
    config.grid_x = shape.grid_x;
    config.grid_y = shape.grid_y;
    config.threads = shape.threads;
    config.shared_bytes = shape.shared_bytes;
    warp_emu::Launch(config, [&] { kernel(args...); });
    launched->push_back(what);
  }
};

std::vector<int32_t> RandomIds(size_t n, int limit, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, limit - 1);
  std::vector<int32_t> ids(n);
  for (int32_t& id : ids)
    id = dist(rng);
  return ids;
}

// Elements past the end of an array that no kernel may touch: on a device a write there lands in
// a neighbouring allocation, and nothing here would notice without them.
constexpr size_t kGuard = 8;
constexpr Bf16Bits kGuardBits = 0x7fff;  // a bf16 NaN
constexpr float kGuardFloat = 12345.0f;  // finite, so that an atomic add to it shows

// bf16 bits of values stored `offset` elements into a buffer and followed by kGuard guard
// elements: offset 1 makes the array 2-byte but not 16-byte aligned (std::vector's storage is
// 16-byte aligned), which takes the general kernels.
struct Bf16Buffer {
  Bf16Buffer(const std::vector<float>& values, size_t offset) : offset(offset), bits(offset) {
    const std::vector<Bf16Bits> b = ToBits(values);
    bits.insert(bits.end(), b.begin(), b.end());
    bits.insert(bits.end(), kGuard, kGuardBits);
  }
  Bf16Bits* data() { return bits.data() + offset; }
  std::vector<float> values() const {
    return ToFloats(std::vector<Bf16Bits>(bits.begin() + static_cast<std::ptrdiff_t>(offset),
                                          bits.end() - static_cast<std::ptrdiff_t>(kGuard)));
  }
  bool GuardIntact() const {
    return std::all_of(bits.end() - static_cast<std::ptrdiff_t>(kGuard), bits.end(),
                       [](Bf16Bits b) { return b == kGuardBits; });
  }
  size_t offset;
  std::vector<Bf16Bits> bits;
};

// fp32 values followed by kGuard guard elements, for the kernels' fp32 outputs.
std::vector<float> WithGuard(std::vector<float> values) {
  values.insert(values.end(), kGuard, kGuardFloat);
  return values;
}
// The first values.size() - kGuard values, after checking that the guard is untouched.
std::vector<float> Unguarded(const std::vector<float>& values) {
  const auto end = values.end() - static_cast<std::ptrdiff_t>(kGuard);
  EXPECT_TRUE(std::all_of(end, values.end(), [](float v) { return v == kGuardFloat; }))
      << "a kernel wrote past the end of an array of " << values.size() - kGuard;
  return std::vector<float>(values.begin(), end);
}

TEST(LayersEmulated, EncoderForwardAndBackward) {
  const int B = 2, T = 5, C = 24, V = 40;
  const size_t N = size_t{B} * T;
  const std::vector<int32_t> tokens = RandomIds(N, V, 1);
  const std::vector<float> wte = RandomBf16Values(size_t{V} * C, 2);
  const std::vector<float> wpe = RandomBf16Values(size_t{T} * C, 3);
  const std::vector<float> dout = RandomBf16Values(N * C, 4);
  std::vector<float> dwte = RandomBf16Values(wte.size(), 5);  // += onto these
  std::vector<float> dwpe = RandomBf16Values(wpe.size(), 6);

  std::vector<std::string> launched;
  const EmulatorLauncher launch{&launched};
  Bf16Buffer d_wte(wte, 0), d_wpe(wpe, 0), d_out(std::vector<float>(N * C, NAN), 0),
      d_dout(dout, 0);
  std::vector<float> got_dwte = WithGuard(dwte), got_dwpe = WithGuard(dwpe);
  EncoderForward(launch, d_out.data(), tokens.data(), d_wte.data(), d_wpe.data(), B, T, C);
  EncoderBackward(launch, got_dwte.data(), got_dwpe.data(), d_dout.data(), tokens.data(), B, T, C);

  std::vector<float> out(N * C);
  cpu::encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
  cpu::encoder_backward(dwte.data(), dwpe.data(), dout.data(), tokens.data(), B, T, C);
  EXPECT_TRUE(Close("out", d_out.values(), out, kBf16Tolerance));
  EXPECT_TRUE(d_out.GuardIntact()) << "out";
  EXPECT_TRUE(Close("dwte", Unguarded(got_dwte), dwte, kFp32Tolerance));
  EXPECT_TRUE(Close("dwpe", Unguarded(got_dwpe), dwpe, kFp32Tolerance));
}

// N rows of C values at `offset` elements into their buffers (with constant_rows, each row's
// values all equal: zero variance, where the epsilon alone sets rstd); returns the forward and
// backward launches' names.
std::vector<std::string> CheckLayerNorm(int N, int C, size_t offset, uint64_t seed,
                                        bool constant_rows = false) {
  std::vector<float> inp = RandomBf16Values(static_cast<size_t>(N) * C, seed, 2.0f);
  for (size_t i = 0; i < inp.size(); i++) {
    const float x = constant_rows ? 0.25f * static_cast<float>(i / C) : inp[i];
    inp[i] = warp::Bf16ToFloat(warp::FloatToBf16(x + 0.5f));  // a non-zero mean
  }
  const std::vector<float> weight = RandomBf16Values(C, seed + 1);
  const std::vector<float> bias = RandomBf16Values(C, seed + 2);
  const std::vector<float> dout = RandomBf16Values(inp.size(), seed + 3);
  std::vector<float> dinp = RandomBf16Values(inp.size(), seed + 4);  // += onto these
  std::vector<float> dweight = RandomBf16Values(C, seed + 5);
  std::vector<float> dbias = RandomBf16Values(C, seed + 6);

  std::vector<std::string> launched;
  const EmulatorLauncher launch{&launched};
  Bf16Buffer d_inp(inp, offset), d_w(weight, offset), d_b(bias, offset),
      d_out(std::vector<float>(inp.size(), NAN), offset), d_dout(dout, offset),
      d_dinp(dinp, offset);
  std::vector<float> got_mean = WithGuard(std::vector<float>(N, NAN)), got_rstd = got_mean,
                     got_dw = WithGuard(dweight), got_db = WithGuard(dbias);
  LayerNormForward(launch, d_out.data(), got_mean.data(), got_rstd.data(), d_inp.data(), d_w.data(),
                   d_b.data(), N, C);
  LayerNormBackward(launch, d_dinp.data(), got_dw.data(), got_db.data(), d_dout.data(),
                    d_inp.data(), d_w.data(), got_mean.data(), got_rstd.data(), N, C);
  const std::vector<float> mean = Unguarded(got_mean), rstd = Unguarded(got_rstd);
  EXPECT_TRUE(d_out.GuardIntact() && d_dinp.GuardIntact()) << "out or dinp";

  std::vector<float> out(inp.size()), cpu_mean(N), cpu_rstd(N);
  cpu::layernorm_forward(out.data(), cpu_mean.data(), cpu_rstd.data(), inp.data(), weight.data(),
                         bias.data(), N, C);
  EXPECT_TRUE(Close("out", d_out.values(), out, kBf16Tolerance));
  EXPECT_TRUE(Close("mean", mean, cpu_mean, kFp32Tolerance));
  EXPECT_TRUE(Close("rstd", rstd, cpu_rstd, kFp32Tolerance));
  // Backward from the kernel's statistics, so that both sides start from the same values.
  cpu::layernorm_backward(dinp.data(), dweight.data(), dbias.data(), dout.data(), inp.data(),
                          weight.data(), mean.data(), rstd.data(), N, C);
  EXPECT_TRUE(Close("dinp", d_dinp.values(), dinp, kBf16Tolerance));
  EXPECT_TRUE(Close("dweight", Unguarded(got_dw), dweight, kFp32Tolerance));
  EXPECT_TRUE(Close("dbias", Unguarded(got_db), dbias, kFp32Tolerance));
  return launched;
}

const std::vector<std::string> kPackedLayerNorm = {"layernorm_forward (packed)",
                                                   "layernorm_backward (packed)"};
const std::vector<std::string> kGeneralLayerNorm = {"layernorm_forward", "layernorm_backward"};

// C = 768 (GPT-2's), 128, 1024 and 136 take the packed kernels with 3, 1, 4 and 1 packs of 8
// per lane (at 136 some lanes have none); 100 rows need two blocks of the backward (64 rows a
// block), whose warps each take several.
TEST(LayersEmulated, LayerNormPacked) {
  EXPECT_EQ(CheckLayerNorm(100, 768, 0, 10), kPackedLayerNorm);
  EXPECT_EQ(CheckLayerNorm(70, 128, 0, 20), kPackedLayerNorm);
  EXPECT_EQ(CheckLayerNorm(9, 1024, 0, 30), kPackedLayerNorm);
  EXPECT_EQ(CheckLayerNorm(12, 136, 0, 35), kPackedLayerNorm);
}

// C % 8 != 0, an unaligned array, or more than 4 packs a lane: the general kernels.
TEST(LayersEmulated, LayerNormGeneral) {
  EXPECT_EQ(CheckLayerNorm(40, 100, 0, 40), kGeneralLayerNorm);
  EXPECT_EQ(CheckLayerNorm(40, 128, 1, 50), kGeneralLayerNorm);
  EXPECT_EQ(CheckLayerNorm(5, 1032, 0, 60), kGeneralLayerNorm);
}

// A packed kernel is chosen only when every array it accesses 16 bytes at a time is 16-byte
// aligned: one misaligned array (the bias of the forward, the weight of the backward, the
// probabilities of the softmax's backward) takes the general kernel, where the packed one would
// fault on a device.
TEST(LayersEmulated, OneMisalignedArrayTakesTheGeneralKernel) {
  const int N = 6, C = 128;
  const std::vector<float> inp = RandomBf16Values(size_t{N} * C, 47, 2.0f);
  const std::vector<float> weight = RandomBf16Values(C, 48);
  const std::vector<float> bias = RandomBf16Values(C, 49);
  const std::vector<float> dout = RandomBf16Values(inp.size(), 50);
  std::vector<std::string> launched;
  const EmulatorLauncher launch{&launched};
  Bf16Buffer d_inp(inp, 0), d_w(weight, 0), d_w_misaligned(weight, 1), d_b_misaligned(bias, 1),
      d_out(std::vector<float>(inp.size(), NAN), 0), d_dout(dout, 0),
      d_dinp(std::vector<float>(inp.size(), 0.0f), 0);
  std::vector<float> mean(N, NAN), rstd(N, NAN), dw(C, 0.0f), db(C, 0.0f);
  LayerNormForward(launch, d_out.data(), mean.data(), rstd.data(), d_inp.data(), d_w.data(),
                   d_b_misaligned.data(), N, C);
  LayerNormBackward(launch, d_dinp.data(), dw.data(), db.data(), d_dout.data(), d_inp.data(),
                    d_w_misaligned.data(), mean.data(), rstd.data(), N, C);
  EXPECT_EQ(launched, kGeneralLayerNorm);
  std::vector<float> out(inp.size()), cpu_mean(N), cpu_rstd(N), dinp(inp.size(), 0.0f),
      cpu_dw(C, 0.0f), cpu_db(C, 0.0f);
  cpu::layernorm_forward(out.data(), cpu_mean.data(), cpu_rstd.data(), inp.data(), weight.data(),
                         bias.data(), N, C);
  cpu::layernorm_backward(dinp.data(), cpu_dw.data(), cpu_db.data(), dout.data(), inp.data(),
                          weight.data(), mean.data(), rstd.data(), N, C);
  EXPECT_TRUE(Close("out", d_out.values(), out, kBf16Tolerance));
  EXPECT_TRUE(Close("dinp", d_dinp.values(), dinp, kBf16Tolerance));

  // The softmax's backward with the gradients aligned and the probabilities not, against the
  // packed kernel on aligned copies of both.
  const int T = 16;
  Bf16Buffer att(RandomBf16Values(size_t{T} * T, 51), 0);
  const std::vector<float> dprobs = RandomBf16Values(size_t{T} * T, 52);
  launched.clear();
  SoftmaxForward(launch, att.data(), 1, T, 0.3f);
  Bf16Buffer att_misaligned(att.values(), 1), datt_packed(dprobs, 0), datt_general(dprobs, 0);
  SoftmaxBackward(launch, datt_packed.data(), att.data(), 1, T, 0.3f);
  SoftmaxBackward(launch, datt_general.data(), att_misaligned.data(), 1, T, 0.3f);
  EXPECT_EQ(launched, (std::vector<std::string>{"attention_softmax_forward (packed)",
                                                "attention_softmax_backward (packed)",
                                                "attention_softmax_backward"}));
  EXPECT_TRUE(Close("dscores", datt_general.values(), datt_packed.values(), kBf16Tolerance));
}

// Rows whose values are all equal (a padding position's activations, a dead unit's): the
// variance is zero and rstd is 1 / sqrt(1e-5), the reference's epsilon, in every kernel.
TEST(LayersEmulated, LayerNormOfConstantRowsUsesTheReferenceEpsilon) {
  EXPECT_EQ(CheckLayerNorm(20, 128, 0, 45, true), kPackedLayerNorm);
  EXPECT_EQ(CheckLayerNorm(20, 100, 0, 46, true), kGeneralLayerNorm);
}

// Rows in bands of 128 per block (the last partial), columns past a block of 256.
TEST(LayersEmulated, BiasBackward) {
  const int N = 300, OC = 270;
  const std::vector<float> dout = RandomBf16Values(size_t{N} * OC, 70);
  std::vector<float> dbias = RandomBf16Values(OC, 71);  // += onto these
  std::vector<float> got = dbias;
  std::vector<std::string> launched;
  Bf16Buffer d_dout(dout, 0);
  BiasBackward(EmulatorLauncher{&launched}, got.data(), d_dout.data(), N, OC);
  for (int n = 0; n < N; n++) {
    for (int o = 0; o < OC; o++)
      dbias[o] += dout[static_cast<size_t>(n) * OC + o];
  }
  EXPECT_TRUE(Close("dbias", got, dbias, kFp32Tolerance));
}

// The matmul attention's layout changes are exact copies: each q, k, v element where the
// (B,T,3,NH,hs) -> (B,NH,T,hs) map puts it, and the inverses restore the input.
TEST(LayersEmulated, PermutesAreExactAndInvert) {
  const int B = 2, T = 7, NH = 3, hs = 8, C = NH * hs;
  const size_t NC = size_t{B} * T * C;
  const std::vector<float> qkv = RandomBf16Values(3 * NC, 80);
  std::vector<std::string> launched;
  const EmulatorLauncher launch{&launched};
  Bf16Buffer d_qkv(qkv, 0), q(std::vector<float>(NC, NAN), 0), k = q, v = q;
  Permute(launch, q.data(), k.data(), v.data(), d_qkv.data(), B, T, NH, hs);
  const std::vector<float> qs = q.values(), ks = k.values(), vs = v.values();
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      for (int t = 0; t < T; t++) {
        for (int i = 0; i < hs; i++) {
          const size_t at = ((static_cast<size_t>(b) * NH + h) * T + t) * hs + i;
          const size_t src = (static_cast<size_t>(b) * T + t) * 3 * C + h * hs + i;
          ASSERT_EQ(qs[at], qkv[src]) << "q " << b << " " << h << " " << t << " " << i;
          ASSERT_EQ(ks[at], qkv[src + C]) << "k " << b << " " << h << " " << t << " " << i;
          ASSERT_EQ(vs[at], qkv[src + 2 * C]) << "v " << b << " " << h << " " << t << " " << i;
        }
      }
    }
  }
  Bf16Buffer back(std::vector<float>(3 * NC, NAN), 0);
  PermuteBackward(launch, back.data(), q.data(), k.data(), v.data(), B, T, NH, hs);
  EXPECT_EQ(back.values(), qkv);

  // Unpermute (B,NH,T,hs) -> (B,T,C), then back.
  Bf16Buffer y(std::vector<float>(NC, NAN), 0), y_back = y;
  Unpermute(launch, y.data(), q.data(), B, T, NH, hs);
  std::vector<float> q_rows(NC);  // q as (B,T,C): the first third of each qkv row
  for (size_t n = 0; n < size_t{B} * T; n++)
    std::copy_n(qkv.begin() + static_cast<std::ptrdiff_t>(n * 3 * C), C, q_rows.begin() + n * C);
  EXPECT_EQ(y.values(), q_rows);
  UnpermuteBackward(launch, y_back.data(), y.data(), B, T, NH, hs);
  EXPECT_EQ(y_back.values(), qs);
}

// BH rows of T x T scores (shift plus normal values) at `offset`: the causal softmax against a
// double-precision one, and its backward; returns the two launches' names.
std::vector<std::string> CheckSoftmax(int BH, int T, size_t offset, uint64_t seed,
                                      float shift = 0.0f) {
  const float scale = 0.3f;
  const size_t size = static_cast<size_t>(BH) * T * T;
  std::vector<float> scores = RandomBf16Values(size, seed, 3.0f);
  for (float& x : scores)
    x = warp::Bf16ToFloat(warp::FloatToBf16(x + shift));
  const std::vector<float> dprobs = RandomBf16Values(size, seed + 1);
  std::vector<std::string> launched;
  const EmulatorLauncher launch{&launched};
  Bf16Buffer att(scores, offset), datt(dprobs, offset);
  SoftmaxForward(launch, att.data(), BH, T, scale);
  SoftmaxBackward(launch, datt.data(), att.data(), BH, T, scale);

  // The backward's reference starts from the kernel's (bf16) probabilities.
  const std::vector<float> got_p = att.values();
  std::vector<float> want_p(size), want_d(size);
  for (size_t row = 0; row < static_cast<size_t>(BH) * T; row++) {
    const int t = static_cast<int>(row % T);
    const float* x = scores.data() + row * T;
    double max = -INFINITY, sum = 0, weighted = 0;
    for (int i = 0; i <= t; i++)
      max = std::max(max, static_cast<double>(scale) * x[i]);
    for (int i = 0; i <= t; i++)
      sum += std::exp(static_cast<double>(scale) * x[i] - max);
    for (int i = 0; i <= t; i++)
      weighted += static_cast<double>(got_p[row * T + i]) * dprobs[row * T + i];
    for (int i = 0; i < T; i++) {
      want_p[row * T + i] =
          i <= t ? static_cast<float>(std::exp(static_cast<double>(scale) * x[i] - max) / sum) : 0;
      want_d[row * T + i] =
          i <= t ? static_cast<float>(scale * got_p[row * T + i] * (dprobs[row * T + i] - weighted))
                 : 0;
    }
  }
  EXPECT_TRUE(Close("probabilities", got_p, want_p, kBf16Tolerance));
  EXPECT_TRUE(Close("dscores", datt.values(), want_d, kBf16Tolerance));
  EXPECT_TRUE(att.GuardIntact() && datt.GuardIntact()) << "probabilities or dscores";
  return launched;
}

TEST(LayersEmulated, AttentionSoftmax) {
  // T % 8 == 0 and aligned: packed; rows whose live part ends inside a pack, then zero packs.
  EXPECT_EQ(CheckSoftmax(3, 40, 0, 90),
            (std::vector<std::string>{"attention_softmax_forward (packed)",
                                      "attention_softmax_backward (packed)"}));
  // T past 32 packs (a lane takes two), and the general kernels at T % 8 != 0 and unaligned.
  EXPECT_EQ(CheckSoftmax(1, 264, 0, 91)[0], "attention_softmax_forward (packed)");
  EXPECT_EQ(CheckSoftmax(2, 37, 0, 92),
            (std::vector<std::string>{"attention_softmax_forward", "attention_softmax_backward"}));
  EXPECT_EQ(CheckSoftmax(2, 40, 1, 93)[0], "attention_softmax_forward");
}

// Scores far from zero (large activations, or a large scale): the kernels subtract the maximum
// of the scaled scores, so that the exponentials neither overflow nor all underflow.
TEST(LayersEmulated, AttentionSoftmaxOfScoresFarFromZero) {
  EXPECT_EQ(CheckSoftmax(2, 40, 0, 94, -400.0f)[0], "attention_softmax_forward (packed)");
  EXPECT_EQ(CheckSoftmax(2, 40, 0, 95, 400.0f)[0], "attention_softmax_forward (packed)");
  EXPECT_EQ(CheckSoftmax(2, 37, 0, 96, -400.0f)[0], "attention_softmax_forward");
  EXPECT_EQ(CheckSoftmax(2, 37, 0, 97, 400.0f)[0], "attention_softmax_forward");
}

// n values at `offset`; vectorized with a tail of n % 8 when aligned.
void CheckGelu(int64_t n, size_t offset, uint64_t seed) {
  const std::vector<float> inp = RandomBf16Values(n, seed, 2.0f);
  const std::vector<float> dout = RandomBf16Values(n, seed + 1);
  std::vector<std::string> launched;
  const EmulatorLauncher launch{&launched};
  Bf16Buffer d_inp(inp, offset), d_out(std::vector<float>(n, NAN), offset), d_d(dout, offset);
  GeluForward(launch, d_out.data(), d_inp.data(), n);
  GeluBackward(launch, d_d.data(), d_inp.data(), d_d.data(), n);  // in place, as the model does
  std::vector<float> out(n), dinp(n);
  cpu::gelu_forward(out.data(), inp.data(), n);
  cpu::gelu_backward(dinp.data(), inp.data(), dout.data(), n);
  EXPECT_TRUE(Close("out", d_out.values(), out, kBf16Tolerance));
  EXPECT_TRUE(Close("dinp", d_d.values(), dinp, kBf16Tolerance));
  EXPECT_TRUE(d_out.GuardIntact() && d_d.GuardIntact()) << "out or dinp";
}

TEST(LayersEmulated, Gelu) {
  CheckGelu(8 * 300 + 5, 0, 100);  // packs over several blocks, then 5 values
  CheckGelu(8 * 40, 0, 101);       // packs only
  CheckGelu(301, 1, 102);          // unaligned: one value a thread
  CheckGelu(8 * 256 + 5, 0, 103);  // packs fill whole blocks: the tail needs a block of its own
}

// N rows of V logits (shift plus normal values), ld apart (padded past V with a value the
// kernels must not touch).
void CheckCrossEntropy(int N, int V, int ld, uint64_t seed, float shift = 0.0f) {
  const std::vector<int32_t> targets = RandomIds(N, V, seed);
  std::vector<float> logits = RandomBf16Values(static_cast<size_t>(N) * V, seed + 1, 3.0f);
  for (float& x : logits)
    x = warp::Bf16ToFloat(warp::FloatToBf16(x + shift));
  std::vector<float> padded(static_cast<size_t>(N) * ld, 7.0f);
  for (int n = 0; n < N; n++)
    std::copy_n(logits.begin() + static_cast<std::ptrdiff_t>(V) * n, V,
                padded.begin() + static_cast<std::ptrdiff_t>(ld) * n);
  const float dloss = 1.0f / N;
  std::vector<std::string> launched;
  const EmulatorLauncher launch{&launched};
  Bf16Buffer d_logits(padded, 0);
  std::vector<float> losses(N, NAN), lse(N, NAN), mean(1, NAN);
  CrossEntropyForward(launch, losses.data(), lse.data(), d_logits.data(), ld, targets.data(), N, V);
  MeanReduce(launch, mean.data(), losses.data(), N);
  CrossEntropySoftmaxBackward(launch, d_logits.data(), ld, lse.data(), targets.data(), dloss, N, V);

  std::vector<float> want_losses(N), want_lse(N);
  cpu::crossentropy_forward(want_losses.data(), want_lse.data(), logits.data(), targets.data(), N,
                            V);
  EXPECT_TRUE(Close("losses", losses, want_losses, kFp32Tolerance));
  EXPECT_TRUE(Close("lse", lse, want_lse, kFp32Tolerance));
  double sum = 0;
  for (float l : want_losses)
    sum += l;
  EXPECT_TRUE(Close("mean", mean, {static_cast<float>(sum / N)}, kFp32Tolerance));
  std::vector<float> dlogits = logits;
  cpu::crossentropy_softmax_backward(dlogits.data(), want_lse.data(), targets.data(), dloss, N, V);
  const std::vector<float> got_padded = d_logits.values();
  std::vector<float> got(static_cast<size_t>(N) * V);
  for (int n = 0; n < N; n++) {
    std::copy_n(got_padded.begin() + static_cast<std::ptrdiff_t>(ld) * n, V,
                got.begin() + static_cast<std::ptrdiff_t>(V) * n);
    for (int i = V; i < ld; i++)
      ASSERT_EQ(got_padded[static_cast<size_t>(ld) * n + i], 7.0f) << "padding of row " << n;
  }
  EXPECT_TRUE(Close("dlogits", got, dlogits, kBf16Tolerance));
}

TEST(LayersEmulated, CrossEntropy) {
  CheckCrossEntropy(6, 5000, 5000, 110);  // packs only; more than one pack a thread
  CheckCrossEntropy(6, 4099, 4104, 111);  // packs, then V % 8 values one by one; padding
  CheckCrossEntropy(6, 1003, 1005, 112);  // rows not 16-byte aligned: one value at a time
  CheckCrossEntropy(3, 300, 304, 113);    // fewer packs than threads
}

// Logits far below zero: the block's maximum is that of the logits alone (the warps' partial
// maxima are combined with -inf for the lanes past the last warp, not 0), so the sum of
// exponentials does not underflow to zero and the loss stays finite.
TEST(LayersEmulated, CrossEntropyOfLogitsFarBelowZero) {
  CheckCrossEntropy(3, 4099, 4104, 114, -300.0f);
}

// The mean loss over more positions than the block has threads (B * T is 8192 in the GPT's
// runs): each thread sums several before the block's reduction.
TEST(LayersEmulated, MeanReduceAveragesMoreValuesThanThreads) {
  std::vector<float> losses = RandomBf16Values(3000, 115);
  double sum = 0;
  for (float& l : losses) {
    l = 1.0f + std::abs(l);  // losses are positive
    sum += l;
  }
  std::vector<std::string> launched;
  std::vector<float> mean = WithGuard({NAN});
  MeanReduce(EmulatorLauncher{&launched}, mean.data(), losses.data(),
             static_cast<int>(losses.size()));
  EXPECT_TRUE(
      Close("mean", Unguarded(mean), {static_cast<float>(sum / losses.size())}, kFp32Tolerance));
}

// The global norm over chunks and the AdamW step with clipping against the CPU trainer's
// (worker/train/adamw.h: SumOfSquares, ClipToNorm, AdamW::Step at step 3), for one flat buffer
// of two tensors (one decays).
TEST(LayersEmulated, GlobalNormAndAdamW) {
  const int64_t n = 5000, split = 3000, chunk = 1024;
  std::vector<ParamChunk> chunks;
  auto add_tensor = [&](int64_t begin, int64_t end, int32_t decays) {
    for (int64_t i = begin; i < end; i += chunk)
      chunks.push_back({i, static_cast<int32_t>(std::min(chunk, end - i)), decays});
  };
  add_tensor(0, split, 1);
  add_tensor(split, n, 0);
  const int num_chunks = static_cast<int>(chunks.size());
  std::vector<float> params = RandomBf16Values(n, 120);
  const std::vector<float> grads = RandomBf16Values(n, 121, 0.1f);
  std::vector<float> m = RandomBf16Values(n, 122, 0.01f);
  std::vector<float> v = RandomBf16Values(n, 123, 1e-4f);
  for (float& x : v)
    x = std::abs(x);
  AdamWArgs a{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1.0f, 0.0f, 0.0f};
  const int t = 3;
  a.correction1 = static_cast<float>(1.0 - std::pow(0.9, t));
  a.correction2 = static_cast<float>(1.0 - std::pow(0.95, t));

  std::vector<std::string> launched;
  const EmulatorLauncher launch{&launched};
  const std::vector<float> before = params;
  std::vector<float> got_params = params, got_m = m, got_v = v, norm(1, NAN),
                     partials(num_chunks, NAN);
  Bf16Buffer got_bf16(std::vector<float>(n, NAN), 0);
  GlobalNorm(launch, norm.data(), partials.data(), grads.data(), chunks.data(), num_chunks);
  AdamWUpdate(launch, got_params.data(), got_bf16.data(), got_m.data(), got_v.data(), grads.data(),
              norm.data(), chunks.data(), num_chunks, a);

  const double want_norm = train::test::AdamWReferenceStep(params, grads, m, v, split, a, t);
  ASSERT_GT(want_norm, a.max_norm) << "the test means to exercise clipping";
  EXPECT_TRUE(Close("norm", norm, {static_cast<float>(want_norm)}, kFp32Tolerance));
  EXPECT_TRUE(Close("m", got_m, m, kFp32Tolerance));
  EXPECT_TRUE(Close("v", got_v, v, kFp32Tolerance));
  EXPECT_TRUE(Close("params", got_params, params, kFp32Tolerance));
  EXPECT_TRUE(Close("params_bf16", got_bf16.values(), params, kBf16Tolerance));
  // The bf16 copy that the next forward reads is the updated parameters, rounded: not the ones
  // before the step (which the comparison above, at bf16's tolerance, would let through).
  EXPECT_EQ(got_bf16.values(), ToFloats(ToBits(got_params)));
  // The updates themselves (about 1e-3 of the parameters, so a wrong weight decay, 1e-4 of
  // them, hides in the comparison above), within what fp32 subtraction leaves of them.
  std::vector<float> got_update(n), want_update(n);
  for (int64_t i = 0; i < n; i++) {
    got_update[i] = got_params[i] - before[i];
    want_update[i] = params[i] - before[i];
  }
  EXPECT_TRUE(Close("update", got_update, want_update, 1e-3));
}

// Gradients of about 1e-6 (the embedding row of a rare token), at the first step, clipped to a
// norm of 1e-5: sqrt(v_hat) is about 1e-6, and eps (1e-8) is added after the square root, as the
// CPU trainer does (under it, the step would shrink a hundredfold); the clipping factor is
// max_norm / (norm + 1e-6), as the trainer's, which at this norm differs from max_norm / norm.
TEST(LayersEmulated, AdamWStepOfTinyGradientsMatchesTheTrainer) {
  const int64_t n = 700;
  const std::vector<ParamChunk> chunks = {{0, static_cast<int32_t>(n), 1}};
  std::vector<float> params = RandomBf16Values(n, 150);
  const std::vector<float> grads = RandomBf16Values(n, 151, 1e-6f);
  std::vector<float> m(n, 0.0f), v(n, 0.0f);
  const AdamWArgs a{1e-3f, 0.9f, 0.95f, 1e-8f, 0.1f, 1e-5f, 1.0f - 0.9f, 1.0f - 0.95f};

  std::vector<std::string> launched;
  const EmulatorLauncher launch{&launched};
  const std::vector<float> before = params;
  std::vector<float> got_params = params, got_m = m, got_v = v, norm(1, NAN), partials(1, NAN);
  Bf16Buffer got_bf16(std::vector<float>(n, NAN), 0);
  GlobalNorm(launch, norm.data(), partials.data(), grads.data(), chunks.data(), 1);
  AdamWUpdate(launch, got_params.data(), got_bf16.data(), got_m.data(), got_v.data(), grads.data(),
              norm.data(), chunks.data(), 1, a);
  const double want_norm = train::test::AdamWReferenceStep(params, grads, m, v, n, a, 1);
  ASSERT_GT(want_norm, a.max_norm) << "the test means to exercise clipping";
  EXPECT_TRUE(Close("m", got_m, m, kFp32Tolerance));
  EXPECT_TRUE(Close("v", got_v, v, kFp32Tolerance));
  std::vector<float> got_update(n), want_update(n);
  for (int64_t i = 0; i < n; i++) {
    got_update[i] = got_params[i] - before[i];
    want_update[i] = params[i] - before[i];
  }
  EXPECT_TRUE(Close("update", got_update, want_update, 1e-3));
}

// The norm's last reduction, over more partial sums than the block has threads (the GPT has
// some 1900 chunks): each thread sums several in order, then the tree over 1024 threads.
TEST(LayersEmulated, NormFinishSumsEveryPartial) {
  const std::vector<float> partials = RandomBf16Values(1500, 130);
  double sum = 0;
  for (float p : partials)
    sum += static_cast<double>(p) * p;
  std::vector<float> squares(partials.size()), norm(1, NAN);
  for (size_t i = 0; i < partials.size(); i++)
    squares[i] = partials[i] * partials[i];
  std::vector<std::string> launched;
  const EmulatorLauncher launch{&launched};
  launch("global_norm (finish)", kNormFinishShape, NormFinishKernel, norm.data(),
         static_cast<const float*>(squares.data()), static_cast<int>(squares.size()));
  EXPECT_TRUE(Close("norm", norm, {static_cast<float>(std::sqrt(sum))}, kFp32Tolerance));
}

TEST(LayersEmulated, ConvertToBf16RoundsToNearestEven) {
  // 1 + 2^-8 lies halfway between two bf16 values: it rounds to the even one, 1.
  const std::vector<float> values = {1.0f + 1.0f / 256, 1.0f + 3.0f / 256, -2.5f, 0.0f, 65504.0f};
  std::vector<std::string> launched;
  Bf16Buffer out(std::vector<float>(values.size(), NAN), 0);
  ConvertToBf16(EmulatorLauncher{&launched}, out.data(), values.data(),
                static_cast<int64_t>(values.size()));
  EXPECT_EQ(out.values(), (std::vector<float>{1.0f, 1.0f + 4.0f / 256, -2.5f, 0.0f, 65536.0f}));
  EXPECT_TRUE(out.GuardIntact());  // the launch's other 251 threads write nothing
}

}  // namespace
}  // namespace tessera::model::cuda::layer_kernels
