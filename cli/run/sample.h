// Text from a trained built-in GPT: loads the parameters of a checkpoint and samples bytes
// autoregressively on CPU. For `tessera run --sample`; one process, not thread-safe.
#pragma once

#include <cstdint>
#include <string>

#include "worker/train/config.h"
#include "worker/train/status.h"

namespace tessera::cli {

struct SampleOptions {
  std::string prompt = "\n";  // bytes to start from (byte tokenizer); empty: a newline
  int length = 200;           // bytes to generate
  double temperature = 0.8;   // > 0; logits are divided by it before the softmax
  uint64_t seed = 1337;       // the same seed and checkpoint give the same text
};

// Reads the newest complete checkpoint in `config.checkpoint.dir` (rank 0's shard, verified
// by its sha256) into a model of `config.model` and generates options.length bytes after the
// prompt, with a context window of the last seqLen bytes. The returned text is the generated
// part only. A missing or unreadable checkpoint is kCheckpointRefused naming the path.
train::Status SampleText(const train::TrainerConfig& config, const SampleOptions& options,
                         std::string* out);

}  // namespace tessera::cli
