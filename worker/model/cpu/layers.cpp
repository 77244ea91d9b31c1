// CPU kernels of the GPT decoder; see layers.h for the contract of each.
#include "worker/model/cpu/layers.h"

#include <cblas.h>
#include <omp.h>

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>
#include <vector>

namespace tessera::model::cpu {
namespace {

// Row-major C (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * C, one BLAS call.
void BlasGemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
              const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
void BlasGemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A,
              int lda, const double* B, int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// The same product on the OpenMP team: each thread multiplies one band of rows of C with a
// single-threaded BLAS call (see SetKernelThreads). One pool of threads then serves the
// matrix products and every other kernel, instead of OpenBLAS's pool and OpenMP's spinning
// against each other between calls. One band per thread, so that each thread packs the
// shared operand once; the bands depend only on the number of threads.
template <typename F>
void Gemm(bool trans_a, bool trans_b, int M, int N, int K, F alpha, const F* A, int lda, const F* B,
          int ldb, F beta, F* C, int ldc) {
  const bool parallel = int64_t{M} * N * K >= (1 << 20) && M >= 32;
  const int threads = parallel ? omp_get_max_threads() : 1;
  const int band_rows = ((M + threads - 1) / threads + 15) / 16 * 16;
#pragma omp parallel for schedule(static) num_threads(threads) if (threads > 1)
  for (int band = 0; band < threads; band++) {
    const int m0 = band * band_rows;
    const int rows = std::min(band_rows, M - m0);
    if (rows <= 0)
      continue;
    // Row m0 of op(A): a row offset of A, or a column offset when A is transposed.
    const F* a = trans_a ? A + m0 : A + static_cast<int64_t>(m0) * lda;
    BlasGemm(trans_a, trans_b, rows, N, K, alpha, a, lda, B, ldb, beta,
             C + static_cast<int64_t>(m0) * ldc, ldc);
  }
}

// Reductions over rows (embedding, layer-norm and bias gradients) split the columns into
// one band per thread; each band is summed over all rows, in row order, by one thread, so
// every sum is the same whatever the number of threads. Bands are a multiple of 16 columns
// wide, so that each row contributes whole vectors.
struct ColumnBands {
  int width;
  int count;
  explicit ColumnBands(int columns) {
    const int threads = std::max(1, std::min(omp_get_max_threads(), columns / 16));
    width = ((columns + threads - 1) / threads + 15) / 16 * 16;
    count = (columns + width - 1) / width;
  }
};

// Hot loops are compiled for AVX-512, for AVX2 and for baseline x86-64; the loader picks
// the best the CPU has (GCC function multi-versioning), so one binary runs everywhere. The
// OpenMP-parallel loops stay outside these functions: they call them on rows or chunks.
// Not under ThreadSanitizer: its instrumented resolvers run before its runtime is set up.
#if defined(__x86_64__) && defined(__GNUC__) && !defined(__clang__) && !defined(__SANITIZE_THREAD__)
#define TESSERA_VECTOR_CLONES \
  __attribute__((target_clones("arch=x86-64-v4", "arch=x86-64-v3", "default")))
#else
#define TESSERA_VECTOR_CLONES
#endif

// exp(x) in float without a libm call, so that loops around it vectorise: x = n ln2 + r with
// |r| <= ln2 / 2 (Cody-Waite split of ln2), exp(r) by its Taylor polynomial of degree 7
// (truncation below 1e-8), times 2^n built in the exponent bits. Inputs are clamped to
// [-87, 88], inside float's normal range.
inline float ExpFast(float x) {
  x = std::min(std::max(x, -87.0f), 88.0f);
  const float n = std::floor(x * 1.44269504088896341f + 0.5f);
  const float r = (x - n * 0.693359375f) + n * 2.12194440e-4f;
  float p = 1.0f / 5040;
  p = p * r + 1.0f / 720;
  p = p * r + 1.0f / 120;
  p = p * r + 1.0f / 24;
  p = p * r + 1.0f / 6;
  p = p * r + 0.5f;
  p = p * r + 1.0f;
  p = p * r + 1.0f;
  return p * std::bit_cast<float>((static_cast<int32_t>(n) + 127) << 23);
}

// The float kernels use the fast forms; the double ones (the test reference) use libm.
template <typename F>
inline F Exp(F x) {
  if constexpr (std::is_same_v<F, float>) {
    return ExpFast(x);
  } else {
    return std::exp(x);
  }
}

// tanh(u) = 1 - 2 / (exp(2u) + 1); absolute error about 1e-7 in float.
template <typename F>
inline F Tanh(F u) {
  if constexpr (std::is_same_v<F, float>) {
    return 1.0f - 2.0f / (ExpFast(2.0f * u) + 1.0f);
  } else {
    return std::tanh(u);
  }
}

// The attention helpers below keep blocks of outputs in registers: kBlock independent
// accumulators of one 64-byte vector each (GCC vector extensions, lowered to whatever the
// target has), so that the multiply-adds do not wait on one another.
constexpr int kVectorBytes = 64;
constexpr int kBlock = 4;
template <typename F>
struct VectorOf {
  typedef F type __attribute__((vector_size(kVectorBytes)));
};
template <typename F>
using Vector = typename VectorOf<F>::type;
template <typename F>
constexpr int kLanes = kVectorBytes / sizeof(F);

template <typename F>
inline Vector<F> Load(const F* p) {
  Vector<F> v;
  std::memcpy(&v, p, sizeof(v));
  return v;
}
template <typename F>
inline void Store(F* p, Vector<F> v) {
  std::memcpy(p, &v, sizeof(v));
}

// V vectors of columns [c, c + V*L) of a row times a transposed matrix (see below).
template <int V, typename F>
inline void RowTimesTransposedBlock(F* block, const F* q, const F* mt, int ldm, int hs, F scale) {
  constexpr int L = kLanes<F>;
  Vector<F> acc[V] = {};
  for (int i = 0; i < hs; i++) {
    const F qi = q[i];
    const F* m = mt + static_cast<int64_t>(i) * ldm;
    for (int v = 0; v < V; v++)
      acc[v] += qi * Load(m + v * L);
  }
  for (int v = 0; v < V; v++)
    Store(block + v * L, acc[v] * scale);
}

// scores[c] = scale * sum_i q[i] * mt[i * ldm + c] for c < n: a row times a matrix stored
// transposed (hs rows of ldm columns, ldm a multiple of kLanes and >= n; columns beyond n
// are read and ignored).
template <typename F>
TESSERA_VECTOR_CLONES void RowTimesTransposed(F* scores, const F* q, const F* mt, int ldm, int hs,
                                              int n, F scale) {
  constexpr int L = kLanes<F>;
  F block[kBlock * L];
  for (int c = 0; c < n;) {
    int width = L;
    if (c + kBlock * L <= ldm) {
      RowTimesTransposedBlock<kBlock>(block, q, mt + c, ldm, hs, scale);
      width = kBlock * L;
    } else {
      RowTimesTransposedBlock<1>(block, q, mt + c, ldm, hs, scale);
    }
    std::copy(block, block + std::min(width, n - c), scores + c);
    c += width;
  }
}

// V vectors of outputs [0, V*L) of the weighted row sum below.
template <int V, typename F>
inline void WeightedRowSumBlock(F* out, const F* w, int64_t wstride, const F* rows, int64_t ld,
                                int n) {
  constexpr int L = kLanes<F>;
  Vector<F> acc[V] = {};
  for (int r = 0; r < n; r++) {
    const F wr = w[r * wstride];
    const F* row = rows + r * ld;
    for (int v = 0; v < V; v++)
      acc[v] += wr * Load(row + v * L);
  }
  for (int v = 0; v < V; v++)
    Store(out + v * L, acc[v]);
}

// out[j] = sum_{r < n} w[r * wstride] * rows[r * ld + j] for j < hs: a weighted sum of n rows.
template <typename F>
TESSERA_VECTOR_CLONES void WeightedRowSum(F* out, const F* w, int64_t wstride, const F* rows,
                                          int64_t ld, int n, int hs) {
  constexpr int L = kLanes<F>;
  int j = 0;
  for (; j + kBlock * L <= hs; j += kBlock * L) {
    WeightedRowSumBlock<kBlock>(out + j, w, wstride, rows + j, ld, n);
  }
  for (; j + L <= hs; j += L)
    WeightedRowSumBlock<1>(out + j, w, wstride, rows + j, ld, n);
  for (; j < hs; j++) {  // head sizes that are not a multiple of the vector width
    F acc = 0;
    for (int r = 0; r < n; r++)
      acc += w[r * wstride] * rows[r * ld + j];
    out[j] = acc;
  }
}

// dst (hs, ld) = the hs columns of n rows of src (row stride src_ld), transposed; columns
// n..ld of dst are zeroed so that RowTimesTransposed may read whole register blocks.
template <typename F>
void Transpose(F* dst, int ld, const F* src, int64_t src_ld, int n, int hs) {
  for (int i = 0; i < hs; i++) {
    F* d = dst + static_cast<int64_t>(i) * ld;
    for (int r = 0; r < n; r++)
      d[r] = src[r * src_ld + i];
    std::fill(d + n, d + ld, F(0));
  }
}

// dst (n, hs) = the hs columns of n rows of src (row stride src_ld), contiguous.
template <typename F>
void Gather(F* dst, const F* src, int64_t src_ld, int n, int hs) {
  for (int r = 0; r < n; r++)
    std::copy(src + r * src_ld, src + r * src_ld + hs, dst + r * hs);
}

// Softmax backward of one causal row, in place: datt[0..n) becomes the gradient of the
// scores, p * (datt - sum(p * datt)) * scale.
template <typename F>
TESSERA_VECTOR_CLONES void SoftmaxBackwardRow(F* datt, const F* p, int n, F scale) {
  F weighted = 0;
#pragma omp simd reduction(+ : weighted)
  for (int i = 0; i < n; i++)
    weighted += p[i] * datt[i];
#pragma omp simd
  for (int i = 0; i < n; i++)
    datt[i] = p[i] * (datt[i] - weighted) * scale;
}

// Softmax of scores[0..n) in place (the causal row of one query).
template <typename F>
TESSERA_VECTOR_CLONES void SoftmaxRow(F* scores, int n) {
  F maxval = scores[0];
  for (int i = 1; i < n; i++)
    maxval = std::max(maxval, scores[i]);
  F sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int i = 0; i < n; i++) {
    const F e = Exp(scores[i] - maxval);
    scores[i] = e;
    sum += e;
  }
  const F inv = F(1) / sum;
#pragma omp simd
  for (int i = 0; i < n; i++)
    scores[i] *= inv;
}

template <typename F>
TESSERA_VECTOR_CLONES void GeluForwardSpan(F* out, const F* inp, int64_t n) {
#pragma omp simd
  for (int64_t i = 0; i < n; i++) {
    const F x = inp[i];
    out[i] = F(0.5) * x * (F(1) + Tanh(F(0.7978845608028654) * (x + F(0.044715) * x * x * x)));
  }
}

template <typename F>
TESSERA_VECTOR_CLONES void GeluBackwardSpan(F* dinp, const F* inp, const F* dout, int64_t n) {
  const F s = F(0.7978845608028654);  // sqrt(2 / pi)
#pragma omp simd
  for (int64_t i = 0; i < n; i++) {
    const F x = inp[i];
    const F th = Tanh(s * (x + F(0.044715) * x * x * x));
    const F sech2 = F(1) - th * th;
    const F grad = F(0.5) * (F(1) + th) + F(0.5) * x * sech2 * s * (F(1) + F(3 * 0.044715) * x * x);
    dinp[i] = grad * dout[i];
  }
}

// One row of layer norm: o = (x - mean) * rstd * weight + bias; returns mean and rstd.
template <typename F>
TESSERA_VECTOR_CLONES void LayerNormRow(F* o, F* mean, F* rstd, const F* x, const F* weight,
                                        const F* bias, int C) {
  F m = 0;
#pragma omp simd reduction(+ : m)
  for (int i = 0; i < C; i++)
    m += x[i];
  m = m / C;
  F v = 0;
#pragma omp simd reduction(+ : v)
  for (int i = 0; i < C; i++)
    v += (x[i] - m) * (x[i] - m);
  v = v / C;
  const F s = F(1) / std::sqrt(v + F(1e-5));
#pragma omp simd
  for (int i = 0; i < C; i++)
    o[i] = (s * (x[i] - m)) * weight[i] + bias[i];
  *mean = m;
  *rstd = s;
}

// One row of the layer-norm input gradient: dx += d/dx.
template <typename F>
TESSERA_VECTOR_CLONES void LayerNormBackwardRow(F* dx, const F* dy, const F* x, const F* weight,
                                                F m, F s, int C) {
  F dnorm_mean = 0;
  F dnorm_norm_mean = 0;
#pragma omp simd reduction(+ : dnorm_mean, dnorm_norm_mean)
  for (int i = 0; i < C; i++) {
    const F dnorm = weight[i] * dy[i];
    dnorm_mean += dnorm;
    dnorm_norm_mean += dnorm * (x[i] - m) * s;
  }
  dnorm_mean = dnorm_mean / C;
  dnorm_norm_mean = dnorm_norm_mean / C;
#pragma omp simd
  for (int i = 0; i < C; i++) {
    const F norm = (x[i] - m) * s;
    dx[i] += (weight[i] * dy[i] - dnorm_mean - norm * dnorm_norm_mean) * s;
  }
}

// Columns [c0, c1) of the layer-norm parameter gradients, summed over the N rows in order.
template <typename F>
TESSERA_VECTOR_CLONES void LayerNormParamColumns(F* dweight, F* dbias, const F* dout, const F* inp,
                                                 const F* mean, const F* rstd, int N, int C, int c0,
                                                 int c1) {
  for (int n = 0; n < N; n++) {
    const F* dy = dout + static_cast<int64_t>(n) * C;
    const F* x = inp + static_cast<int64_t>(n) * C;
    const F m = mean[n];
    const F s = rstd[n];
#pragma omp simd
    for (int i = c0; i < c1; i++) {
      dweight[i] += (x[i] - m) * s * dy[i];
      dbias[i] += dy[i];
    }
  }
}

// sums[c] += sum over the N rows (in order) of rows[n * ld + c], for c in [c0, c1).
template <typename F>
TESSERA_VECTOR_CLONES void ColumnSums(F* sums, const F* rows, int64_t ld, int N, int c0, int c1) {
  for (int n = 0; n < N; n++) {
    const F* row = rows + n * ld;
#pragma omp simd
    for (int i = c0; i < c1; i++)
      sums[i] += row[i];
  }
}

// log(sum(exp(row))) of one row of V logits.
template <typename F>
TESSERA_VECTOR_CLONES F LogSumExpRow(const F* row, int V) {
  F maxval = row[0];
#pragma omp simd reduction(max : maxval)
  for (int i = 0; i < V; i++)
    maxval = std::max(maxval, row[i]);
  F sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int i = 0; i < V; i++)
    sum += Exp(row[i] - maxval);
  return maxval + std::log(sum);
}

// row = exp(row - lse) * dloss: softmax times the loss gradient, in place.
template <typename F>
TESSERA_VECTOR_CLONES void SoftmaxScaleRow(F* row, F lse, F dloss, int V) {
#pragma omp simd
  for (int i = 0; i < V; i++)
    row[i] = Exp(row[i] - lse) * dloss;
}

// Below this many elements of work a kernel runs on the calling thread: waking the team
// would cost more than it saves.
constexpr int64_t kMinParallelWork = 1 << 15;
inline bool Parallel(int64_t work) {
  return work >= kMinParallelWork;
}

// Elementwise kernels run on chunks of this many elements, one chunk per task.
constexpr int64_t kChunk = 16384;

}  // namespace

// ---------------------------------------------------------------------------------------
template <typename F>
void encoder_forward(F* out, const int32_t* tokens, const F* wte, const F* wpe, int B, int T,
                     int C) {
#pragma omp parallel for if (Parallel(int64_t{B} * T * C)) collapse(2) schedule(static)
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T; t++) {
      F* out_bt = out + (static_cast<int64_t>(b) * T + t) * C;
      const F* wte_ix = wte + static_cast<int64_t>(tokens[b * T + t]) * C;
      const F* wpe_t = wpe + static_cast<int64_t>(t) * C;
      for (int i = 0; i < C; i++)
        out_bt[i] = wte_ix[i] + wpe_t[i];
    }
  }
}

template <typename F>
void encoder_backward(F* dwte, F* dwpe, const F* dout, const int32_t* tokens, int B, int T, int C) {
  // Several positions may share a token: split the channels, not the positions, so every
  // dwte element is summed by one thread in (b, t) order.
  const ColumnBands bands(C);
#pragma omp parallel for if (Parallel(int64_t{B} * T * C)) schedule(static)
  for (int band = 0; band < bands.count; band++) {
    const int c0 = band * bands.width;
    const int c1 = std::min(C, c0 + bands.width);
    for (int b = 0; b < B; b++) {
      for (int t = 0; t < T; t++) {
        const F* dout_bt = dout + (static_cast<int64_t>(b) * T + t) * C;
        F* dwte_ix = dwte + static_cast<int64_t>(tokens[b * T + t]) * C;
        F* dwpe_t = dwpe + static_cast<int64_t>(t) * C;
        for (int i = c0; i < c1; i++) {
          dwte_ix[i] += dout_bt[i];
          dwpe_t[i] += dout_bt[i];
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
template <typename F>
void layernorm_forward(F* out, F* mean, F* rstd, const F* inp, const F* weight, const F* bias,
                       int N, int C) {
#pragma omp parallel for if (Parallel(int64_t{N} * C)) schedule(static)
  for (int n = 0; n < N; n++) {
    const int64_t row = static_cast<int64_t>(n) * C;
    LayerNormRow(out + row, mean + n, rstd + n, inp + row, weight, bias, C);
  }
}

template <typename F>
void layernorm_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight,
                        const F* mean, const F* rstd, int N, int C) {
  // dinp: rows are independent.
#pragma omp parallel for if (Parallel(int64_t{N} * C)) schedule(static)
  for (int n = 0; n < N; n++) {
    const int64_t row = static_cast<int64_t>(n) * C;
    LayerNormBackwardRow(dinp + row, dout + row, inp + row, weight, mean[n], rstd[n], C);
  }
  // dweight, dbias: sums over rows, one column block per task.
  const ColumnBands bands(C);
#pragma omp parallel for if (Parallel(int64_t{N} * C)) schedule(static)
  for (int band = 0; band < bands.count; band++) {
    const int c0 = band * bands.width;
    LayerNormParamColumns(dweight, dbias, dout, inp, mean, rstd, N, C, c0,
                          std::min(C, c0 + bands.width));
  }
}

// ---------------------------------------------------------------------------------------
template <typename F>
void matmul_forward(F* out, const F* inp, const F* weight, const F* bias, int N, int C, int OC) {
  if (bias != nullptr) {
#pragma omp parallel for if (Parallel(int64_t{N} * OC)) schedule(static)
    for (int n = 0; n < N; n++) {
      std::copy(bias, bias + OC, out + static_cast<int64_t>(n) * OC);
    }
  }
  Gemm(false, true, N, OC, C, F(1), inp, C, weight, C, bias != nullptr ? F(1) : F(0), out, OC);
}

template <typename F>
void matmul_residual_forward(F* out, const F* residual, const F* inp, const F* weight,
                             const F* bias, int N, int C, int OC) {
#pragma omp parallel for if (Parallel(int64_t{N} * OC)) schedule(static)
  for (int n = 0; n < N; n++) {
    const F* r = residual + static_cast<int64_t>(n) * OC;
    F* o = out + static_cast<int64_t>(n) * OC;
#pragma omp simd
    for (int i = 0; i < OC; i++)
      o[i] = r[i] + bias[i];
  }
  Gemm(false, true, N, OC, C, F(1), inp, C, weight, C, F(1), out, OC);
}

template <typename F>
void matmul_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight,
                     int N, int C, int OC) {
  if (dinp != nullptr)
    Gemm(false, false, N, C, OC, F(1), dout, OC, weight, C, F(0), dinp, C);
  Gemm(true, false, OC, C, N, F(1), dout, OC, inp, C, F(1), dweight, C);
  if (dbias != nullptr) {
    const ColumnBands bands(OC);
#pragma omp parallel for if (Parallel(int64_t{N} * OC)) schedule(static)
    for (int band = 0; band < bands.count; band++) {
      const int c0 = band * bands.width;
      ColumnSums(dbias, dout, OC, N, c0, std::min(OC, c0 + bands.width));
    }
  }
}

// ---------------------------------------------------------------------------------------
template <typename F>
void attention_forward(F* out, F* att, const F* qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const int64_t C3 = 3 * static_cast<int64_t>(C);
  const int Tp = (T + kLanes<F> - 1) / kLanes<F> * kLanes<F>;
  const F scale = F(1) / std::sqrt(static_cast<F>(hs));
#pragma omp parallel if (Parallel(int64_t{B} * T * T * C))
  {
    // Per thread, kept between calls: the keys of one head transposed (hs, Tp) and its values
    // contiguous (T, hs). In qkv a head's rows lie 3C apart, a stride that maps them onto a
    // few cache sets; the copies are read T times each.
    thread_local std::vector<F> kt, vc;
    kt.resize(static_cast<size_t>(hs) * Tp);
    vc.resize(static_cast<size_t>(T) * hs);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
      for (int h = 0; h < NH; h++) {
        const F* q = qkv + static_cast<int64_t>(b) * T * C3 + h * hs;  // row t at q + t*C3
        const F* k = q + C;
        const F* v = q + 2 * C;
        F* att_bh = att + (static_cast<int64_t>(b) * NH + h) * T * T;
        Transpose(kt.data(), Tp, k, C3, T, hs);
        Gather(vc.data(), v, C3, T, hs);
        for (int t = 0; t < T; t++) {
          // Scores against keys t2 <= t only (the causal mask), softmax, weighted values.
          F* att_row = att_bh + static_cast<int64_t>(t) * T;
          RowTimesTransposed(att_row, q + t * C3, kt.data(), Tp, hs, t + 1, scale);
          SoftmaxRow(att_row, t + 1);
          F* o = out + (static_cast<int64_t>(b) * T + t) * C + h * hs;
          WeightedRowSum(o, att_row, 1, vc.data(), hs, t + 1, hs);
        }
      }
    }
  }
}

template <typename F>
void attention_backward(F* dqkv, const F* dout, const F* qkv, const F* att, int B, int T, int C,
                        int NH) {
  const int hs = C / NH;
  const int64_t C3 = 3 * static_cast<int64_t>(C);
  const int Tp = (T + kLanes<F> - 1) / kLanes<F> * kLanes<F>;
  const F scale = F(1) / std::sqrt(static_cast<F>(hs));
  // One (b, h) per task: every gradient element is one weighted sum computed by one thread.
#pragma omp parallel if (Parallel(int64_t{B} * T * T * C))
  {
    // Per thread, kept between calls: the head's values transposed (hs, Tp); its queries,
    // keys and output gradient contiguous (T, hs) each (see attention_forward); the score
    // gradients (T, T).
    thread_local std::vector<F> vt, qc, kc, dyc, dscore;
    vt.resize(static_cast<size_t>(hs) * Tp);
    qc.resize(static_cast<size_t>(T) * hs);
    kc.resize(static_cast<size_t>(T) * hs);
    dyc.resize(static_cast<size_t>(T) * hs);
    dscore.resize(static_cast<size_t>(T) * T);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
      for (int h = 0; h < NH; h++) {
        const int64_t row0 = static_cast<int64_t>(b) * T;
        const F* q = qkv + row0 * C3 + h * hs;  // row t at q + t*C3
        F* dq = dqkv + row0 * C3 + h * hs;
        F* dk = dq + C;
        F* dv = dq + 2 * C;
        const F* p = att + (static_cast<int64_t>(b) * NH + h) * T * T;
        Transpose(vt.data(), Tp, q + 2 * C, C3, T, hs);
        Gather(qc.data(), q, C3, T, hs);
        Gather(kc.data(), q + C, C3, T, hs);
        Gather(dyc.data(), dout + row0 * C + h * hs, C, T, hs);
        for (int t = 0; t < T; t++) {
          // d(att)[t2] = dy[t] . v[t2]; softmax backward; times the score scale.
          F* ds = dscore.data() + static_cast<int64_t>(t) * T;
          const F* p_row = p + static_cast<int64_t>(t) * T;
          RowTimesTransposed(ds, dyc.data() + t * hs, vt.data(), Tp, hs, t + 1, F(1));
          SoftmaxBackwardRow(ds, p_row, t + 1, scale);
          // dq[t] = sum_{t2 <= t} dscore[t, t2] k[t2].
          WeightedRowSum(dq + t * C3, ds, 1, kc.data(), hs, t + 1, hs);
        }
        for (int t2 = 0; t2 < T; t2++) {
          // Sums over the queries t >= t2 that saw position t2 (a column of att / dscore).
          const int64_t diag = static_cast<int64_t>(t2) * T + t2;
          const int64_t row = static_cast<int64_t>(t2) * hs;
          WeightedRowSum(dv + t2 * C3, p + diag, T, dyc.data() + row, hs, T - t2, hs);
          WeightedRowSum(dk + t2 * C3, dscore.data() + diag, T, qc.data() + row, hs, T - t2, hs);
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
template <typename F>
void gelu_forward(F* out, const F* inp, int64_t N) {
  const int64_t chunks = (N + kChunk - 1) / kChunk;
#pragma omp parallel for if (Parallel(N)) schedule(static)
  for (int64_t c = 0; c < chunks; c++) {
    const int64_t i0 = c * kChunk;
    GeluForwardSpan(out + i0, inp + i0, std::min(kChunk, N - i0));
  }
}

template <typename F>
void gelu_backward(F* dinp, const F* inp, const F* dout, int64_t N) {
  const int64_t chunks = (N + kChunk - 1) / kChunk;
#pragma omp parallel for if (Parallel(N)) schedule(static)
  for (int64_t c = 0; c < chunks; c++) {
    const int64_t i0 = c * kChunk;
    GeluBackwardSpan(dinp + i0, inp + i0, dout + i0, std::min(kChunk, N - i0));
  }
}

// ---------------------------------------------------------------------------------------
template <typename F>
void crossentropy_forward(F* losses, F* lse, const F* logits, const int32_t* targets, int N,
                          int V) {
#pragma omp parallel for if (Parallel(int64_t{N} * V)) schedule(static)
  for (int n = 0; n < N; n++) {
    const F* row = logits + static_cast<int64_t>(n) * V;
    lse[n] = LogSumExpRow(row, V);
    losses[n] = lse[n] - row[targets[n]];
  }
}

template <typename F>
void crossentropy_softmax_backward(F* logits_to_dlogits, const F* lse, const int32_t* targets,
                                   F dloss, int N, int V) {
#pragma omp parallel for if (Parallel(int64_t{N} * V)) schedule(static)
  for (int n = 0; n < N; n++) {
    F* row = logits_to_dlogits + static_cast<int64_t>(n) * V;
    SoftmaxScaleRow(row, lse[n], dloss, V);
    row[targets[n]] -= dloss;
  }
}

// ---------------------------------------------------------------------------------------
#define TESSERA_INSTANTIATE(F)                                                                   \
  template void encoder_forward<F>(F*, const int32_t*, const F*, const F*, int, int, int);       \
  template void encoder_backward<F>(F*, F*, const F*, const int32_t*, int, int, int);            \
  template void layernorm_forward<F>(F*, F*, F*, const F*, const F*, const F*, int, int);        \
  template void layernorm_backward<F>(F*, F*, F*, const F*, const F*, const F*, const F*,        \
                                      const F*, int, int);                                       \
  template void matmul_forward<F>(F*, const F*, const F*, const F*, int, int, int);              \
  template void matmul_residual_forward<F>(F*, const F*, const F*, const F*, const F*, int, int, \
                                           int);                                                 \
  template void matmul_backward<F>(F*, F*, F*, const F*, const F*, const F*, int, int, int);     \
  template void attention_forward<F>(F*, F*, const F*, int, int, int, int);                      \
  template void attention_backward<F>(F*, const F*, const F*, const F*, int, int, int, int);     \
  template void gelu_forward<F>(F*, const F*, int64_t);                                          \
  template void gelu_backward<F>(F*, const F*, const F*, int64_t);                               \
  template void crossentropy_forward<F>(F*, F*, const F*, const int32_t*, int, int);             \
  template void crossentropy_softmax_backward<F>(F*, const F*, const int32_t*, F, int, int);

TESSERA_INSTANTIATE(float)
TESSERA_INSTANTIATE(double)
#undef TESSERA_INSTANTIATE

}  // namespace tessera::model::cpu
