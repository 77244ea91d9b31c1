// MatmulEngine: cuBLASLt products with cached descriptors and algorithms; see layers_cuda.h.
#include <cublasLt.h>
#include <cuda_runtime.h>

#include <bit>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>

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

struct MatmulEngine::Plan {
  cublasLtMatmulDesc_t desc = nullptr;
  cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr, d = nullptr;
  cublasLtMatmulAlgo_t algo{};
  ~Plan() {
    if (a != nullptr)
      cublasLtMatrixLayoutDestroy(a);
    if (b != nullptr)
      cublasLtMatrixLayoutDestroy(b);
    if (c != nullptr)
      cublasLtMatrixLayoutDestroy(c);
    if (d != nullptr)
      cublasLtMatrixLayoutDestroy(d);
    if (desc != nullptr)
      cublasLtMatmulDescDestroy(desc);
  }
};

MatmulEngine::MatmulEngine(size_t workspace_bytes) : workspace_bytes_(workspace_bytes) {
  TESSERA_CUBLAS_CHECK(cublasLtCreate(&handle_));
  TESSERA_CUDA_CHECK(cudaMalloc(&workspace_, workspace_bytes_));
}

MatmulEngine::~MatmulEngine() {
  for (auto& [key, plan] : plans_)
    delete plan;
  cudaFree(workspace_);
  cublasLtDestroy(handle_);
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
  TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutCreate(&layout, type, rows, cols, ld));
  if (batch > 1) {
    TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        layout, CUBLASLT_MATRIX_LAYOUT_BATCH_COUNT, &batch, sizeof(batch)));
    TESSERA_CUBLAS_CHECK(cublasLtMatrixLayoutSetAttribute(
        layout, CUBLASLT_MATRIX_LAYOUT_STRIDED_BATCH_OFFSET, &stride, sizeof(stride)));
  }
  return layout;
}

}  // namespace

void MatmulEngine::Gemm(const GemmArgs& g, cudaStream_t stream) {
  const bool batched = g.batch > 1;
  const bool accumulate = g.beta != 0.0f;
  const void* c = g.c != nullptr ? g.c : g.d;
  const int64_t d_elem = g.d_fp32 ? 4 : 2;
  if (g.bias != nullptr && g.d_fp32)
    throw std::invalid_argument("MatmulEngine::Gemm: a bias epilogue needs a bf16 output");
  const uint32_t align_a = Alignment(g.a, g.stride_a * 2, batched);
  const uint32_t align_b = Alignment(g.b, g.stride_b * 2, batched);
  const uint32_t align_c = Alignment(c, g.stride_d * d_elem, batched);
  const uint32_t align_d = Alignment(g.d, g.stride_d * d_elem, batched);
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
                g.d_fp32 * 4 + accumulate * 2 + (g.bias != nullptr),
                static_cast<int>(align_a),
                static_cast<int>(align_b),
                static_cast<int>(align_c * 1024 + align_d)};
  Plan*& plan = plans_[key];
  if (plan == nullptr) {
    auto fresh = std::make_unique<Plan>();
    TESSERA_CUBLAS_CHECK(cublasLtMatmulDescCreate(&fresh->desc, CUBLAS_COMPUTE_32F, CUDA_R_32F));
    const cublasOperation_t op_a = g.trans_a ? CUBLAS_OP_T : CUBLAS_OP_N;
    const cublasOperation_t op_b = g.trans_b ? CUBLAS_OP_T : CUBLAS_OP_N;
    TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(fresh->desc, CUBLASLT_MATMUL_DESC_TRANSA,
                                                        &op_a, sizeof(op_a)));
    TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(fresh->desc, CUBLASLT_MATMUL_DESC_TRANSB,
                                                        &op_b, sizeof(op_b)));
    const cublasLtEpilogue_t epilogue =
        g.bias != nullptr ? CUBLASLT_EPILOGUE_BIAS : CUBLASLT_EPILOGUE_DEFAULT;
    TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(fresh->desc, CUBLASLT_MATMUL_DESC_EPILOGUE,
                                                        &epilogue, sizeof(epilogue)));
    if (g.bias != nullptr) {
      TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
          fresh->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias)));
    }
    const cudaDataType_t d_type = g.d_fp32 ? CUDA_R_32F : CUDA_R_16BF;
    fresh->a = g.trans_a ? Layout(CUDA_R_16BF, g.k, g.m, g.lda, g.batch, g.stride_a)
                         : Layout(CUDA_R_16BF, g.m, g.k, g.lda, g.batch, g.stride_a);
    fresh->b = g.trans_b ? Layout(CUDA_R_16BF, g.n, g.k, g.ldb, g.batch, g.stride_b)
                         : Layout(CUDA_R_16BF, g.k, g.n, g.ldb, g.batch, g.stride_b);
    fresh->c = Layout(d_type, g.m, g.n, g.ldd, g.batch, g.stride_d);
    fresh->d = Layout(d_type, g.m, g.n, g.ldd, g.batch, g.stride_d);

    cublasLtMatmulPreference_t pref = nullptr;
    TESSERA_CUBLAS_CHECK(cublasLtMatmulPreferenceCreate(&pref));
    const uint64_t workspace = workspace_bytes_;
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &workspace,
                                         sizeof(workspace));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, &align_a,
                                         sizeof(align_a));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, &align_b,
                                         sizeof(align_b));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, &align_c,
                                         sizeof(align_c));
    cublasLtMatmulPreferenceSetAttribute(pref, CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, &align_d,
                                         sizeof(align_d));
    cublasLtMatmulHeuristicResult_t result{};
    int found = 0;
    const cublasStatus_t status = cublasLtMatmulAlgoGetHeuristic(
        handle_, fresh->desc, fresh->a, fresh->b, fresh->c, fresh->d, pref, 1, &result, &found);
    cublasLtMatmulPreferenceDestroy(pref);
    if (status != CUBLAS_STATUS_SUCCESS || found == 0) {
      plans_.erase(key);
      throw std::runtime_error("cuBLASLt has no algorithm for m=" + std::to_string(g.m) +
                               " n=" + std::to_string(g.n) + " k=" + std::to_string(g.k) +
                               " batch=" + std::to_string(g.batch) +
                               (g.bias != nullptr ? " with bias" : "") + " (status " +
                               std::to_string(static_cast<int>(status)) + ")");
    }
    fresh->algo = result.algo;
    plan = fresh.release();
  } else if (g.bias != nullptr) {
    TESSERA_CUBLAS_CHECK(cublasLtMatmulDescSetAttribute(
        plan->desc, CUBLASLT_MATMUL_DESC_BIAS_POINTER, &g.bias, sizeof(g.bias)));
  }
  const float alpha = 1.0f;
  const float beta = g.beta;
  TESSERA_CUBLAS_CHECK(cublasLtMatmul(handle_, plan->desc, &alpha, g.a, plan->a, g.b, plan->b,
                                      &beta, c, plan->c, g.d, plan->d, &plan->algo, workspace_,
                                      workspace_bytes_, stream));
}

}  // namespace tessera::model::cuda
