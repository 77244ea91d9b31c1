// flash_bench: the attention alone (worker/model/cuda: the fused kernel sets of
// flash_attention_forward / _backward, and the model's default matmul attention for
// comparison), timed with CUDA events on random bf16 inputs of the GPT's layout, one line per
// attention (--kernels, default "matmul mma mma2 wmma"):
//   flash kernels=mma batch=16 heads=12 seq_len=1024 head_size=64 forward_ms=... backward_ms=...
//   forward_tflops=... backward_tflops=...
// FLOPs count the causal half of the products: forward 2 products (QKᵀ, PV) of B·NH·T²·hs/2
// multiply-adds each; backward 5 (QKᵀ again, dV, dP, dQ, dK): 2.5 times the forward's, for
// every attention (the same work, whatever the kernels recompute or compute above the
// diagonal). The peer is bench/gpu/sdpa_bench.py (PyTorch's scaled_dot_product_attention, same
// shape); bench/gpu/run.sh runs both. Exit status: 0, 2 for a bad flag, 3 without a CUDA
// device.
#include <cuda_runtime.h>

#include <CLI/CLI.hpp>

#include <cstdint>
#include <cstdio>
#include <cstring>
#include <random>
#include <sstream>
#include <stdexcept>
#include <string>
#include <vector>

#include "worker/model/cuda/layers_cuda.h"

namespace {

using tessera::model::cuda::bf16;
using tessera::model::cuda::FlashKernels;

// A device array of n elements of T, freed on scope exit.
template <typename T>
struct Device {
  T* p = nullptr;
  explicit Device(size_t n) { TESSERA_CUDA_CHECK(cudaMalloc(&p, n * sizeof(T))); }
  ~Device() { cudaFree(p); }
  Device(const Device&) = delete;
  Device& operator=(const Device&) = delete;
};

// n normal(0, stddev) values as bf16 bits (round to nearest even), copied to `dst`.
void FillRandom(bf16* dst, size_t n, float stddev, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<uint16_t> bits(n);
  for (uint16_t& b : bits) {
    const float f = dist(rng);
    uint32_t u;
    std::memcpy(&u, &f, sizeof(u));
    u += 0x7fff + ((u >> 16) & 1);
    b = static_cast<uint16_t>(u >> 16);
  }
  TESSERA_CUDA_CHECK(cudaMemcpy(dst, bits.data(), n * sizeof(uint16_t), cudaMemcpyHostToDevice));
}

int Run(int argc, char** argv) {
  CLI::App app{"Tessera's fused attention kernels alone, timed on one CUDA device"};
  int batch = 16, heads = 12, seq_len = 1024, head_size = 64, iters = 20;
  std::string kernels = "matmul mma mma2 wmma";
  app.add_option("--batch", batch, "sequences (B)")->check(CLI::PositiveNumber);
  app.add_option("--heads", heads, "heads (NH)")->check(CLI::PositiveNumber);
  app.add_option("--seq-len", seq_len, "positions (T)")->check(CLI::PositiveNumber);
  app.add_option("--head-size", head_size, "head size (hs): 32 or 64")
      ->check(CLI::IsMember({32, 64}));
  app.add_option("--iters", iters, "timed repetitions of each pass")->check(CLI::PositiveNumber);
  app.add_option("--kernels", kernels,
                 "attentions to time, space-separated: matmul (cuBLASLt products around the fused "
                 "softmax), mma, mma2, wmma (the fused kernel sets)");
  try {
    app.parse(argc, argv);
  } catch (const CLI::ParseError& e) {
    const int code = app.exit(e);
    return code == 0 ? 0 : 2;
  }
  std::vector<FlashKernels> sets;
  std::vector<std::string> names;
  bool matmul = false;
  {
    std::istringstream in(kernels);
    for (std::string name; in >> name;) {
      bool known = name == "matmul";
      matmul = matmul || known;
      for (FlashKernels set : {FlashKernels::kMma, FlashKernels::kMma2, FlashKernels::kWmma}) {
        if (name == tessera::model::cuda::FlashKernelsName(set)) {
          sets.push_back(set);
          names.push_back(name);
          known = true;
        }
      }
      if (!known) {
        std::fprintf(stderr, "flash_bench: --kernels: %s is not matmul, mma, mma2 or wmma\n",
                     name.c_str());
        return 2;
      }
    }
  }
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess || count == 0) {
    std::fprintf(stderr, "flash_bench: no CUDA device\n");
    return 3;
  }

  const int B = batch, NH = heads, T = seq_len, C = heads * head_size;
  const size_t n = static_cast<size_t>(B) * T;
  Device<bf16> qkv(n * 3 * C), out(n * C), dout(n * C), dqkv(n * 3 * C);
  Device<float> lse(n * NH), delta(n * NH), dq(n * C);
  FillRandom(qkv.p, n * 3 * C, 1.0f, 1);
  FillRandom(dout.p, n * C, 1.0f, 2);
  cudaEvent_t start = nullptr, stop = nullptr;
  TESSERA_CUDA_CHECK(cudaEventCreate(&start));
  TESSERA_CUDA_CHECK(cudaEventCreate(&stop));
  // Milliseconds per call of `pass`, after one untimed call.
  const auto time_ms = [&](const auto& pass) {
    pass();
    TESSERA_CUDA_CHECK(cudaEventRecord(start));
    for (int i = 0; i < iters; i++)
      pass();
    TESSERA_CUDA_CHECK(cudaEventRecord(stop));
    TESSERA_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    TESSERA_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    return static_cast<double>(ms) / iters;
  };
  const double forward_flops =
      2.0 * 2.0 * B * NH * static_cast<double>(T) * T * head_size / 2.0;  // 2 products, causal
  const auto print = [&](const char* name, double forward_ms, double backward_ms) {
    std::printf(
        "flash kernels=%s batch=%d heads=%d seq_len=%d head_size=%d forward_ms=%.3f "
        "backward_ms=%.3f forward_tflops=%.1f backward_tflops=%.1f\n",
        name, B, NH, T, head_size, forward_ms, backward_ms, forward_flops / (forward_ms * 1e9),
        2.5 * forward_flops / (backward_ms * 1e9));
  };
  if (matmul) {
    // The model's default attention, for comparison: its products compute whole T x T scores;
    // TFLOP/s still count the causal half, so the figures compare as throughput of the same work.
    tessera::model::cuda::MatmulEngine mm;
    const size_t scores = static_cast<size_t>(B) * NH * T * T;
    Device<bf16> qkvr(n * 3 * C), dqkvr(n * 3 * C), att(scores), datt(scores);
    const double forward_ms = time_ms([&] {
      tessera::model::cuda::attention_forward(mm, out.p, qkvr.p, att.p, qkv.p, B, T, C, NH,
                                              nullptr);
    });
    const double backward_ms = time_ms([&] {
      tessera::model::cuda::attention_backward(mm, dqkv.p, qkvr.p, dqkvr.p, datt.p, dout.p, qkv.p,
                                               att.p, B, T, C, NH, nullptr);
    });
    print("matmul", forward_ms, backward_ms);
  }
  for (size_t k = 0; k < sets.size(); k++) {
    const FlashKernels set = sets[k];
    const double forward_ms = time_ms([&] {
      tessera::model::cuda::flash_attention_forward(out.p, lse.p, qkv.p, B, T, C, NH, nullptr, set);
    });
    const double backward_ms = time_ms([&] {
      tessera::model::cuda::flash_attention_backward(dqkv.p, delta.p, dq.p, dout.p, qkv.p, out.p,
                                                     lse.p, B, T, C, NH, nullptr, set);
    });
    print(names[k].c_str(), forward_ms, backward_ms);
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  try {
    return Run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "flash_bench: %s\n", e.what());
    return 1;
  }
}
