// The GPT forward and backward passes on CPU, composed from the kernels of layers.h, over
// named views into one flat parameter buffer. Templated on the float type: the model runs in
// float, the whole-model gradient check in double. Not thread-safe: one caller per
// GptActivations; the kernels use threads internally.
//
// Both passes work on a GptShard (the whole model by default): a run of blocks, with or
// without the embedding and the head, each block possibly split over tensor-parallel ranks.
// A tensor-parallel shard calls `tensor_sum` where Megatron puts its all-reduces: after each
// row-parallel projection in forward, and on the input gradient of each column-parallel
// matrix in backward.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "worker/model/gpt.h"

namespace tessera::model::cpu {

// Named views into a flat buffer laid out as GptShardTensors(config, shard) says. The same
// struct views the parameters and the gradients. Shapes are the shard's: with tensor_size
// ranks, Ct = C / tensor_size and the matrices below hold the rank's rows or columns.
template <typename F>
struct GptParams {
  struct Block {
    F* ln1w;      // (C)
    F* ln1b;      // (C)
    F* qkvw;      // (3Ct, C): this rank's heads of q, k and v
    F* qkvb;      // (3Ct)
    F* attprojw;  // (C, Ct): this rank's input columns
    F* attprojb;  // (C), replicated
    F* ln2w;      // (C)
    F* ln2b;      // (C)
    F* fcw;       // (4Ct, C)
    F* fcb;       // (4Ct)
    F* fcprojw;   // (C, 4Ct)
    F* fcprojb;   // (C), replicated
  };
  F* wte = nullptr;           // (V, C), also the LM head; null in a stage with neither end
  F* wpe = nullptr;           // (maxT, C); null without the embedding
  std::vector<Block> blocks;  // the shard's blocks, first_layer first
  F* lnfw = nullptr;          // (C); null without the head
  F* lnfb = nullptr;          // (C)
};

// Views into `base`, which holds the shard's parameters (GptParameterCount(config) values for
// the whole model).
template <typename F>
GptParams<F> BindParams(const GptConfig& config, F* base, const GptShard& shard = {});

// Activations of one forward pass, kept for backward, plus the backward scratch buffers
// (shared by all blocks). Allocated once for a (B, T) and reused.
template <typename F>
struct GptActivations {
  struct Block {
    std::vector<F> ln1, ln1_mean, ln1_rstd;  // (B,T,C), (B,T), (B,T)
    std::vector<F> qkv;                      // (B,T,3Ct)
    std::vector<F> atty;                     // (B,T,Ct) attention output before projection
    std::vector<F> att;                      // (B,NH/tensor_size,T,T) attention probabilities
    std::vector<F> residual2;                // (B,T,C) residual + attention projection
    std::vector<F> ln2, ln2_mean, ln2_rstd;  // (B,T,C), (B,T), (B,T)
    std::vector<F> fch, fch_gelu;            // (B,T,4Ct) each
    std::vector<F> residual3;                // (B,T,C) block output
  };
  int B = 0;
  int T = 0;
  std::vector<F> encoded;  // (B,T,C): the embedding's output, or the stage's input
  std::vector<Block> blocks;
  std::vector<F> lnf, lnf_mean, lnf_rstd;  // (B,T,C), (B,T), (B,T); with the head only
  std::vector<F> logits;                   // (B,T,V); holds dlogits after backward
  std::vector<F> losses, lse;              // (B,T)
  // Backward scratch.
  std::vector<F> dresidual;  // (B,T,C) gradient of the residual stream (of the input, at the end)
  std::vector<F> dln;        // (B,T,C) gradient of a layer-norm output
  std::vector<F> datty;      // (B,T,Ct)
  std::vector<F> dqkv;       // (B,T,3Ct)
  std::vector<F> dfch;       // (B,T,4Ct)

  // Sizes every buffer for (B, T); does nothing when already sized for them.
  void Allocate(const GptConfig& config, int B, int T, const GptShard& shard = {});
  // Bytes held by all buffers.
  int64_t bytes() const;
  // bytes() after Allocate(config, B, T, shard), computed without allocating (for checking a
  // configuration against the memory a machine has before training starts).
  static int64_t BytesFor(const GptConfig& config, int B, int T, const GptShard& shard = {});
  // The part of BytesFor in the blocks' attention probabilities, (B, heads, T, T) a block: the
  // term that grows with T^2.
  static int64_t AttentionBytesFor(const GptConfig& config, int B, int T,
                                   const GptShard& shard = {});
  // The shard's output: the last block's residual3, or `encoded` when it has no block.
  const F* output() const;
};

using TensorSum = std::function<void(float*, int64_t)>;

// Forward over (B,T). With the embedding `tokens` (B,T) are read, otherwise `input`
// (B,T,C). With the head and targets (B,T) non-null returns the mean cross-entropy (summed
// in double, in row order); otherwise 0 (with the head and no targets only the logits are
// computed). `tensor_sum` is required when shard.tensor_size > 1 (float only).
template <typename F>
double GptForward(const GptConfig& config, const GptParams<F>& params, GptActivations<F>& acts,
                  const int32_t* tokens, const int32_t* targets, int B, int T,
                  const GptShard& shard = {}, const F* input = nullptr,
                  const TensorSum* tensor_sum = nullptr);

// Backward of the last GptForward: adds d(loss_scale * mean loss)/d(params) into grads. With
// the head the loss is the source (targets required); otherwise `dout` (B,T,C) is the
// gradient of the shard's output. Without the embedding acts.dresidual ends holding the
// gradient of the input. `block_done`, when non-null, is called with l (a whole-model layer
// index) after block l's gradients (and, before the last block's, the final layer norm's)
// are complete, and with -1 after the embeddings' (or, without them, at the end).
template <typename F>
void GptBackward(const GptConfig& config, const GptParams<F>& params, const GptParams<F>& grads,
                 GptActivations<F>& acts, const int32_t* tokens, const int32_t* targets, int B,
                 int T, F loss_scale, const std::function<void(int)>* block_done = nullptr,
                 const GptShard& shard = {}, const F* dout = nullptr,
                 const TensorSum* tensor_sum = nullptr);

}  // namespace tessera::model::cpu
