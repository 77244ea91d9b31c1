// The device memory GptCuda holds, as plain C++ (no CUDA type), so that it can be sized where
// there is no GPU: `tessera plan` and the trainer's memory check use GptCudaMemoryFor, and
// GptCuda carves its activation arena with the same ForEachActivation, so the two cannot drift.
#pragma once

#include <cstdint>

#include "worker/model/cuda/gpt_cuda.h"

namespace tessera::model {

// The logits' row stride: the vocabulary rounded up to 64, so that every row of the tied LM
// head's products is aligned (gpt_cuda.cpp says why).
inline int GptCudaPaddedVocab(int vocab) {
  return (vocab + 63) / 64 * 64;
}

// Every buffer of GptCuda's activation arena for `batch` sequences of `seq` tokens, in arena
// order: take(member, count) once for each, where `member` is a pointer member of `a` (its
// element type gives the size) and `count` its elements. `a` has GptCuda's activation members
// (tokens, targets, encoded, blocks with their Block members, lnf, ...); `blocks` is resized
// here and the members an attention does not use are set to null.
template <class Arena, class Take>
void ForEachActivation(const GptConfig& config, int batch, int seq, GpuAttention attention,
                       Arena& a, Take&& take) {
  const int64_t N = static_cast<int64_t>(batch) * seq;
  const int64_t C = config.d_model;
  const int64_t NC = N * C;
  const int64_t att_size = static_cast<int64_t>(batch) * config.heads * seq * seq;
  const int64_t rows_size = static_cast<int64_t>(batch) * config.heads * seq;  // (B,NH,T)
  const bool flash = attention != GpuAttention::kMatmul;
  take(a.tokens, N);
  take(a.targets, N);
  take(a.encoded, NC);
  a.blocks.resize(config.layers);
  for (auto& b : a.blocks) {
    take(b.ln1, NC);
    take(b.ln1_mean, N);
    take(b.ln1_rstd, N);
    take(b.qkv, 3 * NC);
    take(b.atty, NC);
    b.att = nullptr;
    b.att_lse = nullptr;
    if (flash)
      take(b.att_lse, rows_size);
    else
      take(b.att, att_size);
    take(b.residual2, NC);
    take(b.ln2, NC);
    take(b.ln2_mean, N);
    take(b.ln2_rstd, N);
    take(b.fch, 4 * NC);
    take(b.fch_gelu, 4 * NC);
    take(b.residual3, NC);
  }
  take(a.lnf, NC);
  take(a.lnf_mean, N);
  take(a.lnf_rstd, N);
  take(a.logits, N * GptCudaPaddedVocab(config.vocab));
  take(a.losses, N);
  take(a.lse, N);
  take(a.dresidual, NC);
  take(a.dln, NC);
  take(a.datty, NC);
  take(a.dqkv, 3 * NC);
  take(a.dfch, 4 * NC);
  a.qkvr = a.dqkvr = a.datt = nullptr;
  a.att_delta = a.dq_accum = nullptr;
  if (flash) {
    take(a.att_delta, rows_size);
    if (attention != GpuAttention::kFlashMma2)  // the second version's dQ needs no fp32 scratch
      take(a.dq_accum, NC);
  } else {
    take(a.qkvr, 3 * NC);
    take(a.dqkvr, 3 * NC);
    take(a.datt, att_size);
  }
}

// Where each buffer of the arena starts: offsets rounded up to 256 bytes (cudaMalloc's own
// alignment, which 16-byte kernel accesses and cuBLASLt want).
inline int64_t AlignArenaOffset(int64_t offset) {
  return (offset + 255) / 256 * 256;
}

// Bytes of device memory a GptCuda holds for a configuration.
struct GptCudaMemory {
  int64_t parameters = 0;   // fp32 master weights, their bf16 copy, the padded bf16 LM head
  int64_t gradients = 0;    // fp32
  int64_t optimizer = 0;    // AdamW's two fp32 moments
  int64_t activations = 0;  // the arena for one (B, T): GptCuda::activation_bytes()
  int64_t attention = 0;    // of which the matmul attention's (B, NH, T, T) buffers
};

// What CreateGptCuda and a pass over `batch` sequences of `seq` tokens allocate on the device
// (cuBLASLt's workspace and the optimizer's few scalars aside). Pure; needs no GPU.
GptCudaMemory GptCudaMemoryFor(const GptConfig& config, int batch, int seq, GpuAttention attention);

}  // namespace tessera::model
