// The Gloo group's operation handle: a caller's wait() ends with Gloo's outcome, and an
// operation whose transport ignores its timeout is abandoned at twice the timeout plus a
// margin, telling the group (which then breaks, so nothing queues behind the stuck operation).
#include "worker/comm/gloo_work.h"

#include <gtest/gtest.h>

#include <chrono>
#include <string>
#include <thread>
#include <vector>

namespace tessera::comm::detail {
namespace {

using namespace std::chrono_literals;

// Errors given to on_abandon, in order.
struct Abandoned {
  std::vector<std::string> errors;
  GlooWork::OnAbandon Hook() {
    return [this](const std::string& e) { errors.push_back(e); };
  }
};

std::string WaitError(GlooWork& work) {
  try {
    work.wait();
  } catch (const CommError& e) {
    return e.what();
  }
  return "";
}

TEST(GlooWorkTest, AStartedOperationThatNeverReturnsIsAbandonedAtTwiceTheTimeoutPlusTheMargin) {
  Abandoned abandoned;
  GlooWork work("all_reduce of 4 float32 on group world", 100ms, abandoned.Hook(), 50ms);
  work.Start();
  const auto start = std::chrono::steady_clock::now();
  const std::string error = WaitError(work);
  const auto waited = std::chrono::steady_clock::now() - start;
  EXPECT_EQ(error,
            "all_reduce of 4 float32 on group world timed out after 0.1s (TESSERA_COMM_TIMEOUT) "
            "and did not return: the transport ignored its timeout");
  EXPECT_GE(waited, 250ms);  // 2 x 100 ms + 50 ms: not earlier
  EXPECT_TRUE(work.completed());
  ASSERT_EQ(abandoned.errors.size(), 1u);
  EXPECT_EQ(abandoned.errors[0], error);
  // Gloo returning late changes nothing, and a second wait neither waits nor tells again.
  work.Finish("");
  EXPECT_EQ(WaitError(work), error);
  EXPECT_EQ(abandoned.errors.size(), 1u);
}

TEST(GlooWorkTest, AnOperationThatReturnsInTimeIsNotAbandoned) {
  Abandoned abandoned;
  GlooWork work("barrier on group world", 100ms, abandoned.Hook(), 50ms);
  work.Start();
  std::thread gloo([&] {
    std::this_thread::sleep_for(150ms);  // past the timeout, within the last resort
    work.Finish("");
  });
  EXPECT_EQ(WaitError(work), "");
  gloo.join();
  EXPECT_TRUE(abandoned.errors.empty());
}

TEST(GlooWorkTest, GloosOwnErrorReachesTheCallerAndTheGroupIsNotToldTwice) {
  Abandoned abandoned;
  GlooWork work("broadcast of 8 uint8 on group world", 100ms, abandoned.Hook(), 50ms);
  work.Start();
  work.Finish("broadcast of 8 uint8 on group world failed: rank 1 was lost");
  EXPECT_EQ(WaitError(work), "broadcast of 8 uint8 on group world failed: rank 1 was lost");
  EXPECT_TRUE(abandoned.errors.empty());  // the executor broke the group itself
}

// Queued behind other operations, it waits for its turn however long that takes (each one
// ahead is bounded itself); a broken group finishes it with the group's error.
TEST(GlooWorkTest, AQueuedOperationWaitsForItsTurnWithoutADeadline) {
  Abandoned abandoned;
  GlooWork work("all_gather of 2 int64 on group world", 20ms, abandoned.Hook(), 0ms);
  std::thread executor([&] {
    std::this_thread::sleep_for(200ms);  // ten timeouts' worth queued ahead
    work.Start();
    work.Finish("");
  });
  EXPECT_EQ(WaitError(work), "");
  executor.join();
  EXPECT_TRUE(abandoned.errors.empty());

  GlooWork queued("barrier on group world", 20ms, abandoned.Hook(), 0ms);
  queued.Finish("barrier on group world failed: group is broken: rank 2 was lost");
  EXPECT_EQ(WaitError(queued), "barrier on group world failed: group is broken: rank 2 was lost");
  EXPECT_TRUE(abandoned.errors.empty());
}

}  // namespace
}  // namespace tessera::comm::detail
