// The reconcile loop (controller/reconcile/controller.h) against the in-memory API server of
// the k8s tests: objects created, status written, gang restart, invalid specs, conflicts, and
// expectations keeping a lagging cache from creating twice.
#include "controller/reconcile/controller.h"

#include <gtest/gtest.h>

#include <mutex>
#include <thread>

#include "tests/unit/k8s/fake_apiserver.h"

namespace tessera::reconcile {
namespace {

using namespace std::chrono_literals;
using k8s::testing::FakeApiServer;
using Json = nlohmann::json;

// The in-memory server understands equality selectors only; the controller's informers select
// "has label tessera.dev/job-name". Everything in these tests carries it, so drop that term.
class ExistenceSelectorAdapter : public k8s::HttpTransport {
 public:
  explicit ExistenceSelectorAdapter(FakeApiServer& server) : server_(server) {}
  k8s::Result<k8s::HttpResponse> Send(const k8s::HttpRequest& request) override {
    return server_.Send(Strip(request));
  }
  k8s::Result<k8s::HttpResponse> Stream(const k8s::HttpRequest& request,
                                        const std::function<bool(std::string_view)>& on_line,
                                        k8s::Cancellation& cancel) override {
    return server_.Stream(Strip(request), on_line, cancel);
  }

 private:
  static k8s::HttpRequest Strip(k8s::HttpRequest r) {
    const std::string term = "labelSelector=tessera.dev%2Fjob-name";
    for (auto pos = r.path.find(term); pos != std::string::npos; pos = r.path.find(term)) {
      size_t end = pos + term.size();
      if (end < r.path.size() && r.path[end] != '&')
        break;  // an equality selector: keep it
      r.path.erase(pos, end - pos + (end < r.path.size() ? 1 : 0));
    }
    return r;
  }
  FakeApiServer& server_;
};

class RecordingEvents : public EventSink {
 public:
  void Record(const Json&, const std::string& type, const std::string& reason,
              const std::string&) override {
    std::lock_guard<std::mutex> lock(mu);
    reasons.push_back(type + "/" + reason);
  }
  std::vector<std::string> Reasons() {
    std::lock_guard<std::mutex> lock(mu);
    return reasons;
  }
  std::mutex mu;
  std::vector<std::string> reasons;
};

Json JobObject(const std::string& name, int workers, const std::string& extra_spec = "{}") {
  Json spec = {{"workers", workers},
               {"runPolicy", {{"backoffLimit", 1}}},
               {"template",
                {{"spec",
                  {{"containers", Json::array({{{"name", "worker"},
                                                {"image", "busybox"},
                                                {"command", Json::array({"true"})}}})}}}}}};
  spec.update(Json::parse(extra_spec));
  return {{"apiVersion", "tessera.dev/v1alpha1"},
          {"kind", "TrainingJob"},
          {"metadata", {{"name", name}, {"namespace", "ml"}, {"generation", 1}}},
          {"spec", spec}};
}

bool WaitUntil(const std::function<bool()>& pred, std::chrono::milliseconds timeout = 10s) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (!pred()) {
    if (std::chrono::steady_clock::now() >= deadline)
      return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

k8s::RestOptions Unlimited() {
  k8s::RestOptions o;
  o.qps = 0;
  return o;
}

class ControllerTest : public ::testing::Test {
 protected:
  void SetUp() override { StartController(std::chrono::minutes(2)); }

  void StartController(std::chrono::steady_clock::duration ttl) {
    ControllerOptions options;
    options.expectation_ttl = ttl;
    controller_ = std::make_unique<Controller>(client_, events_, nullptr, nullptr, options);
    controller_->StartInformers();
    ASSERT_TRUE(controller_->WaitForSync(10s));
  }

  Json Create(const k8s::ResourceRef& ref, const Json& object) {
    auto r = client_.Create(ref, object);
    EXPECT_TRUE(r.ok()) << r.error().ToString();
    return r.ok() ? *r : Json();
  }

  Json Job(const std::string& name) {
    auto r = client_.Get(TrainingJobs("ml").Named(name));
    return r.ok() ? *r : Json();
  }

  std::vector<Json> Pods() {
    auto r = client_.List(k8s::Pods("ml"));
    std::vector<Json> out;
    if (r.ok()) {
      for (const auto& p : (*r)["items"])
        out.push_back(p);
    }
    return out;
  }

  // Plays the kubelet: sets the phase (and a terminated worker container) of a pod.
  void SetPodPhase(const std::string& name, const std::string& phase, int exit_code = 0) {
    auto pod = client_.Get(k8s::Pods("ml").Named(name));
    ASSERT_TRUE(pod.ok());
    Json p = *pod;
    p["status"] = {{"phase", phase}, {"podIP", "10.244.0.9"}};
    if (phase == "Running") {
      p["status"]["conditions"] = Json::array({{{"type", "Ready"}, {"status", "True"}}});
    } else if (phase == "Failed" || phase == "Succeeded") {
      p["status"]["containerStatuses"] = Json::array(
          {{{"name", "worker"},
            {"state",
             {{"terminated",
               {{"exitCode", exit_code}, {"reason", exit_code ? "Error" : "Completed"}}}}}}});
    }
    ASSERT_TRUE(client_.UpdateStatus(k8s::Pods("ml").Named(name), p).ok());
  }

  // Reconciles `key` until its outcome settles (no conflict/error), as the workers would.
  ReconcileOutcome Settle(const std::string& key) {
    ReconcileOutcome out;
    for (int i = 0; i < 50; ++i) {
      out = controller_->Reconcile(key);
      if (out.result == ReconcileOutcome::Result::kSuccess)
        return out;
      std::this_thread::sleep_for(10ms);
    }
    return out;
  }

  // Reconciles until `pred` holds on the server, waiting for the caches in between.
  bool ReconcileUntil(const std::string& key, const std::function<bool()>& pred) {
    return WaitUntil([&] {
      Settle(key);
      return pred();
    });
  }

  std::string Phase(const std::string& name) {
    return Job(name).value("status", Json::object()).value("phase", "");
  }

  FakeApiServer server_;
  ExistenceSelectorAdapter transport_{server_};
  k8s::ClientConfig config_;
  k8s::RestClient client_{transport_, config_, Unlimited()};
  RecordingEvents events_;
  std::unique_ptr<Controller> controller_;
};

// Leadership can be won (RunWorkers, on the elector's thread) just as the process is told to
// stop (Stop, on the main thread). Whatever the order, no worker outlives Stop: an unjoined
// one would end the process in ~thread. (Under the tsan preset the old, unguarded worker list
// was reported here as a data race.)
// What the log says while the caches cannot fill: the usual causes are named.
TEST(DescribeInformerFailure, NamesTheUsualCauses) {
  EXPECT_EQ(DescribeInformerFailure("trainingjobs",
                                    {404, "NotFound",
                                     "the server could not find "
                                     "the requested resource"},
                                    true),
            "list trainingjobs failed (retrying with back-off): 404 NotFound: the server could not "
            "find the requested resource: is the TrainingJob CRD installed (manifests/crd/, or the "
            "chart with crds.enabled)?");
  const std::string forbidden =
      DescribeInformerFailure("nodes", {403, "Forbidden", "nodes is forbidden"}, true);
  EXPECT_NE(forbidden.find("list nodes failed"), std::string::npos) << forbidden;
  EXPECT_NE(forbidden.find("may this identity list and watch nodes?"), std::string::npos)
      << forbidden;
  const std::string refused = DescribeInformerFailure("pods", {401, "Unauthorized", ""}, false);
  EXPECT_NE(refused.find("watch pods failed"), std::string::npos) << refused;
  EXPECT_NE(refused.find("refused the kubeconfig's credentials"), std::string::npos) << refused;
  const std::string redirect = DescribeInformerFailure(
      "trainingjobs", {302, "Redirect", "the server redirected to /elsewhere"}, true);
  EXPECT_NE(redirect.find("302 Redirect: the server redirected to /elsewhere"), std::string::npos)
      << redirect;
  EXPECT_EQ(DescribeInformerFailure("pods", {410, "Expired", "too old"}, false), "")
      << "an expired watch is routine";
}

TEST_F(ControllerTest, RunWorkersRacingStopLeavesNoWorkerBehind) {
  for (int i = 0; i < 20; ++i) {
    std::thread leader([&] { controller_->RunWorkers(); });
    controller_->Stop();
    leader.join();
    controller_->RunWorkers();  // after Stop: starts nothing
    controller_.reset();
    StartController(std::chrono::minutes(2));
  }
}

TEST_F(ControllerTest, CreatesServiceSecretAndPodsThenRunning) {
  Create(TrainingJobs("ml"), JobObject("gpt", 2));
  ASSERT_TRUE(WaitUntil([&] {
    return controller_->Reconcile("ml/gpt").result == ReconcileOutcome::Result::kSuccess &&
           Pods().size() == 2;
  }));
  ASSERT_TRUE(client_.Get(k8s::Services("ml").Named("gpt")).ok());
  auto secret = client_.Get(k8s::Secrets("ml").Named("gpt-rendezvous"));
  ASSERT_TRUE(secret.ok());
  EXPECT_EQ((*secret)["stringData"]["token"].get<std::string>().size(), 64u);
  for (const Json& pod : Pods()) {
    EXPECT_EQ(pod["metadata"]["labels"]["tessera.dev/attempt"], "0");
    EXPECT_EQ(pod["metadata"]["ownerReferences"][0]["uid"], Job("gpt")["metadata"]["uid"]);
  }
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] { return Phase("gpt") == "Starting"; }));

  SetPodPhase("gpt-worker-0", "Running");
  SetPodPhase("gpt-worker-1", "Running");
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] { return Phase("gpt") == "Running"; }));
  const Json status = Job("gpt")["status"];
  EXPECT_EQ(status["workers"]["ready"], 2);
  EXPECT_EQ(status["observedGeneration"], 1);
  EXPECT_EQ(Pods().size(), 2u);
  auto reasons = events_.Reasons();
  EXPECT_NE(std::find(reasons.begin(), reasons.end(), "Normal/AllWorkersRunning"), reasons.end());
}

// A controller that restarts finds the EndpointSlice its predecessor wrote: its first POST
// is refused as existing and it replaces the slice instead.
TEST_F(ControllerTest, EndpointSliceWrittenBeforeARestartIsReplaced) {
  Create(k8s::EndpointSlices("ml"),
         {{"apiVersion", "discovery.k8s.io/v1"},
          {"kind", "EndpointSlice"},
          {"metadata", {{"name", "gpt"}, {"namespace", "ml"}}},
          {"addressType", "IPv4"},
          {"endpoints", Json::array({{{"addresses", {"10.0.0.1"}}, {"hostname", "stale"}}})}});
  Create(TrainingJobs("ml"), JobObject("gpt", 2));
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] { return Phase("gpt") == "Starting"; }));
  SetPodPhase("gpt-worker-0", "Running");
  SetPodPhase("gpt-worker-1", "Running");
  auto hostnames = [&] {
    std::vector<std::string> out;
    auto slice = client_.Get(k8s::EndpointSlices("ml").Named("gpt"));
    if (slice.ok()) {
      for (const Json& e : (*slice)["endpoints"])
        out.push_back(e.value("hostname", ""));
    }
    return out;
  };
  ASSERT_TRUE(ReconcileUntil(
      "ml/gpt",
      [&] {
        return hostnames() == std::vector<std::string>{"gpt-worker-0", "gpt-worker-1"};
      }))
      << "slice hostnames: " << ::testing::PrintToString(hostnames());
}

// Creates refused by the apiserver (here 403, as for an exhausted ResourceQuota) are retried,
// and said once as a Warning event, not on every retry; once they succeed the next run of
// failures is said again.
TEST_F(ControllerTest, RefusedCreatesAreOneWarningEventUntilTheyWork) {
  Create(TrainingJobs("ml"), JobObject("gpt", 2));
  ASSERT_TRUE(WaitUntil([&] { return controller_->CachedJob("ml/gpt") != nullptr; }));
  auto failed_creates = [&] {
    const auto reasons = events_.Reasons();
    return std::count(reasons.begin(), reasons.end(), "Warning/FailedCreate");
  };
  server_.FailNext("POST", 6, 403);
  for (int i = 0; i < 3; ++i) {
    const ReconcileOutcome out = controller_->Reconcile("ml/gpt");
    EXPECT_EQ(out.result, ReconcileOutcome::Result::kError);
    EXPECT_NE(out.error.find("403"), std::string::npos) << out.error;
    // The refusal is written to the status: let the cache see it before deciding again.
    ASSERT_TRUE(WaitUntil([&] {
      const auto cached = controller_->CachedJob("ml/gpt");
      return cached &&
             (*cached)["metadata"]["resourceVersion"] == Job("gpt")["metadata"]["resourceVersion"];
    }));
  }
  EXPECT_EQ(failed_creates(), 1);
  EXPECT_TRUE(Pods().empty());
  // Meanwhile the status says why (before, a job whose creates were refused had none).
  auto created = [&] {
    const Json status = Job("gpt").value("status", Json::object());
    for (const Json& c : status.value("conditions", Json::array())) {
      if (c.value("type", "") == "Created")
        return c.value("status", "") + "/" + c.value("reason", "") + ": " + c.value("message", "");
    }
    return std::string("none");
  };
  EXPECT_EQ(Phase("gpt"), "Pending");
  EXPECT_EQ(created().rfind("False/FailedCreate: ", 0), 0u) << created();
  EXPECT_NE(created().find("403"), std::string::npos) << created();
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] { return Pods().size() == 2; }));
  EXPECT_EQ(failed_creates(), 1);
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] { return Phase("gpt") == "Starting"; }));
  EXPECT_EQ(created(), "True/JobCreated: job accepted");
  const auto reasons = events_.Reasons();
  EXPECT_EQ(std::count(reasons.begin(), reasons.end(), "Normal/JobCreated"), 1);

  // The gang fails and its next attempt's creates are refused: a new warning.
  SetPodPhase("gpt-worker-0", "Failed", 1);
  server_.FailNext("POST", 2, 403);
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] { return failed_creates() == 2; }));
}

TEST_F(ControllerTest, FailedWorkerRestartsTheWholeGangThenBackoffLimitFails) {
  Create(TrainingJobs("ml"), JobObject("gpt", 2));
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] { return Phase("gpt") == "Starting"; }));
  SetPodPhase("gpt-worker-0", "Running");
  SetPodPhase("gpt-worker-1", "Failed", 7);

  // Attempt 1: both pods replaced.
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] {
    auto pods = Pods();
    return pods.size() == 2 &&
           std::all_of(pods.begin(), pods.end(),
                       [](const Json& p) {
                         return p["metadata"]["labels"]["tessera.dev/attempt"] == "1";
                       }) &&
           Phase("gpt") == "Starting";
  }));
  Json status = Job("gpt")["status"];
  EXPECT_EQ(status["restarts"], 1);
  EXPECT_EQ(status["lastFailure"]["reason"], "WorkerFailed");
  EXPECT_EQ(status["lastFailure"]["exitCode"], 7);
  EXPECT_EQ(status["lastFailure"]["worker"], "gpt-worker-1");

  // backoffLimit 1: the next failure fails the job.
  SetPodPhase("gpt-worker-0", "Failed", 1);
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] { return Phase("gpt") == "Failed"; }));
  status = Job("gpt")["status"];
  EXPECT_EQ(status["restarts"], 1);
  bool found = false;
  for (const Json& c : status["conditions"]) {
    if (c["type"] == "Failed") {
      found = true;
      EXPECT_EQ(c["reason"], "BackoffLimitExceeded");
      EXPECT_EQ(c["status"], "True");
    }
  }
  EXPECT_TRUE(found);
}

TEST_F(ControllerTest, InvalidSpecFailsTheJobWithoutPods) {
  Create(TrainingJobs("ml"), JobObject("bad", 2, R"({"workers": 0, "bogus": true})"));
  ASSERT_TRUE(ReconcileUntil("ml/bad", [&] { return Phase("bad") == "Failed"; }));
  const Json status = Job("bad")["status"];
  EXPECT_EQ(status["lastFailure"]["reason"], "InvalidSpec");
  EXPECT_NE(status["lastFailure"]["message"].get<std::string>().find("spec."), std::string::npos)
      << status["lastFailure"]["message"];
  EXPECT_TRUE(Pods().empty());
  EXPECT_FALSE(client_.Get(k8s::Services("ml").Named("bad")).ok());
}

TEST_F(ControllerTest, StatusConflictIsReportedForRetry) {
  Create(TrainingJobs("ml"), JobObject("gpt", 1));
  ASSERT_TRUE(WaitUntil([&] {
    return controller_->Reconcile("ml/gpt").requeue_after.has_value() || Pods().size() == 1;
  }));
  // Whatever the controller does next, a 409 on its status write is a conflict, not an error.
  SetPodPhase("gpt-worker-0", "Running");
  server_.FailNext("PUT", 1, 409);
  ASSERT_TRUE(WaitUntil([&] {
    auto out = controller_->Reconcile("ml/gpt");
    return out.result == ReconcileOutcome::Result::kConflict ||
           out.result == ReconcileOutcome::Result::kError;
  }));
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] { return Phase("gpt") == "Running"; }));
}

// The watches stall after the controller created the pods: reconciling again and again must
// not create them again (expectations), and nothing is decided until the caches catch up.
TEST_F(ControllerTest, LaggingCacheNeverCreatesTwice) {
  Create(TrainingJobs("ml"), JobObject("gpt", 3));
  ASSERT_TRUE(WaitUntil([&] { return controller_->CachedJob("ml/gpt") != nullptr; }));
  server_.HoldWatches(true);
  ASSERT_EQ(controller_->Reconcile("ml/gpt").result, ReconcileOutcome::Result::kSuccess);
  const std::string pods_path = "/api/v1/namespaces/ml/pods";
  ASSERT_EQ(server_.CountRequests("POST", pods_path), 3u);
  const size_t puts = server_.CountRequests("PUT", "/apis/tessera.dev");
  for (int i = 0; i < 5; ++i) {
    ReconcileOutcome out = controller_->Reconcile("ml/gpt");
    EXPECT_EQ(out.result, ReconcileOutcome::Result::kSuccess);
    EXPECT_TRUE(out.requeue_after.has_value());  // waits for the expectations
  }
  EXPECT_EQ(server_.CountRequests("POST", pods_path), 3u);
  EXPECT_EQ(server_.CountRequests("PUT", "/apis/tessera.dev"), puts);
  server_.HoldWatches(false);
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] { return Phase("gpt") == "Starting"; }));
  EXPECT_EQ(server_.CountRequests("POST", pods_path), 3u);
  EXPECT_EQ(Pods().size(), 3u);
}

}  // namespace
}  // namespace tessera::reconcile
