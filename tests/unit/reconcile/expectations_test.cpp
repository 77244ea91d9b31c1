// Expectations (controller/reconcile/expectations.h) and progress polling
// (controller/reconcile/progress.h).
#include "controller/reconcile/expectations.h"

#include <gtest/gtest.h>

#include <functional>
#include <future>
#include <mutex>
#include <set>
#include <thread>
#include <vector>

#include "controller/reconcile/progress.h"

namespace tessera::reconcile {
namespace {

using namespace std::chrono_literals;

TEST(Expectations, CreatesDeletesAndStatus) {
  Expectations e(1h);
  EXPECT_TRUE(e.Satisfied("ns/j"));
  e.ExpectCreation("ns/j", "j-worker-0");
  e.ExpectCreation("ns/j", "j-worker-1");
  e.ExpectDeletion("ns/j", "uid-old");
  e.ExpectStatus("ns/j", "42");
  EXPECT_FALSE(e.Satisfied("ns/j"));
  EXPECT_TRUE(e.Satisfied("ns/other"));

  e.CreationObserved("ns/j", "j-worker-0");
  e.CreationFailed("ns/j", "j-worker-1");
  EXPECT_FALSE(e.Satisfied("ns/j"));
  e.DeletionObserved("ns/j", "uid-other");  // not what we wait for
  EXPECT_FALSE(e.Satisfied("ns/j"));
  e.DeletionObserved("ns/j", "uid-old");
  EXPECT_EQ(e.PendingStatus("ns/j"), "42");
  e.StatusObserved("ns/j", "41");
  EXPECT_FALSE(e.Satisfied("ns/j"));
  e.StatusObserved("ns/j", "42");
  EXPECT_TRUE(e.Satisfied("ns/j"));
  EXPECT_EQ(e.PendingJobs(), 0u);
}

TEST(Expectations, ExpireAfterTtl) {
  Expectations e(0ns);
  e.ExpectCreation("ns/j", "j-worker-0");
  EXPECT_TRUE(e.Satisfied("ns/j"));  // expired: counts as met, and is cleared
  EXPECT_EQ(e.PendingJobs(), 0u);

  Expectations f(1h);
  f.ExpectCreation("ns/j", "j-worker-0");
  EXPECT_GT(f.TimeToExpiry("ns/j"), 59min);
  f.Forget("ns/j");
  EXPECT_TRUE(f.Satisfied("ns/j"));
  EXPECT_EQ(f.TimeToExpiry("ns/j"), Expectations::Clock::duration::zero());
}

// The TTL runs from the oldest pending write: raising more for the job does not postpone it, or
// a job that keeps failing to see its writes would never be decided again.
TEST(Expectations, MoreWritesDoNotPostponeTheExpiry) {
  Expectations e(50ms);
  e.ExpectCreation("ns/j", "j-worker-0");
  const auto deadline = Expectations::Clock::now() + 10s;
  int raised = 0;
  while (!e.Satisfied("ns/j")) {
    ASSERT_LT(Expectations::Clock::now(), deadline) << "never expired; raised " << raised;
    e.ExpectCreation("ns/j", "j-worker-" + std::to_string(++raised % 4));
  }
}

TEST(Expectations, StatusWaitsOnlyForAVersion) {
  Expectations e(1h);
  e.ExpectStatus("ns/j", "");  // the write returned no resourceVersion: nothing to wait for
  EXPECT_TRUE(e.Satisfied("ns/j"));
  EXPECT_EQ(e.PendingJobs(), 0u);

  e.ExpectStatus("ns/j", "42");
  e.ExpectCreation("ns/j", "j-worker-0");
  e.ClearStatus("ns/j");
  EXPECT_EQ(e.PendingStatus("ns/j"), std::nullopt);
  EXPECT_FALSE(e.Satisfied("ns/j"));  // the create is still pending
  e.CreationObserved("ns/j", "j-worker-0");
  EXPECT_TRUE(e.Satisfied("ns/j"));
  EXPECT_EQ(e.PendingJobs(), 0u);

  e.ExpectStatus("ns/j", "43");
  e.ClearStatus("ns/j");
  EXPECT_EQ(e.PendingJobs(), 0u);
}

TEST(Expectations, TimeToExpiryIsNeverNegative) {
  Expectations e(0ns);
  e.ExpectCreation("ns/j", "j-worker-0");
  EXPECT_EQ(e.TimeToExpiry("ns/j"), Expectations::Clock::duration::zero());
}

class ScriptedReader : public ProgressReader {
 public:
  std::optional<nlohmann::json> Read(const std::string& host, int port,
                                     std::chrono::milliseconds timeout) override {
    std::lock_guard<std::mutex> lock(mu);
    contacted.insert(host + ":" + std::to_string(port));
    timeouts.insert(timeout);
    return body;
  }
  std::set<std::string> Contacted() {
    std::lock_guard<std::mutex> lock(mu);
    return contacted;
  }
  std::mutex mu;
  std::optional<nlohmann::json> body;
  std::set<std::string> contacted;
  std::set<std::chrono::milliseconds> timeouts;
};

// A stop ends the round after the read in progress: every read of a pod that does not answer
// takes the whole timeout, so a round over many jobs would hold the controller's exit.
TEST(ProgressPoller, StopEndsTheRoundAfterTheReadInProgress) {
  struct StoppingReader : ProgressReader {
    std::optional<nlohmann::json> Read(const std::string&, int port,
                                       std::chrono::milliseconds) override {
      read.push_back(port);
      poller->Stop();  // as if SIGTERM came during this read (no thread: Stop does not join)
      return std::nullopt;
    }
    ProgressPoller* poller = nullptr;
    std::vector<int> read;
  } reader;
  ProgressPoller poller(reader, {ProgressPolling::kLoopbackOnly, 1h, 1s}, nullptr);
  reader.poller = &poller;
  for (int i = 0; i < 3; ++i)
    poller.Track("ns/j" + std::to_string(i), "pod", 0, "127.0.0.1", 9400 + i);
  poller.PollOnce();
  EXPECT_EQ(reader.read, std::vector<int>{9400});
}

TEST(ProgressPoller, LoopbackOnlyNeverContactsPodIps) {
  ScriptedReader reader;
  reader.body = nlohmann::json{{"step", 5}};
  std::vector<std::string> changed;
  ProgressPoller poller(reader, {ProgressPolling::kLoopbackOnly, 1h, 1s},
                        [&](const std::string& key) { changed.push_back(key); });
  poller.Track("ns/a", "pod-a", 0, "10.244.0.7", 9400);
  poller.Track("ns/b", "pod-b", 1, "127.0.0.1", 9401);
  EXPECT_EQ(poller.Targets(), 1u);
  poller.PollOnce();
  EXPECT_EQ(reader.contacted, (std::set<std::string>{"127.0.0.1:9401"}));
  EXPECT_EQ(changed, (std::vector<std::string>{"ns/b"}));
  auto sample = poller.Latest("ns/b", "pod-b");
  ASSERT_TRUE(sample.has_value());
  EXPECT_EQ(sample->step, 5);
  EXPECT_EQ(sample->attempt, 1);
  EXPECT_FALSE(poller.Latest("ns/b", "another-pod").has_value());

  // The same step again is no change; a new pod generation drops the old sample.
  poller.PollOnce();
  EXPECT_EQ(changed.size(), 1u);
  poller.Track("ns/b", "pod-b2", 2, "127.0.0.1", 9401);
  EXPECT_FALSE(poller.Latest("ns/b", "pod-b2").has_value());
}

// A job's next pod generation is read at its own address, with the configured timeout; an
// untracked job is read no more.
TEST(ProgressPoller, ReadsTheCurrentPodsAddressUntilUntracked) {
  ScriptedReader reader;
  reader.body = nlohmann::json{{"step", 5}};
  ProgressPoller poller(reader, {ProgressPolling::kPods, 1h, 1500ms}, nullptr);
  poller.Track("ns/a", "pod-a", 0, "10.244.0.7", 9400);
  poller.Track("ns/a", "pod-a2", 1, "10.244.0.8", 9401);
  poller.PollOnce();
  EXPECT_EQ(reader.contacted, (std::set<std::string>{"10.244.0.8:9401"}));
  EXPECT_EQ(reader.timeouts, (std::set<std::chrono::milliseconds>{1500ms}));
  poller.Untrack("ns/a");
  EXPECT_EQ(poller.Targets(), 0u);
  EXPECT_FALSE(poller.Latest("ns/a", "pod-a2").has_value());
}

// Once started, the poller reads its targets every interval on its own thread; Stop ends it
// at once, not at the end of the interval.
TEST(ProgressPoller, StartedItPollsEachIntervalAndStopEndsItAtOnce) {
  ScriptedReader reader;
  reader.body = nlohmann::json{{"step", 1}};
  ProgressPoller often(reader, {ProgressPolling::kLoopbackOnly, 10ms, 1s}, nullptr);
  often.Track("ns/a", "pod-a", 0, "127.0.0.1", 9400);
  often.Start();
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (reader.Contacted().empty() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  EXPECT_EQ(reader.Contacted(), (std::set<std::string>{"127.0.0.1:9400"}));
  often.Stop();

  ProgressPoller seldom(reader, {ProgressPolling::kLoopbackOnly, 1h, 1s}, nullptr);
  seldom.Start();
  auto stopped = std::async(std::launch::async, [&] { seldom.Stop(); });
  if (stopped.wait_for(20s) != std::future_status::ready) {
    ADD_FAILURE() << "Stop waited for the interval";
    std::abort();  // the poller's thread cannot be abandoned safely
  }
}

TEST(ProgressPoller, PodsModeNeedsAnAddress) {
  ScriptedReader reader;
  ProgressPoller poller(reader, {ProgressPolling::kPods, 1h, 1s}, nullptr);
  poller.Track("ns/a", "pod-a", 0, "10.244.0.7", 9400);
  EXPECT_EQ(poller.Targets(), 1u);
  poller.Track("ns/a", "pod-a", 0, "", 9400);  // the pod lost its IP: stop polling it
  EXPECT_EQ(poller.Targets(), 0u);
  poller.PollOnce();
  EXPECT_TRUE(reader.contacted.empty());
}

// The first sample is news whatever its step (a trainer that just started reports step 0).
TEST(ProgressPoller, FirstSampleIsAChangeEvenAtStepZero) {
  ScriptedReader reader;
  reader.body = nlohmann::json{{"step", 0}};
  std::vector<std::string> changed;
  ProgressPoller poller(reader, {ProgressPolling::kLoopbackOnly, 1h, 1s},
                        [&](const std::string& key) { changed.push_back(key); });
  poller.Track("ns/a", "pod-a", 0, "127.0.0.1", 9400);
  poller.PollOnce();
  EXPECT_EQ(changed, (std::vector<std::string>{"ns/a"}));
}

TEST(ProgressPoller, NewAttemptOfTheSamePodDropsTheSample) {
  ScriptedReader reader;
  reader.body = nlohmann::json{{"step", 5}};
  ProgressPoller poller(reader, {ProgressPolling::kLoopbackOnly, 1h, 1s}, nullptr);
  poller.Track("ns/b", "pod-b", 1, "127.0.0.1", 9401);
  poller.PollOnce();
  ASSERT_TRUE(poller.Latest("ns/b", "pod-b").has_value());
  poller.Track("ns/b", "pod-b", 1, "127.0.0.1", 9401);  // the same generation keeps it
  EXPECT_TRUE(poller.Latest("ns/b", "pod-b").has_value());
  poller.Track("ns/b", "pod-b", 2, "127.0.0.1", 9401);
  EXPECT_FALSE(poller.Latest("ns/b", "pod-b").has_value());
}

// A reader that moves the job on to another pod generation while its read is in flight.
class RetrackingReader : public ProgressReader {
 public:
  std::optional<nlohmann::json> Read(const std::string&, int, std::chrono::milliseconds) override {
    if (retrack)
      retrack();
    return nlohmann::json{{"step", 9}};
  }
  std::function<void()> retrack;
};

// A sample read from a pod generation the job has left is dropped, not credited to the new one.
TEST(ProgressPoller, SampleOfAGenerationLeftDuringTheReadIsDropped) {
  struct Case {
    const char* name;
    std::string uid;
    int64_t attempt;
  };
  const Case cases[] = {{"another pod", "pod-b2", 1}, {"another attempt", "pod-b", 2}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    RetrackingReader reader;
    std::vector<std::string> changed;
    ProgressPoller poller(reader, {ProgressPolling::kLoopbackOnly, 1h, 1s},
                          [&](const std::string& key) { changed.push_back(key); });
    poller.Track("ns/b", "pod-b", 1, "127.0.0.1", 9401);
    reader.retrack = [&] { poller.Track("ns/b", c.uid, c.attempt, "127.0.0.1", 9401); };
    poller.PollOnce();
    EXPECT_FALSE(poller.Latest("ns/b", c.uid).has_value());
    EXPECT_TRUE(changed.empty());
  }
}

TEST(ParseProgressPolling, Table) {
  EXPECT_EQ(ParseProgressPolling("pods"), ProgressPolling::kPods);
  EXPECT_EQ(ParseProgressPolling("loopback-only"), ProgressPolling::kLoopbackOnly);
  EXPECT_EQ(ParseProgressPolling("off"), ProgressPolling::kOff);
  EXPECT_EQ(ParseProgressPolling("loopback"), std::nullopt);
  EXPECT_EQ(ParseProgressPolling("Pods"), std::nullopt);
  EXPECT_EQ(ParseProgressPolling(""), std::nullopt);
}

TEST(ProgressPoller, OffContactsNothing) {
  ScriptedReader reader;
  ProgressPoller poller(reader, {ProgressPolling::kOff, 1h, 1s}, nullptr);
  poller.Track("ns/b", "pod-b", 1, "127.0.0.1", 9401);
  poller.PollOnce();
  EXPECT_TRUE(reader.contacted.empty());
}

// The leader elector's thread starts the poller while a stopping process stops it. Whatever
// the order, nothing polls once both returned. (Under the tsan preset the old, unguarded
// thread handle was reported here as a data race.)
TEST(ProgressPoller, StartRacingStopLeavesNothingPolling) {
  for (int i = 0; i < 100; ++i) {
    ScriptedReader reader;
    reader.body = nlohmann::json{{"step", 1}};
    ProgressPoller poller(reader, {ProgressPolling::kLoopbackOnly, 1ms, 1s}, nullptr);
    std::thread starter([&] { poller.Start(); });
    poller.Stop();
    starter.join();
    poller.Track("ns/a", "pod-a", 0, "127.0.0.1", 9400);
    std::this_thread::sleep_for(5ms);
    std::lock_guard<std::mutex> lock(reader.mu);
    ASSERT_TRUE(reader.contacted.empty()) << "iteration " << i;
  }
}

TEST(ProgressPoller, ParsesTheTrainerJson) {
  auto s = ParseProgress(
      {{"step", 42}, {"totalSteps", 100}, {"loss", 1.25}, {"tokensPerSecond", 9.5}}, 3);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(*s, (ProgressSample{3, 42, {100, 1.25, 9.5}}));
  s = ParseProgress({{"step", 43}, {"valLoss", 1.5}}, 3);
  ASSERT_TRUE(s.has_value());
  EXPECT_EQ(s->detail.val_loss, 1.5);
  EXPECT_FALSE(ParseProgress({{"step", "x"}}, 0).has_value());
  EXPECT_FALSE(ParseProgress({{"step", -1}}, 0).has_value());
  EXPECT_FALSE(ParseProgress(nlohmann::json::array(), 0).has_value());
  // A pod's body is not trusted: a total that is not an int64 is unknown (converting 2e80 was
  // undefined; found by fuzzing).
  for (const nlohmann::json& total :
       {nlohmann::json(2.001e80), nlohmann::json(UINT64_MAX), nlohmann::json(12.5)}) {
    s = ParseProgress({{"step", 42}, {"totalSteps", total}}, 3);
    ASSERT_TRUE(s.has_value()) << total;
    EXPECT_EQ(s->detail.total_steps, 0) << total;
  }
}

TEST(IsLoopbackAddress, Table) {
  EXPECT_TRUE(IsLoopbackAddress("127.0.0.1"));
  EXPECT_TRUE(IsLoopbackAddress("127.8.9.10"));
  EXPECT_TRUE(IsLoopbackAddress("::1"));
  EXPECT_FALSE(IsLoopbackAddress("10.244.1.2"));
  EXPECT_FALSE(IsLoopbackAddress("::ffff:10.0.0.1"));
  EXPECT_FALSE(IsLoopbackAddress("localhost"));
  EXPECT_FALSE(IsLoopbackAddress(""));
}

}  // namespace
}  // namespace tessera::reconcile
