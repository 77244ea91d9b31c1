// CPU kernels of the GPT decoder; see layers.h for the contract of each.
#include "worker/model/cpu/layers.h"

#include <cblas.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace tessera::model::cpu {
namespace {

// Row-major C (M,N) = alpha * op(A) (M,K) @ op(B) (K,N) + beta * C.
void Gemm(bool trans_a, bool trans_b, int M, int N, int K, float alpha, const float* A, int lda,
          const float* B, int ldb, float beta, float* C, int ldc) {
  cblas_sgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}
void Gemm(bool trans_a, bool trans_b, int M, int N, int K, double alpha, const double* A, int lda,
          const double* B, int ldb, double beta, double* C, int ldc) {
  cblas_dgemm(CblasRowMajor, trans_a ? CblasTrans : CblasNoTrans,
              trans_b ? CblasTrans : CblasNoTrans, M, N, K, alpha, A, lda, B, ldb, beta, C, ldc);
}

// Column blocks for reductions over rows (layer-norm and bias gradients): each block of
// columns is summed over all rows, in row order, by one thread. The result does not depend
// on the number of threads.
constexpr int kColumnBlock = 32;

template <typename F>
F Dot(const F* a, const F* b, int n) {
  F sum = 0;
#pragma omp simd reduction(+ : sum)
  for (int i = 0; i < n; i++)
    sum += a[i] * b[i];
  return sum;
}

// y (n) += alpha * x (n).
template <typename F>
void Axpy(F* y, F alpha, const F* x, int n) {
#pragma omp simd
  for (int i = 0; i < n; i++)
    y[i] += alpha * x[i];
}

}  // namespace

// ---------------------------------------------------------------------------------------
template <typename F>
void encoder_forward(F* out, const int32_t* tokens, const F* wte, const F* wpe, int B, int T,
                     int C) {
#pragma omp parallel for collapse(2) schedule(static)
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
  const int blocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < blocks; blk++) {
    const int c0 = blk * kColumnBlock;
    const int c1 = std::min(C, c0 + kColumnBlock);
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
  const F eps = F(1e-5);
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const F* x = inp + static_cast<int64_t>(n) * C;
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
    const F s = F(1) / std::sqrt(v + eps);
    F* o = out + static_cast<int64_t>(n) * C;
#pragma omp simd
    for (int i = 0; i < C; i++)
      o[i] = (s * (x[i] - m)) * weight[i] + bias[i];
    mean[n] = m;
    rstd[n] = s;
  }
}

template <typename F>
void layernorm_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight,
                        const F* mean, const F* rstd, int N, int C) {
  // dinp: rows are independent.
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const F* dy = dout + static_cast<int64_t>(n) * C;
    const F* x = inp + static_cast<int64_t>(n) * C;
    F* dx = dinp + static_cast<int64_t>(n) * C;
    const F m = mean[n];
    const F s = rstd[n];
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
  // dweight, dbias: sums over rows, one column block per thread.
  const int blocks = (C + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
  for (int blk = 0; blk < blocks; blk++) {
    const int c0 = blk * kColumnBlock;
    const int c1 = std::min(C, c0 + kColumnBlock);
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
}

// ---------------------------------------------------------------------------------------
template <typename F>
void matmul_forward(F* out, const F* inp, const F* weight, const F* bias, int N, int C, int OC) {
  if (bias != nullptr) {
#pragma omp parallel for schedule(static)
    for (int n = 0; n < N; n++) {
      std::copy(bias, bias + OC, out + static_cast<int64_t>(n) * OC);
    }
  }
  Gemm(false, true, N, OC, C, F(1), inp, C, weight, C, bias != nullptr ? F(1) : F(0), out, OC);
}

template <typename F>
void matmul_residual_forward(F* out, const F* residual, const F* inp, const F* weight,
                             const F* bias, int N, int C, int OC) {
#pragma omp parallel for schedule(static)
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
    const int blocks = (OC + kColumnBlock - 1) / kColumnBlock;
#pragma omp parallel for schedule(static)
    for (int blk = 0; blk < blocks; blk++) {
      const int c0 = blk * kColumnBlock;
      const int c1 = std::min(OC, c0 + kColumnBlock);
      for (int n = 0; n < N; n++) {
        const F* dy = dout + static_cast<int64_t>(n) * OC;
#pragma omp simd
        for (int i = c0; i < c1; i++)
          dbias[i] += dy[i];
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
template <typename F>
void attention_forward(F* out, F* att, const F* qkv, int B, int T, int C, int NH) {
  const int hs = C / NH;
  const int64_t C3 = 3 * static_cast<int64_t>(C);
  const F scale = F(1) / std::sqrt(static_cast<F>(hs));
#pragma omp parallel for collapse(3) schedule(dynamic, 8)
  for (int b = 0; b < B; b++) {
    for (int h = 0; h < NH; h++) {
      for (int t = 0; t < T; t++) {
        const F* q = qkv + (static_cast<int64_t>(b) * T + t) * C3 + h * hs;
        F* att_row = att + ((static_cast<int64_t>(b) * NH + h) * T + t) * T;
        // Scores for t2 <= t (the causal mask), then a softmax over them.
        F maxval = -std::numeric_limits<F>::infinity();
        for (int t2 = 0; t2 <= t; t2++) {
          const F* k = qkv + (static_cast<int64_t>(b) * T + t2) * C3 + C + h * hs;
          const F score = Dot(q, k, hs) * scale;
          att_row[t2] = score;
          maxval = std::max(maxval, score);
        }
        F sum = 0;
        for (int t2 = 0; t2 <= t; t2++) {
          const F e = std::exp(att_row[t2] - maxval);
          att_row[t2] = e;
          sum += e;
        }
        const F inv = F(1) / sum;
        for (int t2 = 0; t2 <= t; t2++)
          att_row[t2] *= inv;
        // Weighted sum of the values.
        F* o = out + (static_cast<int64_t>(b) * T + t) * C + h * hs;
        std::fill(o, o + hs, F(0));
        for (int t2 = 0; t2 <= t; t2++) {
          const F* v = qkv + (static_cast<int64_t>(b) * T + t2) * C3 + 2 * C + h * hs;
          Axpy(o, att_row[t2], v, hs);
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
  const F scale = F(1) / std::sqrt(static_cast<F>(hs));
  // dk and dv of a position collect contributions from every later query: one (b, h) per
  // iteration keeps each of those sums on one thread, in t order.
#pragma omp parallel
  {
    std::vector<F> datt(T);
#pragma omp for collapse(2) schedule(static)
    for (int b = 0; b < B; b++) {
      for (int h = 0; h < NH; h++) {
        for (int t = 0; t < T; t++) {
          F* row = dqkv + (static_cast<int64_t>(b) * T + t) * C3 + h * hs;
          std::fill(row, row + hs, F(0));
          std::fill(row + C, row + C + hs, F(0));
          std::fill(row + 2 * C, row + 2 * C + hs, F(0));
        }
        for (int t = 0; t < T; t++) {
          const F* att_row = att + ((static_cast<int64_t>(b) * NH + h) * T + t) * T;
          const F* dy = dout + (static_cast<int64_t>(b) * T + t) * C + h * hs;
          const F* q = qkv + (static_cast<int64_t>(b) * T + t) * C3 + h * hs;
          F* dq = dqkv + (static_cast<int64_t>(b) * T + t) * C3 + h * hs;
          // out = att @ v: gradients of att and v.
          F weighted = 0;  // sum_t2 att[t2] * datt[t2]
          for (int t2 = 0; t2 <= t; t2++) {
            const int64_t base = (static_cast<int64_t>(b) * T + t2) * C3 + h * hs;
            datt[t2] = Dot(qkv + base + 2 * C, dy, hs);
            weighted += att_row[t2] * datt[t2];
            Axpy(dqkv + base + 2 * C, att_row[t2], dy, hs);
          }
          // Softmax backward, then the scores q.k * scale.
          for (int t2 = 0; t2 <= t; t2++) {
            const int64_t base = (static_cast<int64_t>(b) * T + t2) * C3 + h * hs;
            const F dscore = att_row[t2] * (datt[t2] - weighted) * scale;
            Axpy(dq, dscore, qkv + base + C, hs);
            Axpy(dqkv + base + C, dscore, q, hs);
          }
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------
namespace {
template <typename F>
constexpr F kGeluScale = F(0.7978845608028654);  // sqrt(2 / pi)
}

template <typename F>
void gelu_forward(F* out, const F* inp, int64_t N) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < N; i++) {
    const F x = inp[i];
    const F cube = F(0.044715) * x * x * x;
    out[i] = F(0.5) * x * (F(1) + std::tanh(kGeluScale<F> * (x + cube)));
  }
}

template <typename F>
void gelu_backward(F* dinp, const F* inp, const F* dout, int64_t N) {
#pragma omp parallel for simd schedule(static)
  for (int64_t i = 0; i < N; i++) {
    const F x = inp[i];
    const F th = std::tanh(kGeluScale<F> * (x + F(0.044715) * x * x * x));
    const F sech2 = F(1) - th * th;
    const F grad = F(0.5) * (F(1) + th) +
                   F(0.5) * x * sech2 * kGeluScale<F> * (F(1) + F(3 * 0.044715) * x * x);
    dinp[i] = grad * dout[i];
  }
}

// ---------------------------------------------------------------------------------------
template <typename F>
void crossentropy_forward(F* losses, F* lse, const F* logits, const int32_t* targets, int N,
                          int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    const F* row = logits + static_cast<int64_t>(n) * V;
    F maxval = row[0];
    for (int i = 1; i < V; i++)
      maxval = std::max(maxval, row[i]);
    F sum = 0;
    for (int i = 0; i < V; i++)
      sum += std::exp(row[i] - maxval);
    lse[n] = maxval + std::log(sum);
    losses[n] = lse[n] - row[targets[n]];
  }
}

template <typename F>
void crossentropy_softmax_backward(F* logits_to_dlogits, const F* lse, const int32_t* targets,
                                   F dloss, int N, int V) {
#pragma omp parallel for schedule(static)
  for (int n = 0; n < N; n++) {
    F* row = logits_to_dlogits + static_cast<int64_t>(n) * V;
    const F l = lse[n];
    for (int i = 0; i < V; i++)
      row[i] = std::exp(row[i] - l) * dloss;
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
