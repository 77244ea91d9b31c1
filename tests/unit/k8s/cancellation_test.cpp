// Cancellation: wakes waiters, runs callbacks once, and Unregister really unregisters.
#include "controller/k8s/cancellation.h"

#include <gtest/gtest.h>

#include <atomic>
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

}  // namespace
}  // namespace tessera::k8s
