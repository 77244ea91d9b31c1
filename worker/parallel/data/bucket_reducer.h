// Data-parallel gradient reduction (DESIGN.md §6): the flat gradient buffer is cut into
// buckets from its end toward its start (the order backward completes them), and each bucket's
// all-reduce (average over the data-parallel group) starts as soon as backward reports its
// gradients final, so the reduction of late layers overlaps the backward of early ones.
// A bucket is a contiguous range of the buffer and is reduced in place: no copies.
// It knows nothing of the model beyond "gradients from offset X on are final".
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <span>
#include <vector>

#include "worker/comm/process_group.h"

namespace tessera::parallel {

// A half-open range [begin, end) of a flat buffer, in elements.
struct BufferRange {
  int64_t begin = 0;
  int64_t end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const BufferRange&) const = default;
};

// Buckets of at most `bucket_elements` (>= 1) covering [0, count), listed from the end of the
// buffer to its start: bucket 0 ends at `count`. Pure.
std::vector<BufferRange> PlanBuckets(int64_t count, int64_t bucket_elements);

// The same, cut where backward reports gradients final (`ready`: the offsets a model's
// GradientsReadyFn receives, decreasing; model::GradientReadyOffsets). Each bucket lies
// within what one report completes, or merges consecutive reports while it stays within
// `bucket_elements`, so it can start the moment its last gradient is final; a report larger
// than that is split into equal buckets. Without offsets, PlanBuckets(count, bucket_elements).
std::vector<BufferRange> PlanBuckets(int64_t count, int64_t bucket_elements,
                                     const std::vector<int64_t>& ready);

// What the reductions of one step cost this rank.
struct ReductionStats {
  int buckets = 0;
  int64_t bytes = 0;           // bytes all-reduced (each rank's contribution)
  double exposed_seconds = 0;  // time Finish() blocked: communication not hidden by backward
  // Buckets not yet reduced when Finish() was called (not started, or started and not
  // complete): how far communication lagged behind backward.
  int pending_at_finish = 0;
};

// Not thread-safe: the thread running backward owns it. One step at a time:
// GradientsReady() any number of times (decreasing offsets), then Finish().
class BucketReducer {
 public:
  // `grads` must stay alive and at the same address while the reducer is used.
  // `bucket_bytes` defaults to 25 MiB, as PyTorch DDP's. `ready`: where backward reports
  // gradients final (see PlanBuckets); empty = fixed-size buckets.
  BucketReducer(std::shared_ptr<comm::ProcessGroup> group, std::span<float> grads,
                size_t bucket_bytes = size_t{25} << 20, const std::vector<int64_t>& ready = {});

  // Backward's report: every gradient from element `first` to the end is final for this step.
  // Starts the all-reduce of each bucket lying entirely in [first, end) not started yet.
  // Matches model::GradientsReadyFn.
  void GradientsReady(int64_t first);
  // The same for gradients in device memory (a device group, e.g. NCCL): they are final once
  // `device_event`, a cudaEvent_t, has completed (model::GpuGradientsReadyFn). The buckets
  // started here are ordered after the event on the group's stream; nothing waits on the host.
  // The last report of a step must cover the whole buffer (first = 0), as Backward's does.
  void GradientsReady(int64_t first, void* device_event);

  // Starts what is left, waits for every bucket and returns the step's figures; afterwards
  // the buffer holds the average over the group. Throws comm::CommError when a peer is lost
  // or the timeout passes (the group is broken then).
  ReductionStats Finish();

  const std::vector<BufferRange>& buckets() const { return buckets_; }

 private:
  void Launch(size_t bucket);

  std::shared_ptr<comm::ProcessGroup> group_;
  std::span<float> grads_;
  std::vector<BufferRange> buckets_;
  std::vector<std::shared_ptr<comm::Work>> in_flight_;
  size_t next_ = 0;  // the next bucket to start
};

}  // namespace tessera::parallel
