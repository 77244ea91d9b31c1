// Cancellation: wakes waiters, runs callbacks once, and Unregister really unregisters (and waits
// out a callback already running).
#include "controller/k8s/cancellation.h"

#include <gtest/gtest.h>

#include <atomic>
#include <condition_variable>
#include <mutex>
#include <thread>

namespace tessera::k8s {
namespace {

using namespace std::chrono_literals;

TEST(K8sCancellationTest, WakesWaitersAndRunsCallbacksOnce) {
  Cancellation c;
  EXPECT_FALSE(c.WaitFor(1ms)) << "times out while not cancelled";
  std::atomic<int> ran{0}, unregistered{0};
  c.Register([&] { ++ran; });
  uint64_t id = c.Register([&] { ++unregistered; });
  c.Unregister(id);
  std::atomic<bool> woke{false};
  std::thread waiter([&] { woke = c.WaitFor(1h); });
  c.Cancel();
  c.Cancel();
  waiter.join();
  EXPECT_TRUE(woke.load());
  EXPECT_TRUE(c.IsCancelled());
  EXPECT_EQ(ran.load(), 1);
  EXPECT_EQ(unregistered.load(), 0);
  c.Register([&] { ++ran; });  // already cancelled: runs at once
  EXPECT_EQ(ran.load(), 2);
  EXPECT_TRUE(c.WaitFor(1h));
}

// Unregister of a callback that Cancel is running right now returns only once it has finished:
// afterwards the caller may free what the callback uses.
TEST(K8sCancellationTest, UnregisterWaitsOutARunningCallback) {
  Cancellation c;
  std::mutex mu;
  std::condition_variable cv;
  bool running = false, release = false, finished = false;
  const uint64_t id = c.Register([&] {
    std::unique_lock<std::mutex> lock(mu);
    running = true;
    cv.notify_all();
    cv.wait(lock, [&] { return release; });
    finished = true;
  });
  std::thread canceller([&] { c.Cancel(); });
  {
    std::unique_lock<std::mutex> lock(mu);
    EXPECT_TRUE(cv.wait_for(lock, 10s, [&] { return running; }));
  }
  // Let the callback finish a little later, from another thread, while Unregister waits.
  std::thread releaser([&] {
    std::this_thread::sleep_for(50ms);
    std::lock_guard<std::mutex> lock(mu);
    release = true;
    cv.notify_all();
  });
  c.Unregister(id);
  {
    std::lock_guard<std::mutex> lock(mu);
    EXPECT_TRUE(finished) << "Unregister returned while the callback was still running";
  }
  releaser.join();
  canceller.join();
}

}  // namespace
}  // namespace tessera::k8s
