#include "worker/parallel/data/bucket_reducer.h"

#include <algorithm>
#include <cassert>

namespace tessera::parallel {

std::vector<BufferRange> PlanBuckets(int64_t count, int64_t bucket_elements) {
  assert(bucket_elements >= 1);
  std::vector<BufferRange> buckets;
  for (int64_t end = count; end > 0;) {
    const int64_t begin = std::max<int64_t>(0, end - bucket_elements);
    buckets.push_back({begin, end});
    end = begin;
  }
  return buckets;
}

BucketReducer::BucketReducer(std::shared_ptr<comm::ProcessGroup> group, std::span<float> grads,
                             size_t bucket_bytes)
    : group_(std::move(group)),
      grads_(grads),
      buckets_(
          PlanBuckets(static_cast<int64_t>(grads.size()),
                      std::max<int64_t>(1, static_cast<int64_t>(bucket_bytes / sizeof(float))))) {}

void BucketReducer::Launch(size_t bucket) {
  const BufferRange& r = buckets_[bucket];
  in_flight_.push_back(group_->all_reduce(grads_.data() + r.begin, static_cast<size_t>(r.size()),
                                          comm::DataType::kFloat32, comm::ReduceOp::kAvg));
}

void BucketReducer::GradientsReady(int64_t first) {
  while (next_ < buckets_.size() && buckets_[next_].begin >= first)
    Launch(next_++);
}

void BucketReducer::GradientsReady(int64_t first, void* device_event) {
  if (next_ < buckets_.size() && buckets_[next_].begin >= first)
    group_->wait_event(device_event);
  GradientsReady(first);
}

ReductionStats BucketReducer::Finish() {
  const auto start = std::chrono::steady_clock::now();
  while (next_ < buckets_.size())
    Launch(next_++);
  ReductionStats stats;
  stats.buckets = static_cast<int>(in_flight_.size());
  stats.bytes = static_cast<int64_t>(grads_.size() * sizeof(float));
  std::vector<std::shared_ptr<comm::Work>> works;
  works.swap(in_flight_);
  next_ = 0;
  for (const std::shared_ptr<comm::Work>& w : works)
    w->wait();
  stats.exposed_seconds =
      std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count();
  return stats;
}

}  // namespace tessera::parallel
