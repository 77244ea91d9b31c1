// The work queue's guarantees: de-duplication, one worker per item, re-processing after
// Done, delays (and waking for them), Len, per-item back-off, shutdown. Threads synchronise on the
// queue itself or on condition variables; nothing sleeps to wait.
#include "controller/k8s/workqueue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <future>
#include <thread>

namespace tessera::k8s {
namespace {

using namespace std::chrono_literals;
using Clock = WorkQueue::Clock;

WorkQueueRateLimiter::Options NoBucket() {
  WorkQueueRateLimiter::Options o;
  o.qps = 0;
  return o;
}

TEST(K8sWorkQueueTest, DeduplicatesQueuedItemsInFifoOrder) {
  WorkQueue q;
  for (const char* item : {"a", "b", "a", "c", "b"})
    q.Add(item);
  EXPECT_EQ(q.Len(), 3u);
  EXPECT_EQ(q.Get(), "a");
  EXPECT_EQ(q.Get(), "b");
  EXPECT_EQ(q.Get(), "c");
  EXPECT_EQ(q.Len(), 0u);
}

TEST(K8sWorkQueueTest, ItemAddedWhileProcessingComesBackOnlyAfterDone) {
  WorkQueue q;
  q.Add("a");
  ASSERT_EQ(q.Get(), "a");
  q.Add("a");
  q.Add("a");
  EXPECT_EQ(q.Len(), 0u) << "must not be handed to a second worker";
  EXPECT_EQ(q.GetUntil(Clock::now() + 20ms), std::nullopt);
  q.Done("a");
  EXPECT_EQ(q.Len(), 1u);
  EXPECT_EQ(q.Get(), "a");
  q.Done("a");
  EXPECT_EQ(q.Len(), 0u) << "not re-added: done for good";
}

// After ShutDown (SIGTERM) no worker takes another key: Get returns nullopt at once though
// keys were queued, delayed or re-added while in process, and Done re-queues nothing.
TEST(K8sWorkQueueTest, ShutDownHandsOutNothingMoreAndReleasesBlockedWorkers) {
  WorkQueue q(NoBucket());
  q.Add("in-process");
  ASSERT_EQ(q.Get(), "in-process");
  q.Add("in-process");  // to be re-queued by Done
  q.Add("queued-1");
  q.Add("queued-2");
  q.AddAfter("delayed", 1ms);
  q.AddRateLimited("retried");
  q.ShutDown();
  q.Add("added-after");  // ignored
  q.AddAfter("added-after-delayed", 0ms);
  EXPECT_TRUE(q.ShuttingDown());
  EXPECT_EQ(q.Len(), 0u);
  EXPECT_EQ(q.Get(), std::nullopt);
  EXPECT_EQ(q.GetUntil(Clock::now() + 1h), std::nullopt) << "returns at once, not at the deadline";
  q.Done("in-process");
  EXPECT_EQ(q.Len(), 0u);
  EXPECT_EQ(q.Get(), std::nullopt);

  WorkQueue q2;
  std::optional<std::string> got = "unset";
  std::thread worker([&] { got = q2.Get(); });
  q2.ShutDown();
  worker.join();
  EXPECT_EQ(got, std::nullopt);
}

TEST(K8sWorkQueueTest, AddAfterHoldsTheItemUntilItsTime) {
  WorkQueue q;
  auto start = Clock::now();
  q.AddAfter("late", 60ms);
  EXPECT_EQ(q.Len(), 0u);
  EXPECT_EQ(q.GetUntil(start + 10ms), std::nullopt);
  EXPECT_EQ(q.GetUntil(start + 10s), "late");
  EXPECT_GE(Clock::now() - start, 60ms);
  q.Done("late");

  // Several delays for one item: the earliest wins, and it is queued once.
  q.AddAfter("x", 1h);
  q.AddAfter("x", 1ms);
  EXPECT_EQ(q.GetUntil(Clock::now() + 10s), "x");
  q.Done("x");
  EXPECT_EQ(q.GetUntil(Clock::now() + 20ms), std::nullopt);

  // A zero delay is an Add.
  q.AddAfter("now", 0ms);
  EXPECT_EQ(q.Len(), 1u);
}

TEST(K8sWorkQueueTest, AddAfterWakesAWorkerAlreadyWaiting) {
  WorkQueue q;
  std::optional<std::string> got;
  std::thread worker([&] { got = q.GetUntil(Clock::now() + 10s); });
  q.AddAfter("z", 5ms);
  worker.join();
  EXPECT_EQ(got, "z");
}

// GetUntil with a far deadline, on another thread: the item, or nullopt when none came within
// `limit` (the queue is then shut down to free the waiting thread).
std::optional<std::string> GetWithin(WorkQueue& q, std::chrono::seconds limit) {
  auto got = std::async(std::launch::async, [&q] { return q.GetUntil(Clock::now() + 1h); });
  if (got.wait_for(limit) != std::future_status::ready)
    q.ShutDown();
  return got.get();
}

// A worker already waiting wakes for a delayed item when it is due, not at its own deadline.
TEST(K8sWorkQueueTest, AWaitingWorkerWakesWhenADelayedItemIsDue) {
  WorkQueue q;
  q.AddAfter("later", 1h);
  std::atomic<bool> asking{false};
  auto got = std::async(std::launch::async, [&] {
    asking = true;
    return q.GetUntil(Clock::now() + 1h);
  });
  while (!asking)
    std::this_thread::yield();
  // Nothing tells when the worker is asleep inside GetUntil (until "later"); give it a moment to
  // get there, so that only AddAfter's wake-up can bring it "soon".
  std::this_thread::sleep_for(50ms);
  q.AddAfter("soon", 5ms);
  if (got.wait_for(30s) != std::future_status::ready)
    q.ShutDown();
  EXPECT_EQ(got.get(), "soon");

  WorkQueue idle;
  idle.AddAfter("due", 5ms);
  EXPECT_EQ(GetWithin(idle, 30s), "due") << "a worker that comes later sleeps only until it is due";
}

// Len counts what a worker could take now: due delayed items too, but not one in process.
TEST(K8sWorkQueueTest, LenCountsDueDelayedItemsButNotThoseInProcess) {
  WorkQueue q(NoBucket());
  q.Add("busy");
  ASSERT_EQ(q.Get(), "busy");
  q.AddAfter("busy", 1ms);
  q.AddAfter("due", 1ms);
  q.AddAfter("later", 1h);
  const auto due = Clock::now() + 1ms;
  while (Clock::now() <= due)
    std::this_thread::yield();
  EXPECT_EQ(q.Len(), 1u);
}

TEST(K8sWorkQueueTest, AddAfterIsIgnoredAfterShutDown) {
  WorkQueue q(NoBucket());
  q.ShutDown();
  q.AddAfter("x", 1ms);
  const auto due = Clock::now() + 1ms;
  while (Clock::now() <= due)
    std::this_thread::yield();
  EXPECT_EQ(q.Len(), 0u);
}

TEST(K8sWorkQueueRateLimiterTest, PerItemBackoffDoublesUpToTheCapAndForgetResets) {
  WorkQueueRateLimiter limiter(NoBucket());
  const std::chrono::nanoseconds expected[] = {5ms, 10ms, 20ms, 40ms, 80ms, 160ms, 320ms};
  for (auto want : expected)
    EXPECT_EQ(limiter.When("a"), want);
  EXPECT_EQ(limiter.NumRequeues("a"), 7);
  EXPECT_EQ(limiter.When("b"), 5ms) << "items back off independently";
  for (int i = 0; i < 100; ++i)
    limiter.When("a");
  EXPECT_EQ(limiter.When("a"), 1000s) << "capped, and no overflow after many failures";
  limiter.Forget("a");
  EXPECT_EQ(limiter.NumRequeues("a"), 0);
  EXPECT_EQ(limiter.When("a"), 5ms);
}

TEST(K8sWorkQueueRateLimiterTest, OverallBucketLimitsAllItemsTogether) {
  WorkQueueRateLimiter::Options o;
  o.qps = 1;
  o.burst = 2;
  WorkQueueRateLimiter limiter(o);
  EXPECT_EQ(limiter.When("a"), 5ms);
  EXPECT_EQ(limiter.When("b"), 5ms);
  EXPECT_GT(limiter.When("c"), 500ms) << "third item within a second waits for the bucket";
}

TEST(K8sWorkQueueTest, AddRateLimitedCountsRequeuesAndForgetClearsThem) {
  WorkQueue q(NoBucket());
  q.AddRateLimited("k");
  EXPECT_EQ(q.NumRequeues("k"), 1);
  ASSERT_EQ(q.GetUntil(Clock::now() + 10s), "k");
  q.Done("k");
  q.AddRateLimited("k");
  EXPECT_EQ(q.NumRequeues("k"), 2);
  ASSERT_EQ(q.GetUntil(Clock::now() + 10s), "k");
  q.Forget("k");
  q.Done("k");
  EXPECT_EQ(q.NumRequeues("k"), 0);
}

// Many producers re-add a few keys while several workers process them. Invariants: a key is
// never processed by two workers at once, and every key's final Add is followed by a
// processing that saw it.
TEST(K8sWorkQueueTest, ConcurrentWorkersNeverShareAKeyAndSeeEveryLastAdd) {
  constexpr int kKeys = 8, kWorkers = 4, kProducers = 3, kAddsPerProducer = 2000;
  WorkQueue q;
  std::mutex mu;
  std::map<std::string, int> added;      // number of adds per key so far
  std::map<std::string, int> processed;  // adds seen by the latest processing
  std::map<std::string, int> in_flight;
  bool overlap = false;

  std::vector<std::thread> workers;
  for (int w = 0; w < kWorkers; ++w) {
    workers.emplace_back([&] {
      while (auto key = q.Get()) {
        {
          std::lock_guard<std::mutex> lock(mu);
          if (++in_flight[*key] > 1)
            overlap = true;
          processed[*key] = added[*key];  // everything added so far is seen by this pass
        }
        std::this_thread::yield();
        {
          std::lock_guard<std::mutex> lock(mu);
          --in_flight[*key];
        }
        q.Done(*key);
      }
    });
  }
  std::vector<std::thread> producers;
  for (int p = 0; p < kProducers; ++p) {
    producers.emplace_back([&, p] {
      for (int i = 0; i < kAddsPerProducer; ++i) {
        std::string key = "k" + std::to_string((i * 7 + p) % kKeys);
        {
          std::lock_guard<std::mutex> lock(mu);
          ++added[key];
        }
        q.Add(key);
      }
    });
  }
  for (auto& t : producers)
    t.join();
  // Wait (with a deadline) until every key has been processed after its last add.
  auto deadline = Clock::now() + 30s;
  while (Clock::now() < deadline) {
    std::lock_guard<std::mutex> lock(mu);
    if (processed == added)
      break;
  }
  q.ShutDown();
  for (auto& t : workers)
    t.join();
  EXPECT_FALSE(overlap);
  EXPECT_EQ(processed, added);
  EXPECT_EQ(added.size(), static_cast<size_t>(kKeys));
}

}  // namespace
}  // namespace tessera::k8s
