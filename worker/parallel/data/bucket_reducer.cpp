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

std::vector<BufferRange> PlanBuckets(int64_t count, int64_t bucket_elements,
                                     const std::vector<int64_t>& ready) {
  if (ready.empty())
    return PlanBuckets(count, bucket_elements);
  assert(bucket_elements >= 1);
  std::vector<BufferRange> buckets;
  BufferRange open{count, count};  // reports merged so far, not yet a bucket
  int64_t end = count;             // the end of the next report's range
  for (size_t i = 0; i <= ready.size() && end > 0; ++i) {
    const int64_t begin = i < ready.size() ? std::clamp<int64_t>(ready[i], 0, end) : 0;
    if (begin == end)
      continue;
    if (open.end - begin <= bucket_elements) {
      open.begin = begin;  // still fits: merge this report into the open bucket
    } else {
      if (open.size() > 0)
        buckets.push_back(open);
      const int64_t size = end - begin;
      if (size <= bucket_elements) {
        open = {begin, end};
      } else {
        // All of it is final at once: equal buckets, none larger than bucket_elements.
        const int64_t parts = (size + bucket_elements - 1) / bucket_elements;
        for (int64_t p = 0; p < parts; ++p)
          buckets.push_back({end - size * (p + 1) / parts, end - size * p / parts});
        open = {begin, begin};
      }
    }
    end = begin;
  }
  if (open.size() > 0)
    buckets.push_back(open);
  return buckets;
}

BucketReducer::BucketReducer(std::shared_ptr<comm::ProcessGroup> group, std::span<float> grads,
                             size_t bucket_bytes, const std::vector<int64_t>& ready)
    : group_(std::move(group)),
      grads_(grads),
      buckets_(PlanBuckets(static_cast<int64_t>(grads.size()),
                           std::max<int64_t>(1, static_cast<int64_t>(bucket_bytes / sizeof(float))),
                           ready)) {}

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
  ReductionStats stats;
  stats.pending_at_finish = static_cast<int>(buckets_.size() - next_);
  for (const std::shared_ptr<comm::Work>& w : in_flight_)
    stats.pending_at_finish += w->completed() ? 0 : 1;
  while (next_ < buckets_.size())
    Launch(next_++);
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
