// Leader election against the in-memory API server: acquire, renew through a conflict,
// release (of its own Lease only), hand-over between two candidates, each new leader reported
// once, leading on while renewals succeed, takeover after a silent holder's lease expires,
// stepping down when renewals fail; and, over the real transport, stepping down at
// the renew deadline when a renewal never gets an answer. Waits are on conditions with
// deadlines.
#include "controller/k8s/leader_election.h"

#include <gtest/gtest.h>

#include <mutex>
#include <string>
#include <thread>
#include <vector>

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
    c.on_new_leader = [this](const std::string& leader) {
      std::lock_guard<std::mutex> lock(mu_);
      new_leaders_.push_back(leader);
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
  // What on_new_leader was called with, in order.
  std::vector<std::string> NewLeaders() {
    std::lock_guard<std::mutex> lock(mu_);
    return new_leaders_;
  }

  std::unique_ptr<LeaderElector> elector;
  Cancellation stop;
  std::thread thread;
  std::atomic<bool> started{false}, stopped{false}, returned{false};

 private:
  std::mutex mu_;
  std::vector<std::string> new_leaders_;
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

// on_new_leader names each new holder once: the other candidate when it is first seen holding
// the Lease (not again on every retry), then this one when it takes over.
TEST_F(K8sLeaderElectionTest, ReportsEachNewLeaderOnce) {
  Candidate a(client_, "a", leaders_, max_leaders_);
  a.Start();
  ASSERT_TRUE(Eventually([&] { return a.started.load(); }));
  Candidate b(client_, "b", leaders_, max_leaders_);
  b.Start();
  ASSERT_TRUE(Eventually([&] { return b.elector->ObservedLeader() == "a"; }));
  const size_t gets = server_.CountRequests("GET", "/apis/coordination.k8s.io");
  ASSERT_TRUE(Eventually(
      [&] { return server_.CountRequests("GET", "/apis/coordination.k8s.io") > gets + 20; }));
  EXPECT_EQ(a.NewLeaders(), std::vector<std::string>{"a"});
  EXPECT_EQ(b.NewLeaders(), std::vector<std::string>{"a"});
  a.Stop();
  ASSERT_TRUE(Eventually([&] { return b.started.load(); }));
  EXPECT_EQ(b.NewLeaders(), (std::vector<std::string>{"a", "b"}));
}

// Renewals that succeed keep the leader leading well past the renew deadline (600 ms).
TEST_F(K8sLeaderElectionTest, KeepsLeadingWhileRenewalsSucceed) {
  Candidate a(client_, "a", leaders_, max_leaders_);
  a.Start();
  ASSERT_TRUE(Eventually([&] { return a.started.load(); }));
  // 30 renewals, one every retry period (50 ms) at the most: 1.5 s at least.
  const size_t puts = server_.CountRequests("PUT", "/apis/coordination.k8s.io");
  ASSERT_TRUE(Eventually(
      [&] { return server_.CountRequests("PUT", "/apis/coordination.k8s.io") >= puts + 30; }));
  EXPECT_TRUE(a.elector->IsLeader());
  EXPECT_FALSE(a.stopped.load());
}

// On stop a leader hands its Lease back marked expired (duration 1 s, whatever it was), so a
// successor need not wait out the duration; a Lease someone else holds by then is left alone.
TEST_F(K8sLeaderElectionTest, ReleasesOnlyALeaseItStillHoldsAndMarksItExpired) {
  const ResourceRef lease = Leases("kube-system").Named("tessera-controller");
  {
    LeaderElectionConfig c;
    c.lease_namespace = "kube-system";
    c.lease_name = "tessera-controller";
    c.identity = "slow";
    c.lease_duration = 15s;
    c.renew_deadline = 10s;
    c.retry_period = 2s;
    std::atomic<bool> started{false};
    c.on_started_leading = [&] { started = true; };
    LeaderElector elector(client_, c);
    Cancellation stop;
    std::thread run([&] { elector.Run(stop); });
    EXPECT_TRUE(Eventually([&] { return started.load(); }));
    EXPECT_EQ(Lease()["leaseDurationSeconds"], 15);
    stop.Cancel();
    run.join();
    EXPECT_EQ(Lease()["holderIdentity"], "");
    EXPECT_EQ(Lease()["leaseDurationSeconds"], 1);
  }

  Candidate a(client_, "a", leaders_, max_leaders_);
  a.Start();
  ASSERT_TRUE(Eventually([&] { return a.started.load(); }));
  // Another holder takes the Lease over (a write that may race a's renewals: retried on 409).
  ASSERT_TRUE(Eventually([&] {
    auto current = client_.Get(lease);
    if (!current.ok())
      return false;
    (*current)["spec"]["holderIdentity"] = "b";
    return client_.Update(lease, *current).ok();
  }));
  a.Stop();
  EXPECT_EQ(Lease()["holderIdentity"], "b");
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
  // The renew deadline (1 s) ended it, not the hung request's own timeout (10 s); the bound
  // sits far from both, so a loaded machine does not decide the outcome.
  EXPECT_LT(stopped_at - started_at, options.timeout / 2);
  EXPECT_FALSE(elector.IsLeader());
}

TEST(K8sLeaderElectionConfigTest, RejectsInconsistentDurations) {
  struct Case {
    int lease, renew, retry;
    std::string id;
    std::string error;  // substring, "" = valid
    std::string ns = "ns", name = "l";
  };
  const Case cases[] = {
      {15000, 10000, 2000, "x", ""},
      {10000, 10000, 2000, "x", "lease duration must exceed"},
      {15000, 2000, 2000, "x", "renew deadline must exceed"},
      {15000, 2400, 2000, "x", "renew deadline must exceed"},  // exactly 1.2 x
      {15000, 2401, 2000, "x", ""},
      {15000, 10000, 0, "x", "retry period must be positive"},
      {15000, 10000, 2000, "", "identity must be set"},
      {15000, 10000, 2000, "x", "namespace and name must be set", "", "l"},
      {15000, 10000, 2000, "x", "namespace and name must be set", "ns", ""},
  };
  for (const auto& c : cases) {
    SCOPED_TRACE(c.error);
    LeaderElectionConfig config;
    config.lease_namespace = c.ns;
    config.lease_name = c.name;
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

TEST(K8sEventRecorderTest, DefaultsAndWhatTheRegardingReferenceCarries) {
  FakeApiServer server;
  RestOptions options;
  options.qps = 0;
  RestClient client(server, ClientConfig{}, options);
  EventRecorder recorder(client, {});
  Json pod = {{"apiVersion", "v1"},
              {"kind", "Pod"},
              {"metadata", {{"name", "p"}, {"namespace", "ns"}, {"resourceVersion", "42"}}}};
  const std::string kib(1024, 'x');
  Json built = recorder.Build(pod, "Normal", "Started", "Start", kib);
  EXPECT_EQ(built["reportingInstance"], "tessera-controller");
  EXPECT_EQ(built["reportingController"], "tessera.dev/controller");
  EXPECT_EQ(built["regarding"]["resourceVersion"], "42");
  EXPECT_FALSE(built["regarding"].contains("uid"));
  EXPECT_EQ(built["note"], kib) << "a note of exactly 1 KiB is kept whole";
  EXPECT_EQ(recorder.Build(pod, "Normal", "R", "A", kib + "y")["note"],
            kib.substr(0, 1021) + "...");

  server.FailNext("POST", 1, 403);
  Status refused = recorder.Record(pod, "Normal", "Started", "Start", "");
  ASSERT_FALSE(refused.ok());
  EXPECT_EQ(refused.error().code, 403);
}

// A note is cut between characters: half of one would make the Event's JSON invalid, and the
// whole Record throw.
TEST(K8sEventRecorderTest, ALongNoteIsCutBetweenCharacters) {
  FakeApiServer server;
  RestOptions options;
  options.qps = 0;
  RestClient client(server, ClientConfig{}, options);
  EventRecorder recorder(client, {});
  Json job = {{"apiVersion", "tessera.dev/v1alpha1"},
              {"kind", "TrainingJob"},
              {"metadata", {{"name", "gpt"}, {"namespace", "team"}}}};
  std::string note;
  while (note.size() < 2000)
    note += "\u00e9";  // two bytes: byte 1021 is the first half of one
  ASSERT_TRUE(recorder.Record(job, "Warning", "Failed", "Reconcile", note).ok());
  auto list = client.List(Events("team"));
  ASSERT_TRUE(list.ok());
  ASSERT_EQ((*list)["items"].size(), 1u);
  EXPECT_EQ((*list)["items"][0]["note"], note.substr(0, 1020) + "...");
}

}  // namespace
}  // namespace tessera::k8s
