#include "worker/parallel/data/zero.h"

#include <algorithm>

namespace tessera::parallel {

BufferRange ZeroLayout::shard(int rank) const {
  const int64_t s = shard_size();
  return {std::min(count, rank * s), std::min(count, (rank + 1) * s)};
}

ZeroShards::ZeroShards(std::shared_ptr<comm::ProcessGroup> group, int64_t count)
    : group_(std::move(group)), layout_{count, group_->size()} {
  // When the shards tile the buffer exactly the collectives run on the model's own buffers;
  // otherwise the padded tail needs a staging copy of the whole buffer.
  if (layout_.padded())
    staging_.assign(static_cast<size_t>(layout_.shard_size() * layout_.ranks), 0.0f);
  shard_.assign(static_cast<size_t>(layout_.shard_size()), 0.0f);
}

std::span<float> ZeroShards::ReduceScatter(std::span<const float> grads) {
  const float* input = grads.data();
  if (!staging_.empty()) {
    // The padding past `count` stays zero: its average is zero and nobody reads it.
    std::copy(grads.begin(), grads.end(), staging_.begin());
    input = staging_.data();
  }
  group_
      ->reduce_scatter(input, shard_.data(), static_cast<size_t>(layout_.shard_size()),
                       comm::DataType::kFloat32, comm::ReduceOp::kAvg)
      ->wait();
  return std::span<float>(shard_).first(static_cast<size_t>(own().size()));
}

void ZeroShards::AllGather(std::span<float> params) {
  const BufferRange mine = own();
  std::fill(shard_.begin(), shard_.end(), 0.0f);
  std::copy(params.begin() + mine.begin, params.begin() + mine.end, shard_.begin());
  float* output = staging_.empty() ? params.data() : staging_.data();
  group_
      ->all_gather(shard_.data(), output, static_cast<size_t>(layout_.shard_size()),
                   comm::DataType::kFloat32)
      ->wait();
  if (!staging_.empty())
    std::copy(staging_.begin(), staging_.begin() + layout_.count, params.begin());
}

}  // namespace tessera::parallel
