// MatmulEngine: cuBLASLt products with cached descriptors and algorithms; see layers_cuda.h.
#include <cublasLt.h>
#include <cuda_runtime.h>
#include <dlfcn.h>

#include <algorithm>
#include <bit>
#include <cstdint>
#include <limits>
#include <memory>
#include <stdexcept>
#include <string>
#include <type_traits>

#include "worker/model/cuda/layers_cuda.h"

namespace tessera::model::cuda {

void CheckCuda(cudaError_t status, const char* what, const char* file, int line) {
  if (status == cudaSuccess)
    return;
  throw std::runtime_error(std::string(what) + " failed at " + file + ":" + std::to_string(line) +
                           ": " + cudaGetErrorString(status));
}

void CheckCublas(cublasStatus_t status, const char* what, const char* file, int line) {
  if (status == CUBLAS_STATUS_SUCCESS)
    return;
  throw std::runtime_error(std::string(what) + " failed at " + file + ":" + std::to_string(line) +
                           ": cuBLAS status " + std::to_string(static_cast<int>(status)));
}

// cuBLASLt is opened with dlopen on first use rather than linked: its 96 KiB of static
// thread-local storage would otherwise be reserved in every thread's stack from process start,
// and a library that gives its threads small stacks (civetweb, serving /metrics) then fails to
// create them, in fp32 jobs that never touch the GPU too. A library opened later gets its
// thread-local storage allocated on first use instead.
namespace {

struct CublasLt {
  decltype(&::cublasLtCreate) create = nullptr;
  decltype(&::cublasLtDestroy) destroy = nullptr;
  decltype(&::cublasLtMatmul) matmul = nullptr;
  decltype(&::cublasLtMatmulAlgoGetHeuristic) matmul_algo_get_heuristic = nullptr;
  decltype(&::cublasLtMatmulDescCreate) matmul_desc_create = nullptr;
  decltype(&::cublasLtMatmulDescDestroy) matmul_desc_destroy = nullptr;
  decltype(&::cublasLtMatmulDescSetAttribute) matmul_desc_set_attribute = nullptr;
  decltype(&::cublasLtMatmulPreferenceCreate) matmul_preference_create = nullptr;
  decltype(&::cublasLtMatmulPreferenceDestroy) matmul_preference_destroy = nullptr;
  decltype(&::cublasLtMatmulPreferenceSetAttribute) matmul_preference_set_attribute = nullptr;
  decltype(&::cublasLtMatrixLayoutCreate) matrix_layout_create = nullptr;
  decltype(&::cublasLtMatrixLayoutDestroy) matrix_layout_destroy = nullptr;
  decltype(&::cublasLtMatrixLayoutSetAttribute) matrix_layout_set_attribute = nullptr;
};

// Opens `soname` as the loader finds it, else from the directory of the CUDA runtime this
// process uses (the same toolkit): under AddressSanitizer, whose dlopen interceptor does not
// search the executable's run path, only the second finds a toolkit outside the system's.
void* OpenNextToCudaRuntime(const std::string& soname, std::string* why) {
  void* lib = dlopen(soname.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (lib != nullptr)
    return lib;
  const char* error = dlerror();
  *why = error != nullptr ? error : "?";
  Dl_info info{};
  void* runtime_symbol = dlsym(RTLD_DEFAULT, "cudaGetDeviceCount");
  if (runtime_symbol == nullptr || dladdr(runtime_symbol, &info) == 0 || info.dli_fname == nullptr)
    return nullptr;
  const std::string runtime = info.dli_fname;
  const size_t slash = runtime.rfind('/');
  if (slash == std::string::npos)
    return nullptr;
  return dlopen((runtime.substr(0, slash + 1) + soname).c_str(), RTLD_NOW | RTLD_LOCAL);
}

const CublasLt& Lt() {
  static const CublasLt api = [] {
    const std::string soname = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
    std::string why;
    void* lib = OpenNextToCudaRuntime(soname, &why);
    if (lib == nullptr)
      throw std::runtime_error("cannot load " + soname + " (cuBLASLt): " + why);
    CublasLt a;
    const auto load = [&](auto& fn, const char* name) {
      fn = reinterpret_cast<std::remove_reference_t<decltype(fn)>>(dlsym(lib, name));
      if (fn == nullptr)
        throw std::runtime_error(soname + " has no " + name);
    };
    load(a.create, "cublasLtCreate");
    load(a.destroy, "cublasLtDestroy");
    load(a.matmul, "cublasLtMatmul");
    load(a.matmul_algo_get_heuristic, "cublasLtMatmulAlgoGetHeuristic");
    load(a.matmul_desc_create, "cublasLtMatmulDescCreate");
    load(a.matmul_desc_destroy, "cublasLtMatmulDescDestroy");
    load(a.matmul_desc_set_attribute, "cublasLtMatmulDescSetAttribute");
    load(a.matmul_preference_create, "cublasLtMatmulPreferenceCreate");
    load(a.matmul_preference_destroy, "cublasLtMatmulPreferenceDestroy");
    load(a.matmul_preference_set_attribute, "cublasLtMatmulPreferenceSetAttribute");
    load(a.matrix_layout_create, "cublasLtMatrixLayoutCreate");
    load(a.matrix_layout_destroy, "cublasLtMatrixLayoutDestroy");
    load(a.matrix_layout_set_attribute, "cublasLtMatrixLayoutSetAttribute");
    return a;
  }();
  return api;
}

}  // namespace

std::string LoadCublasLt() {
  try {
    (void)Lt();
    return "";
  } catch (const std::runtime_error& e) {
    return e.what();
  }
}

struct MatmulEngine::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (a != nullptr)
      Lt().matrix_layout_destroy(a);
    if (b != nullptr)
      Lt().matrix_layout_destroy(b);
    if (c != nullptr)
      Lt().matrix_layout_destroy(c);
    if (d != nullptr)
      Lt().matrix_layout_destroy(d);
    if (desc != nullptr)
      Lt().matmul_desc_destroy(desc);
  }
};

MatmulEngine::MatmulEngine(int tune_candidates, size_t workspace_bytes)
    : workspace_bytes_(workspace_bytes),
      tune_candidates_(std::clamp(tune_candidates, 1, kMaxTuneCandidates)) {
  TESSERA_CUBLAS_CHECK(Lt().create(&handle_));
  TESSERA_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

MatmulEngine::~MatmulEngine() {
  for (auto& [key, plan] : plans_)
    delete plan;
  cudaFree(workspace_);
  Lt().destroy(handle_);
}

namespace {

// Largest power of two up to 256 dividing the address and, for batches, the batch stride:
// what cuBLASLt may assume of the operand's alignment.
uint32_t Alignment(const void* p, int64_t stride_bytes, bool batched) {
  uint64_t bits = reinterpret_cast<uintptr_t>(p) | 256u;
  if (batched)
    bits |= static_cast<uint64_t>(stride_bytes);
  return static_cast<uint32_t>(uint64_t{1} << std::countr_zero(bits));
}

cublasLtMatrixLayout_t Layout(cudaDataType_t type, int rows, int cols, int ld, int batch,
                              int64_t stride) {
  cublasLtMatrixLayout_t layout = nullptr;
  TESSERA_CUBLAS_CHECK(Lt().matrix_layout_create(&layout, type, rows, cols, ld));
  if (batch > 1) {
    TESSERA_CUBLAS_CHECK(Lt().matrix_layout_set_attribute(
        layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch)));
    TESSERA_CUBLAS_CHECK(Lt().matrix_layout_set_attribute(
        layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return layout;
}

cublasLtEpilogue_t Epilogue(const GemmArgs& g) {
  switch (g.gelu) {
    case GemmGelu::kForward:
      return g.bias != nullptr ? CUBLASLT_EPILOGUE_GELU_AUX_BIAS : CUBLASLT_EPILOGUE_GELU_AUX;
    case GemmGelu::kBackward:
      return CUBLASLT_EPILOGUE_DGELU;
    case GemmGelu::kNone:
      break;
  }
  return g.bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
}

void CheckEpilogue(const GemmArgs& g) {
  if (g.bias != nullptr && g.d_fp32)
    throw std::invalid_argument("MatmulEngine::Gemm: a bias epilogue needs a bf16 output");
  if (g.gelu == GemmGelu::kNone)
    return;
  if (g.d_fp32 || g.batch > 1 || g.gelu_aux == nullptr || g.ldd % 8 != 0) {
    throw std::invalid_argument(
        "MatmulEngine::Gemm: a GELU epilogue needs a bf16 output of one matrix, an aux array and "
        "a leading dimension divisible by 8 (ldd=" +
        std::to_string(g.ldd) + ")");
  }
  if (g.gelu == GemmGelu::kBackward && g.bias != nullptr)
    throw std::invalid_argument("MatmulEngine::Gemm: the GELU-gradient epilogue takes no bias");
}

// The per-call pointers of an epilogue, kept in the (cached) descriptor.
void SetEpiloguePointers(cublasLtMatmulDesc_t desc, const GemmArgs& g, const void* aux) {
  if (g.bias != nullptr) {
    TESSERA_CUBLAS_CHECK(Lt().matmul_desc_set_attribute(desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER,
                                                        &g.bias, sizeof(g.bias)));
  }
  if (g.gelu != GemmGelu::kNone) {
    TESSERA_CUBLAS_CHECK(Lt().matmul_desc_set_attribute(
        desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_POINTER, &aux, sizeof(aux)));
  }
}

// Elements from the first of D (or C, or the GELU's aux, all laid out alike) to past its last.
int64_t OutputExtent(const GemmArgs& g) {
  return int64_t{g.ldd} * (g.n - 1) + g.m + (g.batch > 1 ? g.stride_d * (g.batch - 1) : 0);
}

// Device memory freed on scope exit (cudaFree waits for the device); p is null for 0 bytes
// and when the allocation failed (the error is cleared).
struct Scratch {
  void* p = nullptr;
  explicit Scratch(int64_t bytes) {
    if (bytes > 0 && cudaMalloc(&p, bytes) != cudaSuccess) {
      p = nullptr;
      cudaGetLastError();
    }
  }
  ~Scratch() { cudaFree(p); }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
};

}  // namespace

size_t MatmulEngine::Fastest(const Plan& plan, const GemmArgs& g,
                             const cublasLtMatmulHeuristicResult_t* candidates, int count,
                             cudaStream_t stream) {
  // Outputs go to scratch: D, the C it accumulates onto when that is D itself, and the GELU's
  // pre-activation when the epilogue writes it. Inputs are the real ones. Without the memory
  // for them, the heuristics' first it is.
  const int64_t d_bytes = OutputExtent(g) * (g.d_fp32 ? 4 : 2);
  Scratch d(d_bytes);
  Scratch aux(g.gelu == GemmGelu::kForward ? OutputExtent(g) * 2 : 0);
  if (d.p == nullptr || (g.gelu == GemmGelu::kForward && aux.p == nullptr))
    return 0;
  TESSERA_CUDA_CHECK(cudaMemsetAsync(d.p, 0, d_bytes, stream));
  const void* c = (g.c == nullptr || g.c == g.d) ? d.p : g.c;
  if (g.gelu == GemmGelu::kForward)
    SetEpiloguePointers(plan.desc, g, aux.p);
  cudaEvent_t start = nullptr, stop = nullptr;
  TESSERA_CUDA_CHECK(cudaEventCreate(&start));
  TESSERA_CUDA_CHECK(cudaEventCreate(&stop));
  const float alpha = 1.0f;
  const auto run = [&](const cublasLtMatmulAlgo_t& algo) {
    return Lt().matmul(handle_, plan.desc, &alpha, g.a, plan.a, g.b, plan.b, &g.beta, c, plan.c,
                       d.p, plan.d, &algo, workspace_, workspace_bytes_, stream);
  };
  constexpr int kRepeats = 5;
  size_t best = 0;
  float best_ms = std::numeric_limits<float>::infinity();
  for (int i = 0; i < count; i++) {
    const cublasLtMatmulAlgo_t& algo = candidates[i].algo;
    if (run(algo) != CUBLAS_STATUS_SUCCESS)  // warm-up; a candidate that fails is passed over
      continue;
    TESSERA_CUDA_CHECK(cudaEventRecord(start, stream));
    for (int r = 0; r < kRepeats; r++)
      TESSERA_CUBLAS_CHECK(run(algo));
    TESSERA_CUDA_CHECK(cudaEventRecord(stop, stream));
    TESSERA_CUDA_CHECK(cudaEventSynchronize(stop));
    float ms = 0.0f;
    TESSERA_CUDA_CHECK(cudaEventElapsedTime(&ms, start, stop));
    if (ms < best_ms) {
      best_ms = ms;
      best = static_cast<size_t>(i);
    }
  }
  cudaEventDestroy(start);
  cudaEventDestroy(stop);
  TESSERA_CUDA_CHECK(cudaStreamSynchronize(stream));
  return best;
}

void MatmulEngine::Gemm(const GemmArgs& g, cudaStream_t stream) {
  CheckEpilogue(g);
  const bool batched = g.batch > 1;
  const bool accumulate = g.beta != 0.0f;
  const void* c = g.c != nullptr ? g.c : g.d;
  const int64_t d_elem = g.d_fp32 ? 4 : 2;
  const uint32_t align_a = Alignment(g.a, g.stride_a * 2, batched);
  const uint32_t align_b = Alignment(g.b, g.stride_b * 2, batched);
  const uint32_t align_c = Alignment(c, g.stride_d * d_elem, batched);
  const uint32_t align_d = Alignment(g.d, g.stride_d * d_elem, batched);
  const uint32_t align_aux = g.gelu != GemmGelu::kNone ? Alignment(g.gelu_aux, 0, false) : 0;
  const Key key{g.trans_a,
                g.trans_b,
                g.m,
                g.n,
                g.k,
                g.lda,
                g.ldb,
                g.ldd,
                g.stride_a,
                g.stride_b,
                g.stride_d,
                g.batch,
                static_cast<int>(g.d_fp32 * 4 + accumulate * 2 + (g.bias != nullptr) +
                                 8 * static_cast<int>(g.gelu) + 32 * align_aux),
                static_cast<int>(align_a),
                static_cast<int>(align_b),
                static_cast<int>(align_c * 1024 + align_d)};
  Plan*& plan = plans_[key];
  if (plan == nullptr) {
    auto fresh = std::make_unique<Plan>();
    TESSERA_CUBLAS_CHECK(Lt().matmul_desc_create(&fresh->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    TESSERA_CUBLAS_CHECK(Lt().matmul_desc_set_attribute(fresh->desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                        &op_a, sizeof(op_a)));
    TESSERA_CUBLAS_CHECK(Lt().matmul_desc_set_attribute(fresh->desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                        &op_b, sizeof(op_b)));
    const cublasLtEpilogue_t epilogue = Epilogue(g);
    TESSERA_CUBLAS_CHECK(Lt().matmul_desc_set_attribute(fresh->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                        &epilogue, sizeof(epilogue)));
    if (g.gelu != GemmGelu::kNone) {
      const int64_t aux_ld = g.ldd;
      TESSERA_CUBLAS_CHECK(Lt().matmul_desc_set_attribute(
          fresh->desc, CUBLASLT_MATMUL_DESC_EPILOGUE_AUX_LD, &aux_ld, sizeof(aux_ld)));
    }
    SetEpiloguePointers(fresh->desc, g, g.gelu_aux);  // heuristics read their alignment
    const cudaDataType_t d_type = g.d_fp32 ? CUDA_R_32F : CUDA_R_16BF;
    fresh->a = g.trans_a ? Layout(CUDA_R_16BF, g.k, g.m, g.lda, g.batch, g.stride_a)
                         : Layout(CUDA_R_16BF, g.m, g.k, g.lda, g.batch, g.stride_a);
    fresh->b = g.trans_b ? Layout(CUDA_R_16BF, g.n, g.k, g.ldb, g.batch, g.stride_b)
                         : Layout(CUDA_R_16BF, g.k, g.n, g.ldb, g.batch, g.stride_b);
    fresh->c = Layout(d_type, g.m, g.n, g.ldd, g.batch, g.stride_d);
    fresh->d = Layout(d_type, g.m, g.n, g.ldd, g.batch, g.stride_d);

    cublasLtMatmulPreference_t pref = nullptr;
    TESSERA_CUBLAS_CHECK(Lt().matmul_preference_create(&pref));
    const uint64_t workspace = workspace_bytes_;
    Lt().matmul_preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                         sizeof(workspace));
    Lt().matmul_preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                         sizeof(align_a));
    Lt().matmul_preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                         sizeof(align_b));
    Lt().matmul_preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                         sizeof(align_c));
    Lt().matmul_preference_set_attribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                         sizeof(align_d));
    cublasLtMatmulHeuristicResult_t candidates[kMaxTuneCandidates]{};
    int found = 0;
    const cublasStatus_t status =
        Lt().matmul_algo_get_heuristic(handle_, fresh->desc, fresh->a, fresh->b, fresh->c, fresh->d,
                                       pref, tune_candidates_, candidates, &found);
    Lt().matmul_preference_destroy(pref);
    if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
      plans_.erase(key);
      throw std::runtime_error("cuBLASLt has no algorithm for m=" + std::to_string(g.m) +
                               " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k) +
                               " batch=" + std::to_string(g.batch) +
                               (g.bias != nullptr ? " with bias" : "") +
                               (g.gelu != GemmGelu::kNone ? " with a GELU epilogue" : "") +
                               " (status " + std::to_string(static_cast<int>(status)) + ")");
    }
    size_t chosen = 0;
    if (found > 1) {
      try {
        chosen = Fastest(*fresh, g, candidates, found, stream);
      } catch (...) {
        plans_.erase(key);
        throw;
      }
    }
    fresh->algo = candidates[chosen].algo;
    plan = fresh.release();
  }
  SetEpiloguePointers(plan->desc, g, g.gelu_aux);
  const float alpha = 1.0f;
  const float beta = g.beta;
  TESSERA_CUBLAS_CHECK(Lt().matmul(handle_, plan->desc, &alpha, g.a, plan->a, g.b, plan->b, &beta,
                                   c, plan->c, g.d, plan->d, &plan->algo, workspace_,
                                   workspace_bytes_, stream));
}

}  // namespace tessera::model::cuda
