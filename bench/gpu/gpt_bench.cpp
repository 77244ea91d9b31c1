// gpt_bench: Tessera's side of bench/gpu/run.sh. Trains the GPT on one CUDA device (bf16,
// AdamW) on random tokens and prints one line:
//   tessera tokens_per_s=... step_ms=... mfu=... ... attention=... gelu_fusion=... gemm_tune=...
// --attention matmul|flash|flash-mma|flash-mma2 (default matmul) picks the attention kernels,
// --gelu-fusion moves the MLP's GELU into cuBLASLt epilogues, --gemm-tune N times N cuBLASLt
// candidates per product shape (GptCudaOptions; TESSERA_ATTENTION, TESSERA_GELU_FUSION and
// TESSERA_GEMM_TUNE in the environment override them, and the line shows the flags' values).
// MFU counts the model's FLOPs as nanoGPT does: 6 (P - wpe) + 12 L C T per token (forward
// and backward, attention included), against --peak-tflops (H100/H200 SXM dense bf16: 989).
// Exit status: 0, 2 for a bad flag, 3 when no CUDA device or model can be had.
#include <CLI/CLI.hpp>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <exception>
#include <random>
#include <string>
#include <vector>

#include "worker/model/cuda/activation_layout.h"
#include "worker/model/cuda/gpt_cuda.h"
#include "worker/model/gpt.h"
#include "worker/train/plan.h"

namespace {

int Run(int argc, char** argv) {
  using tessera::model::GptConfig;
  CLI::App app{"Tessera GPT training throughput on one CUDA device"};
  std::string preset = "gpt2-124m";
  GptConfig config;
  int layers = 0, d_model = 0, heads = 0, seq_len = 0, vocab = 0;
  int batch = 16, steps = 20, warmup = 3;
  double peak_tflops = 989.0;
  std::string attention = "matmul";
  bool gelu_fusion = false;
  int gemm_tune = 1;
  app.add_option("--preset", preset, "model preset (gpt2-124m, ...); 'none' for the flags below");
  app.add_option("--layers", layers, "override: layers");
  app.add_option("--d-model", d_model, "override: dModel");
  app.add_option("--heads", heads, "override: heads");
  app.add_option("--seq-len", seq_len, "override: seqLen (= T of every step)");
  app.add_option("--vocab", vocab, "override: vocabulary size");
  app.add_option("--batch", batch, "sequences per step (B)");
  app.add_option("--steps", steps, "timed steps");
  app.add_option("--warmup", warmup, "untimed steps first");
  app.add_option("--peak-tflops", peak_tflops, "the device's dense bf16 peak, for MFU");
  app.add_option("--attention", attention,
                 "attention kernels: matmul (cuBLASLt), flash (fused, wmma), flash-mma (fused, "
                 "mma.sync) or flash-mma2 (its second version)")
      ->check(CLI::Validator(
          [](const std::string& name) {
            tessera::model::GpuAttention unused;
            return tessera::model::ParseGpuAttention(name, &unused)
                       ? std::string()
                       : std::string("use ") + tessera::model::kGpuAttentionNames;
          },
          "ATTENTION"));
  app.add_flag("--gelu-fusion", gelu_fusion,
               "the MLP's GELU in the epilogues of its cuBLASLt products");
  app.add_option("--gemm-tune", gemm_tune,
                 "time this many cuBLASLt candidates per product shape and keep the fastest "
                 "(1: the heuristics' first)")
      ->check(CLI::Range(1, tessera::model::kMaxGemmTune));
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);  // prints the message or the help
    return code == 0 ? 0 : 2;
  }
  if (preset != "none" && !tessera::model::GptPreset(preset, &config)) {
    std::fprintf(stderr, "gpt_bench: unknown --preset %s\n", preset.c_str());
    return 2;
  }
  if (layers > 0)
    config.layers = layers;
  if (d_model > 0)
    config.d_model = d_model;
  if (heads > 0)
    config.heads = heads;
  if (seq_len > 0)
    config.seq_len = seq_len;
  if (vocab > 0)
    config.vocab = vocab;
  const std::string invalid = tessera::model::ValidateGptConfig(config);
  if (!invalid.empty() || batch < 1 || steps < 1 || warmup < 0) {
    std::fprintf(stderr, "gpt_bench: %s\n",
                 invalid.empty() ? "--batch and --steps must be positive" : invalid.c_str());
    return 2;
  }

  std::string error;
  tessera::model::GptCudaOptions options;
  tessera::model::ParseGpuAttention(attention, &options.attention);  // checked by CLI11
  options.gelu_fusion = gelu_fusion;
  options.gemm_tune = gemm_tune;
  auto model = tessera::model::CreateGptCuda(config, options, &error);
  if (model == nullptr) {
    std::fprintf(stderr, "gpt_bench: cannot create the CUDA model: %s\n", error.c_str());
    return 3;
  }
  model->InitParameters(1337);
  const int B = batch;
  const int T = config.seq_len;
  tessera::model::GpuAdamWOptions adamw;  // lr 3e-4, betas (0.9, 0.95), wd 0.1, clip 1.0
  std::mt19937_64 rng(42);
  std::uniform_int_distribution<int32_t> dist(0, config.vocab - 1);
  std::vector<int32_t> data(static_cast<size_t>(B) * T + 1);

  double timed = 0.0;
  float first = NAN, last = NAN;
  for (int s = 0; s < warmup + steps; s++) {
    for (int32_t& id : data)
      id = dist(rng);
    const std::span<const int32_t> all(data);
    const auto tokens = all.first(data.size() - 1);
    const auto targets = all.last(data.size() - 1);
    model->Synchronize();
    const auto t0 = std::chrono::steady_clock::now();
    model->ZeroGradients();
    model->Forward(tokens, targets, B, T);
    model->Backward();
    model->Step(adamw, adamw.lr);
    const float loss = model->Loss();  // the step's one read-back
    model->Synchronize();
    const auto t1 = std::chrono::steady_clock::now();
    if (s == 0)
      first = loss;
    last = loss;
    if (s >= warmup)
      timed += std::chrono::duration<double>(t1 - t0).count();
  }
  // One more step, untimed above, with a wait after each phase: where a step's time goes.
  // The waits drain the queue between phases, so the parts add up to a little more than a step.
  double phase_ms[3] = {0, 0, 0};
  {
    const std::span<const int32_t> all(data);
    const auto tokens = all.first(data.size() - 1);
    const auto targets = all.last(data.size() - 1);
    model->Synchronize();
    auto mark = std::chrono::steady_clock::now();
    auto lap = [&](double* into) {
      model->Synchronize();
      const auto now = std::chrono::steady_clock::now();
      *into = std::chrono::duration<double, std::milli>(now - mark).count();
      mark = now;
    };
    model->ZeroGradients();
    model->Forward(tokens, targets, B, T);
    lap(&phase_ms[0]);
    model->Backward();
    lap(&phase_ms[1]);
    model->Step(adamw, adamw.lr);
    lap(&phase_ms[2]);
  }
  const int64_t P = tessera::model::GptParameterCount(config);
  const double flops_per_token = tessera::train::FlopsPerToken(config);
  // What `tessera plan` and the trainer's memory check predict for this arena (the attention
  // the model really uses: TESSERA_ATTENTION overrides --attention).
  const int64_t planned =
      tessera::model::GptCudaMemoryFor(
          config, B, T, tessera::model::GpuAttentionFromEnvironment(options.attention))
          .activations;
  const double tokens_per_s = static_cast<double>(B) * T * steps / timed;
  const double mfu = tessera::train::MfuRatio(flops_per_token, tokens_per_s, peak_tflops * 1e12, 1);
  std::printf(
      "tessera tokens_per_s=%.1f step_ms=%.2f mfu=%.4f batch=%d seq_len=%d params=%lld "
      "activation_gib=%.2f loss_first=%.4f loss_last=%.4f grad_norm=%.4f forward_ms=%.2f "
      "backward_ms=%.2f optimizer_ms=%.2f attention=%s gelu_fusion=%d gemm_tune=%d "
      "planned_activation_gib=%.2f\n",
      tokens_per_s, 1e3 * timed / steps, mfu, B, T, static_cast<long long>(P),
      static_cast<double>(model->activation_bytes()) / (1 << 30), first, last, model->GradNorm(),
      phase_ms[0], phase_ms[1], phase_ms[2], attention.c_str(), gelu_fusion ? 1 : 0, gemm_tune,
      static_cast<double>(planned) / (1 << 30));
  return std::isfinite(last) ? 0 : 1;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "gpt_bench: %s\n", e.what());
    return 1;
  }
}
