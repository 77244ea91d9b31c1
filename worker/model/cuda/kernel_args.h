// Plain structs that the host code (gpt_cuda.cpp, layers_cuda.h) and the kernels
// (layer_kernels.cuh, also compiled for the CPU emulator) both take: no CUDA header here.
#pragma once

#include <cstdint>

namespace tessera::model::cuda {

// The optimizer works on chunks of the flat parameter buffer: each chunk lies in one tensor and
// carries that tensor's weight-decay flag.
struct ParamChunk {
  int64_t offset;
  int32_t count;
  int32_t decays;
};

// One AdamW step's constants; correction1/2 are 1 - beta^t.
struct AdamWArgs {
  float lr, beta1, beta2, eps, weight_decay, max_norm, correction1, correction2;
};

}  // namespace tessera::model::cuda
