// The GPT forward and backward passes on CPU, composed from the kernels of layers.h, over
// named views into one flat parameter buffer. Templated on the float type: the model runs in
// float, the whole-model gradient check in double. Not thread-safe: one caller per
// GptActivations; the kernels use threads internally.
#pragma once

#include <cstdint>
#include <functional>
#include <vector>

#include "worker/model/gpt.h"

namespace tessera::model::cpu {

// Named views into a flat buffer laid out as GptParameterTensors(config) says. The same
// struct views the parameters and the gradients.
template <typename F>
struct GptParams {
  struct Block {
    F* ln1w;      // (C)
    F* ln1b;      // (C)
    F* qkvw;      // (3C, C)
    F* qkvb;      // (3C)
    F* attprojw;  // (C, C)
    F* attprojb;  // (C)
    F* ln2w;      // (C)
    F* ln2b;      // (C)
    F* fcw;       // (4C, C)
    F* fcb;       // (4C)
    F* fcprojw;   // (C, 4C)
    F* fcprojb;   // (C)
  };
  F* wte;  // (V, C), also the LM head
  F* wpe;  // (maxT, C)
  std::vector<Block> blocks;
  F* lnfw;  // (C)
  F* lnfb;  // (C)
};

// Views into `base`, which holds GptParameterCount(config) values.
template <typename F>
GptParams<F> BindParams(const GptConfig& config, F* base);

// Activations of one forward pass, kept for backward, plus the backward scratch buffers
// (shared by all blocks). Allocated once for a (B, T) and reused.
template <typename F>
struct GptActivations {
  struct Block {
    std::vector<F> ln1, ln1_mean, ln1_rstd;  // (B,T,C), (B,T), (B,T)
    std::vector<F> qkv;                      // (B,T,3C)
    std::vector<F> atty;                     // (B,T,C) attention output before projection
    std::vector<F> att;                      // (B,NH,T,T) attention probabilities
    std::vector<F> residual2;                // (B,T,C) residual + attention projection
    std::vector<F> ln2, ln2_mean, ln2_rstd;  // (B,T,C), (B,T), (B,T)
    std::vector<F> fch, fch_gelu;            // (B,T,4C) each
    std::vector<F> residual3;                // (B,T,C) block output
  };
  int B = 0;
  int T = 0;
  std::vector<F> encoded;  // (B,T,C)
  std::vector<Block> blocks;
  std::vector<F> lnf, lnf_mean, lnf_rstd;  // (B,T,C), (B,T), (B,T)
  std::vector<F> logits;                   // (B,T,V); holds dlogits after backward
  std::vector<F> losses, lse;              // (B,T)
  // Backward scratch.
  std::vector<F> dresidual;  // (B,T,C) gradient of the residual stream
  std::vector<F> dln;        // (B,T,C) gradient of a layer-norm output
  std::vector<F> datty;      // (B,T,C)
  std::vector<F> dqkv;       // (B,T,3C)
  std::vector<F> dfch;       // (B,T,4C)

  // Sizes every buffer for (B, T); does nothing when already sized for them.
  void Allocate(const GptConfig& config, int B, int T);
};

// Forward over tokens (B,T); with targets (B,T) non-null returns the mean cross-entropy
// (summed in double, in row order), else 0 and only the logits are computed.
template <typename F>
double GptForward(const GptConfig& config, const GptParams<F>& params, GptActivations<F>& acts,
                  const int32_t* tokens, const int32_t* targets, int B, int T);

// Backward of the last GptForward (with targets): adds d(loss_scale * mean loss)/d(params)
// into grads. `block_done`, when non-null, is called with l after block l's gradients (and,
// before block L-1's, the final layer norm's) are complete, and with -1 after the embeddings'.
template <typename F>
void GptBackward(const GptConfig& config, const GptParams<F>& params, const GptParams<F>& grads,
                 GptActivations<F>& acts, const int32_t* tokens, const int32_t* targets, int B,
                 int T, F loss_scale, const std::function<void(int)>* block_done = nullptr);

}  // namespace tessera::model::cpu
