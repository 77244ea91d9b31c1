// Megatron-style tensor parallelism (DESIGN.md §6). The model's GptShard splits each block
// over the ranks of a stage — attention heads and the first MLP matrix by output rows, the
// output projections by input columns — and calls a TensorSumFn at the four places per block
// where partial results must be added up: after each row-parallel projection in forward and
// on the input gradient of each column-parallel matrix in backward. This file provides that
// sum over the tensor group of a DeviceMesh.
#pragma once

#include <memory>

#include "worker/comm/process_group.h"
#include "worker/model/gpt.h"

namespace tessera::parallel {

// Time and bytes spent in the tensor-parallel all-reduces (read between steps).
struct TensorCommStats {
  double seconds = 0;
  double bytes = 0;
  int64_t calls = 0;
};

// An in-place sum over `group` (blocking: the next layer needs the result). `stats`, when
// non-null, must outlive the function. Throws CommError when a rank of the group is lost.
model::TensorSumFn MakeTensorSum(std::shared_ptr<comm::ProcessGroup> group, TensorCommStats* stats);

}  // namespace tessera::parallel
