// Tessera's side of bench/cpu_train: trains one GPT configuration on CPU in fp32 with AdamW
// for a number of steps and prints tokens/s and achieved GFLOP/s, plus the machine's sgemm
// peak measured with OpenBLAS in the same process. run.sh compares it with PyTorch.
// Not a test: it never fails on a time.
#include <cblas.h>
#include <CLI/CLI.hpp>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <random>
#include <vector>

#include "worker/model/gpt.h"

namespace {

using Clock = std::chrono::steady_clock;

double Seconds(Clock::time_point a, Clock::time_point b) {
  return std::chrono::duration<double>(b - a).count();
}

// Best GFLOP/s of cblas_sgemm on an n x n x n product over a few repetitions, OpenBLAS
// using `threads` threads.
double MeasureSgemmPeak(int n, int threads) {
  openblas_set_num_threads(threads);
  std::vector<float> a(static_cast<size_t>(n) * n), b(a.size()), c(a.size());
  std::mt19937 rng(1);
  std::uniform_real_distribution<float> u(-1.0f, 1.0f);
  for (float& x : a)
    x = u(rng);
  for (float& x : b)
    x = u(rng);
  double best = 0;
  for (int rep = 0; rep < 4; rep++) {
    const auto t0 = Clock::now();
    cblas_sgemm(CblasRowMajor, CblasNoTrans, CblasNoTrans, n, n, n, 1.0f, a.data(), n, b.data(), n,
                0.0f, c.data(), n);
    const double s = Seconds(t0, Clock::now());
    if (rep > 0)
      best = std::max(best, 2.0 * n * n * static_cast<double>(n) / s / 1e9);
  }
  return best;
}

// Floating-point operations of one training step (forward + backward = 3 x forward) counting
// the matrix products and the causal attention products only, as is usual for MFU.
double StepFlops(const tessera::model::GptConfig& c, int B, int T) {
  const double N = static_cast<double>(B) * T;
  const double C = c.d_model;
  const double forward = c.layers * (2.0 * N * 12.0 * C * C          // qkv, proj, fc, fc proj
                                     + 2.0 * B * C * T * (T + 1.0))  // q.k and att.v, causal
                         + 2.0 * N * C * c.vocab;                    // LM head
  return 3.0 * forward;
}

// AdamW with decoupled weight decay on the tensors that decay (matrices and embeddings).
struct AdamW {
  float lr = 3e-4f, beta1 = 0.9f, beta2 = 0.95f, eps = 1e-8f, weight_decay = 0.1f;
  std::vector<float> m, v, decay;  // decay: per element, 1 where weight decay applies
  int step = 0;

  explicit AdamW(const tessera::model::GptConfig& config) {
    const int64_t n = tessera::model::GptParameterCount(config);
    m.assign(n, 0.0f);
    v.assign(n, 0.0f);
    decay.assign(n, 0.0f);
    for (const auto& t : tessera::model::GptParameterTensors(config)) {
      if (t.decays)
        std::fill_n(decay.begin() + t.offset, t.size, 1.0f);
    }
  }

  void Update(std::span<float> params, std::span<const float> grads) {
    step++;
    const float c1 = 1.0f - std::pow(beta1, static_cast<float>(step));
    const float c2 = 1.0f - std::pow(beta2, static_cast<float>(step));
    const int64_t n = static_cast<int64_t>(params.size());
#pragma omp parallel for simd schedule(static)
    for (int64_t i = 0; i < n; i++) {
      const float g = grads[i];
      m[i] = beta1 * m[i] + (1.0f - beta1) * g;
      v[i] = beta2 * v[i] + (1.0f - beta2) * g * g;
      const float update = (m[i] / c1) / (std::sqrt(v[i] / c2) + eps);
      params[i] -= lr * (update + weight_decay * decay[i] * params[i]);
    }
  }
};

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{"Tessera CPU training throughput (one process, fp32, AdamW)"};
  tessera::model::GptConfig config{4, 256, 4, 128, 256};
  int batch = 8, steps = 20, warmup = 3, threads = 1, peak_n = 2048;
  app.add_option("--layers", config.layers);
  app.add_option("--d-model", config.d_model);
  app.add_option("--heads", config.heads);
  app.add_option("--seq-len", config.seq_len);
  app.add_option("--vocab", config.vocab);
  app.add_option("--batch", batch);
  app.add_option("--steps", steps, "Timed steps");
  app.add_option("--warmup", warmup, "Untimed steps first");
  app.add_option("--threads", threads);
  app.add_option("--peak-n", peak_n, "Size of the square sgemm measuring the peak (0: skip)");
  CLI11_PARSE(app, argc, argv);
  const std::string error = tessera::model::ValidateGptConfig(config);
  if (!error.empty()) {
    std::fprintf(stderr, "cpu_train_bench: %s\n", error.c_str());
    return 2;
  }
  if (batch < 1 || steps < 1 || warmup < 0 || threads < 1) {
    std::fprintf(stderr, "cpu_train_bench: --batch, --steps, --threads must be >= 1\n");
    return 2;
  }
  // Measured before and after training, best kept: on a shared machine either may be slowed.
  double peak = peak_n > 0 ? MeasureSgemmPeak(peak_n, threads) : 0.0;
  tessera::model::SetKernelThreads(threads);

  const int T = config.seq_len;
  tessera::model::Gpt gpt(config);
  gpt.InitParameters(1337);
  AdamW adamw(config);
  std::mt19937_64 rng(42);
  std::vector<int32_t> data(static_cast<size_t>(batch) * T + 1);
  double timed = 0;
  float first_loss = 0, last_loss = 0;
  for (int s = 0; s < warmup + steps; s++) {
    for (int32_t& id : data)
      id = static_cast<int32_t>(rng() % config.vocab);
    std::span<const int32_t> all(data);
    const auto t0 = Clock::now();
    gpt.ZeroGradients();
    const float loss = gpt.Forward(all.first(data.size() - 1), all.subspan(1), batch, T);
    gpt.Backward();
    adamw.Update(gpt.parameters(), gpt.gradients());
    const auto t1 = Clock::now();
    if (s == 0)
      first_loss = loss;
    last_loss = loss;
    if (s >= warmup)
      timed += Seconds(t0, t1);
  }
  if (peak_n > 0) {
    peak = std::max(peak, MeasureSgemmPeak(peak_n, threads));
    tessera::model::SetKernelThreads(threads);
  }
  const double tokens_per_s = static_cast<double>(batch) * T * steps / timed;
  const double gflops = StepFlops(config, batch, T) * steps / timed / 1e9;
  std::printf(
      "tessera tokens_per_s=%.1f step_ms=%.2f gflops=%.2f sgemm_peak_gflops=%.2f "
      "fraction_of_peak=%.3f threads=%d params=%lld loss_first=%.4f loss_last=%.4f "
      "openblas_core=%s\n",
      tokens_per_s, 1e3 * timed / steps, gflops, peak, peak > 0 ? gflops / peak : 0.0, threads,
      static_cast<long long>(tessera::model::GptParameterCount(config)), first_loss, last_loss,
      openblas_get_corename());
  return 0;
}
