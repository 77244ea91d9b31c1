// GptCuda: the passes of worker/model/cpu/gpt_cpu.cpp, composed from the kernels of
// layers_cuda.h over bf16 activations in one device arena. Host code (C++20); the kernels are
// in layers.cu.
#include "worker/model/cuda/gpt_cuda.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <limits>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "worker/model/cuda/activation_layout.h"
#include "worker/model/cuda/layers_cuda.h"

namespace tessera::model {

using cuda::bf16;

namespace {

// Tensor views into a flat buffer laid out as GptParameterTensors says (see cpu::GptParams).
template <typename F>
struct ParamViews {
  struct Block {
    F *ln1w, *ln1b, *qkvw, *qkvb, *attprojw, *attprojb, *ln2w, *ln2b, *fcw, *fcb, *fcprojw,
        *fcprojb;
  };
  F* wte;
  F* wpe;
  std::vector<Block> blocks;
  F* lnfw;
  F* lnfb;
};

template <typename F>
ParamViews<F> Bind(const std::vector<ParameterTensor>& tensors, int layers, F* base) {
  constexpr size_t kPerBlock = 12;  // wte, wpe, 12 per block, lnf w/b
  auto at = [&](size_t i) { return base + tensors[i].offset; };
  ParamViews<F> p;
  p.wte = at(0);
  p.wpe = at(1);
  p.blocks.resize(layers);
  for (int l = 0; l < layers; l++) {
    const size_t i = 2 + kPerBlock * l;
    p.blocks[l] = {at(i),     at(i + 1), at(i + 2), at(i + 3), at(i + 4),  at(i + 5),
                   at(i + 6), at(i + 7), at(i + 8), at(i + 9), at(i + 10), at(i + 11)};
  }
  p.lnfw = at(tensors.size() - 2);
  p.lnfb = at(tensors.size() - 1);
  return p;
}

constexpr int32_t kChunkElements = 1 << 16;

float Bf16BitsToFloat(uint16_t bits) {
  const uint32_t word = static_cast<uint32_t>(bits) << 16;
  float f;
  std::memcpy(&f, &word, sizeof(f));
  return f;
}

}  // namespace

struct GptCuda::Impl {
  GptConfig config;
  int device = 0;
  GpuAttention attention = GpuAttention::kMatmul;
  bool gelu_fusion = false;  // GptCudaOptions::gelu_fusion
  cuda::FlashKernels flash_kernels() const {
    switch (attention) {
      case GpuAttention::kFlashMma:
        return cuda::FlashKernels::kMma;
      case GpuAttention::kFlashMma2:
        return cuda::FlashKernels::kMma2;
      default:
        return cuda::FlashKernels::kWmma;
    }
  }
  int64_t P = 0;
  int Vp = 0;  // logits row stride: vocab rounded up to 64, so that every row is aligned
  std::vector<ParameterTensor> tensors;
  std::vector<int64_t> block_offset;  // first float of each block's tensors

  cudaStream_t stream = nullptr;
  std::unique_ptr<cuda::MatmulEngine> mm;
  float* params = nullptr;  // fp32 master weights
  bf16* params_bf16 = nullptr;
  // The tied LM head's weights as the head's products read them: wte's bf16 rows, then rows of
  // zeros up to Vp. With V = 50257 rows the products' contiguous extent would be odd, and
  // cuBLASLt then falls back to unvectorised kernels (measured on an H200: 23 ms of an 80 ms
  // step in the two products; the padded products were not profiled on their own, the whole
  // step with this and the 16-byte kernels took 46.5 ms). Refreshed after every change of
  // params_bf16 (CopyHeadWeights).
  bf16* wte_padded = nullptr;
  float* grads = nullptr;
  float* adam_m = nullptr;
  float* adam_v = nullptr;
  cuda::ParamChunk* chunks = nullptr;
  int num_chunks = 0;
  float* partials = nullptr;
  float* norm = nullptr;          // device scalar
  float* loss = nullptr;          // device scalar
  float* host_scalars = nullptr;  // pinned: [0] loss, [1] norm
  cudaEvent_t loss_event = nullptr;
  cudaEvent_t norm_event = nullptr;
  cudaEvent_t ids_event = nullptr;  // the pinned ids have been copied to the device
  std::vector<cudaEvent_t> ready_events;
  int64_t steps = 0;

  // Activations of one (B, T), carved out of one allocation. att (B,NH,T,T) is the matmul
  // attention's probabilities, att_lse (B,NH,T) the flash attention's log-sum-exp; the other
  // is null.
  struct Block {
    bf16 *ln1, *qkv, *atty, *att, *residual2, *ln2, *fch, *fch_gelu, *residual3;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *att_lse;
  };
  int B = 0;
  int T = 0;
  void* arena = nullptr;
  int64_t arena_bytes = 0;
  int32_t* host_ids = nullptr;  // pinned: tokens (N) | targets (N)
  int32_t* tokens = nullptr;    // device (N)
  int32_t* targets = nullptr;   // device (N)
  bf16* encoded = nullptr;
  std::vector<Block> blocks;
  bf16* lnf = nullptr;
  float *lnf_mean = nullptr, *lnf_rstd = nullptr;
  bf16* logits = nullptr;  // (N, Vp)
  float *losses = nullptr, *lse = nullptr;
  bf16 *dresidual = nullptr, *dln = nullptr, *datty = nullptr, *dqkv = nullptr, *dfch = nullptr;
  bf16 *qkvr = nullptr, *dqkvr = nullptr, *datt = nullptr;  // matmul attention's scratch
  float *att_delta = nullptr, *dq_accum = nullptr;          // flash attention's scratch
  bool have_forward = false;
  bool have_targets = false;
  bool logits_are_gradient = false;

  ~Impl() {
    cudaSetDevice(device);
    if (stream != nullptr)
      cudaStreamSynchronize(stream);
    FreeActivations();
    mm.reset();
    for (void* p :
         {static_cast<void*>(params), static_cast<void*>(params_bf16),
          static_cast<void*>(wte_padded), static_cast<void*>(grads), static_cast<void*>(adam_m),
          static_cast<void*>(adam_v), static_cast<void*>(chunks), static_cast<void*>(partials),
          static_cast<void*>(norm), static_cast<void*>(loss)}) {
      if (p != nullptr)
        cudaFree(p);
    }
    if (host_scalars != nullptr)
      cudaFreeHost(host_scalars);
    for (cudaEvent_t e : ready_events)
      cudaEventDestroy(e);
    for (cudaEvent_t e : {loss_event, norm_event, ids_event}) {
      if (e != nullptr)
        cudaEventDestroy(e);
    }
    if (stream != nullptr)
      cudaStreamDestroy(stream);
  }

  void FreeActivations() {
    if (arena != nullptr)
      cudaFree(arena);
    if (host_ids != nullptr)
      cudaFreeHost(host_ids);
    arena = nullptr;
    host_ids = nullptr;
    arena_bytes = 0;
    B = T = 0;
  }

  void Allocate(int batch, int seq) {
    if (batch == B && seq == T)
      return;
    TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream));
    FreeActivations();
    // Two passes over the layout (activation_layout.h): the first sizes the arena, the second
    // hands out pointers into it.
    for (int pass = 0; pass < 2; pass++) {
      int64_t offset = 0;
      ForEachActivation(config, batch, seq, attention, *this, [&](auto*& ptr, int64_t count) {
        using Elem = std::remove_reference_t<decltype(*ptr)>;
        offset = AlignArenaOffset(offset);
        ptr = pass == 0 ? nullptr : reinterpret_cast<Elem*>(static_cast<char*>(arena) + offset);
        offset += count * static_cast<int64_t>(sizeof(Elem));
      });
      if (pass == 0) {
        arena_bytes = offset;
        TESSERA_CUDA_CHECK(cudaMalloc(&arena, arena_bytes));
      }
    }
    const int64_t N = static_cast<int64_t>(batch) * seq;
    TESSERA_CUDA_CHECK(cudaMallocHost(&host_ids, 2 * N * sizeof(int32_t)));
    B = batch;
    T = seq;
  }

  ParamViews<bf16> Weights() { return Bind(tensors, config.layers, params_bf16); }

  // wte's bf16 rows (the first V*C values of params_bf16) into wte_padded; rows V..Vp stay 0.
  void CopyHeadWeights() {
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(
        wte_padded, params_bf16, static_cast<size_t>(config.vocab) * config.d_model * sizeof(bf16),
        cudaMemcpyDeviceToDevice, stream));
  }
  ParamViews<float> Grads() { return Bind(tensors, config.layers, grads); }
};

GptCuda::GptCuda(std::unique_ptr<Impl> impl) : impl_(std::move(impl)) {}
GptCuda::~GptCuda() = default;

const GptConfig& GptCuda::config() const {
  return impl_->config;
}
int64_t GptCuda::parameter_count() const {
  return impl_->P;
}
int64_t GptCuda::step_count() const {
  return impl_->steps;
}
int64_t GptCuda::activation_bytes() const {
  return impl_->arena_bytes;
}
float* GptCuda::device_parameters() {
  return impl_->params;
}
float* GptCuda::device_gradients() {
  return impl_->grads;
}
void* GptCuda::stream() {
  return impl_->stream;
}

bool GptCudaCompiled() {
  return true;
}

int CudaDeviceCount() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();  // clear the sticky "no driver" / "no device" error
    return 0;
  }
  return count;
}

std::optional<int64_t> CudaFreeMemory(int device) {
  size_t free = 0, total = 0;
  if (cudaSetDevice(device) != cudaSuccess || cudaMemGetInfo(&free, &total) != cudaSuccess) {
    cudaGetLastError();
    return std::nullopt;
  }
  return static_cast<int64_t>(free);
}

std::unique_ptr<GptCuda> CreateGptCuda(const GptConfig& config, const GptCudaOptions& options,
                                       std::string* error) {
  auto fail = [&](const std::string& message) -> std::unique_ptr<GptCuda> {
    if (error != nullptr)
      *error = message;
    return nullptr;
  };
  const std::string invalid = ValidateGptConfig(config);
  if (!invalid.empty())
    return fail(invalid);
  GpuAttention attention = options.attention;
  if (const char* env = std::getenv("TESSERA_ATTENTION"); env != nullptr) {
    if (!ParseGpuAttention(env, &attention)) {
      return fail(std::string("TESSERA_ATTENTION=") + env + " is not an attention: use " +
                  kGpuAttentionNames);
    }
  }
  bool gelu_fusion = options.gelu_fusion;
  if (const char* env = std::getenv("TESSERA_GELU_FUSION"); env != nullptr) {
    if (!ParseGpuSwitch(env, &gelu_fusion))
      return fail(std::string("TESSERA_GELU_FUSION=") + env + " is not 0 or 1");
  }
  int gemm_tune = options.gemm_tune;
  if (const char* env = std::getenv("TESSERA_GEMM_TUNE"); env != nullptr) {
    if (!ParseGemmTune(env, &gemm_tune)) {
      return fail(std::string("TESSERA_GEMM_TUNE=") + env +
                  " is not a count of candidates from 1 to " + std::to_string(kMaxGemmTune));
    }
  }
  if (gelu_fusion && config.d_model % 2 != 0) {  // the epilogue's rows of 4 * dModel: % 8
    return fail("GELU fusion needs an even dModel, not " + std::to_string(config.d_model) +
                "; use TESSERA_GELU_FUSION=0");
  }
  static_assert(kMaxGemmTune == cuda::MatmulEngine::kMaxTuneCandidates);
  if (gemm_tune < 1 || gemm_tune > kMaxGemmTune) {
    return fail("GptCudaOptions::gemm_tune=" + std::to_string(gemm_tune) +
                " is not a count of candidates from 1 to " + std::to_string(kMaxGemmTune));
  }
  const int head_size = config.d_model / config.heads;
  const bool fused = attention != GpuAttention::kMatmul;
  if (fused && head_size != 32 && head_size != 64) {
    return fail("flash attention supports head sizes (dModel / heads) 32 and 64, not " +
                std::to_string(head_size) + "; use TESSERA_ATTENTION=matmul");
  }
  const int count = CudaDeviceCount();
  if (count == 0)
    return fail("no CUDA device");
  if (options.device < 0 || options.device >= count) {
    return fail("CUDA device " + std::to_string(options.device) + " does not exist (" +
                std::to_string(count) + " visible)");
  }
  if (fused) {
    int major = 0;
    if (cudaDeviceGetAttribute(&major, cudaDevAttrComputeCapabilityMajor, options.device) !=
            cudaSuccess ||
        major < 8) {
      cudaGetLastError();
      return fail("flash attention needs a GPU of compute capability 8.0 or later (device " +
                  std::to_string(options.device) + "); use TESSERA_ATTENTION=matmul");
    }
  }
  try {
    auto impl = std::make_unique<GptCuda::Impl>();
    GptCuda::Impl& s = *impl;
    s.config = config;
    s.device = options.device;
    s.attention = attention;
    s.gelu_fusion = gelu_fusion;
    s.P = GptParameterCount(config);
    s.Vp = GptCudaPaddedVocab(config.vocab);
    s.tensors = GptParameterTensors(config);
    s.block_offset.assign(config.layers, 0);
    for (const ParameterTensor& t : s.tensors) {
      if (t.layer >= 0 && s.block_offset[t.layer] == 0)
        s.block_offset[t.layer] = t.offset;
    }
    TESSERA_CUDA_CHECK(cudaSetDevice(s.device));
    TESSERA_CUDA_CHECK(cudaStreamCreateWithFlags(&s.stream, cudaStreamNonBlocking));
    s.mm = std::make_unique<cuda::MatmulEngine>(gemm_tune);
    const size_t bytes = static_cast<size_t>(s.P) * sizeof(float);
    TESSERA_CUDA_CHECK(cudaMalloc(&s.params, bytes));
    TESSERA_CUDA_CHECK(cudaMalloc(&s.params_bf16, static_cast<size_t>(s.P) * sizeof(bf16)));
    const size_t head_bytes = static_cast<size_t>(s.Vp) * config.d_model * sizeof(bf16);
    TESSERA_CUDA_CHECK(cudaMalloc(&s.wte_padded, head_bytes));
    TESSERA_CUDA_CHECK(cudaMemsetAsync(s.wte_padded, 0, head_bytes, s.stream));
    TESSERA_CUDA_CHECK(cudaMalloc(&s.grads, bytes));
    TESSERA_CUDA_CHECK(cudaMalloc(&s.adam_m, bytes));
    TESSERA_CUDA_CHECK(cudaMalloc(&s.adam_v, bytes));
    TESSERA_CUDA_CHECK(cudaMemsetAsync(s.params, 0, bytes, s.stream));
    TESSERA_CUDA_CHECK(
        cudaMemsetAsync(s.params_bf16, 0, static_cast<size_t>(s.P) * sizeof(bf16), s.stream));
    TESSERA_CUDA_CHECK(cudaMemsetAsync(s.grads, 0, bytes, s.stream));
    TESSERA_CUDA_CHECK(cudaMemsetAsync(s.adam_m, 0, bytes, s.stream));
    TESSERA_CUDA_CHECK(cudaMemsetAsync(s.adam_v, 0, bytes, s.stream));
    // Optimizer chunks: each inside one tensor, so each carries the tensor's decay flag.
    std::vector<cuda::ParamChunk> chunks;
    for (const ParameterTensor& t : s.tensors) {
      for (int64_t i = 0; i < t.size; i += kChunkElements) {
        const auto count = static_cast<int32_t>(std::min<int64_t>(kChunkElements, t.size - i));
        chunks.push_back({t.offset + i, count, t.decays ? 1 : 0});
      }
    }
    s.num_chunks = static_cast<int>(chunks.size());
    TESSERA_CUDA_CHECK(cudaMalloc(&s.chunks, chunks.size() * sizeof(cuda::ParamChunk)));
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(s.chunks, chunks.data(),
                                       chunks.size() * sizeof(cuda::ParamChunk),
                                       cudaMemcpyHostToDevice, s.stream));
    TESSERA_CUDA_CHECK(cudaMalloc(&s.partials, chunks.size() * sizeof(float)));
    TESSERA_CUDA_CHECK(cudaMalloc(&s.norm, sizeof(float)));
    TESSERA_CUDA_CHECK(cudaMalloc(&s.loss, sizeof(float)));
    TESSERA_CUDA_CHECK(cudaMallocHost(&s.host_scalars, 2 * sizeof(float)));
    s.host_scalars[0] = s.host_scalars[1] = std::numeric_limits<float>::quiet_NaN();
    TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&s.loss_event, cudaEventDisableTiming));
    TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&s.norm_event, cudaEventDisableTiming));
    TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&s.ids_event, cudaEventDisableTiming));
    s.ready_events.resize(config.layers + 1);
    for (cudaEvent_t& e : s.ready_events)
      TESSERA_CUDA_CHECK(cudaEventCreateWithFlags(&e, cudaEventDisableTiming));
    TESSERA_CUDA_CHECK(cudaStreamSynchronize(s.stream));
    return std::unique_ptr<GptCuda>(new GptCuda(std::move(impl)));
  } catch (const std::exception& e) {
    return fail(e.what());
  }
}

void GptCuda::InitParameters(uint64_t seed) {
  Gpt cpu(impl_->config);
  cpu.InitParameters(seed);
  SetParameters(cpu.parameters());
}

void GptCuda::SetParameters(std::span<const float> host) {
  Impl& s = *impl_;
  if (static_cast<int64_t>(host.size()) != s.P)
    throw std::invalid_argument("GptCuda::SetParameters: need parameter_count() floats");
  TESSERA_CUDA_CHECK(cudaSetDevice(s.device));
  const size_t bytes = static_cast<size_t>(s.P) * sizeof(float);
  TESSERA_CUDA_CHECK(
      cudaMemcpyAsync(s.params, host.data(), bytes, cudaMemcpyHostToDevice, s.stream));
  cuda::convert_to_bf16(s.params_bf16, s.params, s.P, s.stream);
  s.CopyHeadWeights();
  TESSERA_CUDA_CHECK(cudaMemsetAsync(s.adam_m, 0, bytes, s.stream));
  TESSERA_CUDA_CHECK(cudaMemsetAsync(s.adam_v, 0, bytes, s.stream));
  s.steps = 0;
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(s.stream));
}

void GptCuda::GetParameters(std::span<float> host) const {
  const Impl& s = *impl_;
  if (static_cast<int64_t>(host.size()) != s.P)
    throw std::invalid_argument("GptCuda::GetParameters: need parameter_count() floats");
  TESSERA_CUDA_CHECK(cudaSetDevice(s.device));
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(host.data(), s.params, host.size() * sizeof(float),
                                     cudaMemcpyDeviceToHost, s.stream));
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(s.stream));
}

void GptCuda::GetGradients(std::span<float> host) const {
  const Impl& s = *impl_;
  if (static_cast<int64_t>(host.size()) != s.P)
    throw std::invalid_argument("GptCuda::GetGradients: need parameter_count() floats");
  TESSERA_CUDA_CHECK(cudaSetDevice(s.device));
  TESSERA_CUDA_CHECK(cudaMemcpyAsync(host.data(), s.grads, host.size() * sizeof(float),
                                     cudaMemcpyDeviceToHost, s.stream));
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(s.stream));
}

void GptCuda::GetOptimizerState(std::span<float> first_moment,
                                std::span<float> second_moment) const {
  const Impl& s = *impl_;
  if (static_cast<int64_t>(first_moment.size()) != s.P ||
      static_cast<int64_t>(second_moment.size()) != s.P) {
    throw std::invalid_argument("GptCuda::GetOptimizerState: need parameter_count() floats each");
  }
  TESSERA_CUDA_CHECK(cudaSetDevice(s.device));
  const size_t bytes = static_cast<size_t>(s.P) * sizeof(float);
  TESSERA_CUDA_CHECK(
      cudaMemcpyAsync(first_moment.data(), s.adam_m, bytes, cudaMemcpyDeviceToHost, s.stream));
  TESSERA_CUDA_CHECK(
      cudaMemcpyAsync(second_moment.data(), s.adam_v, bytes, cudaMemcpyDeviceToHost, s.stream));
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(s.stream));
}

void GptCuda::SetOptimizerState(std::span<const float> first_moment,
                                std::span<const float> second_moment, int64_t step_count) {
  Impl& s = *impl_;
  if (static_cast<int64_t>(first_moment.size()) != s.P ||
      static_cast<int64_t>(second_moment.size()) != s.P || step_count < 0) {
    throw std::invalid_argument(
        "GptCuda::SetOptimizerState: need parameter_count() floats each and a step count >= 0");
  }
  TESSERA_CUDA_CHECK(cudaSetDevice(s.device));
  const size_t bytes = static_cast<size_t>(s.P) * sizeof(float);
  TESSERA_CUDA_CHECK(
      cudaMemcpyAsync(s.adam_m, first_moment.data(), bytes, cudaMemcpyHostToDevice, s.stream));
  TESSERA_CUDA_CHECK(
      cudaMemcpyAsync(s.adam_v, second_moment.data(), bytes, cudaMemcpyHostToDevice, s.stream));
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  s.steps = step_count;
}

void GptCuda::Forward(std::span<const int32_t> tokens, std::span<const int32_t> targets, int B,
                      int T) {
  Impl& s = *impl_;
  const GptConfig& config = s.config;
  if (B < 1 || T < 1 || T > config.seq_len) {
    throw std::invalid_argument("GptCuda::Forward: need B >= 1 and 1 <= T <= seqLen " +
                                std::to_string(config.seq_len) + ", got B=" + std::to_string(B) +
                                " T=" + std::to_string(T));
  }
  const size_t n = static_cast<size_t>(B) * T;
  if (tokens.size() != n || (!targets.empty() && targets.size() != n))
    throw std::invalid_argument("GptCuda::Forward: tokens and targets must hold B*T ids");
  auto check_ids = [&](std::span<const int32_t> ids, const char* what) {
    for (int32_t id : ids) {
      if (id < 0 || id >= config.vocab) {
        throw std::out_of_range(std::string("GptCuda::Forward: ") + what + " id " +
                                std::to_string(id) + " outside [0, vocab " +
                                std::to_string(config.vocab) + ")");
      }
    }
  };
  check_ids(tokens, "token");
  check_ids(targets, "target");
  TESSERA_CUDA_CHECK(cudaSetDevice(s.device));
  s.Allocate(B, T);
  const int C = config.d_model;
  const int NH = config.heads;
  const int V = config.vocab;
  const int N = B * T;
  cudaStream_t st = s.stream;

  // The pinned staging buffer may still feed the previous Forward's copy.
  TESSERA_CUDA_CHECK(cudaEventSynchronize(s.ids_event));
  std::memcpy(s.host_ids, tokens.data(), n * sizeof(int32_t));
  if (!targets.empty())
    std::memcpy(s.host_ids + n, targets.data(), n * sizeof(int32_t));
  TESSERA_CUDA_CHECK(
      cudaMemcpyAsync(s.tokens, s.host_ids, n * sizeof(int32_t), cudaMemcpyHostToDevice, st));
  if (!targets.empty()) {
    TESSERA_CUDA_CHECK(cudaMemcpyAsync(s.targets, s.host_ids + n, n * sizeof(int32_t),
                                       cudaMemcpyHostToDevice, st));
  }
  TESSERA_CUDA_CHECK(cudaEventRecord(s.ids_event, st));

  const ParamViews<bf16> w = s.Weights();
  cuda::MatmulEngine& mm = *s.mm;
  cuda::encoder_forward(s.encoded, s.tokens, w.wte, w.wpe, B, T, C, st);
  const bf16* residual = s.encoded;
  for (int l = 0; l < config.layers; l++) {
    const auto& p = w.blocks[l];
    Impl::Block& a = s.blocks[l];
    cuda::layernorm_forward(a.ln1, a.ln1_mean, a.ln1_rstd, residual, p.ln1w, p.ln1b, N, C, st);
    cuda::matmul_forward(mm, a.qkv, a.ln1, p.qkvw, p.qkvb, nullptr, N, C, 3 * C, st);
    if (s.attention != GpuAttention::kMatmul)
      cuda::flash_attention_forward(a.atty, a.att_lse, a.qkv, B, T, C, NH, st, s.flash_kernels());
    else
      cuda::attention_forward(mm, a.atty, s.qkvr, a.att, a.qkv, B, T, C, NH, st);
    cuda::matmul_forward(mm, a.residual2, a.atty, p.attprojw, p.attprojb, residual, N, C, C, st);
    cuda::layernorm_forward(a.ln2, a.ln2_mean, a.ln2_rstd, a.residual2, p.ln2w, p.ln2b, N, C, st);
    if (s.gelu_fusion) {
      cuda::matmul_gelu_forward(mm, a.fch_gelu, a.fch, a.ln2, p.fcw, p.fcb, N, C, 4 * C, st);
    } else {
      cuda::matmul_forward(mm, a.fch, a.ln2, p.fcw, p.fcb, nullptr, N, C, 4 * C, st);
      cuda::gelu_forward(a.fch_gelu, a.fch, static_cast<int64_t>(N) * 4 * C, st);
    }
    cuda::matmul_forward(mm, a.residual3, a.fch_gelu, p.fcprojw, p.fcprojb, a.residual2, N, 4 * C,
                         C, st);
    residual = a.residual3;
  }
  cuda::layernorm_forward(s.lnf, s.lnf_mean, s.lnf_rstd, residual, w.lnfw, w.lnfb, N, C, st);
  // LM head tied to wte: logits (N, Vp) = lnf @ wte_padded^T; columns V..Vp come out 0.
  cuda::GemmArgs head;
  head.trans_a = true;
  head.m = s.Vp;
  head.n = N;
  head.k = C;
  head.a = s.wte_padded;
  head.lda = C;
  head.b = s.lnf;
  head.ldb = C;
  head.d = s.logits;
  head.ldd = s.Vp;
  mm.Gemm(head, st);
  s.have_forward = true;
  s.have_targets = !targets.empty();
  s.logits_are_gradient = false;
  if (s.have_targets) {
    cuda::crossentropy_forward(s.losses, s.lse, s.logits, s.Vp, s.targets, N, V, st);
    cuda::mean_reduce(s.loss, s.losses, N, st);
    TESSERA_CUDA_CHECK(
        cudaMemcpyAsync(s.host_scalars, s.loss, sizeof(float), cudaMemcpyDeviceToHost, st));
    TESSERA_CUDA_CHECK(cudaEventRecord(s.loss_event, st));
  }
}

float GptCuda::Loss() {
  Impl& s = *impl_;
  if (!s.have_targets)
    return std::numeric_limits<float>::quiet_NaN();
  TESSERA_CUDA_CHECK(cudaEventSynchronize(s.loss_event));
  return s.host_scalars[0];
}

void GptCuda::GetLogits(std::span<float> host) {
  Impl& s = *impl_;
  const int64_t N = static_cast<int64_t>(s.B) * s.T;
  const int V = s.config.vocab;
  if (!s.have_forward || s.logits_are_gradient)
    throw std::logic_error("GptCuda::GetLogits: needs a Forward, before its Backward");
  if (static_cast<int64_t>(host.size()) != N * V)
    throw std::invalid_argument("GptCuda::GetLogits: need B*T*vocab floats");
  TESSERA_CUDA_CHECK(cudaSetDevice(s.device));
  std::vector<uint16_t> bits(static_cast<size_t>(N) * V);
  TESSERA_CUDA_CHECK(cudaMemcpy2DAsync(bits.data(), V * sizeof(uint16_t), s.logits,
                                       s.Vp * sizeof(bf16), V * sizeof(uint16_t), N,
                                       cudaMemcpyDeviceToHost, s.stream));
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(s.stream));
  for (size_t i = 0; i < bits.size(); i++)
    host[i] = Bf16BitsToFloat(bits[i]);
}

void GptCuda::Backward(float loss_scale, const GpuGradientsReadyFn& on_ready) {
  Impl& s = *impl_;
  if (!s.have_forward || !s.have_targets || s.logits_are_gradient)
    throw std::logic_error("GptCuda::Backward: needs a Forward with targets first");
  TESSERA_CUDA_CHECK(cudaSetDevice(s.device));
  const GptConfig& config = s.config;
  const int B = s.B;
  const int T = s.T;
  const int C = config.d_model;
  const int NH = config.heads;
  const int V = config.vocab;
  const int N = B * T;
  cudaStream_t st = s.stream;
  cuda::MatmulEngine& mm = *s.mm;
  const ParamViews<bf16> w = s.Weights();
  const ParamViews<float> g = s.Grads();

  // Loss -> logits (in place) -> final layer norm and the tied LM head's share of dwte.
  cuda::crossentropy_softmax_backward(s.logits, s.Vp, s.lse, s.targets,
                                      loss_scale / static_cast<float>(N), N, V, st);
  s.logits_are_gradient = true;
  // dlnf (N,C) = dlogits @ wte, over Vp columns: the padding's logits gradients stay 0 (the
  // backward above writes V columns) and its weights are 0.
  cuda::GemmArgs dx;
  dx.m = C;
  dx.n = N;
  dx.k = s.Vp;
  dx.a = s.wte_padded;
  dx.lda = C;
  dx.b = s.logits;
  dx.ldb = s.Vp;
  dx.d = s.dln;
  dx.ldd = C;
  mm.Gemm(dx, st);
  cuda::GemmArgs dw;  // dwte (V,C) += dlogits^T @ lnf
  dw.trans_b = true;
  dw.m = C;
  dw.n = V;
  dw.k = N;
  dw.a = s.lnf;
  dw.lda = C;
  dw.b = s.logits;
  dw.ldb = s.Vp;
  dw.d = g.wte;
  dw.ldd = C;
  dw.d_fp32 = true;
  dw.beta = 1.0f;
  mm.Gemm(dw, st);
  const size_t nc_bytes = static_cast<size_t>(N) * C * sizeof(bf16);
  TESSERA_CUDA_CHECK(cudaMemsetAsync(s.dresidual, 0, nc_bytes, st));
  const bf16* last = config.layers > 0 ? s.blocks.back().residual3 : s.encoded;
  cuda::layernorm_backward(s.dresidual, g.lnfw, g.lnfb, s.dln, last, w.lnfw, s.lnf_mean, s.lnf_rstd,
                           N, C, st);

  bf16* dres = s.dresidual;
  for (int l = config.layers - 1; l >= 0; l--) {
    const auto& p = w.blocks[l];
    const auto& gb = g.blocks[l];
    const Impl::Block& a = s.blocks[l];
    const bf16* residual = l == 0 ? s.encoded : s.blocks[l - 1].residual3;
    // MLP branch: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2)))).
    cuda::matmul_backward(mm, s.dfch, gb.fcprojw, gb.fcprojb, dres, a.fch_gelu, p.fcprojw, N, 4 * C,
                          C, st, s.gelu_fusion ? a.fch : nullptr);
    if (!s.gelu_fusion)
      cuda::gelu_backward(s.dfch, a.fch, s.dfch, static_cast<int64_t>(N) * 4 * C, st);
    cuda::matmul_backward(mm, s.dln, gb.fcw, gb.fcb, s.dfch, a.ln2, p.fcw, N, C, 4 * C, st);
    cuda::layernorm_backward(dres, gb.ln2w, gb.ln2b, s.dln, a.residual2, p.ln2w, a.ln2_mean,
                             a.ln2_rstd, N, C, st);
    // Attention branch: residual2 = residual + attproj(attention(qkv(ln1(residual)))).
    cuda::matmul_backward(mm, s.datty, gb.attprojw, gb.attprojb, dres, a.atty, p.attprojw, N, C, C,
                          st);
    if (s.attention != GpuAttention::kMatmul) {
      cuda::flash_attention_backward(s.dqkv, s.att_delta, s.dq_accum, s.datty, a.qkv, a.atty,
                                     a.att_lse, B, T, C, NH, st, s.flash_kernels());
    } else {
      cuda::attention_backward(mm, s.dqkv, s.qkvr, s.dqkvr, s.datt, s.datty, a.qkv, a.att, B, T, C,
                               NH, st);
    }
    cuda::matmul_backward(mm, s.dln, gb.qkvw, gb.qkvb, s.dqkv, a.ln1, p.qkvw, N, C, 3 * C, st);
    cuda::layernorm_backward(dres, gb.ln1w, gb.ln1b, s.dln, residual, p.ln1w, a.ln1_mean,
                             a.ln1_rstd, N, C, st);
    if (on_ready) {
      TESSERA_CUDA_CHECK(cudaEventRecord(s.ready_events[l], st));
      on_ready(s.block_offset[l], s.ready_events[l]);
    }
  }
  cuda::encoder_backward(g.wte, g.wpe, dres, s.tokens, B, T, C, st);
  if (on_ready) {
    cudaEvent_t done = s.ready_events[config.layers];
    TESSERA_CUDA_CHECK(cudaEventRecord(done, st));
    on_ready(0, done);
  }
}

void GptCuda::ZeroGradients() {
  Impl& s = *impl_;
  TESSERA_CUDA_CHECK(cudaSetDevice(s.device));
  TESSERA_CUDA_CHECK(
      cudaMemsetAsync(s.grads, 0, static_cast<size_t>(s.P) * sizeof(float), s.stream));
}

void GptCuda::Step(const GpuAdamWOptions& options, float lr) {
  Impl& s = *impl_;
  TESSERA_CUDA_CHECK(cudaSetDevice(s.device));
  s.steps++;
  const double t = static_cast<double>(s.steps);
  cuda::AdamWArgs args;
  args.lr = lr;
  args.beta1 = options.beta1;
  args.beta2 = options.beta2;
  args.eps = options.eps;
  args.weight_decay = options.weight_decay;
  args.max_norm = options.grad_clip;
  args.correction1 = static_cast<float>(1.0 - std::pow(static_cast<double>(options.beta1), t));
  args.correction2 = static_cast<float>(1.0 - std::pow(static_cast<double>(options.beta2), t));
  cuda::global_norm(s.norm, s.partials, s.grads, s.chunks, s.num_chunks, s.stream);
  TESSERA_CUDA_CHECK(
      cudaMemcpyAsync(s.host_scalars + 1, s.norm, sizeof(float), cudaMemcpyDeviceToHost, s.stream));
  TESSERA_CUDA_CHECK(cudaEventRecord(s.norm_event, s.stream));
  cuda::adamw_update(s.params, s.params_bf16, s.adam_m, s.adam_v, s.grads, s.norm, s.chunks,
                     s.num_chunks, args, s.stream);
  s.CopyHeadWeights();
}

float GptCuda::GradNorm() {
  Impl& s = *impl_;
  if (s.steps == 0)
    return std::numeric_limits<float>::quiet_NaN();
  TESSERA_CUDA_CHECK(cudaEventSynchronize(s.norm_event));
  return s.host_scalars[1];
}

void GptCuda::Synchronize() {
  Impl& s = *impl_;
  TESSERA_CUDA_CHECK(cudaSetDevice(s.device));
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(s.stream));
}

}  // namespace tessera::model
