// Which blocks each pipeline stage holds (DESIGN.md §6). A stage's cost is the sum of its
// blocks' forward FLOPs per token, plus the embedding on the first stage and the final
// layer norm, LM head and loss on the last; stages are contiguous runs of at least one block
// chosen to make the most expensive stage as cheap as possible, which bounds how long the
// other stages wait for it every micro-batch.
#pragma once

#include <string>
#include <vector>

#include "worker/model/gpt.h"

namespace tessera::parallel {

// Forward FLOPs per token (backward costs about twice as much for every part alike).
struct LayerCosts {
  std::vector<double> blocks;  // each block: its four matrix products and attention
  double embedding = 0;        // token + position lookup and add
  double head = 0;             // final layer norm, the tied LM head product, softmax + loss
};

// The cost model of a configuration for sequences of `seq_len` tokens.
LayerCosts GptLayerCosts(const model::GptConfig& config, int seq_len);

struct StageLayers {
  int first = 0;  // first block
  int end = 0;    // one past the last block
  double cost = 0;
  bool operator==(const StageLayers&) const = default;
};

// Splits the blocks into `stages` contiguous runs of at least one block each, minimising the
// largest stage cost. Ties: the last stage starts as early as the minimum allows, and the
// blocks before it are split the same way (7 equal blocks on 2 stages: [0,3) [3,7)).
// Requires 1 <= stages <= costs.blocks.size().
std::vector<StageLayers> PartitionStages(const LayerCosts& costs, int stages);

// "[0,3) [3,6)" for log lines.
std::string DescribeStages(const std::vector<StageLayers>& stages);

}  // namespace tessera::parallel
