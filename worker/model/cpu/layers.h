// CPU kernels of the GPT decoder: one `x_forward` / `x_backward` pair per layer, on raw
// row-major arrays with explicit shapes. Templated on the float type so that tests can run
// the very same code in double precision against finite differences; the model uses float.
// Callers own every buffer (the attention kernels keep a small per-thread scratch). Matrix
// products are split into one band of rows per OpenMP thread, each a single-threaded
// OpenBLAS call (so run OpenBLAS with one thread, as Gpt does); everything else runs on the
// same OpenMP threads. Each result is written by exactly one thread in a fixed order, so
// results are bit-identical from run to run for a fixed thread count.
#pragma once

#include <cstdint>

namespace tessera::model::cpu {

// ---- encoder: token + position embedding ----
// out (B,T,C) = wte[tokens[b,t], :] + wpe[t, :]. tokens (B,T), wte (V,C), wpe (maxT,C).
template <typename F>
void encoder_forward(F* out, const int32_t* tokens, const F* wte, const F* wpe, int B, int T,
                     int C);
// dwte (V,C) += scatter of dout by token; dwpe (maxT,C) += sum over b of dout[b,t,:].
template <typename F>
void encoder_backward(F* dwte, F* dwpe, const F* dout, const int32_t* tokens, int B, int T, int C);

// ---- layer norm over the last dimension (eps 1e-5) ----
// out (N,C) = (inp - mean) * rstd * weight + bias; mean (N), rstd (N) kept for backward.
template <typename F>
void layernorm_forward(F* out, F* mean, F* rstd, const F* inp, const F* weight, const F* bias,
                       int N, int C);
// dinp (N,C) += d/dinp; dweight (C), dbias (C) += their gradients.
template <typename F>
void layernorm_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight,
                        const F* mean, const F* rstd, int N, int C);

// ---- fully connected layer, weights stored (OC, C) like torch.nn.Linear ----
// out (N,OC) = inp (N,C) @ weight^T + bias (OC); bias may be null.
template <typename F>
void matmul_forward(F* out, const F* inp, const F* weight, const F* bias, int N, int C, int OC);
// out (N,OC) = residual (N,OC) + inp @ weight^T + bias: a projection added to the residual
// stream in one pass. Its backward is matmul_backward, the residual passing dout unchanged.
template <typename F>
void matmul_residual_forward(F* out, const F* residual, const F* inp, const F* weight,
                             const F* bias, int N, int C, int OC);
// dinp (N,C) = dout @ weight (overwritten; skipped when dinp is null);
// dweight (OC,C) += dout^T @ inp; dbias (OC) += column sums of dout (skipped when null).
template <typename F>
void matmul_backward(F* dinp, F* dweight, F* dbias, const F* dout, const F* inp, const F* weight,
                     int N, int C, int OC);

// ---- causal multi-head self-attention, NH heads of size hs = C / NH ----
// qkv (B,T,3C) holds q | k | v per position, head h at columns [h*hs, (h+1)*hs) of each.
// out (B,T,C) = softmax(q k^T / sqrt(hs), causal) v per head; att (B,NH,T,T) keeps the
// probabilities (only t2 <= t is written and read).
template <typename F>
void attention_forward(F* out, F* att, const F* qkv, int B, int T, int C, int NH);
// dqkv (B,T,3C) = gradient of qkv (overwritten) from dout (B,T,C).
template <typename F>
void attention_backward(F* dqkv, const F* dout, const F* qkv, const F* att, int B, int T, int C,
                        int NH);

// ---- GELU, tanh approximation ----
// out (N) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3))).
template <typename F>
void gelu_forward(F* out, const F* inp, int64_t N);
// dinp (N) = gelu'(inp) * dout (overwritten; dinp may alias dout).
template <typename F>
void gelu_backward(F* dinp, const F* inp, const F* dout, int64_t N);

// ---- softmax + cross-entropy, fused ----
// logits (N,V), targets (N). losses (N) = logsumexp(row) - row[target]; lse (N) keeps the
// log-sum-exp for backward.
template <typename F>
void crossentropy_forward(F* losses, F* lse, const F* logits, const int32_t* targets, int N, int V);
// dlogits (N,V) = (softmax(row) - onehot(target)) * dloss, written over logits (in place).
template <typename F>
void crossentropy_softmax_backward(F* logits_to_dlogits, const F* lse, const int32_t* targets,
                                   F dloss, int N, int V);

}  // namespace tessera::model::cpu
