// Leader election against the in-memory API server: acquire, renew through a conflict,
// release, hand-over between two candidates, takeover after a silent holder's lease
// expires, stepping down when renewals fail. Waits are on conditions with deadlines.
#include "controller/k8s/leader_election.h"

#include <gtest/gtest.h>

#include <thread>

#include "controller/k8s/events.h"
#include "tests/unit/k8s/fake_apiserver.h"

namespace tessera::k8s {
namespace {

using namespace std::chrono_literals;
using testing::FakeApiServer;

template <typename Pred>
bool Eventually(Pred pred, std::chrono::milliseconds limit = 10s) {
  auto deadline = std::chrono::steady_clock::now() + limit;
  while (std::chrono::steady_clock::now() < deadline) {
    if (pred())
      return true;
    std::this_thread::yield();
  }
  return pred();
}

// A candidate running on its own thread, counting how many candidates lead at once.
class Candidate {
 public:
  Candidate(RestClient& client, const std::string& id, std::atomic<int>& leaders,
            std::atomic<int>& max_leaders, bool release = true) {
    LeaderElectionConfig c;
    c.lease_namespace = "kube-system";
    c.lease_name = "tessera-controller";
    c.identity = id;
    c.lease_duration = 1000ms;  // the Lease holds whole seconds: 1 s is the shortest
    c.renew_deadline = 600ms;
    c.retry_period = 50ms;
    c.release_on_cancel = release;
    c.on_started_leading = [&, this] {
      int now = ++leaders;
      int seen = max_leaders.load();
      while (now > seen && !max_leaders.compare_exchange_weak(seen, now)) {
      }
      started = true;
    };
    c.on_stopped_leading = [&, this] {
      --leaders;
      stopped = true;
    };
    EXPECT_EQ(ValidateLeaderElectionConfig(c), "");
    elector = std::make_unique<LeaderElector>(client, c);
  }
  void Start() {
    thread = std::thread([this] {
      elector->Run(stop);
      returned = true;
    });
  }
  void Stop() {
    stop.Cancel();
    if (thread.joinable())
      thread.join();
  }
  ~Candidate() { Stop(); }

  std::unique_ptr<LeaderElector> elector;
  Cancellation stop;
  std::thread thread;
  std::atomic<bool> started{false}, stopped{false}, returned{false};
};

class K8sLeaderElectionTest : public ::testing::Test {
 protected:
  K8sLeaderElectionTest() : client_(server_, ClientConfig{}, Unlimited()) {}
  static RestOptions Unlimited() {
    RestOptions o;
    o.qps = 0;
    return o;
  }
  Json Lease() {
    auto lease = client_.Get(Leases("kube-system").Named("tessera-controller"));
    EXPECT_TRUE(lease.ok());
    return lease.ok() ? (*lease)["spec"] : Json();
  }
  FakeApiServer server_;
  RestClient client_;
  std::atomic<int> leaders_{0}, max_leaders_{0};
};

TEST_F(K8sLeaderElectionTest, AcquiresRenewsThroughAConflictAndReleases) {
  Candidate a(client_, "a", leaders_, max_leaders_);
  a.Start();
  ASSERT_TRUE(Eventually([&] { return a.started.load(); }));
  EXPECT_TRUE(a.elector->IsLeader());
  EXPECT_EQ(Lease()["holderIdentity"], "a");
  EXPECT_EQ(Lease()["leaseDurationSeconds"], 1);

  // A renewal that loses a race (409) is retried; leadership survives it.
  size_t puts = server_.CountRequests("PUT", "/apis/coordination.k8s.io");
  server_.FailNext("PUT", 1, 409);
  ASSERT_TRUE(Eventually(
      [&] { return server_.CountRequests("PUT", "/apis/coordination.k8s.io") >= puts + 3; }));
  EXPECT_TRUE(a.elector->IsLeader());
  EXPECT_FALSE(a.stopped.load());
  std::string renewed = Lease()["renewTime"];
  EXPECT_NE(renewed, Lease()["acquireTime"]);

  a.Stop();
  EXPECT_TRUE(a.stopped.load());
  EXPECT_TRUE(a.returned.load());
  EXPECT_FALSE(a.elector->IsLeader());
  EXPECT_EQ(Lease()["holderIdentity"], "") << "released on stop";
}

TEST_F(K8sLeaderElectionTest, OnlyOneOfTwoLeadsAndTheOtherTakesOverOnRelease) {
  Candidate a(client_, "a", leaders_, max_leaders_);
  Candidate b(client_, "b", leaders_, max_leaders_);
  a.Start();
  b.Start();
  ASSERT_TRUE(Eventually([&] { return a.started.load() || b.started.load(); }));
  Candidate& first = a.started ? a : b;
  Candidate& second = a.started ? b : a;
  // Let the follower try many times while the leader renews.
  size_t gets = server_.CountRequests("GET", "/apis/coordination.k8s.io");
  ASSERT_TRUE(Eventually(
      [&] { return server_.CountRequests("GET", "/apis/coordination.k8s.io") > gets + 20; }));
  EXPECT_FALSE(second.started.load());
  EXPECT_EQ(second.elector->ObservedLeader(), first.elector->ObservedLeader());

  auto stopped_at = std::chrono::steady_clock::now();
  first.Stop();
  ASSERT_TRUE(Eventually([&] { return second.started.load(); }));
  EXPECT_LT(std::chrono::steady_clock::now() - stopped_at, 1000ms)
      << "a released Lease is taken without waiting out its duration";
  EXPECT_EQ(max_leaders_.load(), 1);
  EXPECT_EQ(Lease()["leaseTransitions"], 1) << "one change of holder since creation";
}

TEST_F(K8sLeaderElectionTest, SilentHolderIsReplacedOnlyAfterTheLeaseDuration) {
  Candidate a(client_, "a", leaders_, max_leaders_, /*release=*/false);
  a.Start();
  ASSERT_TRUE(Eventually([&] { return a.started.load(); }));
  Candidate b(client_, "b", leaders_, max_leaders_);
  b.Start();
  ASSERT_TRUE(Eventually([&] { return b.elector->ObservedLeader() == "a"; }));
  auto stopped_at = std::chrono::steady_clock::now();
  a.Stop();  // stops renewing, keeps the Lease (a crash)
  EXPECT_EQ(Lease()["holderIdentity"], "a");
  ASSERT_TRUE(Eventually([&] { return b.started.load(); }));
  // b saw a's last renewal at most one retry period before a stopped.
  EXPECT_GE(std::chrono::steady_clock::now() - stopped_at, 1000ms - 100ms);
  EXPECT_EQ(Lease()["holderIdentity"], "b");
  EXPECT_EQ(max_leaders_.load(), 1);
}

TEST_F(K8sLeaderElectionTest, StepsDownWhenRenewalsFailForTheRenewDeadline) {
  Candidate a(client_, "a", leaders_, max_leaders_);
  a.Start();
  ASSERT_TRUE(Eventually([&] { return a.started.load(); }));
  auto failing_from = std::chrono::steady_clock::now();
  server_.FailNext("", 100000, 503);
  ASSERT_TRUE(Eventually([&] { return a.returned.load(); }));
  EXPECT_TRUE(a.stopped.load());
  EXPECT_FALSE(a.elector->IsLeader());
  EXPECT_GE(std::chrono::steady_clock::now() - failing_from, 600ms - 50ms);
}

TEST(K8sLeaderElectionConfigTest, RejectsInconsistentDurations) {
  struct Case {
    int lease, renew, retry;
    std::string id;
    std::string error;  // substring, "" = valid
  };
  const Case cases[] = {
      {15000, 10000, 2000, "x", ""},
      {10000, 10000, 2000, "x", "lease duration must exceed"},
      {15000, 2000, 2000, "x", "renew deadline must exceed"},
      {15000, 10000, 0, "x", "retry period must be positive"},
      {15000, 10000, 2000, "", "identity must be set"},
  };
  for (const auto& c : cases) {
    LeaderElectionConfig config;
    config.lease_namespace = "ns";
    config.lease_name = "l";
    config.identity = c.id;
    config.lease_duration = std::chrono::milliseconds(c.lease);
    config.renew_deadline = std::chrono::milliseconds(c.renew);
    config.retry_period = std::chrono::milliseconds(c.retry);
    std::string err = ValidateLeaderElectionConfig(config);
    if (c.error.empty()) {
      EXPECT_EQ(err, "");
    } else {
      EXPECT_NE(err.find(c.error), std::string::npos) << err;
    }
  }
}

TEST(K8sEventRecorderTest, BuildsAnEventsV1EventAboutTheObject) {
  FakeApiServer server;
  RestOptions options;
  options.qps = 0;
  RestClient client(server, ClientConfig{}, options);
  EventRecorder recorder(client, {"tessera.dev/controller", "controller-0"});
  Json job = {{"apiVersion", "tessera.dev/v1alpha1"},
              {"kind", "TrainingJob"},
              {"metadata", {{"name", "gpt"}, {"namespace", "team"}, {"uid", "u-1"}}}};
  ASSERT_TRUE(
      recorder.Record(job, "Warning", "GangRestart", "Restart", std::string(2000, 'x')).ok());
  ASSERT_TRUE(recorder.Record(job, "Normal", "Created", "Create", "created 4 pods").ok());
  auto list = client.List(Events("team"));
  ASSERT_TRUE(list.ok());
  ASSERT_EQ((*list)["items"].size(), 2u) << "each event has its own name";
  const Json& e = (*list)["items"][0];
  EXPECT_EQ(e["apiVersion"], "events.k8s.io/v1");
  EXPECT_EQ(e["regarding"]["kind"], "TrainingJob");
  EXPECT_EQ(e["regarding"]["uid"], "u-1");
  EXPECT_EQ(e["regarding"]["namespace"], "team");
  EXPECT_EQ(e["reportingController"], "tessera.dev/controller");
  EXPECT_EQ(e["reportingInstance"], "controller-0");
  EXPECT_EQ(e["note"].get<std::string>().size(), 1024u);
  EXPECT_EQ(e["eventTime"].get<std::string>().size(),
            std::string("2026-01-02T03:04:05.123456Z").size());
  EXPECT_EQ(e["metadata"]["name"].get<std::string>().rfind("gpt.", 0), 0u);

  Json node = {{"apiVersion", "v1"}, {"kind", "Node"}, {"metadata", {{"name", "n1"}}}};
  Json built = recorder.Build(node, "Warning", "NodeLost", "ForceDelete", "");
  EXPECT_EQ(built["metadata"]["namespace"], "default") << "cluster-scoped objects";
  EXPECT_FALSE(built["regarding"].contains("namespace"));
}

}  // namespace
}  // namespace tessera::k8s
