// GPT forward and backward on CPU; see gpt_cpu.h.
#include "worker/model/cpu/gpt_cpu.h"

#include <algorithm>
#include <cassert>
#include <iterator>
#include <string>
#include <type_traits>

#include "worker/model/cpu/layers.h"

namespace tessera::model::cpu {

namespace {

// Sums a shard's partial results over its tensor-parallel ranks (float only: the double
// instantiation serves the whole-model gradient check).
template <typename F>
void TensorAllReduce(const TensorSum* tensor_sum, F* data, int64_t count) {
  if constexpr (std::is_same_v<F, float>) {
    assert(tensor_sum != nullptr);
    (*tensor_sum)(data, count);
  } else {
    (void)tensor_sum, (void)data, (void)count;
    assert(false && "tensor parallelism runs in float");
  }
}

}  // namespace

template <typename F>
GptParams<F> BindParams(const GptConfig& config, F* base, const GptShard& shard) {
  GptParams<F> p;
  const int first = shard.first_layer;
  p.blocks.resize(shard.end(config) - first);
  // Block tensors in buffer order (see GptParameterTensors).
  static const char* const kBlockTensors[] = {
      "ln1.weight",       "ln1.bias",       "attn.qkv.weight", "attn.qkv.bias",
      "attn.proj.weight", "attn.proj.bias", "ln2.weight",      "ln2.bias",
      "mlp.fc.weight",    "mlp.fc.bias",    "mlp.proj.weight", "mlp.proj.bias"};
  for (const ShardTensor& t : GptShardTensors(config, shard)) {
    F* at = base + t.local.offset;
    const std::string& name = t.local.name;
    if (name == "wte") {
      p.wte = at;
    } else if (name == "wpe") {
      p.wpe = at;
    } else if (name == "lnf.weight") {
      p.lnfw = at;
    } else if (name == "lnf.bias") {
      p.lnfb = at;
    } else {
      typename GptParams<F>::Block& blk = p.blocks[t.local.layer - first];
      F** slots[] = {&blk.ln1w, &blk.ln1b, &blk.qkvw, &blk.qkvb, &blk.attprojw, &blk.attprojb,
                     &blk.ln2w, &blk.ln2b, &blk.fcw,  &blk.fcb,  &blk.fcprojw,  &blk.fcprojb};
      const std::string suffix = name.substr(name.find('.') + 1);
      for (size_t i = 0; i < std::size(kBlockTensors); i++) {
        if (suffix == kBlockTensors[i])
          *slots[i] = at;
      }
    }
  }
  return p;
}

template <typename F>
void GptActivations<F>::Allocate(const GptConfig& config, int batch, int seq,
                                 const GptShard& shard) {
  if (batch == B && seq == T)
    return;
  B = batch;
  T = seq;
  const int64_t N = static_cast<int64_t>(B) * T;
  const int64_t C = config.d_model;
  const int64_t Ct = C / shard.tensor_size;
  const int64_t NHt = config.heads / shard.tensor_size;
  encoded.assign(N * C, F(0));
  blocks.resize(shard.end(config) - shard.first_layer);
  for (Block& blk : blocks) {
    blk.ln1.assign(N * C, F(0));
    blk.ln1_mean.assign(N, F(0));
    blk.ln1_rstd.assign(N, F(0));
    blk.qkv.assign(N * 3 * Ct, F(0));
    blk.atty.assign(N * Ct, F(0));
    blk.att.assign(static_cast<int64_t>(B) * NHt * T * T, F(0));
    blk.residual2.assign(N * C, F(0));
    blk.ln2.assign(N * C, F(0));
    blk.ln2_mean.assign(N, F(0));
    blk.ln2_rstd.assign(N, F(0));
    blk.fch.assign(N * 4 * Ct, F(0));
    blk.fch_gelu.assign(N * 4 * Ct, F(0));
    blk.residual3.assign(N * C, F(0));
  }
  if (shard.head) {
    lnf.assign(N * C, F(0));
    lnf_mean.assign(N, F(0));
    lnf_rstd.assign(N, F(0));
    logits.assign(N * config.vocab, F(0));
    losses.assign(N, F(0));
    lse.assign(N, F(0));
  }
  dresidual.assign(N * C, F(0));
  dln.assign(N * C, F(0));
  datty.assign(N * Ct, F(0));
  dqkv.assign(N * 3 * Ct, F(0));
  dfch.assign(N * 4 * Ct, F(0));
}

template <typename F>
int64_t GptActivations<F>::bytes() const {
  size_t n = encoded.size() + lnf.size() + lnf_mean.size() + lnf_rstd.size() + logits.size() +
             losses.size() + lse.size() + dresidual.size() + dln.size() + datty.size() +
             dqkv.size() + dfch.size();
  for (const Block& b : blocks) {
    n += b.ln1.size() + b.ln1_mean.size() + b.ln1_rstd.size() + b.qkv.size() + b.atty.size() +
         b.att.size() + b.residual2.size() + b.ln2.size() + b.ln2_mean.size() + b.ln2_rstd.size() +
         b.fch.size() + b.fch_gelu.size() + b.residual3.size();
  }
  return static_cast<int64_t>(n * sizeof(F));
}

template <typename F>
int64_t GptActivations<F>::BytesFor(const GptConfig& config, int B, int T, const GptShard& shard) {
  // Element counts as Allocate sizes them (a unit test keeps the two equal).
  const int64_t N = static_cast<int64_t>(B) * T;
  const int64_t C = config.d_model;
  const int64_t Ct = C / shard.tensor_size;
  const int64_t per_block = 4 * N * C      // ln1, residual2, ln2, residual3
                            + 4 * N        // ln1 and ln2 mean and rstd
                            + 4 * N * Ct   // qkv, atty
                            + 8 * N * Ct;  // fch, fch_gelu
  const int64_t head = shard.head ? N * C + 4 * N + N * config.vocab : 0;  // lnf.., losses, lse
  const int64_t scratch = 2 * N * C + 8 * N * Ct;  // dresidual, dln; datty, dqkv, dfch
  const int64_t blocks = shard.end(config) - shard.first_layer;
  return (N * C + blocks * per_block + head + scratch) * static_cast<int64_t>(sizeof(F)) +
         AttentionBytesFor(config, B, T, shard);
}

template <typename F>
int64_t GptActivations<F>::AttentionBytesFor(const GptConfig& config, int B, int T,
                                             const GptShard& shard) {
  const int64_t blocks = shard.end(config) - shard.first_layer;
  const int64_t NHt = config.heads / shard.tensor_size;
  return blocks * B * NHt * T * T * static_cast<int64_t>(sizeof(F));  // att
}

template <typename F>
const F* GptActivations<F>::output() const {
  return blocks.empty() ? encoded.data() : blocks.back().residual3.data();
}

template <typename F>
double GptForward(const GptConfig& config, const GptParams<F>& params, GptActivations<F>& acts,
                  const int32_t* tokens, const int32_t* targets, int B, int T,
                  const GptShard& shard, const F* input, const TensorSum* tensor_sum) {
  const int C = config.d_model;
  const int tp = shard.tensor_size;
  const int Ct = C / tp;
  const int NHt = config.heads / tp;
  const int V = config.vocab;
  const int N = B * T;
  acts.Allocate(config, B, T, shard);

  if (shard.embedding) {
    encoder_forward(acts.encoded.data(), tokens, params.wte, params.wpe, B, T, C);
  } else {
    std::copy_n(input, static_cast<size_t>(N) * C, acts.encoded.data());
  }
  // residual + proj(inp): one fused pass on one rank; with tensor parallelism each rank
  // projects its columns (the bias added once, by rank 0) and the partial sums are added up.
  auto project_into_residual = [&](F* out, const F* residual, const F* inp, const F* w, const F* b,
                                   int in) {
    if (tp == 1) {
      matmul_residual_forward(out, residual, inp, w, b, N, in, C);
      return;
    }
    matmul_forward(out, inp, w, shard.tensor_rank == 0 ? b : static_cast<const F*>(nullptr), N, in,
                   C);
    TensorAllReduce(tensor_sum, out, static_cast<int64_t>(N) * C);
    for (int64_t i = 0; i < static_cast<int64_t>(N) * C; i++)
      out[i] += residual[i];
  };
  const F* residual = acts.encoded.data();  // (B,T,C) input of the block
  for (size_t l = 0; l < acts.blocks.size(); l++) {
    const typename GptParams<F>::Block& p = params.blocks[l];
    typename GptActivations<F>::Block& a = acts.blocks[l];
    layernorm_forward(a.ln1.data(), a.ln1_mean.data(), a.ln1_rstd.data(), residual, p.ln1w, p.ln1b,
                      N, C);
    matmul_forward(a.qkv.data(), a.ln1.data(), p.qkvw, p.qkvb, N, C, 3 * Ct);
    attention_forward(a.atty.data(), a.att.data(), a.qkv.data(), B, T, Ct, NHt);
    project_into_residual(a.residual2.data(), residual, a.atty.data(), p.attprojw, p.attprojb, Ct);
    layernorm_forward(a.ln2.data(), a.ln2_mean.data(), a.ln2_rstd.data(), a.residual2.data(),
                      p.ln2w, p.ln2b, N, C);
    matmul_forward(a.fch.data(), a.ln2.data(), p.fcw, p.fcb, N, C, 4 * Ct);
    gelu_forward(a.fch_gelu.data(), a.fch.data(), static_cast<int64_t>(N) * 4 * Ct);
    project_into_residual(a.residual3.data(), a.residual2.data(), a.fch_gelu.data(), p.fcprojw,
                          p.fcprojb, 4 * Ct);
    residual = a.residual3.data();
  }
  if (!shard.head)
    return 0.0;
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
                 int T, F loss_scale, const std::function<void(int)>* block_done,
                 const GptShard& shard, const F* dout, const TensorSum* tensor_sum) {
  const int C = config.d_model;
  const int tp = shard.tensor_size;
  const int Ct = C / tp;
  const int NHt = config.heads / tp;
  const int V = config.vocab;
  const int N = B * T;
  const int64_t NC = static_cast<int64_t>(N) * C;
  assert(acts.B == B && acts.T == T);

  if (shard.head) {
    // Loss -> logits -> final layer norm. The mean over B*T positions scales each row by 1/N.
    crossentropy_softmax_backward(acts.logits.data(), acts.lse.data(), targets, loss_scale / F(N),
                                  N, V);
    const F* dlogits = acts.logits.data();
    matmul_backward(acts.dln.data(), grads.wte, static_cast<F*>(nullptr), dlogits, acts.lnf.data(),
                    params.wte, N, C, V);
    std::fill(acts.dresidual.begin(), acts.dresidual.end(), F(0));
    layernorm_backward(acts.dresidual.data(), grads.lnfw, grads.lnfb, acts.dln.data(),
                       acts.output(), params.lnfw, acts.lnf_mean.data(), acts.lnf_rstd.data(), N,
                       C);
  } else {
    std::copy_n(dout, NC, acts.dresidual.data());
  }

  // Blocks in reverse. dresidual holds the gradient of the block output; the residual
  // connections pass it through unchanged, and each branch adds its part.
  F* dres = acts.dresidual.data();
  for (int l = static_cast<int>(acts.blocks.size()) - 1; l >= 0; l--) {
    const typename GptParams<F>::Block& p = params.blocks[l];
    const typename GptParams<F>::Block& g = grads.blocks[l];
    const typename GptActivations<F>::Block& a = acts.blocks[l];
    const F* residual = l == 0 ? acts.encoded.data() : acts.blocks[l - 1].residual3.data();
    // MLP branch: residual3 = residual2 + fcproj(gelu(fc(ln2(residual2)))).
    F* dfch = acts.dfch.data();
    matmul_backward(dfch, g.fcprojw, g.fcprojb, dres, a.fch_gelu.data(), p.fcprojw, N, 4 * Ct, C);
    gelu_backward(dfch, a.fch.data(), dfch, static_cast<int64_t>(N) * 4 * Ct);
    matmul_backward(acts.dln.data(), g.fcw, g.fcb, dfch, a.ln2.data(), p.fcw, N, C, 4 * Ct);
    if (tp > 1)
      TensorAllReduce(tensor_sum, acts.dln.data(), NC);
    layernorm_backward(dres, g.ln2w, g.ln2b, acts.dln.data(), a.residual2.data(), p.ln2w,
                       a.ln2_mean.data(), a.ln2_rstd.data(), N, C);
    // Attention branch: residual2 = residual + attproj(attention(qkv(ln1(residual)))).
    matmul_backward(acts.datty.data(), g.attprojw, g.attprojb, dres, a.atty.data(), p.attprojw, N,
                    Ct, C);
    attention_backward(acts.dqkv.data(), acts.datty.data(), a.qkv.data(), a.att.data(), B, T, Ct,
                       NHt);
    matmul_backward(acts.dln.data(), g.qkvw, g.qkvb, acts.dqkv.data(), a.ln1.data(), p.qkvw, N, C,
                    3 * Ct);
    if (tp > 1)
      TensorAllReduce(tensor_sum, acts.dln.data(), NC);
    layernorm_backward(dres, g.ln1w, g.ln1b, acts.dln.data(), residual, p.ln1w, a.ln1_mean.data(),
                       a.ln1_rstd.data(), N, C);
    if (block_done != nullptr)
      (*block_done)(shard.first_layer + l);
  }
  if (shard.embedding)
    encoder_backward(grads.wte, grads.wpe, dres, tokens, B, T, C);
  if (block_done != nullptr)
    (*block_done)(-1);
}

template struct GptActivations<float>;
template struct GptActivations<double>;
template GptParams<float> BindParams<float>(const GptConfig&, float*, const GptShard&);
template GptParams<double> BindParams<double>(const GptConfig&, double*, const GptShard&);
template double GptForward<float>(const GptConfig&, const GptParams<float>&, GptActivations<float>&,
                                  const int32_t*, const int32_t*, int, int, const GptShard&,
                                  const float*, const TensorSum*);
template double GptForward<double>(const GptConfig&, const GptParams<double>&,
                                   GptActivations<double>&, const int32_t*, const int32_t*, int,
                                   int, const GptShard&, const double*, const TensorSum*);
template void GptBackward<float>(const GptConfig&, const GptParams<float>&, const GptParams<float>&,
                                 GptActivations<float>&, const int32_t*, const int32_t*, int, int,
                                 float, const std::function<void(int)>*, const GptShard&,
                                 const float*, const TensorSum*);
template void GptBackward<double>(const GptConfig&, const GptParams<double>&,
                                  const GptParams<double>&, GptActivations<double>&, const int32_t*,
                                  const int32_t*, int, int, double, const std::function<void(int)>*,
                                  const GptShard&, const double*, const TensorSum*);

}  // namespace tessera::model::cpu
