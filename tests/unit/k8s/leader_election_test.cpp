// Leader election against the in-memory API server: acquire, renew through a conflict,
// release, hand-over between two candidates, takeover after a silent holder's lease
// expires, stepping down when renewals fail; and, over the real transport, stepping down at
// the renew deadline when a renewal never gets an answer. Waits are on conditions with
// deadlines.
#include "controller/k8s/leader_election.h"

#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include "controller/k8s/events.h"
#include "controller/k8s/transport_cpprest.h"
#include "tests/unit/k8s/fake_apiserver.h"
#include "tests/unit/k8s/loopback_server.h"

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
  // The deadline counts from the start of the last successful renewal: at most a retry period
  // (50 ms) and that renewal's own time before the failures began.
  EXPECT_GE(std::chrono::steady_clock::now() - failing_from, 600ms - 100ms);
}

// A renewal whose update never gets an answer (an apiserver that takes reads but black-holes
// writes) must not keep the leader leading past its renew deadline, while another replica may
// take the Lease at the lease duration: each attempt's requests end at the deadline, not at
// the client's request timeout (10 s here).
TEST(K8sLeaderElectionHungRenewTest, StepsDownAtTheRenewDeadlineWhenARenewalNeverAnswers) {
  std::mutex mu;
  Json stored;  // the Lease; null until created
  std::atomic<bool> put_seen{false};
  testing::LoopbackServer server([&](int conn, const testing::LoopbackServer::Request& r) {
    auto reply = [conn](const char* status, const Json& body) {
      const std::string text = body.dump();
      testing::LoopbackServer::Write(
          conn, std::string("HTTP/1.1 ") + status +
                    "\r\nContent-Type: application/json\r\nContent-Length: " +
                    std::to_string(text.size()) + "\r\nConnection: close\r\n\r\n" + text);
    };
    if (r.method == "PUT") {
      put_seen = true;
      testing::LoopbackServer::HoldUntilClosed(conn);
      return;
    }
    std::lock_guard<std::mutex> lock(mu);
    if (r.method == "POST") {
      stored = Json::parse(r.body);
      stored["metadata"]["resourceVersion"] = "1";
      reply("201 Created", stored);
    } else if (stored.is_null()) {
      reply("404 Not Found", {{"kind", "Status"}, {"code", 404}, {"reason", "NotFound"}});
    } else {
      reply("200 OK", stored);
    }
  });
  ClientConfig config;
  config.server = server.url();
  auto transport = NewCpprestTransport(config);
  ASSERT_TRUE(transport.ok()) << transport.error();
  RestOptions options;
  options.qps = 0;
  options.timeout = 10s;
  RestClient client(**transport, config, options);

  LeaderElectionConfig c;
  c.lease_namespace = "kube-system";
  c.lease_name = "tessera-controller";
  c.identity = "a";
  c.lease_duration = 1500ms;
  c.renew_deadline = 1000ms;
  c.retry_period = 200ms;
  std::atomic<bool> started{false}, stopped{false};
  std::chrono::steady_clock::time_point started_at, stopped_at;
  c.on_started_leading = [&] {
    started_at = std::chrono::steady_clock::now();
    started = true;
  };
  c.on_stopped_leading = [&] {
    stopped_at = std::chrono::steady_clock::now();
    stopped = true;
  };
  ASSERT_EQ(ValidateLeaderElectionConfig(c), "");
  LeaderElector elector(client, c);
  Cancellation stop;
  std::thread run([&] { elector.Run(stop); });
  struct Join {
    Cancellation& stop;
    std::thread& t;
    ~Join() {
      stop.Cancel();
      t.join();
    }
  } join{stop, run};

  ASSERT_TRUE(Eventually([&] { return started.load(); }, 5s));
  ASSERT_TRUE(Eventually([&] { return put_seen.load(); }, 5s)) << "no renewal was tried";
  ASSERT_TRUE(Eventually([&] { return stopped.load(); }, 5s))
      << "still leading with a renewal hung past the renew deadline";
  // Leadership began (acquire) before started_at: it ends by the renew deadline after that.
  EXPECT_LT(stopped_at - started_at, c.renew_deadline + 300ms);
  EXPECT_FALSE(elector.IsLeader());
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
