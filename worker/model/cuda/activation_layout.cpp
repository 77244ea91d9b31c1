#include "worker/model/cuda/activation_layout.h"

#include <vector>

namespace tessera::model {
namespace {

// The arena's members with host types of the device types' sizes (bf16 is two bytes), for
// ForEachActivation to size without carving anything.
struct Bf16Size {
  uint16_t bits;
};
struct SizingArena {
  struct Block {
    Bf16Size *ln1, *qkv, *atty, *att, *residual2, *ln2, *fch, *fch_gelu, *residual3;
    float *ln1_mean, *ln1_rstd, *ln2_mean, *ln2_rstd, *att_lse;
  };
  int32_t *tokens, *targets;
  Bf16Size* encoded;
  std::vector<Block> blocks;
  Bf16Size* lnf;
  float *lnf_mean, *lnf_rstd;
  Bf16Size* logits;
  float *losses, *lse;
  Bf16Size *dresidual, *dln, *datty, *dqkv, *dfch;
  Bf16Size *qkvr, *dqkvr, *datt;
  float *att_delta, *dq_accum;
};

}  // namespace

GptCudaMemory GptCudaMemoryFor(const GptConfig& config, int batch, int seq,
                               GpuAttention attention) {
  GptCudaMemory m;
  const int64_t P = GptParameterCount(config);
  const int64_t head = static_cast<int64_t>(GptCudaPaddedVocab(config.vocab)) * config.d_model;
  m.parameters = 4 * P + 2 * P + 2 * head;
  m.gradients = 4 * P;
  m.optimizer = 8 * P;
  SizingArena arena{};
  int64_t offset = 0;
  ForEachActivation(config, batch, seq, attention, arena, [&](auto*& ptr, int64_t count) {
    offset = AlignArenaOffset(offset) + count * static_cast<int64_t>(sizeof(*ptr));
  });
  m.activations = offset;
  if (attention == GpuAttention::kMatmul) {
    const int64_t att = static_cast<int64_t>(batch) * config.heads * seq * seq * 2;
    m.attention = att * (config.layers + 1);  // each block's probabilities, and their gradient
  }
  return m;
}

}  // namespace tessera::model
