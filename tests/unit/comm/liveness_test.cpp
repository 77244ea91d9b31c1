// The lost-rank monitor against an in-process store: a client dying without a goodbye is
// reported by rank, a clean exit is not, a vanished store is reported as rank 0, a store that
// stops answering does not hold a rank's exit, and Unsubscribe waits for a callback under way.
#include "worker/comm/liveness.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstdlib>
#include <future>
#include <string>
#include <thread>

#include "tests/unit/comm/local_store.h"

namespace tessera::comm {
namespace {

using namespace std::chrono_literals;

class LivenessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = test::StartLocalStore();
    options_ = test::LocalStoreClient(*server_, 5s);
    client_ = std::make_unique<rendezvous::StoreClient>(options_);
  }
  std::unique_ptr<rendezvous::StoreServer> server_;
  rendezvous::StoreClientOptions options_;
  std::unique_ptr<rendezvous::StoreClient> client_;
};

TEST_F(LivenessTest, ACrashedRankIsReportedByNumberToSubscribers) {
  LivenessMonitor watcher(*client_, "job/", 1);
  std::promise<RankLoss> seen;
  watcher.Subscribe([&](const RankLoss& loss) { seen.set_value(loss); });
  EXPECT_EQ(watcher.loss(), std::nullopt);
  {
    // Rank 2's wills, on a connection that closes without ClearWills, as after kill -9.
    rendezvous::StoreClient rank2(options_);
    rank2.AddWill("job/lost", "2");
  }
  auto future = seen.get_future();
  ASSERT_EQ(future.wait_for(10s), std::future_status::ready);
  const RankLoss loss = future.get();
  EXPECT_EQ(loss.world_rank, 2);
  EXPECT_NE(loss.message.find("rank 2 lost"), std::string::npos) << loss.message;
  ASSERT_TRUE(watcher.loss().has_value());
  EXPECT_EQ(watcher.loss()->world_rank, 2);
  // A late subscriber hears about it at once.
  int calls = 0;
  watcher.Subscribe([&](const RankLoss&) { ++calls; });
  EXPECT_EQ(calls, 1);
}

// A group unsubscribes before it drops its core; the core may hold the last reference to the
// monitor. If Unsubscribe returned while the callback still ran, the callback's reference
// could be the last, and the monitor would be destroyed on its own thread (a self-join, which
// aborted a rank in CI).
TEST_F(LivenessTest, UnsubscribeWaitsForACallbackUnderWay) {
  LivenessMonitor watcher(*client_, "job/", 1);
  std::promise<void> started;
  std::atomic<bool> finished{false};
  const int id = watcher.Subscribe([&](const RankLoss&) {
    started.set_value();
    std::this_thread::sleep_for(300ms);
    finished = true;
  });
  int unsubscribed_calls = 0;
  const int gone = watcher.Subscribe([&](const RankLoss&) { ++unsubscribed_calls; });
  watcher.Unsubscribe(gone);
  {
    rendezvous::StoreClient rank2(options_);
    rank2.AddWill("job/lost", "2");
  }
  ASSERT_EQ(started.get_future().wait_for(10s), std::future_status::ready);
  watcher.Unsubscribe(id);
  EXPECT_TRUE(finished);
  EXPECT_EQ(unsubscribed_calls, 0);
}

// What a subscriber holds is released before Unsubscribe returns (not afterwards on the
// monitor's thread), even when releasing it takes a while.
TEST_F(LivenessTest, UnsubscribeReturnsOnlyOnceTheCallbackIsReleased) {
  LivenessMonitor watcher(*client_, "job/", 1);
  struct SlowToRelease {
    explicit SlowToRelease(std::atomic<bool>* r) : released(r) {}
    std::atomic<bool>* released;
    ~SlowToRelease() {
      std::this_thread::sleep_for(200ms);  // the span released, not a wait for a condition
      *released = true;
    }
  };
  std::atomic<bool> released{false};
  std::promise<void> called;
  int id = 0;
  {
    auto held = std::make_shared<SlowToRelease>(&released);
    id = watcher.Subscribe([&, held](const RankLoss&) { called.set_value(); });
  }
  {
    rendezvous::StoreClient rank2(options_);
    rank2.AddWill("job/lost", "2");
  }
  ASSERT_EQ(called.get_future().wait_for(10s), std::future_status::ready);
  watcher.Unsubscribe(id);
  EXPECT_TRUE(released);
}

// A subscriber may unsubscribe itself from inside its callback without waiting for itself.
TEST_F(LivenessTest, ASubscriberMayUnsubscribeItselfFromItsCallback) {
  auto watcher = std::make_unique<LivenessMonitor>(*client_, "job/", 1);
  std::promise<void> unsubscribed;
  std::promise<int> id;
  auto id_future = id.get_future().share();
  id.set_value(watcher->Subscribe([&, id_future](const RankLoss&) {
    watcher->Unsubscribe(id_future.get());
    unsubscribed.set_value();
  }));
  {
    rendezvous::StoreClient rank2(options_);
    rank2.AddWill("job/lost", "2");
  }
  if (unsubscribed.get_future().wait_for(10s) != std::future_status::ready) {
    ADD_FAILURE() << "Unsubscribe from the callback did not return";
    watcher.release();  // its thread is stuck: leak it rather than hang joining it
  }
}

// A rank that ends without the goodbye (a killed process) leaves both wills: the key every
// rank watches and the one naming it. In a child process, which exits without destructors: a
// fresh one (forked from this one, whose store has threads, ThreadSanitizer refuses the child's
// threads), which re-runs this test up to EXPECT_EXIT and so finds this store's port in the
// environment, set here only when not inherited.
TEST_F(LivenessTest, ARankThatExitsWithoutAGoodbyeLeavesBothWills) {
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  constexpr char kPort[] = "TESSERA_LIVENESS_TEST_STORE_PORT";
  ::setenv(kPort, std::to_string(server_->port()).c_str(), /*overwrite=*/0);
  EXPECT_EXIT(
      {
        rendezvous::StoreClientOptions o = options_;
        o.port = std::atoi(std::getenv(kPort));
        rendezvous::StoreClient store(o);
        LivenessMonitor monitor(store, "job/", 2);
        std::_Exit(0);
      },
      ::testing::ExitedWithCode(0), "");
  ::unsetenv(kPort);
  EXPECT_EQ(client_->Get("job/lost", 5s), "2");
  EXPECT_EQ(client_->Get("job/lost/2", 5s), "2");
}

TEST_F(LivenessTest, ACleanExitIsNotALoss) {
  LivenessMonitor watcher(*client_, "job/", 1);
  { LivenessMonitor leaving(*client_, "job/", 2); }  // destructor withdraws the will
  // Once the server processed rank 2's departure (only client_ and the watcher's two
  // connections remain), any will it left would have been applied.
  ASSERT_TRUE(server_->WaitForClientsToLeave(10s, 3));
  EXPECT_EQ(watcher.loss(), std::nullopt);
  EXPECT_EQ(client_->TryGet("job/lost"), std::nullopt);
}

TEST_F(LivenessTest, AVanishedStoreIsReportedAsRankZero) {
  LivenessMonitor watcher(*client_, "job/", 3);
  server_->Stop();
  auto loss = watcher.WaitForLoss(10s);
  ASSERT_TRUE(loss.has_value());
  EXPECT_EQ(loss->world_rank, 0);
  EXPECT_NE(loss->message.find("rank 0 lost"), std::string::npos) << loss->message;
}

// Rank 0 stopped (SIGSTOP) or wedged: its store keeps the connections open but answers nothing.
// The monitor's goodbye is a courtesy and gives up after kClearWillsTimeout, not after the store
// timeout (TESSERA_RDZV_TIMEOUT, 300 s by default, a minute here), so the rank exits and the
// gang can restart.
TEST_F(LivenessTest, AStoreThatStopsAnsweringDoesNotHoldTheExit) {
  test::FreezableRelay relay(server_->port());
  rendezvous::StoreClientOptions through = test::LocalStoreClient(*server_, 60s);
  through.port = relay.port();
  auto watcher = std::make_unique<LivenessMonitor>(rendezvous::StoreClient(through), "job/", 1);
  relay.Freeze();
  auto stopped = std::async(std::launch::async, [&] { watcher.reset(); });
  EXPECT_EQ(stopped.wait_for(LivenessMonitor::kClearWillsTimeout + 10s), std::future_status::ready);
}

}  // namespace
}  // namespace tessera::comm
