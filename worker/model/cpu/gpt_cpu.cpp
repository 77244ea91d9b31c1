// GPT forward and backward on CPU; see gpt_cpu.h.
#include "worker/model/cpu/gpt_cpu.h"

#include <algorithm>
#include <cassert>

#include "worker/model/cpu/layers.h"

namespace tessera::model::cpu {

template <typename F>
GptParams<F> BindParams(const GptConfig& config, F* base) {
  const std::vector<ParameterTensor> tensors = GptParameterTensors(config);
  // Buffer order (see GptParameterTensors): wte, wpe, 12 tensors per block, lnf w/b.
  constexpr size_t kPerBlock = 12;
  assert(tensors.size() == 4 + kPerBlock * config.layers);
  auto at = [&](size_t i) { return base + tensors[i].offset; };
  GptParams<F> p;
  p.wte = at(0);
  p.wpe = at(1);
  p.blocks.resize(config.layers);
  for (int l = 0; l < config.layers; l++) {
    const size_t i = 2 + kPerBlock * l;
    typename GptParams<F>::Block& blk = p.blocks[l];
    blk.ln1w = at(i + 0);
    blk.ln1b = at(i + 1);
    blk.qkvw = at(i + 2);
    blk.qkvb = at(i + 3);
    blk.attprojw = at(i + 4);
    blk.attprojb = at(i + 5);
    blk.ln2w = at(i + 6);
    blk.ln2b = at(i + 7);
    blk.fcw = at(i + 8);
    blk.fcb = at(i + 9);
    blk.fcprojw = at(i + 10);
    blk.fcprojb = at(i + 11);
  }
  p.lnfw = at(tensors.size() - 2);
  p.lnfb = at(tensors.size() - 1);
  return p;
}

template <typename F>
void GptActivations<F>::Allocate(const GptConfig& config, int batch, int seq) {
  if (batch == B && seq == T)
    return;
  B = batch;
  T = seq;
  const int64_t N = static_cast<int64_t>(B) * T;
  const int64_t C = config.d_model;
  const int64_t NH = config.heads;
  encoded.assign(N * C, F(0));
  blocks.resize(config.layers);
  for (Block& blk : blocks) {
    blk.ln1.assign(N * C, F(0));
    blk.ln1_mean.assign(N, F(0));
    blk.ln1_rstd.assign(N, F(0));
    blk.qkv.assign(N * 3 * C, F(0));
    blk.atty.assign(N * C, F(0));
    blk.att.assign(static_cast<int64_t>(B) * NH * T * T, F(0));
    blk.residual2.assign(N * C, F(0));
    blk.ln2.assign(N * C, F(0));
    blk.ln2_mean.assign(N, F(0));
    blk.ln2_rstd.assign(N, F(0));
    blk.fch.assign(N * 4 * C, F(0));
    blk.fch_gelu.assign(N * 4 * C, F(0));
    blk.residual3.assign(N * C, F(0));
  }
  lnf.assign(N * C, F(0));
  lnf_mean.assign(N, F(0));
  lnf_rstd.assign(N, F(0));
  logits.assign(N * config.vocab, F(0));
  losses.assign(N, F(0));
  lse.assign(N, F(0));
  dresidual.assign(N * C, F(0));
  dln.assign(N * C, F(0));
  datty.assign(N * C, F(0));
  dqkv.assign(N * 3 * C, F(0));
  dfch.assign(N * 4 * C, F(0));
}

template <typename F>
double GptForward(const GptConfig& config, const GptParams<F>& params, GptActivations<F>& acts,
                  const int32_t* tokens, const int32_t* targets, int B, int T) {
  const int C = config.d_model;
  const int NH = config.heads;
  const int V = config.vocab;
  const int N = B * T;
  acts.Allocate(config, B, T);

  encoder_forward(acts.encoded.data(), tokens, params.wte, params.wpe, B, T, C);
  const F* residual = acts.encoded.data();  // (B,T,C) input of the block
  for (int l = 0; l < config.layers; l++) {
    const typename GptParams<F>::Block& p = params.blocks[l];
    typename GptActivations<F>::Block& a = acts.blocks[l];
    layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), residual, p.ln1w, p.ln1b,
                      N, C);
    matmul_forward(a.qkv.data(), a.ln1.data(), p.qkvw, p.qkvb, N, C, 3 * C);
    attention_forward(a.atty.data(), a.att.data(), a.qkv.data(), B, T, C, NH);
    matmul_residual_forward(a.residual2.data(), residual, a.atty.data(), p.attprojw, p.attprojb, N,
                            C, C);
    layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.residual2.data(),
                      p.ln2w, p.ln2b, N, C);
    matmul_forward(a.fch.data(), a.ln2.data(), p.fcw, p.fcb, N, C, 4 * C);
    gelu_forward(a.fch_gelu.data(), a.fch.data(), static_cast<int64_t>(N) * 4 * C);
    matmul_residual_forward(a.residual3.data(), a.residual2.data(), a.fch_gelu.data(), p.fcprojw,
                            p.fcprojb, N, 4 * C, C);
    residual = a.residual3.data();
  }
  layernorm_forward(acts.lnf.data(), acts.lnf_mean.data(), acts.lnf_rstd.data(), residual,
                    params.lnfw, params.lnfb, N, C);
  matmul_forward(acts.logits.data(), acts.lnf.data(), params.wte, static_cast<const F*>(nullptr), N,
                 C, V);
  if (targets == nullptr)
    return 0.0;
  crossentropy_forward(acts.losses.data(), acts.lse.data(), acts.logits.data(), targets, N, V);
  double sum = 0;
  for (int n = 0; n < N; n++)
    sum += static_cast<double>(acts.losses[n]);
  return sum / N;
}

template <typename F>
void GptBackward(const GptConfig& config, const GptParams<F>& params, const GptParams<F>& grads,
                 GptActivations<F>& acts, const int32_t* tokens, const int32_t* targets, int B,
                 int T, F loss_scale, const std::function<void(int)>* block_done) {
  const int C = config.d_model;
  const int NH = config.heads;
  const int V = config.vocab;
  const int N = B * T;
  assert(acts.B == B && acts.T == T);

  // Loss -> logits -> final layer norm. The mean over B*T positions scales each row by 1/N.
  crossentropy_softmax_backward(acts.logits.data(), acts.lse.data(), targets, loss_scale / F(N), N,
                                V);
  const F* dlogits = acts.logits.data();
  matmul_backward(acts.dln.data(), grads.wte, static_cast<F*>(nullptr), dlogits, acts.lnf.data(),
                  params.wte, N, C, V);
  std::fill(acts.dresidual.begin(), acts.dresidual.end(), F(0));
  const F* last = config.layers > 0 ? acts.blocks.back().residual3.data() : acts.encoded.data();
  layernorm_backward(acts.dresidual.data(), grads.lnfw, grads.lnfb, acts.dln.data(), last,
                     params.lnfw, acts.lnf_mean.data(), acts.lnf_rstd.data(), N, C);

  // Blocks in reverse. dresidual holds the gradient of the block output; the residual
  // connections pass it through unchanged, and each branch adds its part.
  F* dres = acts.dresidual.data();
  for (int l = config.layers - 1; l >= 0; l--) {
    const typename GptParams<F>::Block& p = params.blocks[l];
    const typename GptParams<F>::Block& g = grads.blocks[l];
    const typename GptActivations<F>::Block& a = acts.blocks[l];
    const F* residual = l == 0 ? acts.encoded.data() : acts.blocks[l - 1].residual3.data();
    // MLP branch: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2)))).
    F* dfch = acts.dfch.data();
    matmul_backward(dfch, g.fcprojw, g.fcprojb, dres, a.fch_gelu.data(), p.fcprojw, N, 4 * C, C);
    gelu_backward(dfch, a.fch.data(), dfch, static_cast<int64_t>(N) * 4 * C);
    matmul_backward(acts.dln.data(), g.fcw, g.fcb, dfch, a.ln2.data(), p.fcw, N, C, 4 * C);
    layernorm_backward(dres, g.ln2w, g.ln2b, acts.dln.data(), a.residual2.data(), p.ln2w,
                       a.ln2_mean.data(), a.ln2_rstd.data(), N, C);
    // Attention branch: residual2 = residual + attproj(attention(qkv(ln1(residual)))).
    matmul_backward(acts.datty.data(), g.attprojw, g.attprojb, dres, a.atty.data(), p.attprojw, N,
                    C, C);
    attention_backward(acts.dqkv.data(), acts.datty.data(), a.qkv.data(), a.att.data(), B, T, C,
                       NH);
    matmul_backward(acts.dln.data(), g.qkvw, g.qkvb, acts.dqkv.data(), a.ln1.data(), p.qkvw, N, C,
                    3 * C);
    layernorm_backward(dres, g.ln1w, g.ln1b, acts.dln.data(), residual, p.ln1w, a.ln1_mean.data(),
                       a.ln1_rstd.data(), N, C);
    if (block_done != nullptr)
      (*block_done)(l);
  }
  encoder_backward(grads.wte, grads.wpe, dres, tokens, B, T, C);
  if (block_done != nullptr)
    (*block_done)(-1);
}

template struct GptActivations<float>;
template struct GptActivations<double>;
template GptParams<float> BindParams<float>(const GptConfig&, float*);
template GptParams<double> BindParams<double>(const GptConfig&, double*);
template double GptForward<float>(const GptConfig&, const GptParams<float>&, GptActivations<float>&,
                                  const int32_t*, const int32_t*, int, int);
template double GptForward<double>(const GptConfig&, const GptParams<double>&,
                                   GptActivations<double>&, const int32_t*, const int32_t*, int,
                                   int);
template void GptBackward<float>(const GptConfig&, const GptParams<float>&, const GptParams<float>&,
                                 GptActivations<float>&, const int32_t*, const int32_t*, int, int,
                                 float, const std::function<void(int)>*);
template void GptBackward<double>(const GptConfig&, const GptParams<double>&,
                                  const GptParams<double>&, GptActivations<double>&, const int32_t*,
                                  const int32_t*, int, int, double,
                                  const std::function<void(int)>*);

}  // namespace tessera::model::cpu
