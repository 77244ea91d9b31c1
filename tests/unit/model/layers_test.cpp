// Each layer's backward against central finite differences, in double precision. For a layer
// y = f(x, w) and a fixed random upstream gradient g, the scalar L = sum(g * y) has
// dL/dx = backward(g); every input and parameter element is perturbed by +-h and the
// difference quotient compared with the analytic gradient.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <functional>
#include <random>
#include <string>
#include <vector>

#include "worker/model/cpu/layers.h"

namespace tessera::model::cpu {
namespace {

using Vec = std::vector<double>;

Vec Random(size_t n, std::mt19937_64& rng, double scale = 1.0) {
  std::normal_distribution<double> dist(0.0, scale);
  Vec v(n);
  for (double& x : v)
    x = dist(rng);
  return v;
}

double Dot(const Vec& a, const Vec& b) {
  double s = 0;
  for (size_t i = 0; i < a.size(); i++)
    s += a[i] * b[i];
  return s;
}

// Compares analytic[i] with (L(x + h e_i) - L(x - h e_i)) / 2h for every `stride`-th element
// of x.
void ExpectGradient(const std::string& what, Vec& x, const Vec& analytic,
                    const std::function<double()>& loss, size_t stride = 1) {
  ASSERT_EQ(x.size(), analytic.size()) << what;
  const double h = 1e-5;
  double worst = 0;
  for (size_t i = 0; i < x.size(); i += stride) {
    const double saved = x[i];
    x[i] = saved + h;
    const double up = loss();
    x[i] = saved - h;
    const double down = loss();
    x[i] = saved;
    const double numeric = (up - down) / (2 * h);
    const double err = std::abs(numeric - analytic[i]);
    worst = std::max(worst, err / (1e-8 + std::abs(numeric)));
    ASSERT_LE(err, 1e-8 + 1e-6 * std::abs(numeric))
        << what << "[" << i << "]: analytic " << analytic[i] << " numeric " << numeric;
  }
  ::testing::Test::RecordProperty(what + "_worst_relative_error", std::to_string(worst));
}

class ModelLayersTest : public ::testing::Test {
 protected:
  std::mt19937_64 rng{42};
  static constexpr int B = 2, T = 5, C = 8, NH = 2;
  static constexpr int N = B * T;
};

TEST_F(ModelLayersTest, Encoder) {
  const int V = 7;
  std::vector<int32_t> tokens = {1, 3, 3, 0, 6, 3, 2, 1, 1, 5};  // repeated ids on purpose
  Vec wte = Random(V * C, rng), wpe = Random(T * C, rng), g = Random(N * C, rng);
  auto loss = [&] {
    Vec out(N * C);
    encoder_forward(out.data(), tokens.data(), wte.data(), wpe.data(), B, T, C);
    return Dot(out, g);
  };
  Vec dwte(V * C, 0.0), dwpe(T * C, 0.0);
  encoder_backward(dwte.data(), dwpe.data(), g.data(), tokens.data(), B, T, C);
  ExpectGradient("dwte", wte, dwte, loss);
  ExpectGradient("dwpe", wpe, dwpe, loss);
}

TEST_F(ModelLayersTest, LayerNorm) {
  Vec x = Random(N * C, rng, 2.0), w = Random(C, rng), b = Random(C, rng), g = Random(N * C, rng);
  Vec mean(N), rstd(N);
  auto loss = [&] {
    Vec out(N * C);
    layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), N, C);
    return Dot(out, g);
  };
  loss();
  // dinp accumulates: start from a known non-zero value and subtract it afterwards.
  Vec dx(N * C, 0.5), dw(C, 0.0), db(C, 0.0);
  layernorm_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), mean.data(),
                     rstd.data(), N, C);
  for (double& v : dx)
    v -= 0.5;
  ExpectGradient("dinp", x, dx, loss);
  ExpectGradient("dweight", w, dw, loss);
  ExpectGradient("dbias", b, db, loss);
}

TEST_F(ModelLayersTest, Matmul) {
  const int OC = 6;
  Vec x = Random(N * C, rng), w = Random(OC * C, rng), b = Random(OC, rng), g = Random(N * OC, rng);
  auto loss = [&] {
    Vec out(N * OC);
    matmul_forward(out.data(), x.data(), w.data(), b.data(), N, C, OC);
    return Dot(out, g);
  };
  Vec dx(N * C, 7.0), dw(OC * C, 0.0), db(OC, 0.0);  // dinp is overwritten, not accumulated
  matmul_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), N, C, OC);
  ExpectGradient("dinp", x, dx, loss);
  ExpectGradient("dweight", w, dw, loss);
  ExpectGradient("dbias", b, db, loss);
}

TEST_F(ModelLayersTest, MatmulResidual) {
  const int OC = 6;
  Vec r = Random(N * OC, rng), x = Random(N * C, rng), w = Random(OC * C, rng), b = Random(OC, rng),
      g = Random(N * OC, rng);
  Vec out(N * OC), plain(N * OC);
  matmul_residual_forward(out.data(), r.data(), x.data(), w.data(), b.data(), N, C, OC);
  matmul_forward(plain.data(), x.data(), w.data(), b.data(), N, C, OC);
  for (int i = 0; i < N * OC; i++)
    EXPECT_NEAR(out[i], plain[i] + r[i], 1e-12) << i;
  auto loss = [&] {
    matmul_residual_forward(out.data(), r.data(), x.data(), w.data(), b.data(), N, C, OC);
    return Dot(out, g);
  };
  Vec dx(N * C), dw(OC * C, 0.0), db(OC, 0.0);
  matmul_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), N, C, OC);
  ExpectGradient("dinp", x, dx, loss);
  ExpectGradient("dweight", w, dw, loss);
  ExpectGradient("dresidual", r, g, loss);  // the residual passes the gradient unchanged
}

TEST_F(ModelLayersTest, Attention) {
  Vec qkv = Random(N * 3 * C, rng), g = Random(N * C, rng);
  Vec att(B * NH * T * T);
  auto loss = [&] {
    Vec out(N * C);
    attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
    return Dot(out, g);
  };
  loss();
  Vec dqkv(N * 3 * C, 3.0);  // overwritten
  attention_backward(dqkv.data(), g.data(), qkv.data(), att.data(), B, T, C, NH);
  ExpectGradient("dqkv", qkv, dqkv, loss);
}

// Head size 80 and T = 40 exercise the register-blocked paths of the attention kernels
// (blocks of 4 vectors, single vectors, and the scalar tail); the small test above only the
// scalar one.
TEST_F(ModelLayersTest, AttentionWideHeads) {
  const int b = 1, t = 40, c = 160, nh = 2;
  const int n = b * t;
  Vec qkv = Random(n * 3 * c, rng, 0.3), g = Random(n * c, rng);
  Vec att(b * nh * t * t);
  auto loss = [&] {
    Vec out(n * c);
    attention_forward(out.data(), att.data(), qkv.data(), b, t, c, nh);
    return Dot(out, g);
  };
  loss();
  Vec dqkv(n * 3 * c);
  attention_backward(dqkv.data(), g.data(), qkv.data(), att.data(), b, t, c, nh);
  ExpectGradient("dqkv", qkv, dqkv, loss, 61);

  // The float kernels (other vector width, fast exp) agree with the double ones.
  std::vector<float> qkv_f(qkv.begin(), qkv.end()), g_f(g.begin(), g.end());
  std::vector<float> out_f(n * c), att_f(att.size()), dqkv_f(dqkv.size());
  attention_forward(out_f.data(), att_f.data(), qkv_f.data(), b, t, c, nh);
  attention_backward(dqkv_f.data(), g_f.data(), qkv_f.data(), att_f.data(), b, t, c, nh);
  Vec out(n * c);
  attention_forward(out.data(), att.data(), qkv.data(), b, t, c, nh);
  for (int i = 0; i < n * c; i++)
    ASSERT_NEAR(out_f[i], out[i], 1e-5) << i;
  for (size_t i = 0; i < dqkv.size(); i++)
    ASSERT_NEAR(dqkv_f[i], dqkv[i], 1e-4) << i;
}

TEST_F(ModelLayersTest, FloatGeluAndSoftmaxMatchDouble) {
  // GELU over [-12, 12] and cross-entropy rows in float (fast exp and tanh) against double.
  const int n = 2401;
  Vec x(n), dy(n, 1.0);
  for (int i = 0; i < n; i++)
    x[i] = -12.0 + 24.0 * i / (n - 1);
  std::vector<float> xf(x.begin(), x.end()), yf(n), dxf(n), dyf(n, 1.0f);
  Vec y(n), dx(n);
  gelu_forward(y.data(), x.data(), n);
  gelu_backward(dx.data(), x.data(), dy.data(), n);
  gelu_forward(yf.data(), xf.data(), n);
  gelu_backward(dxf.data(), xf.data(), dyf.data(), n);
  for (int i = 0; i < n; i++) {
    ASSERT_NEAR(yf[i], y[i], 2e-6 * std::max(1.0, std::abs(y[i]))) << x[i];
    ASSERT_NEAR(dxf[i], dx[i], 2e-6) << x[i];
  }
  const int V = 300;
  Vec logits = Random(4 * V, rng, 20.0), losses(4), lse(4);
  std::vector<float> logits_f(logits.begin(), logits.end()), losses_f(4), lse_f(4);
  const std::vector<int32_t> targets = {0, 17, 299, 150};
  crossentropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), 4, V);
  crossentropy_forward(losses_f.data(), lse_f.data(), logits_f.data(), targets.data(), 4, V);
  for (int i = 0; i < 4; i++)
    EXPECT_NEAR(losses_f[i], losses[i], 1e-5 * (1 + losses[i]));
}

TEST_F(ModelLayersTest, AttentionIsCausalAndNormalised) {
  Vec qkv = Random(N * 3 * C, rng), out(N * C), att(B * NH * T * T);
  attention_forward(out.data(), att.data(), qkv.data(), B, T, C, NH);
  for (int bh = 0; bh < B * NH; bh++) {
    for (int t = 0; t < T; t++) {
      double sum = 0;
      for (int t2 = 0; t2 <= t; t2++)
        sum += att[(bh * T + t) * T + t2];
      EXPECT_NEAR(sum, 1.0, 1e-12);
    }
  }
  // A change to the last position's key and value leaves every earlier output unchanged.
  Vec changed = qkv;
  for (int b = 0; b < B; b++) {
    for (int i = C; i < 3 * C; i++)
      changed[(b * T + T - 1) * 3 * C + i] += 1.0;
  }
  Vec out2(N * C);
  attention_forward(out2.data(), att.data(), changed.data(), B, T, C, NH);
  for (int b = 0; b < B; b++) {
    for (int t = 0; t < T - 1; t++) {
      for (int i = 0; i < C; i++) {
        EXPECT_EQ(out[(b * T + t) * C + i], out2[(b * T + t) * C + i]);
      }
    }
    EXPECT_NE(out[(b * T + T - 1) * C], out2[(b * T + T - 1) * C]);
  }
}

TEST_F(ModelLayersTest, Gelu) {
  Vec x = Random(N * C, rng, 2.0), g = Random(N * C, rng);
  auto loss = [&] {
    Vec out(N * C);
    gelu_forward(out.data(), x.data(), N * C);
    return Dot(out, g);
  };
  Vec dx(N * C);
  gelu_backward(dx.data(), x.data(), g.data(), N * C);
  ExpectGradient("dinp", x, dx, loss);
  // Known values of the tanh approximation.
  const double in[] = {0.0, 1.0, -1.0};
  double out[3];
  gelu_forward(out, in, 3);
  EXPECT_NEAR(out[0], 0.0, 1e-12);
  EXPECT_NEAR(out[1], 0.8411919906082768, 1e-9);
  EXPECT_NEAR(out[2], -0.15880800939172324, 1e-9);
}

TEST_F(ModelLayersTest, CrossEntropy) {
  const int V = 9;
  Vec logits = Random(N * V, rng, 3.0);
  std::vector<int32_t> targets(N);
  for (int n = 0; n < N; n++)
    targets[n] = (n * 5) % V;
  const double dloss = 0.7;
  auto loss = [&] {
    Vec losses(N), lse(N);
    crossentropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), N, V);
    double sum = 0;
    for (double l : losses)
      sum += l;
    return dloss * sum;
  };
  // Reference value of one row: -log softmax at the target.
  {
    Vec losses(N), lse(N);
    crossentropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), N, V);
    double z = 0;
    for (int i = 0; i < V; i++)
      z += std::exp(logits[i]);
    EXPECT_NEAR(losses[0], -std::log(std::exp(logits[targets[0]]) / z), 1e-12);
  }
  Vec d = logits, losses(N), lse(N);
  crossentropy_forward(losses.data(), lse.data(), d.data(), targets.data(), N, V);
  crossentropy_softmax_backward(d.data(), lse.data(), targets.data(), dloss, N, V);
  ExpectGradient("dlogits", logits, d, loss);
}

// Reference attention written out directly: for every query t, softmax over t2 <= t of
// q_t . k_t2 / sqrt(hs), then the weighted sum of v_t2. Odd shapes (T = 7, three heads of 4)
// and a sentinel above the diagonal, which the kernel must leave alone.
TEST_F(ModelLayersTest, AttentionMatchesScaledSoftmaxComputedDirectly) {
  const int b_ = 2, t_ = 7, c_ = 12, nh = 3, hs = c_ / nh;
  Vec qkv = Random(b_ * t_ * 3 * c_, rng), out(b_ * t_ * c_);
  Vec att(b_ * nh * t_ * t_, 123.0);
  attention_forward(out.data(), att.data(), qkv.data(), b_, t_, c_, nh);
  for (int b = 0; b < b_; b++) {
    for (int h = 0; h < nh; h++) {
      for (int t = 0; t < t_; t++) {
        const double* q = &qkv[(b * t_ + t) * 3 * c_ + h * hs];
        Vec p(t + 1);
        double maxval = -1e300, sum = 0;
        for (int t2 = 0; t2 <= t; t2++) {
          const double* k = &qkv[(b * t_ + t2) * 3 * c_ + c_ + h * hs];
          double dot = 0;
          for (int i = 0; i < hs; i++)
            dot += q[i] * k[i];
          p[t2] = dot / std::sqrt(static_cast<double>(hs));
          maxval = std::max(maxval, p[t2]);
        }
        for (double& x : p)
          sum += (x = std::exp(x - maxval));
        const double* row = &att[((b * nh + h) * t_ + t) * t_];
        for (int t2 = 0; t2 < t_; t2++) {
          if (t2 <= t)
            EXPECT_NEAR(row[t2], p[t2] / sum, 1e-12) << "b " << b << " h " << h << " t " << t;
          else
            EXPECT_EQ(row[t2], 123.0) << "above the diagonal: t " << t << " t2 " << t2;
        }
        for (int i = 0; i < hs; i++) {
          double want = 0;
          for (int t2 = 0; t2 <= t; t2++)
            want += p[t2] / sum * qkv[(b * t_ + t2) * 3 * c_ + 2 * c_ + h * hs + i];
          EXPECT_NEAR(out[(b * t_ + t) * c_ + h * hs + i], want, 1e-12);
        }
      }
    }
  }
}

// Scores far beyond exp's range (hundreds, of either sign, with one key far above the rest)
// still give finite, exact probabilities: the softmax subtracts each row's maximum.
TEST_F(ModelLayersTest, AttentionStaysExactForScoresBeyondExpRange) {
  const int t_ = 6, c_ = 4;  // one head of 4
  const double key_sizes[t_] = {1.0, 2.5, 1.2, 1.1, 1.3, 1.0};
  Vec qkv(t_ * 3 * c_, 0.0);
  for (int t = 0; t < t_; t++) {
    for (int i = 0; i < c_; i++) {
      qkv[t * 3 * c_ + i] = (t % 2 == 0 ? 400.0 : -400.0) * (1.0 + 0.01 * t);  // q
      qkv[t * 3 * c_ + c_ + i] = key_sizes[t];                                 // k
      qkv[t * 3 * c_ + 2 * c_ + i] = t + 0.1 * i;                              // v
    }
  }
  Vec out(t_ * c_), att(t_ * t_);
  attention_forward(out.data(), att.data(), qkv.data(), 1, t_, c_, 1);
  for (int t = 0; t < t_; t++) {
    Vec s(t + 1);
    for (int t2 = 0; t2 <= t; t2++)
      s[t2] = qkv[t * 3 * c_] * key_sizes[t2] * c_ / std::sqrt(double{c_});
    const double maxval = *std::max_element(s.begin(), s.end());
    double sum = 0;
    for (double x : s)
      sum += std::exp(x - maxval);
    for (int t2 = 0; t2 <= t; t2++) {
      const double want = std::exp(s[t2] - maxval) / sum;
      ASSERT_TRUE(std::isfinite(att[t * t_ + t2])) << "t " << t << " t2 " << t2;
      EXPECT_NEAR(att[t * t_ + t2], want, 1e-12) << "t " << t << " t2 " << t2;
    }
    for (int i = 0; i < c_; i++)
      ASSERT_TRUE(std::isfinite(out[t * c_ + i])) << "t " << t;
  }
}

// Layer norm against mean, biased variance and eps = 1e-5 computed here, including a
// constant row, where eps alone sets the scale.
TEST_F(ModelLayersTest, LayerNormUsesBiasedVarianceAndEpsilonOneInHundredThousand) {
  const int c_ = 5;
  const Vec x = {1.0, 2.0, 3.0, 4.0, 10.0, 7.0, 7.0, 7.0, 7.0, 7.0};
  const Vec w = {1.0, -2.0, 0.5, 3.0, 1.5}, b = {0.1, 0.2, -0.3, 0.0, 1.0};
  Vec out(2 * c_), mean(2), rstd(2);
  layernorm_forward(out.data(), mean.data(), rstd.data(), x.data(), w.data(), b.data(), 2, c_);
  EXPECT_DOUBLE_EQ(mean[0], 4.0);
  EXPECT_NEAR(rstd[0], 1.0 / std::sqrt(10.0 + 1e-5), 1e-15);  // variance (9+4+1+0+36)/5
  EXPECT_DOUBLE_EQ(mean[1], 7.0);
  EXPECT_NEAR(rstd[1], 1.0 / std::sqrt(1e-5), 1e-9);
  for (int i = 0; i < c_; i++) {
    EXPECT_NEAR(out[i], (x[i] - 4.0) / std::sqrt(10.0 + 1e-5) * w[i] + b[i], 1e-12) << i;
    EXPECT_DOUBLE_EQ(out[c_ + i], b[i]) << i;
  }
}

// Products large enough to be split into bands of rows over several threads (odd row counts,
// so the last band is short) equal the products written out here, forward and backward.
TEST_F(ModelLayersTest, MatmulSplitOverThreadsMatchesTheProductComputedDirectly) {
  const int saved_threads = omp_get_max_threads();
  omp_set_num_threads(3);
  const int n = 67, c = 128, oc = 131;  // n * c * oc > 2^20: every product is split
  Vec x = Random(n * c, rng), w = Random(oc * c, rng), bias = Random(oc, rng),
      g = Random(n * oc, rng);
  Vec out(n * oc), dx(n * c), dw(oc * c, 0.5), db(oc, 0.25);
  matmul_forward(out.data(), x.data(), w.data(), bias.data(), n, c, oc);
  matmul_backward(dx.data(), dw.data(), db.data(), g.data(), x.data(), w.data(), n, c, oc);
  omp_set_num_threads(saved_threads);
  for (int r = 0; r < n; r++) {
    for (int o = 0; o < oc; o++) {
      double want = bias[o];
      for (int i = 0; i < c; i++)
        want += x[r * c + i] * w[o * c + i];
      ASSERT_NEAR(out[r * oc + o], want, 1e-10) << "out row " << r << " col " << o;
    }
    for (int i = 0; i < c; i++) {
      double want = 0;
      for (int o = 0; o < oc; o++)
        want += g[r * oc + o] * w[o * c + i];
      ASSERT_NEAR(dx[r * c + i], want, 1e-10) << "dinp row " << r << " col " << i;
    }
  }
  for (int o = 0; o < oc; o++) {
    double want_bias = 0.25;
    for (int r = 0; r < n; r++)
      want_bias += g[r * oc + o];
    ASSERT_NEAR(db[o], want_bias, 1e-10) << "dbias " << o;
    for (int i = 0; i < c; i++) {
      double want = 0.5;  // dweight accumulates
      for (int r = 0; r < n; r++)
        want += g[r * oc + o] * x[r * c + i];
      ASSERT_NEAR(dw[o * c + i], want, 1e-10) << "dweight row " << o << " col " << i;
    }
  }
}

// The float softmax (fast exp) within a few float roundings of the exact one, over the whole
// range it promises: differences to the row maximum down to -80.
TEST_F(ModelLayersTest, FloatSoftmaxGradientIsAccurateDownToExpOfMinusEighty) {
  const int V = 4001;
  std::vector<float> logits(V);
  for (int i = 0; i < V; i++)
    logits[i] = -80.0f + 80.0f * static_cast<float>(i) / (V - 1);
  const int32_t target = 0;
  std::vector<float> losses(1), lse(1);
  crossentropy_forward(losses.data(), lse.data(), logits.data(), &target, 1, V);
  double exact_lse = 0;  // of the same float inputs, in double with libm
  {
    double sum = 0;
    for (float l : logits)
      sum += std::exp(static_cast<double>(l));
    exact_lse = std::log(sum);
  }
  EXPECT_NEAR(lse[0], exact_lse, 1e-6);
  std::vector<float> d = logits;
  crossentropy_softmax_backward(d.data(), lse.data(), &target, 1.0f, 1, V);
  double worst = 0;
  for (int i = 1; i < V; i++) {
    // The difference as the kernel forms it, in float; then exp in double.
    const double want = std::exp(static_cast<double>(logits[i] - lse[0]));
    worst = std::max(worst, std::abs(d[i] - want) / want);
  }
  RecordProperty("worst_relative_error", std::to_string(worst));
  EXPECT_LT(worst, 3e-7) << worst;
}

// Logits far beyond exp's range, the largest not first in its row: the loss is still
// logsumexp - logit, exact, and its gradient the softmax minus the one-hot target.
TEST_F(ModelLayersTest, CrossEntropyStaysExactForLogitsBeyondExpRange) {
  const int V = 4;
  const Vec logits = {-1000.0, 0.0, 1000.0, 500.0, 3000.0, -3000.0, 2999.0, 0.0};
  const std::vector<int32_t> targets = {3, 0};
  Vec losses(2), lse(2);
  crossentropy_forward(losses.data(), lse.data(), logits.data(), targets.data(), 2, V);
  EXPECT_NEAR(lse[0], 1000.0, 1e-9);
  EXPECT_NEAR(losses[0], 500.0, 1e-9);
  EXPECT_NEAR(lse[1], 3000.0 + std::log1p(std::exp(-1.0)), 1e-9);
  EXPECT_NEAR(losses[1], std::log1p(std::exp(-1.0)), 1e-9);
  Vec d = logits;
  crossentropy_softmax_backward(d.data(), lse.data(), targets.data(), 0.5, 2, V);
  const Vec p1 = {1.0 / (1.0 + std::exp(-1.0)), 0.0, std::exp(-1.0) / (1.0 + std::exp(-1.0)), 0.0};
  const Vec want = {0.0, 0.0, 0.5, -0.5, 0.5 * p1[0] - 0.5, 0.0, 0.5 * p1[2], 0.0};
  for (int i = 0; i < 2 * V; i++)
    EXPECT_NEAR(d[i], want[i], 1e-12) << i;
}

}  // namespace
}  // namespace tessera::model::cpu
