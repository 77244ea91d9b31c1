// GptCuda against the CPU Gpt: the same parameters, the same loss, logits and gradients within
// bf16 tolerance of a whole model, and a 20-step AdamW training run whose loss curve tracks
// the CPU run's.
#include "worker/model/cuda/gpt_cuda.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <random>
#include <string>
#include <utility>
#include <vector>

#include "tests/unit/gpu/gpu_test_util.h"
#include "worker/model/cuda/activation_layout.h"
#include "worker/model/gpt.h"

namespace tessera::model {
namespace {

using gpu_test::RelativeErrorWithin;

// A small model with every feature of the real one (several blocks and heads, a vocabulary
// whose logits rows need padding).
GptConfig SmallConfig() {
  GptConfig c;
  c.layers = 2;
  c.d_model = 64;
  c.heads = 4;
  c.seq_len = 32;
  c.vocab = 97;
  return c;
}

// Whole-model tolerances: every activation is rounded to bf16 between some 20 kernels, so a
// whole pass differs from the fp32 CPU model by more than one layer does (kBf16Tolerance).
constexpr double kLossTolerance = 1e-2;
constexpr double kLogitsTolerance = 2e-2;
constexpr double kGradientTolerance = 5e-2;

std::unique_ptr<GptCuda> MakeModel(const GptConfig& config,
                                   const GptCudaOptions& options = GptCudaOptions{}) {
  std::string error;
  auto model = CreateGptCuda(config, options, &error);
  EXPECT_NE(model, nullptr) << error;
  return model;
}

struct Batch {
  std::vector<int32_t> tokens, targets;
};

// Random tokens; each target is the token after it in the vocabulary, a rule that a model
// learns within a few steps.
Batch RandomBatch(int B, int T, int vocab, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::uniform_int_distribution<int32_t> dist(0, vocab - 1);
  Batch b;
  for (int i = 0; i < B * T; i++) {
    b.tokens.push_back(dist(rng));
    b.targets.push_back((b.tokens.back() + 1) % vocab);
  }
  return b;
}

TEST(GpuModel, InitialParametersEqualTheCpuModels) {
  TESSERA_SKIP_WITHOUT_GPU();
  const GptConfig config = SmallConfig();
  auto gpu = MakeModel(config);
  ASSERT_NE(gpu, nullptr);
  Gpt cpu(config);
  cpu.InitParameters(1337);
  gpu->InitParameters(1337);
  std::vector<float> got(gpu->parameter_count());
  gpu->GetParameters(got);
  ASSERT_EQ(got.size(), cpu.parameters().size());
  EXPECT_TRUE(std::equal(got.begin(), got.end(), cpu.parameters().begin()));
}

// One forward and backward of B full sequences on both models: loss, logits and every
// parameter tensor's gradient.
void CheckForwardAndBackwardAgainstCpu(const GptConfig& config, const GptCudaOptions& options,
                                       int B) {
  const int T = config.seq_len;
  const uint64_t seed = std::random_device{}();
  std::printf("seed %llu\n", static_cast<unsigned long long>(seed));
  const Batch batch = RandomBatch(B, T, config.vocab, seed);
  Gpt cpu(config);
  cpu.InitParameters(seed);
  auto gpu = MakeModel(config, options);
  ASSERT_NE(gpu, nullptr);
  gpu->InitParameters(seed);

  const float cpu_loss = cpu.Forward(batch.tokens, batch.targets, B, T);
  gpu->Forward(batch.tokens, batch.targets, B, T);
  // The arena is what `tessera plan` and the memory checks size without a GPU.
  if (std::getenv("TESSERA_ATTENTION") == nullptr) {
    EXPECT_EQ(gpu->activation_bytes(),
              GptCudaMemoryFor(config, B, T, options.attention).activations);
  }
  const float gpu_loss = gpu->Loss();
  EXPECT_TRUE(RelativeErrorWithin({gpu_loss}, {cpu_loss}, kLossTolerance));
  std::vector<float> logits(static_cast<size_t>(B) * T * config.vocab);
  gpu->GetLogits(logits);
  const std::vector<float> cpu_logits(cpu.logits().begin(), cpu.logits().end());
  EXPECT_TRUE(RelativeErrorWithin(logits, cpu_logits, kLogitsTolerance));

  cpu.ZeroGradients();
  cpu.Backward(0.5f);
  gpu->ZeroGradients();
  gpu->Backward(0.5f);
  std::vector<float> grads(gpu->parameter_count());
  gpu->GetGradients(grads);
  const std::span<const float> cpu_grads = cpu.gradients();
  for (const ParameterTensor& t : GptParameterTensors(config)) {
    const std::vector<float> got(grads.begin() + t.offset, grads.begin() + t.offset + t.size);
    const std::vector<float> want(cpu_grads.begin() + t.offset,
                                  cpu_grads.begin() + t.offset + t.size);
    EXPECT_TRUE(RelativeErrorWithin(got, want, kGradientTolerance)) << t.name;
  }
}

TEST(GpuModel, ForwardAndBackwardMatchTheCpuModel) {
  TESSERA_SKIP_WITHOUT_GPU();
  CheckForwardAndBackwardAgainstCpu(SmallConfig(), GptCudaOptions{}, 4);
}

// The fused attentions need head size 32 or 64: two heads of 32, and 80 positions (wmma: a
// full 64-row tile and a partial one; mma.sync: one forward block of 128 queries, partly past T).
void CheckFusedAttentionAgainstCpu(GpuAttention attention) {
  GptConfig config = SmallConfig();
  config.heads = 2;
  config.seq_len = 80;
  GptCudaOptions options;
  options.attention = attention;
  CheckForwardAndBackwardAgainstCpu(config, options, 2);
}

TEST(GpuModel, ForwardAndBackwardWithFlashAttentionMatchTheCpuModel) {
  TESSERA_SKIP_WITHOUT_GPU();
  CheckFusedAttentionAgainstCpu(GpuAttention::kFlash);
}

TEST(GpuModel, ForwardAndBackwardWithFlashMmaAttentionMatchTheCpuModel) {
  TESSERA_SKIP_WITHOUT_GPU();
  CheckFusedAttentionAgainstCpu(GpuAttention::kFlashMma);
}

TEST(GpuModel, ForwardAndBackwardWithFlashMma2AttentionMatchTheCpuModel) {
  TESSERA_SKIP_WITHOUT_GPU();
  CheckFusedAttentionAgainstCpu(GpuAttention::kFlashMma2);
}

// The names TESSERA_ATTENTION and gpt_bench --attention take (no GPU needed).
TEST(GpuModel, AttentionNamesParse) {
  GpuAttention attention = GpuAttention::kFlash;
  ASSERT_TRUE(ParseGpuAttention("matmul", &attention));
  EXPECT_EQ(attention, GpuAttention::kMatmul);
  ASSERT_TRUE(ParseGpuAttention("flash", &attention));
  EXPECT_EQ(attention, GpuAttention::kFlash);
  ASSERT_TRUE(ParseGpuAttention("flash-mma2", &attention));
  EXPECT_EQ(attention, GpuAttention::kFlashMma2);
  ASSERT_TRUE(ParseGpuAttention("flash-mma", &attention));
  EXPECT_EQ(attention, GpuAttention::kFlashMma);
  EXPECT_FALSE(ParseGpuAttention("fused", &attention));
  EXPECT_FALSE(ParseGpuAttention("flash-mma3", &attention));
  EXPECT_FALSE(ParseGpuAttention("", &attention));
  EXPECT_EQ(attention, GpuAttention::kFlashMma);  // unchanged by a refused name
}

// The MLP's GELU in the cuBLASLt epilogues, alone and with every product's algorithm chosen by
// timing 8 candidates (whose trial runs must leave the accumulated gradients untouched), on the
// mma.sync attention: the configuration bench/gpu/run.sh times as flash-mma+gelu+tune.
TEST(GpuModel, ForwardAndBackwardWithGeluFusionMatchTheCpuModel) {
  TESSERA_SKIP_WITHOUT_GPU();
  GptCudaOptions options;
  options.gelu_fusion = true;
  CheckForwardAndBackwardAgainstCpu(SmallConfig(), options, 4);
}

TEST(GpuModel, ForwardAndBackwardWithTunedProductsMatchTheCpuModel) {
  TESSERA_SKIP_WITHOUT_GPU();
  GptConfig config = SmallConfig();
  config.heads = 2;
  config.seq_len = 80;
  GptCudaOptions options;
  options.attention = GpuAttention::kFlashMma;
  options.gelu_fusion = true;
  options.gemm_tune = 8;
  CheckForwardAndBackwardAgainstCpu(config, options, 2);
}

// The values TESSERA_GELU_FUSION and TESSERA_GEMM_TUNE take (no GPU needed).
TEST(GpuModel, SwitchesParse) {
  bool on = false;
  ASSERT_TRUE(ParseGpuSwitch("1", &on));
  EXPECT_TRUE(on);
  ASSERT_TRUE(ParseGpuSwitch("0", &on));
  EXPECT_FALSE(on);
  EXPECT_FALSE(ParseGpuSwitch("yes", &on));
  EXPECT_FALSE(ParseGpuSwitch("", &on));
  int n = 0;
  ASSERT_TRUE(ParseGemmTune("1", &n));
  EXPECT_EQ(n, 1);
  ASSERT_TRUE(ParseGemmTune("16", &n));
  EXPECT_EQ(n, 16);
  for (const char* bad : {"0", "17", "", "-1", "8x", "100", "+8"})
    EXPECT_FALSE(ParseGemmTune(bad, &n)) << bad;
  EXPECT_EQ(n, 16);  // unchanged by refused values
}

// Sets an environment variable for the scope, restoring the previous value (or its absence).
class ScopedEnv {
 public:
  ScopedEnv(const char* name, const char* value) : name_(name) {
    const char* previous = std::getenv(name);
    had_ = previous != nullptr;
    if (had_)
      saved_ = previous;
    setenv(name, value, 1);
  }
  ~ScopedEnv() {
    if (had_)
      setenv(name_, saved_.c_str(), 1);
    else
      unsetenv(name_);
  }
  ScopedEnv(const ScopedEnv&) = delete;
  ScopedEnv& operator=(const ScopedEnv&) = delete;

 private:
  const char* name_;
  bool had_ = false;
  std::string saved_;
};

// Bad TESSERA_GELU_FUSION / TESSERA_GEMM_TUNE values are refused naming the variable, before
// any device is looked for (so this runs without a GPU), and so is an out-of-range option.
TEST(GpuModel, BadSwitchesAreRefusedNamingTheVariable) {
  for (const auto& [name, value] :
       {std::pair{"TESSERA_GELU_FUSION", "yes"}, std::pair{"TESSERA_GEMM_TUNE", "0"},
        std::pair{"TESSERA_GEMM_TUNE", "many"}}) {
    ScopedEnv env(name, value);
    std::string error;
    EXPECT_EQ(CreateGptCuda(SmallConfig(), GptCudaOptions{}, &error), nullptr);
    EXPECT_NE(error.find(name), std::string::npos) << error;
  }
  GptCudaOptions options;
  options.gemm_tune = 17;
  std::string error;
  EXPECT_EQ(CreateGptCuda(SmallConfig(), options, &error), nullptr);
  EXPECT_NE(error.find("gemm_tune=17"), std::string::npos) << error;
  GptConfig odd = SmallConfig();  // the epilogue needs rows of 4 * dModel % 8 == 0
  odd.d_model = 63;
  odd.heads = 3;
  options = GptCudaOptions{};
  options.gelu_fusion = true;
  EXPECT_EQ(CreateGptCuda(odd, options, &error), nullptr);
  EXPECT_NE(error.find("GELU fusion needs an even dModel, not 63"), std::string::npos) << error;
}

// TESSERA_ATTENTION overrides GptCudaOptions::attention; a value that names no attention is
// refused with a message naming the variable. Checked before any device is looked for, so this
// runs without a GPU too.
TEST(GpuModel, UnknownTesseraAttentionIsRefusedNamingTheVariable) {
  const char* previous = std::getenv("TESSERA_ATTENTION");
  const std::string saved = previous != nullptr ? previous : "";
  setenv("TESSERA_ATTENTION", "fused", 1);
  std::string error;
  auto model = CreateGptCuda(SmallConfig(), GptCudaOptions{}, &error);
  if (previous != nullptr)
    setenv("TESSERA_ATTENTION", saved.c_str(), 1);
  else
    unsetenv("TESSERA_ATTENTION");
  EXPECT_EQ(model, nullptr);
  EXPECT_NE(error.find("TESSERA_ATTENTION"), std::string::npos) << error;
}

TEST(GpuModel, BackwardReportsFinalGradientsInOrder) {
  TESSERA_SKIP_WITHOUT_GPU();
  const GptConfig config = SmallConfig();
  auto gpu = MakeModel(config);
  ASSERT_NE(gpu, nullptr);
  gpu->InitParameters(7);
  const Batch batch = RandomBatch(2, 16, config.vocab, 7);
  gpu->Forward(batch.tokens, batch.targets, 2, 16);
  std::vector<int64_t> firsts;
  gpu->Backward(1.0f, [&](int64_t first, void* event) {
    EXPECT_NE(event, nullptr);
    firsts.push_back(first);
  });
  gpu->Synchronize();
  ASSERT_EQ(firsts.size(), static_cast<size_t>(config.layers) + 1);
  for (size_t i = 1; i < firsts.size(); i++)
    EXPECT_LT(firsts[i], firsts[i - 1]);
  EXPECT_EQ(firsts.back(), 0);
  EXPECT_THROW(gpu->Backward(), std::logic_error);  // the logits now hold their gradient
}

TEST(GpuModel, RejectsBadInputsLikeTheCpuModel) {
  TESSERA_SKIP_WITHOUT_GPU();
  const GptConfig config = SmallConfig();
  auto gpu = MakeModel(config);
  ASSERT_NE(gpu, nullptr);
  std::vector<int32_t> ids(8, 0);
  EXPECT_THROW(gpu->Forward(ids, ids, 1, config.seq_len + 1), std::invalid_argument);
  ids[3] = config.vocab;
  EXPECT_THROW(gpu->Forward(ids, {}, 1, 8), std::out_of_range);
  EXPECT_THROW(gpu->Backward(), std::logic_error);
}

// The CPU side of the training comparison: AdamW as worker/train/adamw.h, with clipping by
// global norm (ClipToNorm), written out here so the test needs no trainer library.
void CpuAdamWStep(std::span<float> p, std::span<float> g, std::vector<float>& m,
                  std::vector<float>& v, const std::vector<uint8_t>& decays,
                  const GpuAdamWOptions& o, int t) {
  double sum2 = 0;
  for (float x : g)
    sum2 += static_cast<double>(x) * x;
  const double norm = std::sqrt(sum2);
  const float factor =
      o.grad_clip > 0 && norm > o.grad_clip ? static_cast<float>(o.grad_clip / (norm + 1e-6)) : 1;
  const auto c1 = static_cast<float>(1.0 - std::pow(static_cast<double>(o.beta1), t));
  const auto c2 = static_cast<float>(1.0 - std::pow(static_cast<double>(o.beta2), t));
  for (size_t i = 0; i < p.size(); i++) {
    const float gi = g[i] * factor;
    m[i] = o.beta1 * m[i] + (1 - o.beta1) * gi;
    v[i] = o.beta2 * v[i] + (1 - o.beta2) * gi * gi;
    const float decay = decays[i] ? o.weight_decay * p[i] : 0.0f;
    p[i] -= o.lr * ((m[i] / c1) / (std::sqrt(v[i] / c2) + o.eps) + decay);
  }
}

TEST(GpuModel, TwentyStepTrainingTracksTheCpuRun) {
  TESSERA_SKIP_WITHOUT_GPU();
  const GptConfig config = SmallConfig();
  const int B = 4, T = config.seq_len, kSteps = 20;
  GpuAdamWOptions options;
  options.lr = 1e-3f;
  Gpt cpu(config);
  cpu.InitParameters(42);
  auto gpu = MakeModel(config);
  ASSERT_NE(gpu, nullptr);
  gpu->InitParameters(42);
  std::vector<uint8_t> decays(cpu.parameters().size(), 0);
  for (const ParameterTensor& t : GptParameterTensors(config))
    std::fill(decays.begin() + t.offset, decays.begin() + t.offset + t.size, t.decays ? 1 : 0);
  std::vector<float> m(decays.size(), 0.0f), v(decays.size(), 0.0f);

  // Two batches, alternating.
  const Batch batches[2] = {RandomBatch(B, T, config.vocab, 1), RandomBatch(B, T, config.vocab, 2)};
  std::vector<float> cpu_losses, gpu_losses;
  for (int step = 1; step <= kSteps; step++) {
    const Batch& b = batches[step % 2];
    cpu.ZeroGradients();
    cpu_losses.push_back(cpu.Forward(b.tokens, b.targets, B, T));
    cpu.Backward();
    CpuAdamWStep(cpu.parameters(), cpu.gradients(), m, v, decays, options, step);
    gpu->ZeroGradients();
    gpu->Forward(b.tokens, b.targets, B, T);
    gpu->Backward();
    gpu->Step(options, options.lr);
    gpu_losses.push_back(gpu->Loss());
    std::printf("step %2d  cpu %.5f  gpu %.5f\n", step, cpu_losses.back(), gpu_losses.back());
  }
  for (int s = 0; s < kSteps; s++) {
    EXPECT_TRUE(RelativeErrorWithin({gpu_losses[s]}, {cpu_losses[s]}, 2 * kLossTolerance))
        << "step " << s + 1;
  }
  EXPECT_LT(gpu_losses.back(), gpu_losses.front() - 0.2f) << "the GPU model did not learn";
  EXPECT_TRUE(std::isfinite(gpu->GradNorm()));
}

}  // namespace
}  // namespace tessera::model
