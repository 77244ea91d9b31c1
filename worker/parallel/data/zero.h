// ZeRO stage 1 (DESIGN.md §6): optimizer state sharded over the data-parallel group. The flat
// buffer of `count` values is cut into size() equal shards of ceil(count / size()) (the last
// padded); rank r owns shard r, keeps AdamW moments only for it, and updates only it. A step is
// reduce-scatter of the gradients (each rank gets its shard averaged), the sharded update by
// the caller, then all-gather of the parameters so every replica is whole again.
// This file owns the layout and the two collectives; the optimizer is the caller's.
#pragma once

#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "worker/comm/process_group.h"
#include "worker/parallel/data/bucket_reducer.h"

namespace tessera::parallel {

// The shard layout, pure: shard_size = ceil(count / ranks); shard r covers
// [min(r * shard_size, count), min((r + 1) * shard_size, count)).
struct ZeroLayout {
  int64_t count = 0;
  int ranks = 1;
  int64_t shard_size() const { return (count + ranks - 1) / ranks; }
  BufferRange shard(int rank) const;
  // Whether the shards do not tile count (the last is padded): then the collectives need a
  // staging copy of ranks * shard_size floats.
  bool padded() const { return shard_size() * ranks != count; }
  // What ZeroShards holds besides the model's buffers: its shard of floats and, when padded(),
  // the staging copy.
  int64_t buffer_bytes() const {
    return static_cast<int64_t>(sizeof(float)) *
           (shard_size() + (padded() ? shard_size() * ranks : 0));
  }
};

// Not thread-safe: one trainer owns it. Holds one shard of floats; when ranks * shard_size
// exceeds count (the last shard padded) also a staging buffer of ranks * shard_size floats,
// because a padded collective cannot run in the model's buffer.
class ZeroShards {
 public:
  ZeroShards(std::shared_ptr<comm::ProcessGroup> group, int64_t count);

  const ZeroLayout& layout() const { return layout_; }
  // This rank's shard of the buffer.
  BufferRange own() const { return layout_.shard(group_->rank()); }

  // Averages `grads` (count values, the same length on every rank) over the group and returns
  // this rank's shard of the average (own().size() values, valid until the next call).
  // Throws comm::CommError on a lost peer or timeout.
  std::span<float> ReduceScatter(std::span<const float> grads);

  // Every rank contributes its own() range of `params`; afterwards every rank's `params` holds
  // all shards. Throws comm::CommError on a lost peer or timeout.
  void AllGather(std::span<float> params);

  // Bytes each collective sends from this rank (for the communication metrics).
  int64_t shard_bytes() const { return layout_.shard_size() * static_cast<int64_t>(sizeof(float)); }

 private:
  std::shared_ptr<comm::ProcessGroup> group_;
  ZeroLayout layout_;
  std::vector<float> staging_;  // ranks * shard_size, or empty when the shards tile count
  std::vector<float> shard_;    // shard_size
};

}  // namespace tessera::parallel
