// A rate-limited, de-duplicating work queue of keys ("namespace/name"), shaped like
// client-go's: event handlers Add keys, N workers Get/Done them. It knows nothing of
// Kubernetes objects and does not retry by itself (the worker calls AddRateLimited).
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <map>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <vector>

#include "controller/k8s/rate_limiter.h"

namespace tessera::k8s {

// Per-item exponential back-off (base * 2^failures, capped) combined with an overall token
// bucket: When() returns the larger of the two delays. Thread-safe.
class WorkQueueRateLimiter {
 public:
  struct Options {
    std::chrono::nanoseconds base_delay = std::chrono::milliseconds(5);
    std::chrono::nanoseconds max_delay = std::chrono::seconds(1000);
    double qps = 10;  // overall; <= 0 disables the bucket
    int burst = 100;
  };
  WorkQueueRateLimiter() : WorkQueueRateLimiter(Options{}) {}
  explicit WorkQueueRateLimiter(Options options);

  // The delay before `item` may be retried; counts one more failure for it.
  std::chrono::nanoseconds When(const std::string& item);
  // Clears the failure count (call after a successful sync).
  void Forget(const std::string& item);
  int NumRequeues(const std::string& item) const;

 private:
  Options options_;
  TokenBucket bucket_;
  mutable std::mutex mu_;
  std::map<std::string, int> failures_;
};

// Thread-safe. Guarantees:
//  - an item is queued at most once however often it is added before a worker takes it;
//  - an item is never handed to two workers at once: added while being processed, it is
//    queued again only when the worker calls Done;
//  - after ShutDown nothing more is handed out: Get returns nullopt at once, and the items
//    still queued, delayed or to be re-queued by Done are dropped; Add is ignored.
class WorkQueue {
 public:
  using Clock = std::chrono::steady_clock;
  WorkQueue() : WorkQueue(WorkQueueRateLimiter::Options{}) {}
  explicit WorkQueue(WorkQueueRateLimiter::Options limiter);
  WorkQueue(const WorkQueue&) = delete;
  WorkQueue& operator=(const WorkQueue&) = delete;

  void Add(const std::string& item);
  // Adds `item` once `delay` has passed (at once when delay <= 0). Of several pending delays
  // for one item the earliest wins.
  void AddAfter(const std::string& item, Clock::duration delay);
  // AddAfter with the rate limiter's delay for this item.
  void AddRateLimited(const std::string& item);
  // Forgets the item's failure history (not the item itself).
  void Forget(const std::string& item);
  int NumRequeues(const std::string& item) const;

  // Blocks until an item is ready and returns it, marking it as being processed; nullopt
  // once the queue is shut down (even with items queued). The caller must call Done(item)
  // afterwards.
  std::optional<std::string> Get();
  // Like Get, but gives up (nullopt) at `deadline`.
  std::optional<std::string> GetUntil(Clock::time_point deadline);
  void Done(const std::string& item);

  // Drops every queued and delayed item and wakes every Get (they return nullopt). Items
  // being processed stay so until Done, which then re-queues nothing. Idempotent.
  void ShutDown();
  bool ShuttingDown() const;
  // Items ready to be handed out (not counting delayed or in-process ones).
  size_t Len() const;

 private:
  void AddLocked(const std::string& item);
  void PromoteDueLocked(Clock::time_point now);
  std::optional<std::string> GetImpl(std::optional<Clock::time_point> deadline);

  mutable std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::string> queue_;
  std::set<std::string> dirty_;                       // queued, or to be queued when Done
  std::set<std::string> processing_;                  // handed out, not yet Done
  std::map<std::string, Clock::time_point> waiting_;  // AddAfter: item -> when
  bool shutting_down_ = false;
  WorkQueueRateLimiter limiter_;
};

}  // namespace tessera::k8s
