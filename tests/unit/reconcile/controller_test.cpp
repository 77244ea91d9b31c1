// The reconcile loop (controller/reconcile/controller.h) against the in-memory API server of
// the k8s tests: objects created, status written, gang restart, invalid specs, conflicts, and
// expectations keeping a lagging cache from creating or deleting twice; the API server's
// refusals, the EndpointSlice, gang schedulers' PodGroups, progress polling, metrics and
// events; and the workers reacting to job, pod and node events.
#include "controller/reconcile/controller.h"

#include <gtest/gtest.h>
#include <prometheus/metric_family.h>
#include <prometheus/registry.h>

#include <atomic>
#include <condition_variable>
#include <map>
#include <mutex>
#include <set>
#include <thread>

#include "api/contract.h"
#include "controller/reconcile/objects.h"
#include "controller/reconcile/observe.h"
#include "controller/reconcile/rfc3339.h"
#include "tests/unit/k8s/fake_apiserver.h"

namespace tessera::reconcile {
namespace {

using namespace std::chrono_literals;
using k8s::testing::FakeApiServer;
using Json = nlohmann::json;

// The in-memory server understands equality selectors only; the controller's informers select
// "has label tessera.dev/job-name". Everything in these tests carries it, so drop that term.
// It also plays what the in-memory server lacks, as a test asks: refused pod creates and node
// lists, Volcano's API group (discovery, PodGroups), graceful pod deletion, and a gate that
// holds pod creates to count how many are in flight at once.
class ExistenceSelectorAdapter : public k8s::HttpTransport {
 public:
  explicit ExistenceSelectorAdapter(FakeApiServer& server) : server_(server) {}
  k8s::Result<k8s::HttpResponse> Send(const k8s::HttpRequest& request) override {
    const bool pod_create = request.method == "POST" && request.path.ends_with("/pods");
    if (pod_create && refuse_pod_creates.fetch_sub(1) > 0)
      return Refusal(403, "Forbidden", "exceeded quota");
    if (request.method == "GET" && request.path.starts_with("/api/v1/nodes") && refuse_node_lists)
      return Refusal(500, "InternalError", "etcd unavailable");
    if (request.method == "DELETE" && request.path.find("/pods/") != std::string::npos &&
        graceful_pod_deletes) {
      // As a kubelet that is still running the pod: it is marked, and goes later.
      k8s::HttpRequest get = request;
      get.method = "GET";
      get.body.clear();
      auto pod = server_.Send(get);
      if (!pod.ok() || pod->status != 200)
        return pod;
      Json marked = Json::parse(pod->body);
      marked["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
      k8s::HttpRequest put = request;
      put.method = "PUT";
      put.body = marked.dump();
      return server_.Send(put);
    }
    if (request.path == "/apis/scheduling.volcano.sh/v1beta1" && fail_discovery)
      return Refusal(503, "ServiceUnavailable", "the aggregated API is down");
    if (request.path.starts_with("/apis/scheduling.volcano.sh/")) {
      if (!volcano_served)
        return Refusal(404, "NotFound", "the server could not find the requested resource");
      if (request.path == "/apis/scheduling.volcano.sh/v1beta1") {
        return k8s::HttpResponse{
            200, {}, R"({"kind": "APIResourceList", "resources": [{"name": "podgroups"}]})"};
      }
    }
    if (pod_create && gate_pod_creates > 0) {
      std::unique_lock<std::mutex> lock(mu_);
      max_pod_creates_in_flight = std::max(max_pod_creates_in_flight, ++pod_creates_in_flight_);
      cv_.notify_all();
      cv_.wait_for(lock, 2s, [&] { return pod_creates_in_flight_ >= gate_pod_creates; });
      lock.unlock();
      auto response = server_.Send(Strip(request));
      lock.lock();
      --pod_creates_in_flight_;
      return response;
    }
    return server_.Send(Strip(request));
  }
  int MaxPodCreatesInFlight() {
    std::lock_guard<std::mutex> lock(mu_);
    return max_pod_creates_in_flight;
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
  static k8s::HttpResponse Refusal(int code, const std::string& reason,
                                   const std::string& message) {
    return {
        code,
        {},
        Json{{"kind", "Status"}, {"code", code}, {"reason", reason}, {"message", message}}.dump()};
  }
  FakeApiServer& server_;
  std::mutex mu_;
  std::condition_variable cv_;
  int pod_creates_in_flight_ = 0;
  int max_pod_creates_in_flight = 0;

 public:
  std::atomic<int> refuse_pod_creates{0};      // answer this many pod creates with 403
  std::atomic<bool> refuse_node_lists{false};  // answer node lists with 500
  // Whether the API server serves Volcano's PodGroup CRD (else 404 for all of its group).
  std::atomic<bool> volcano_served{false};
  std::atomic<bool> fail_discovery{false};        // answer discovery of its group with 503
  std::atomic<bool> graceful_pod_deletes{false};  // a pod delete marks the pod only
  // Holds each pod create until this many are in flight (or 2 s passed); 0: none.
  std::atomic<int> gate_pod_creates{0};
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

// A pod in phase `phase` controlled by an earlier TrainingJob gpt (uid uid-of-an-earlier-gpt),
// labelled as gpt's and with `labels`.
Json PodOfAnEarlierGpt(const std::string& name, Json labels, const std::string& phase) {
  labels["tessera.dev/job-name"] = "gpt";
  return {{"apiVersion", "v1"},
          {"kind", "Pod"},
          {"metadata",
           {{"name", name},
            {"namespace", "ml"},
            {"labels", labels},
            {"ownerReferences", Json::array({{{"apiVersion", "tessera.dev/v1alpha1"},
                                              {"kind", "TrainingJob"},
                                              {"name", "gpt"},
                                              {"uid", "uid-of-an-earlier-gpt"},
                                              {"controller", true}}})}}},
          {"spec", {{"containers", Json::array({{{"name", "worker"}, {"image", "busybox"}}})}}},
          {"status", {{"phase", phase}}}};
}

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

// Serves the same /progress document to every pod, and notes which addresses were read.
class ScriptedProgress : public ProgressReader {
 public:
  std::optional<Json> Read(const std::string& host, int port, std::chrono::milliseconds) override {
    std::lock_guard<std::mutex> lock(mu);
    contacted.insert(host + ":" + std::to_string(port));
    return body;
  }
  std::set<std::string> Contacted() {
    std::lock_guard<std::mutex> lock(mu);
    return contacted;
  }
  std::mutex mu;
  std::optional<Json> body;
  std::set<std::string> contacted;
};

// The sample of metric `name` with exactly `labels`: a counter's or gauge's value, a
// histogram's count of observations; nullopt when there is none.
std::optional<double> Sample(const ControllerMetrics& metrics, const std::string& name,
                             const std::map<std::string, std::string>& labels = {}) {
  for (const prometheus::MetricFamily& family : metrics.registry()->Collect()) {
    if (family.name != name)
      continue;
    for (const prometheus::ClientMetric& metric : family.metric) {
      std::map<std::string, std::string> got;
      for (const auto& label : metric.label)
        got[label.name] = label.value;
      if (got != labels)
        continue;
      switch (family.type) {
        case prometheus::MetricType::Counter:
          return metric.counter.value;
        case prometheus::MetricType::Gauge:
          return metric.gauge.value;
        case prometheus::MetricType::Histogram:
          return static_cast<double>(metric.histogram.sample_count);
        default:
          return std::nullopt;
      }
    }
  }
  return std::nullopt;
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
    StartController(options);
  }

  // Replaces the controller by one with `options`, reading progress through `poller_` when
  // `progress` (else none).
  void StartController(const ControllerOptions& options, bool progress = false) {
    controller_.reset();
    poller_ = std::make_unique<ProgressPoller>(
        progress_, ProgressPoller::Options{ProgressPolling::kPods, 1h, 1s}, nullptr);
    controller_ = std::make_unique<Controller>(client_, events_, &metrics_,
                                               progress ? poller_.get() : nullptr, options);
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
  void SetPodPhase(const std::string& name, const std::string& phase, int exit_code = 0,
                   const std::string& message = "") {
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
      if (!message.empty())
        p["status"]["containerStatuses"][0]["state"]["terminated"]["message"] = message;
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

  // Reconciles `key` until a reconcile decides (awaits none of the controller's own writes);
  // its outcome.
  ReconcileOutcome Decided(const std::string& key) {
    ReconcileOutcome out;
    EXPECT_TRUE(WaitUntil([&] {
      out = Settle(key);
      return controller_->expectations().Satisfied(key);
    }));
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

  Json Status(const std::string& name) { return Job(name).value("status", Json::object()); }

  // "status/reason" of the job's condition `type`; "none" without it.
  std::string Condition(const std::string& name, const std::string& type) {
    for (const Json& c : Status(name).value("conditions", Json::array())) {
      if (c.value("type", "") == type)
        return c.value("status", "") + "/" + c.value("reason", "");
    }
    return "none";
  }

  size_t FailedCreateEvents() {
    const auto reasons = events_.Reasons();
    return std::count(reasons.begin(), reasons.end(), "Warning/FailedCreate");
  }

  // Waits until the cache holds the job `name` as the server does.
  bool CacheHasJob(const std::string& name) {
    return WaitUntil([&] {
      const auto cached = controller_->CachedJob("ml/" + name);
      return cached &&
             (*cached)["metadata"]["resourceVersion"] == Job(name)["metadata"]["resourceVersion"];
    });
  }

  // Sets the phase of the pods `names` and waits until the controller's cache has seen it.
  void SetPodPhaseSeen(const std::string& job, const std::vector<std::string>& names,
                       const std::string& phase, int exit_code = 0) {
    // Any event of a pod observes its creation: expectations serve as markers, once the
    // controller awaits nothing else (its own last status write, say).
    ASSERT_TRUE(WaitUntil([&] {
      Settle("ml/" + job);
      return controller_->expectations().Satisfied("ml/" + job);
    }));
    for (const std::string& name : names)
      controller_->expectations().ExpectCreation("ml/" + job, name);
    for (const std::string& name : names)
      SetPodPhase(name, phase, exit_code);
    ASSERT_TRUE(WaitUntil([&] { return controller_->expectations().Satisfied("ml/" + job); }));
  }

  // Creates job `name` with `workers` workers and reconciles it until they all run.
  void RunJob(const std::string& name, int workers, const std::string& extra_spec = "{}") {
    Create(TrainingJobs("ml"), JobObject(name, workers, extra_spec));
    ASSERT_TRUE(ReconcileUntil("ml/" + name, [&] { return Phase(name) == "Starting"; }));
    for (int i = 0; i < workers; ++i)
      SetPodPhase(name + "-worker-" + std::to_string(i), "Running");
    ASSERT_TRUE(ReconcileUntil("ml/" + name, [&] { return Phase(name) == "Running"; }));
  }

  // Requests the controller wrote to the API server (creates, updates, deletes) under `path`.
  size_t Writes(const std::string& path) {
    return server_.CountRequests("POST", path) + server_.CountRequests("PUT", path) +
           server_.CountRequests("DELETE", path);
  }

  // The bodies of the DELETE requests for `path` exactly.
  std::vector<Json> Deletes(const std::string& path) {
    std::vector<Json> out;
    for (const k8s::HttpRequest& r : server_.Requests()) {
      if (r.method == "DELETE" && r.path == path)
        out.push_back(Json::parse(r.body.empty() ? "{}" : r.body));
    }
    return out;
  }

  FakeApiServer server_;
  ExistenceSelectorAdapter transport_{server_};
  k8s::ClientConfig config_;
  k8s::RestClient client_{transport_, config_, Unlimited()};
  RecordingEvents events_;
  ControllerMetrics metrics_;
  ScriptedProgress progress_;
  std::unique_ptr<ProgressPoller> poller_;
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
  EXPECT_EQ(DescribeInformerFailure("pods", {404, "NotFound", "not found"}, true),
            "list pods failed (retrying with back-off): 404 NotFound: not found")
      << "only the TrainingJob CRD is ours to install";
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
  server_.FailNext("POST", 6, 403);
  for (int i = 0; i < 3; ++i) {
    const ReconcileOutcome out = controller_->Reconcile("ml/gpt");
    EXPECT_EQ(out.result, ReconcileOutcome::Result::kError);
    EXPECT_NE(out.error.find("403"), std::string::npos) << out.error;
    // The refusal is written to the status: let the cache see it before deciding again.
    ASSERT_TRUE(CacheHasJob("gpt"));
  }
  EXPECT_EQ(FailedCreateEvents(), 1u);
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
  EXPECT_EQ(FailedCreateEvents(), 1u);
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] { return Phase("gpt") == "Starting"; }));
  EXPECT_EQ(created(), "True/JobCreated: job accepted");
  const auto reasons = events_.Reasons();
  EXPECT_EQ(std::count(reasons.begin(), reasons.end(), "Normal/JobCreated"), 1);

  // The gang fails and its next attempt's creates are refused: a new warning.
  SetPodPhase("gpt-worker-0", "Failed", 1);
  server_.FailNext("POST", 2, 403);
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] { return FailedCreateEvents() == 2; }));
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

// The controller's events reach the API server as events.k8s.io Events on the job, with the
// action Reconcile.
TEST_F(ControllerTest, ApiEventSinkRecordsAnEventOnTheJob) {
  const Json job = Create(TrainingJobs("ml"), JobObject("gpt", 1));
  k8s::EventRecorder recorder(client_, {});
  ApiEventSink sink(recorder);
  sink.Record(job, "Warning", "FailedCreate", "create pod ml/gpt-worker-0: 403");
  auto events = client_.List(k8s::Events("ml"));
  ASSERT_TRUE(events.ok());
  ASSERT_EQ((*events)["items"].size(), 1u);
  Json event = (*events)["items"][0];  // not const: a missing field reads as null
  EXPECT_EQ(event["type"], "Warning");
  EXPECT_EQ(event["reason"], "FailedCreate");
  EXPECT_EQ(event["action"], "Reconcile");
  EXPECT_EQ(event["note"], "create pod ml/gpt-worker-0: 403");
  EXPECT_EQ(event["regarding"]["uid"], job["metadata"]["uid"]);
}

// What each recorder of ControllerMetrics shows on /metrics.
TEST(ControllerMetrics, EachRecorderSetsItsSample) {
  ControllerMetrics m;
  for (const char* phase :
       {"Pending", "Starting", "Running", "Restarting", "Succeeded", "Failed", "Suspended"})
    EXPECT_EQ(Sample(m, "tessera_jobs", {{"phase", phase}}), 0.0) << "from the start: " << phase;
  m.SetJobPhases({{"Running", 2}, {"Suspended", 1}});
  EXPECT_EQ(Sample(m, "tessera_jobs", {{"phase", "Running"}}), 2.0);
  EXPECT_EQ(Sample(m, "tessera_jobs", {{"phase", "Suspended"}}), 1.0);
  m.SetJobPhases({{"Running", 3}});
  EXPECT_EQ(Sample(m, "tessera_jobs", {{"phase", "Running"}}), 3.0);
  EXPECT_EQ(Sample(m, "tessera_jobs", {{"phase", "Suspended"}}), 0.0) << "a phase left out is 0";

  m.ObserveReconcile("success", 0.002);
  m.ObserveReconcile("error", 0.5);
  m.ObserveReconcile("error", 0.5);
  EXPECT_EQ(Sample(m, "tessera_controller_reconcile_total", {{"result", "success"}}), 1.0);
  EXPECT_EQ(Sample(m, "tessera_controller_reconcile_total", {{"result", "error"}}), 2.0);
  EXPECT_EQ(Sample(m, "tessera_controller_reconcile_duration_seconds"), 3.0);
  m.SetWorkqueueDepth(7);
  EXPECT_EQ(Sample(m, "tessera_controller_workqueue_depth"), 7.0);
  m.ObserveApiRequest("GET", 0);
  m.ObserveApiRequest("GET", 404);
  m.ObserveApiRequest("GET", 404);
  EXPECT_EQ(Sample(m, "tessera_controller_api_requests_total", {{"verb", "GET"}, {"code", "0"}}),
            1.0);
  EXPECT_EQ(Sample(m, "tessera_controller_api_requests_total", {{"verb", "GET"}, {"code", "404"}}),
            2.0);
  m.ObserveWatchRestart("nodes");
  EXPECT_EQ(Sample(m, "tessera_controller_watch_restarts_total", {{"resource", "nodes"}}), 1.0);
  m.SetLeader(true);
  EXPECT_EQ(Sample(m, "tessera_controller_leader"), 1.0);
  m.SetLeader(false);
  EXPECT_EQ(Sample(m, "tessera_controller_leader"), 0.0);
  m.ObserveJobRestart();
  EXPECT_EQ(Sample(m, "tessera_job_restarts_total"), 1.0);
  m.ObserveJobStartup(12);
  EXPECT_EQ(Sample(m, "tessera_job_startup_seconds"), 1.0);
}

// tessera_jobs counts each job once, in the phase last reconciled, and forgets a deleted job;
// a gang restart and an attempt's startup are observed once each, not on every reconcile.
TEST_F(ControllerTest, MetricsFollowTheJobsPhaseRestartsAndStartup) {
  ASSERT_NO_FATAL_FAILURE(RunJob("gpt", 2));
  EXPECT_EQ(Sample(metrics_, "tessera_jobs", {{"phase", "Running"}}), 1.0);
  EXPECT_EQ(Sample(metrics_, "tessera_job_startup_seconds"), 1.0);
  EXPECT_EQ(Sample(metrics_, "tessera_job_restarts_total"), 0.0);

  SetPodPhase("gpt-worker-1", "Failed", 7);
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] {
    return Status("gpt").value("restarts", 0) == 1 && Phase("gpt") == "Starting";
  }));
  for (int i = 0; i < 3; ++i)
    Settle("ml/gpt");
  EXPECT_EQ(Sample(metrics_, "tessera_job_restarts_total"), 1.0);
  EXPECT_EQ(Sample(metrics_, "tessera_job_startup_seconds"), 1.0);
  EXPECT_EQ(Sample(metrics_, "tessera_jobs", {{"phase", "Running"}}), 0.0);
  EXPECT_EQ(Sample(metrics_, "tessera_jobs", {{"phase", "Starting"}}), 1.0);

  ASSERT_TRUE(client_.Delete(TrainingJobs("ml").Named("gpt"), {}).ok());
  ASSERT_TRUE(WaitUntil([&] { return controller_->CachedJob("ml/gpt") == nullptr; }));
  Settle("ml/gpt");
  EXPECT_EQ(Sample(metrics_, "tessera_jobs", {{"phase", "Starting"}}), 0.0);
}

// Rank 0's /progress is read, at its pod IP and the job's metrics port, only while the
// attempt runs; its sample goes into the status, and a new attempt stops the reads.
TEST_F(ControllerTest, ProgressIsReadFromRankZeroWhileTheAttemptRuns) {
  ASSERT_NO_FATAL_FAILURE(StartController(ControllerOptions{}, /*progress=*/true));
  progress_.body = Json{{"step", 12}, {"totalSteps", 100}, {"loss", 2.5}, {"valLoss", 2.75}};
  Create(TrainingJobs("ml"), JobObject("gpt", 2, R"({"metrics": {"port": 9411}})"));
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] { return Phase("gpt") == "Starting"; }));
  // Rank 0 runs (it has an IP), rank 1 does not yet: the attempt is still starting.
  SetPodPhase("gpt-worker-0", "Running");
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] {
    return Status("gpt").value("workers", Json::object()).value("ready", 0) == 1;
  }));
  EXPECT_EQ(poller_->Targets(), 0u);

  SetPodPhase("gpt-worker-1", "Running");
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] { return Phase("gpt") == "Running"; }));
  ASSERT_EQ(poller_->Targets(), 1u);
  poller_->PollOnce();
  EXPECT_EQ(progress_.Contacted(), std::set<std::string>{"10.244.0.9:9411"});
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] { return Status("gpt").contains("progress"); }));
  Json progress = Status("gpt")["progress"];  // not const: a missing field reads as null
  EXPECT_EQ(progress["step"], 12);
  EXPECT_EQ(progress["attempt"], 0);
  EXPECT_EQ(progress["totalSteps"], 100);
  EXPECT_EQ(progress["loss"], 2.5);
  EXPECT_EQ(progress["valLoss"], 2.75);

  SetPodPhase("gpt-worker-1", "Failed", 1);
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] { return Status("gpt").value("restarts", 0) == 1; }));
  EXPECT_EQ(poller_->Targets(), 0u);
}

// Worker 0's termination message ends with rank 0's progress as it ended: that is the job's
// progress once the pod has ended, not the last poll (at step 12 here), whether the job
// succeeded or the attempt failed, and the line is not part of lastFailure's message.
TEST_F(ControllerTest, RankZerosFinalProgressIsTheProgressOnceItsPodHasEnded) {
  ASSERT_NO_FATAL_FAILURE(StartController(ControllerOptions{}, /*progress=*/true));
  progress_.body = Json{{"step", 12}, {"totalSteps", 100}, {"loss", 2.5}};
  ASSERT_NO_FATAL_FAILURE(RunJob("gpt", 2));
  poller_->PollOnce();
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] {
    return Status("gpt").value("progress", Json::object()).value("step", 0) == 12;
  }));

  SetPodPhase("gpt-worker-0", "Failed", 5,
              "loss is NaN at step 40: lower optimizer.lr\n"
              R"(final progress: {"step":40,"totalSteps":100,"loss":9.5,"valLoss":null})");
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] { return Status("gpt").value("restarts", 0) == 1; }));
  Json status = Status("gpt");
  EXPECT_EQ(status["progress"]["step"], 40);
  EXPECT_EQ(status["progress"]["attempt"], 0);
  EXPECT_EQ(status["progress"]["loss"], 9.5);
  const std::string failure = status["lastFailure"]["message"];
  EXPECT_NE(failure.find("(Error: loss is NaN at step 40: lower optimizer.lr)"), std::string::npos)
      << failure;
  EXPECT_EQ(failure.find("final progress"), std::string::npos) << failure;

  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] {
    auto pods = Pods();
    return pods.size() == 2 && std::all_of(pods.begin(), pods.end(), [](const Json& p) {
             return p["metadata"]["labels"]["tessera.dev/attempt"] == "1";
           });
  }));
  SetPodPhase("gpt-worker-0", "Running");
  SetPodPhase("gpt-worker-1", "Running");
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] { return Phase("gpt") == "Running"; }));
  SetPodPhase("gpt-worker-1", "Succeeded");
  SetPodPhase("gpt-worker-0", "Succeeded", 0,
              R"(final progress: {"step":100,"totalSteps":100,"loss":1.25,"valLoss":1.5})");
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] { return Phase("gpt") == "Succeeded"; }));
  status = Status("gpt");
  EXPECT_EQ(status["progress"]["step"], 100);
  EXPECT_EQ(status["progress"]["attempt"], 1);
  EXPECT_EQ(status["progress"]["loss"], 1.25);
  EXPECT_EQ(status["progress"]["valLoss"], 1.5);
}

// A job deleted, or on its way out, is no longer polled.
TEST_F(ControllerTest, ProgressOfAJobGoingOrGoneIsNoLongerRead) {
  ASSERT_NO_FATAL_FAILURE(StartController(ControllerOptions{}, /*progress=*/true));
  ASSERT_NO_FATAL_FAILURE(RunJob("gone", 1));
  ASSERT_NO_FATAL_FAILURE(RunJob("going", 1));
  ASSERT_EQ(poller_->Targets(), 2u);

  ASSERT_TRUE(client_.Delete(TrainingJobs("ml").Named("gone"), {}).ok());
  ASSERT_TRUE(WaitUntil([&] { return controller_->CachedJob("ml/gone") == nullptr; }));
  Settle("ml/gone");
  EXPECT_EQ(poller_->Targets(), 1u);

  Json going = Job("going");
  going["metadata"]["deletionTimestamp"] = "2026-01-01T00:00:00Z";
  ASSERT_TRUE(client_.Update(TrainingJobs("ml").Named("going"), going).ok());
  ASSERT_TRUE(WaitUntil([&] {
    const auto cached = controller_->CachedJob("ml/going");
    return cached && (*cached)["metadata"].contains("deletionTimestamp");
  }));
  Settle("ml/going");
  EXPECT_EQ(poller_->Targets(), 0u);
}

// The EndpointSlice is not written while no worker has an address, then once per change of
// its endpoints (not on every reconcile); one deleted by someone is created again.
TEST_F(ControllerTest, EndpointSliceIsWrittenOnlyWhenItsEndpointsChange) {
  const std::string slices = "/apis/discovery.k8s.io";
  Create(TrainingJobs("ml"), JobObject("gpt", 2));
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] { return Phase("gpt") == "Starting"; }));
  Settle("ml/gpt");
  EXPECT_EQ(Writes(slices), 0u);

  ASSERT_NO_FATAL_FAILURE(SetPodPhaseSeen("gpt", {"gpt-worker-0", "gpt-worker-1"}, "Running"));
  // The first write is refused: an error, and written at the next reconcile.
  server_.FailNext("POST", 1, 500);
  const ReconcileOutcome refused = controller_->Reconcile("ml/gpt");
  EXPECT_EQ(refused.result, ReconcileOutcome::Result::kError);
  EXPECT_EQ(refused.error.rfind("write endpointslice ml/gpt: 500", 0), 0u) << refused.error;
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] {
    auto slice = client_.Get(k8s::EndpointSlices("ml").Named("gpt"));
    return slice.ok() && (*slice)["endpoints"].size() == 2 && Phase("gpt") == "Running";
  }));
  const size_t slice_writes = Writes(slices);
  const size_t status_writes = Writes("/apis/tessera.dev");
  for (int i = 0; i < 3; ++i)
    EXPECT_EQ(Settle("ml/gpt").result, ReconcileOutcome::Result::kSuccess);
  EXPECT_EQ(Writes(slices), slice_writes) << "an unchanged slice is not sent again";
  EXPECT_EQ(Writes("/apis/tessera.dev"), status_writes) << "nor an unchanged status";

  ASSERT_TRUE(client_.Delete(k8s::EndpointSlices("ml").Named("gpt"), {}).ok());
  auto pod = client_.Get(k8s::Pods("ml").Named("gpt-worker-1"));
  ASSERT_TRUE(pod.ok());
  (*pod)["status"]["podIP"] = "10.244.0.10";
  ASSERT_TRUE(client_.UpdateStatus(k8s::Pods("ml").Named("gpt-worker-1"), *pod).ok());
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] {
    auto slice = client_.Get(k8s::EndpointSlices("ml").Named("gpt"));
    return slice.ok() && (*slice)["endpoints"].dump().find("10.244.0.10") != std::string::npos;
  }));
}

// The API server's answer to the status write decides the outcome: a conflict is retried as
// such, a job deleted meanwhile is done with, anything else is an error.
TEST_F(ControllerTest, StatusWriteAnswersDecideTheOutcome) {
  struct Case {
    int code;
    ReconcileOutcome::Result want;
  };
  const Case cases[] = {{409, ReconcileOutcome::Result::kConflict},
                        {404, ReconcileOutcome::Result::kSuccess},
                        {500, ReconcileOutcome::Result::kError}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.code);
    const std::string name = "job-" + std::to_string(c.code);
    Create(TrainingJobs("ml"), JobObject(name, 1));
    ASSERT_TRUE(WaitUntil([&] { return controller_->CachedJob("ml/" + name) != nullptr; }));
    server_.FailNext("PUT", 1, c.code);  // the first PUT of a new job's reconcile: its status
    const ReconcileOutcome out = controller_->Reconcile("ml/" + name);
    EXPECT_EQ(out.result, c.want) << out.error;
    EXPECT_EQ(
        server_.CountRequests(
            "PUT", "/apis/tessera.dev/v1alpha1/namespaces/ml/trainingjobs/" + name + "/status"),
        1u);
  }
}

// The controller's own status write is awaited in the cache before it decides again: while
// the watches stall, reconciling again writes nothing.
TEST_F(ControllerTest, OwnStatusWriteIsAwaitedBeforeDecidingAgain) {
  Create(TrainingJobs("ml"), JobObject("bad", 2, R"({"workers": 0})"));
  ASSERT_TRUE(WaitUntil([&] { return controller_->CachedJob("ml/bad") != nullptr; }));
  server_.HoldWatches(true);
  ASSERT_EQ(controller_->Reconcile("ml/bad").result, ReconcileOutcome::Result::kSuccess);
  const size_t puts = server_.CountRequests("PUT", "/apis/tessera.dev");
  ASSERT_EQ(puts, 1u);
  for (int i = 0; i < 3; ++i) {
    const ReconcileOutcome out = controller_->Reconcile("ml/bad");
    EXPECT_EQ(out.result, ReconcileOutcome::Result::kSuccess) << out.error;
    EXPECT_TRUE(out.requeue_after.has_value());
  }
  EXPECT_EQ(server_.CountRequests("PUT", "/apis/tessera.dev"), puts);
  server_.HoldWatches(false);
  EXPECT_EQ(Phase("bad"), "Failed");
}

// Refused pod creates are retried at once, not after the expectations' TTL: a refused create
// is expected no more.
TEST_F(ControllerTest, RefusedPodCreatesAreRetriedWithoutWaitingForTheirExpectations) {
  Create(TrainingJobs("ml"), JobObject("gpt", 1));
  ASSERT_TRUE(WaitUntil([&] { return controller_->CachedJob("ml/gpt") != nullptr; }));
  transport_.refuse_pod_creates = 2;
  for (int i = 0; i < 2; ++i) {
    const ReconcileOutcome out = controller_->Reconcile("ml/gpt");
    EXPECT_EQ(out.result, ReconcileOutcome::Result::kError);
    EXPECT_NE(out.error.find("create pod ml/gpt-worker-0: 403"), std::string::npos) << out.error;
    ASSERT_TRUE(CacheHasJob("gpt"));
  }
  EXPECT_EQ(Sample(metrics_, "tessera_jobs", {{"phase", "Pending"}}), 1.0);
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] { return Pods().size() == 1; }));
}

// A create that went through before, unseen (its expectation expired before the cache showed
// it, and the status that said so was refused), is answered "already exists": that counts as
// created, not as a refusal.
TEST_F(ControllerTest, ACreateThatWentThroughBeforeCountsAsDone) {
  ASSERT_NO_FATAL_FAILURE(StartController(0s));
  Create(TrainingJobs("ml"), JobObject("gpt", 2));
  ASSERT_TRUE(WaitUntil([&] { return controller_->CachedJob("ml/gpt") != nullptr; }));
  server_.HoldWatches(true);
  server_.FailNext("PUT", 1, 500);
  ASSERT_EQ(controller_->Reconcile("ml/gpt").result, ReconcileOutcome::Result::kError);
  ASSERT_EQ(Pods().size(), 2u);
  const ReconcileOutcome again = controller_->Reconcile("ml/gpt");
  EXPECT_EQ(again.result, ReconcileOutcome::Result::kSuccess) << again.error;
  EXPECT_EQ(server_.CountRequests("POST", "/api/v1/namespaces/ml/pods"), 4u);
  server_.HoldWatches(false);
  const auto reasons = events_.Reasons();
  EXPECT_EQ(std::count(reasons.begin(), reasons.end(), "Warning/FailedCreate"), 0);
  EXPECT_EQ(Pods().size(), 2u);
}

// The watches stall after the controller created the pods and its status write was refused:
// the creates alone are awaited, and nothing is created twice.
TEST_F(ControllerTest, LaggingCacheNeverCreatesTwiceAfterARefusedStatusWrite) {
  Create(TrainingJobs("ml"), JobObject("gpt", 3));
  ASSERT_TRUE(WaitUntil([&] { return controller_->CachedJob("ml/gpt") != nullptr; }));
  server_.HoldWatches(true);
  server_.FailNext("PUT", 1, 409);
  ASSERT_EQ(controller_->Reconcile("ml/gpt").result, ReconcileOutcome::Result::kConflict);
  const std::string pods_path = "/api/v1/namespaces/ml/pods";
  ASSERT_EQ(server_.CountRequests("POST", pods_path), 3u);
  for (int i = 0; i < 3; ++i) {
    const ReconcileOutcome out = controller_->Reconcile("ml/gpt");
    EXPECT_EQ(out.result, ReconcileOutcome::Result::kSuccess) << out.error;
    EXPECT_TRUE(out.requeue_after.has_value());
  }
  EXPECT_EQ(server_.CountRequests("POST", pods_path), 3u);
  server_.HoldWatches(false);
}

// A pod of an earlier job of the same name (another owner uid) is neither counted as a
// worker nor touched: the garbage collector removes it.
TEST_F(ControllerTest, PodsOfAnEarlierJobOfTheSameNameAreIgnored) {
  Create(k8s::Pods("ml"),
         PodOfAnEarlierGpt("gpt-worker-5",
                           {{"tessera.dev/worker-index", "0"}, {"tessera.dev/attempt", "4"}},
                           "Failed"));
  Create(TrainingJobs("ml"), JobObject("gpt", 2));
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] { return Phase("gpt") == "Starting"; }));
  Json status = Status("gpt");  // not const: a missing field reads as null
  EXPECT_EQ(status["attempt"], 0);
  EXPECT_EQ(status.value("restarts", 0), 0);
  EXPECT_EQ(Pods().size(), 3u);
  EXPECT_TRUE(client_.Get(k8s::Pods("ml").Named("gpt-worker-5")).ok());
}

// A pod with a worker's name that the job does not own (here an earlier job's of the same
// name, not yet collected; or anyone's) is said, in the reconcile's error, a FailedCreate event
// and the status, and the worker is created once it is gone. Before, "already exists" counted
// as created: the worker was held, unsaid, until the startup timeout.
TEST_F(ControllerTest, APodOfAWorkersNameThatTheJobDoesNotOwnIsSaidAndWaitedFor) {
  Create(k8s::Pods("ml"),
         PodOfAnEarlierGpt("gpt-worker-1", {{"tessera.dev/worker-index", "1"}}, "Running"));
  Create(TrainingJobs("ml"), JobObject("gpt", 2));
  ASSERT_TRUE(WaitUntil([&] { return controller_->CachedJob("ml/gpt") != nullptr; }));
  const ReconcileOutcome out = controller_->Reconcile("ml/gpt");
  EXPECT_EQ(out.result, ReconcileOutcome::Result::kError);
  EXPECT_EQ(out.error,
            "create pod ml/gpt-worker-1: one of that name exists that this job does not own "
            "(its controller: TrainingJob gpt (uid uid-of-an-earlier-gpt)); the worker is created "
            "once it is gone: delete it unless it is on its way out");
  EXPECT_EQ(FailedCreateEvents(), 1u);
  ASSERT_TRUE(WaitUntil([&] {
    for (const Json& c : Status("gpt").value("conditions", Json::array())) {
      if (c.value("type", "") == "Created" && c.value("reason", "") == "FailedCreate")
        return c.value("message", "").find("does not own") != std::string::npos;
    }
    return false;
  }));

  // Without any owner, the same.
  auto foreign = client_.Get(k8s::Pods("ml").Named("gpt-worker-1"));
  ASSERT_TRUE(foreign.ok());
  (*foreign)["metadata"].erase("ownerReferences");
  ASSERT_TRUE(client_.Update(k8s::Pods("ml").Named("gpt-worker-1"), *foreign).ok());
  ASSERT_TRUE(WaitUntil([&] {
    return controller_->Reconcile("ml/gpt").error.find("(its controller: no controller)") !=
           std::string::npos;
  }));

  ASSERT_TRUE(client_.Delete(k8s::Pods("ml").Named("gpt-worker-1"), {}).ok());
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] {
    auto pod = client_.Get(k8s::Pods("ml").Named("gpt-worker-1"));
    return pod.ok() && ControlledBy(*pod, Job("gpt")["metadata"]["uid"]);
  }));
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] { return Phase("gpt") == "Starting"; }));
  EXPECT_EQ(Pods().size(), 2u);
}

// Someone else's Service of the job's name (a user's ClusterIP Service, say) is not taken for
// the job's own: the workers' DNS names need a headless one, and the job's EndpointSlice would
// add the workers to that Service. No worker is created and the status says why, until it is
// gone. Before, any Service of that name counted as created, and the job ran without DNS.
TEST_F(ControllerTest, AServiceOfTheJobsNameThatTheJobDoesNotOwnIsSaidAndWaitedFor) {
  Create(k8s::Services("ml"), {{"apiVersion", "v1"},
                               {"kind", "Service"},
                               {"metadata", {{"name", "gpt"}, {"namespace", "ml"}}},
                               {"spec", {{"clusterIP", "10.96.0.7"}}}});
  Create(TrainingJobs("ml"), JobObject("gpt", 2));
  ASSERT_TRUE(WaitUntil([&] { return controller_->CachedJob("ml/gpt") != nullptr; }));
  const ReconcileOutcome out = controller_->Reconcile("ml/gpt");
  EXPECT_EQ(out.result, ReconcileOutcome::Result::kError);
  EXPECT_EQ(out.error,
            "create services ml/gpt: one of that name exists that this job does not own (its "
            "controller: no controller); the workers are created once it is gone: delete it, or "
            "give the job another name");
  EXPECT_TRUE(Pods().empty());
  EXPECT_EQ(FailedCreateEvents(), 1u);
  EXPECT_EQ(Condition("gpt", "Created"), "False/FailedCreate");

  ASSERT_TRUE(client_.Delete(k8s::Services("ml").Named("gpt"), {}).ok());
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] { return Phase("gpt") == "Starting"; }));
  auto service = client_.Get(k8s::Services("ml").Named("gpt"));
  ASSERT_TRUE(service.ok());
  EXPECT_TRUE(ControlledBy(*service, Job("gpt")["metadata"]["uid"]));
  EXPECT_EQ(Pods().size(), 2u);
  // Its own Service, found at the next attempt, counts as created.
  SetPodPhase("gpt-worker-0", "Failed", 1);
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] {
    return Status("gpt").value("attempt", 0) == 1 && Phase("gpt") == "Starting";
  }));
  EXPECT_EQ(Pods().size(), 2u);
}

// A pod event reconciles its job after the batching delay, a job event at once.
TEST_F(ControllerTest, PodEventsWaitForTheBatchJobEventsDoNot) {
  ControllerOptions options;
  options.pod_event_batch = 1h;
  ASSERT_NO_FATAL_FAILURE(StartController(options));
  for (const char* name : {"other-worker-0", "other-worker-1"}) {
    controller_->expectations().ExpectCreation("ml/other", name);
    Create(
        k8s::Pods("ml"),
        {{"apiVersion", "v1"},
         {"kind", "Pod"},
         {"metadata",
          {{"name", name}, {"namespace", "ml"}, {"labels", {{"tessera.dev/job-name", "other"}}}}}});
  }
  // Pod events are handled in order: once the second is seen, the first was queued.
  ASSERT_TRUE(WaitUntil([&] { return controller_->expectations().Satisfied("ml/other"); }));
  EXPECT_EQ(controller_->QueueLength(), 0u);
  Create(TrainingJobs("ml"), JobObject("gpt", 1));
  EXPECT_TRUE(WaitUntil([&] { return controller_->QueueLength() == 1; }));
}

// The workers: a refused status write is retried by the queue (the pods' own events wait for
// their batch), counted by result.
TEST_F(ControllerTest, WorkersRetryARefusedStatusWrite) {
  struct Case {
    int code;
    const char* result;
  };
  ControllerOptions options;
  options.pod_event_batch = 1h;
  ASSERT_NO_FATAL_FAILURE(StartController(options));
  controller_->RunWorkers();
  for (const Case c : {Case{409, "conflict"}, Case{500, "error"}}) {
    SCOPED_TRACE(c.code);
    const std::string name = "job-" + std::to_string(c.code);
    server_.FailNext("PUT", 1, c.code);
    Create(TrainingJobs("ml"), JobObject(name, 1));
    EXPECT_TRUE(WaitUntil([&] { return Phase(name) == "Starting"; }));
    EXPECT_EQ(Sample(metrics_, "tessera_controller_reconcile_total", {{"result", c.result}}), 1.0);
  }
}

// The workers react to a spec change (suspend), and to the end of a finished job's TTL.
TEST_F(ControllerTest, WorkersFollowSpecChangesAndDeleteAFinishedJobAfterItsTtl) {
  ControllerOptions options;
  options.pod_event_batch = 0s;
  ASSERT_NO_FATAL_FAILURE(StartController(options));
  controller_->RunWorkers();
  Create(TrainingJobs("ml"),
         JobObject("gpt", 1, R"({"runPolicy": {"ttlSecondsAfterFinished": 1}})"));
  ASSERT_TRUE(WaitUntil([&] { return Pods().size() == 1; }));
  SetPodPhase("gpt-worker-0", "Running");
  ASSERT_TRUE(WaitUntil([&] { return Phase("gpt") == "Running"; }));
  SetPodPhase("gpt-worker-0", "Succeeded");
  ASSERT_TRUE(WaitUntil([&] { return Phase("gpt") == "Succeeded"; }));
  const std::string uid = Job("gpt")["metadata"]["uid"];
  ASSERT_TRUE(WaitUntil([&] { return !client_.Get(TrainingJobs("ml").Named("gpt")).ok(); }));
  const auto deletes = Deletes("/apis/tessera.dev/v1alpha1/namespaces/ml/trainingjobs/gpt");
  ASSERT_EQ(deletes.size(), 1u);
  EXPECT_EQ(deletes[0].value("propagationPolicy", ""), "Background");
  EXPECT_EQ(deletes[0].value("preconditions", Json::object()).value("uid", ""), uid);

  auto berts = [&] {
    const auto pods = Pods();
    return std::count_if(pods.begin(), pods.end(), [](const Json& p) {
      return p["metadata"]["labels"]["tessera.dev/job-name"] == "bert";
    });
  };
  Create(TrainingJobs("ml"), JobObject("bert", 2));
  ASSERT_TRUE(WaitUntil([&] { return berts() == 2; }));
  ASSERT_TRUE(WaitUntil([&] {  // the workers write its status meanwhile: retry on conflict
    Json bert = Job("bert");
    bert["spec"]["suspend"] = true;
    return client_.Update(TrainingJobs("ml").Named("bert"), bert).ok();
  }));
  EXPECT_TRUE(WaitUntil([&] { return Phase("bert") == "Suspended" && berts() == 0; }));
}

// A suspension's status write refused with a conflict (the job was resumed meanwhile, as
// `kubectl patch` of suspend true then false does in a second): the workers must still be
// there, or the next decision takes the suspension's deletes for a lost worker. Before, the
// deletes went first and the resume counted a restart (WorkerMissing); with backoffLimit 0
// the job failed.
TEST_F(ControllerTest, ASuspensionWhoseStatusWriteConflictsCostsNoRestart) {
  RunJob("gpt", 2, R"({"runPolicy": {"backoffLimit": 0}})");
  auto set_suspend = [&](bool suspend) {
    Json job = Job("gpt");
    job["spec"]["suspend"] = suspend;
    ASSERT_TRUE(client_.Update(TrainingJobs("ml").Named("gpt"), job).ok());
    ASSERT_TRUE(CacheHasJob("gpt"));
  };
  ASSERT_NO_FATAL_FAILURE(set_suspend(true));
  server_.FailNext("PUT", 1, 409);
  EXPECT_EQ(controller_->Reconcile("ml/gpt").result, ReconcileOutcome::Result::kConflict);
  ASSERT_NO_FATAL_FAILURE(set_suspend(false));

  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] {
    return controller_->expectations().Satisfied("ml/gpt") && Phase("gpt") != "Starting";
  }));
  const Json status = Status("gpt");
  EXPECT_EQ(status.value("phase", ""), "Running");
  EXPECT_EQ(status.value("restarts", -1), 0);
  EXPECT_FALSE(status.contains("lastFailure")) << status.dump();
  EXPECT_EQ(Pods().size(), 2u);
}

// A running job's status wiped (a status PUT of {}, a restore that drops status): the job is
// decided again from its pods and shows Running. Before, the controller's memory of the
// attempt's start time, applied to a status that reads as Pending, left it Pending for good
// while its workers ran.
TEST_F(ControllerTest, AStatusWipedWhileRunningIsRunningAgain) {
  RunJob("gpt", 2);
  Decided("ml/gpt");
  Json job = Job("gpt");
  job["status"] = Json::object();
  ASSERT_TRUE(client_.UpdateStatus(TrainingJobs("ml").Named("gpt"), job).ok());
  ASSERT_TRUE(CacheHasJob("gpt"));
  EXPECT_TRUE(ReconcileUntil("ml/gpt", [&] { return Phase("gpt") == "Running"; }))
      << Status("gpt").dump();
  EXPECT_EQ(Pods().size(), 2u);
}

// A running job is decided again at the earliest of what it waits for: its active deadline, or
// the moment its worker on a NotReady node counts as lost (the pod's grace period after the
// node stopped being ready).
TEST_F(ControllerTest, RequeueIsTheEarliestOfTheDeadlineAndALostNodesGrace) {
  Create(k8s::Nodes(),
         {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata", {{"name", "n1"}}},
          {"status",
           {{"conditions", Json::array({{{"type", "Ready"},
                                         {"status", "False"},
                                         {"lastTransitionTime",
                                          FormatTime(std::chrono::system_clock::now())}}})}}}});
  ASSERT_NO_FATAL_FAILURE(StartController(ControllerOptions{}));  // lists the node
  struct Case {
    const char* name;
    int deadline_seconds;
    std::chrono::seconds min, max;
  };
  // The grace period is 600 s.
  const Case cases[] = {{"deadline-first", 60, 1s, 60s}, {"node-first", 3600, 500s, 600s}};
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    Create(TrainingJobs("ml"),
           JobObject(c.name, 1,
                     R"({"runPolicy": {"backoffLimit": 1, "activeDeadlineSeconds": )" +
                         std::to_string(c.deadline_seconds) +
                         R"(}, "template": {"spec": {"terminationGracePeriodSeconds": 600,
                            "containers": [{"name": "worker", "image": "busybox", "command": ["true"]}]}}})"));
    const std::string pod_name = std::string(c.name) + "-worker-0";
    ASSERT_TRUE(ReconcileUntil("ml/" + std::string(c.name),
                               [&] { return client_.Get(k8s::Pods("ml").Named(pod_name)).ok(); }));
    auto pod = client_.Get(k8s::Pods("ml").Named(pod_name));
    ASSERT_TRUE(pod.ok());
    (*pod)["spec"]["nodeName"] = "n1";
    ASSERT_TRUE(client_.Update(k8s::Pods("ml").Named(pod_name), *pod).ok());
    SetPodPhase(pod_name, "Running");
    ASSERT_TRUE(
        ReconcileUntil("ml/" + std::string(c.name), [&] { return Phase(c.name) == "Running"; }));
    const ReconcileOutcome out = Decided("ml/" + std::string(c.name));
    ASSERT_TRUE(out.requeue_after.has_value());
    EXPECT_GE(*out.requeue_after, c.min);
    EXPECT_LE(*out.requeue_after, c.max);
  }
}

// A node that goes away takes its workers with it: the workers reconcile the jobs on it at
// once, deleting those pods by force (their kubelet is gone) and restarting the gang.
TEST_F(ControllerTest, WorkersRestartAGangWhoseNodeIsGone) {
  Create(k8s::Nodes(),
         {{"apiVersion", "v1"},
          {"kind", "Node"},
          {"metadata", {{"name", "n1"}}},
          {"status", {{"conditions", Json::array({{{"type", "Ready"}, {"status", "True"}}})}}}});
  ControllerOptions options;
  options.pod_event_batch = 0s;
  ASSERT_NO_FATAL_FAILURE(StartController(options));  // lists the node
  controller_->RunWorkers();
  Create(TrainingJobs("ml"), JobObject("gpt", 2));
  ASSERT_TRUE(WaitUntil([&] { return Pods().size() == 2; }));
  for (const char* name : {"gpt-worker-0", "gpt-worker-1"}) {
    auto pod = client_.Get(k8s::Pods("ml").Named(name));
    ASSERT_TRUE(pod.ok());
    (*pod)["spec"]["nodeName"] = "n1";
    ASSERT_TRUE(client_.Update(k8s::Pods("ml").Named(name), *pod).ok());
    SetPodPhase(name, "Running");
  }
  ASSERT_TRUE(WaitUntil([&] { return Phase("gpt") == "Running"; }));
  std::map<std::string, std::string> uids;
  for (const Json& pod : Pods())
    uids[pod["metadata"]["name"]] = pod["metadata"]["uid"];
  const size_t deletes_before = server_.CountRequests("DELETE", "/api/v1/namespaces/ml/pods");
  ASSERT_TRUE(client_.Delete(k8s::Nodes().Named("n1"), {}).ok());
  // The status (restarts 1) is written first, then the workers are deleted.
  ASSERT_TRUE(WaitUntil([&] {
    return Status("gpt").value("restarts", 0) == 1 &&
           !Deletes("/api/v1/namespaces/ml/pods/gpt-worker-0").empty() &&
           !Deletes("/api/v1/namespaces/ml/pods/gpt-worker-1").empty();
  }));
  EXPECT_GT(server_.CountRequests("DELETE", "/api/v1/namespaces/ml/pods"), deletes_before);
  for (const char* name : {"gpt-worker-0", "gpt-worker-1"}) {
    const auto deletes = Deletes(std::string("/api/v1/namespaces/ml/pods/") + name);
    ASSERT_FALSE(deletes.empty()) << name;
    EXPECT_EQ(deletes[0].value("gracePeriodSeconds", -1), 0) << name;
    EXPECT_EQ(deletes[0].value("preconditions", Json::object()).value("uid", ""), uids[name])
        << name;
  }
}

// Until every cache has listed, the controller is not synced: here the nodes cannot be listed.
TEST_F(ControllerTest, NotSyncedWhileAListFails) {
  controller_.reset();
  transport_.refuse_node_lists = true;
  controller_ =
      std::make_unique<Controller>(client_, events_, &metrics_, nullptr, ControllerOptions{});
  controller_->StartInformers();
  EXPECT_FALSE(controller_->WaitForSync(300ms));
  EXPECT_FALSE(controller_->Synced());
}

// The cache keeps a job without kubectl's copy of it (cache_trim.h).
TEST_F(ControllerTest, CachedJobsAreTrimmed) {
  Json job = JobObject("gpt", 1);
  job["metadata"]["annotations"] = {
      {"kubectl.kubernetes.io/last-applied-configuration", JobObject("gpt", 1).dump()},
      {"team", "a"}};
  Create(TrainingJobs("ml"), job);
  ASSERT_TRUE(WaitUntil([&] { return controller_->CachedJob("ml/gpt") != nullptr; }));
  EXPECT_EQ((*controller_->CachedJob("ml/gpt"))["metadata"]["annotations"], (Json{{"team", "a"}}));
}

// A watch that must list again (its resourceVersion compacted away) is counted, by resource.
TEST_F(ControllerTest, RelistsAreCountedByResource) {
  server_.HoldWatches(true);
  Create(TrainingJobs("ml"), JobObject("gpt", 1));
  server_.Compact();
  server_.CloseWatches();
  server_.HoldWatches(false);
  EXPECT_TRUE(WaitUntil([&] {
    return Sample(metrics_, "tessera_controller_watch_restarts_total",
                  {{"resource", "trainingjobs"}})
               .value_or(0) >= 1;
  }));
}

// The controller's status write may reach the cache only through a relist, as a later object
// that carries it: that too counts as seen, and the job is decided again at once.
TEST_F(ControllerTest, OwnStatusSeenThroughARelistIsNotAwaitedAgain) {
  Create(TrainingJobs("ml"), JobObject("bad", 2, R"({"workers": 0})"));
  ASSERT_TRUE(WaitUntil([&] { return controller_->CachedJob("ml/bad") != nullptr; }));
  server_.HoldWatches(true);
  ASSERT_EQ(controller_->Reconcile("ml/bad").result, ReconcileOutcome::Result::kSuccess);
  Json job = Job("bad");
  job["metadata"]["labels"] = {{"team", "a"}};
  ASSERT_TRUE(client_.Update(TrainingJobs("ml").Named("bad"), job).ok());
  server_.Compact();
  server_.CloseWatches();
  server_.HoldWatches(false);
  ASSERT_TRUE(CacheHasJob("bad"));
  ASSERT_EQ(controller_->Reconcile("ml/bad").result, ReconcileOutcome::Result::kSuccess);
  EXPECT_EQ(controller_->expectations().PendingJobs(), 0u);
}

// An attempt's pods are created concurrently, up to max_parallel_creates at once; after the
// first refusal no further create starts.
TEST_F(ControllerTest, PodCreatesRunConcurrentlyAndStopAtTheFirstRefusal) {
  transport_.gate_pod_creates = 3;
  Create(TrainingJobs("ml"), JobObject("wide", 3));
  ASSERT_TRUE(WaitUntil([&] { return controller_->CachedJob("ml/wide") != nullptr; }));
  controller_->Reconcile("ml/wide");
  EXPECT_EQ(transport_.MaxPodCreatesInFlight(), 3);
  transport_.gate_pod_creates = 0;

  ControllerOptions options;
  options.max_parallel_creates = 1;
  ASSERT_NO_FATAL_FAILURE(StartController(options));
  Create(TrainingJobs("ml"), JobObject("narrow", 3));
  ASSERT_TRUE(WaitUntil([&] { return controller_->CachedJob("ml/narrow") != nullptr; }));
  const size_t before = server_.CountRequests("POST", "/api/v1/namespaces/ml/pods");
  transport_.refuse_pod_creates = 1;
  EXPECT_EQ(controller_->Reconcile("ml/narrow").result, ReconcileOutcome::Result::kError);
  EXPECT_EQ(server_.CountRequests("POST", "/api/v1/namespaces/ml/pods"), before)
      << "the refused create never reached the server, nor any after it";
  EXPECT_EQ(transport_.refuse_pod_creates, 0);
}

// A job deleted and created again under its name starts afresh: its refused creates are said
// again, nothing is awaited for the old one, and its EndpointSlice is not written before its
// workers have addresses.
TEST_F(ControllerTest, AJobCreatedAgainUnderItsNameStartsAfresh) {
  auto recreate = [&] {
    ASSERT_TRUE(client_.Delete(TrainingJobs("ml").Named("gpt"), {}).ok());
    for (const Json& pod : Pods())  // as the garbage collector would
      client_.Delete(k8s::Pods("ml").Named(pod["metadata"]["name"]), {});
    client_.Delete(k8s::Services("ml").Named("gpt"), {});  // the earlier job's is not the new one's
    ASSERT_TRUE(WaitUntil([&] { return controller_->CachedJob("ml/gpt") == nullptr; }));
    Settle("ml/gpt");
    EXPECT_EQ(controller_->expectations().PendingJobs(), 0u);
    Create(TrainingJobs("ml"), JobObject("gpt", 1));
    ASSERT_TRUE(CacheHasJob("gpt"));
  };
  Create(TrainingJobs("ml"), JobObject("gpt", 1));
  ASSERT_TRUE(CacheHasJob("gpt"));
  transport_.refuse_pod_creates = 1;
  EXPECT_EQ(controller_->Reconcile("ml/gpt").result, ReconcileOutcome::Result::kError);
  EXPECT_EQ(FailedCreateEvents(), 1u);

  ASSERT_NO_FATAL_FAILURE(recreate());
  transport_.refuse_pod_creates = 1;
  EXPECT_EQ(controller_->Reconcile("ml/gpt").result, ReconcileOutcome::Result::kError);
  EXPECT_EQ(FailedCreateEvents(), 2u);
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] { return Phase("gpt") == "Starting"; }));
  SetPodPhase("gpt-worker-0", "Running");
  ASSERT_TRUE(ReconcileUntil(
      "ml/gpt", [&] { return client_.Get(k8s::EndpointSlices("ml").Named("gpt")).ok(); }));

  ASSERT_NO_FATAL_FAILURE(recreate());
  const size_t slice_writes = Writes("/apis/discovery.k8s.io");
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] { return Phase("gpt") == "Starting"; }));
  Settle("ml/gpt");
  EXPECT_EQ(Writes("/apis/discovery.k8s.io"), slice_writes);
}

// The watches stall after the controller deleted a failed gang: reconciling again deletes
// nothing more until the cache shows the deletes (its own status write, awaited too, is taken
// as seen here, so that only the deletes hold the decision).
TEST_F(ControllerTest, LaggingCacheNeverDeletesTwice) {
  ASSERT_NO_FATAL_FAILURE(RunJob("gpt", 2));
  ASSERT_NO_FATAL_FAILURE(SetPodPhaseSeen("gpt", {"gpt-worker-1"}, "Failed", 3));
  const std::string pods = "/api/v1/namespaces/ml/pods";
  const size_t before = server_.CountRequests("DELETE", pods);
  server_.HoldWatches(true);
  ASSERT_EQ(controller_->Reconcile("ml/gpt").result, ReconcileOutcome::Result::kSuccess);
  const size_t deletes = server_.CountRequests("DELETE", pods) - before;
  ASSERT_GT(deletes, 0u);
  controller_->expectations().ClearStatus("ml/gpt");
  for (int i = 0; i < 3; ++i) {
    const ReconcileOutcome out = controller_->Reconcile("ml/gpt");
    EXPECT_EQ(out.result, ReconcileOutcome::Result::kSuccess) << out.error;
    EXPECT_TRUE(out.requeue_after.has_value());
  }
  EXPECT_EQ(server_.CountRequests("DELETE", pods) - before, deletes);
  server_.HoldWatches(false);
}

// A pod whose graceful delete has begun (deletionTimestamp set, the pod still there) counts as
// deleted for what the controller awaits.
TEST_F(ControllerTest, APodBeingDeletedIsNotAwaitedUntilItIsGone) {
  ASSERT_NO_FATAL_FAILURE(RunJob("gpt", 2));
  transport_.graceful_pod_deletes = true;
  SetPodPhase("gpt-worker-1", "Failed", 3);
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] {
    const auto pods = Pods();
    return std::all_of(pods.begin(), pods.end(),
                       [](const Json& p) { return p["metadata"].contains("deletionTimestamp"); });
  }));
  EXPECT_TRUE(
      ReconcileUntil("ml/gpt", [&] { return controller_->expectations().Satisfied("ml/gpt"); }));
}

// A pod delete answered 404 (gone already) is done with: no error, and nothing awaited for it.
TEST_F(ControllerTest, APodDeleteAnsweredNotFoundCountsAsDone) {
  ASSERT_NO_FATAL_FAILURE(RunJob("gpt", 2));
  ASSERT_NO_FATAL_FAILURE(SetPodPhaseSeen("gpt", {"gpt-worker-1"}, "Failed", 3));
  server_.FailNext("DELETE", 2, 404);
  const ReconcileOutcome out = controller_->Reconcile("ml/gpt");
  EXPECT_EQ(out.result, ReconcileOutcome::Result::kSuccess) << out.error;
  EXPECT_TRUE(ReconcileUntil("ml/gpt", [&] {
    const auto pods = Pods();
    return Status("gpt").value("restarts", 0) == 1 && pods.size() == 2 &&
           std::all_of(pods.begin(), pods.end(), [](const Json& p) {
             return p["metadata"]["labels"]["tessera.dev/attempt"] == "1";
           });
  }));
}

// A finished job past its TTL whose delete is answered 404 (deleted meanwhile) is done with.
TEST_F(ControllerTest, AFinishedJobsDeleteAnsweredNotFoundIsNoError) {
  Create(TrainingJobs("ml"),
         JobObject("gpt", 1,
                   R"({"runPolicy": {"ttlSecondsAfterFinished": 0, "cleanPodPolicy": "None"}})"));
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] { return Phase("gpt") == "Starting"; }));
  SetPodPhase("gpt-worker-0", "Running");
  ASSERT_TRUE(ReconcileUntil("ml/gpt", [&] { return Phase("gpt") == "Running"; }));
  ASSERT_NO_FATAL_FAILURE(SetPodPhaseSeen("gpt", {"gpt-worker-0"}, "Succeeded"));
  server_.FailNext("DELETE", 1, 404);
  const ReconcileOutcome out = controller_->Reconcile("ml/gpt");
  EXPECT_EQ(out.result, ReconcileOutcome::Result::kSuccess) << out.error;
  EXPECT_EQ(Deletes("/apis/tessera.dev/v1alpha1/namespaces/ml/trainingjobs/gpt").size(), 1u);
}

// With the built-in trainer each attempt has its own ConfigMap; a new attempt deletes the
// previous one's.
TEST_F(ControllerTest, EachAttemptOfTheBuiltInTrainerHasItsOwnConfigMap) {
  Json job = JobObject("tiny", 1, R"({"trainer": {"model": {"layers": 2, "dModel": 64, "heads": 4,
      "seqLen": 64}, "data": {"path": "/data/x.txt"}, "batch": {"global": 16},
      "schedule": {"steps": 10}}})");
  job["spec"].erase("template");
  Create(TrainingJobs("ml"), job);
  auto exists = [&](int64_t attempt) {
    const std::string uid = Job("tiny")["metadata"]["uid"];
    const std::string name = "tiny-config-" + std::to_string(attempt) + "-" + uid.substr(0, 8);
    return client_.Get(k8s::ConfigMaps("ml").Named(name)).ok();
  };
  ASSERT_TRUE(ReconcileUntil("ml/tiny", [&] { return Phase("tiny") == "Starting"; }))
      << Status("tiny").dump();
  EXPECT_TRUE(exists(0));
  SetPodPhase("tiny-worker-0", "Failed", 1);
  ASSERT_TRUE(ReconcileUntil("ml/tiny", [&] { return Status("tiny").value("attempt", 0) == 1; }));
  ASSERT_TRUE(ReconcileUntil("ml/tiny", [&] { return exists(1); }));
  EXPECT_FALSE(exists(0));
}

// A job deleted and applied again under its name with another trainer (the trainer cannot
// change, so that is how one changes it) before the garbage collector has removed the old
// job's ConfigMap: the new job's pods read the new trainer, not the old one.
TEST_F(ControllerTest, AJobAppliedAgainUnderItsNameReadsItsOwnTrainerNotTheOldOnes) {
  auto tiny = [](const std::string& lr) {
    Json job = JobObject("tiny", 1,
                         R"({"trainer": {"model": {"layers": 2, "dModel": 64,
        "heads": 4, "seqLen": 64}, "data": {"path": "/data/x.txt"}, "batch": {"global": 16},
        "schedule": {"steps": 10}, "optimizer": {"lr": )" +
                             lr + "}}}");
    job["spec"].erase("template");
    return job;
  };
  Create(TrainingJobs("ml"), tiny("0.5"));
  ASSERT_TRUE(ReconcileUntil("ml/tiny", [&] { return Phase("tiny") == "Starting"; }));
  // Deleted; its pods and Service gone, its ConfigMap not yet (the garbage collector lags).
  ASSERT_TRUE(client_.Delete(TrainingJobs("ml").Named("tiny"), {}).ok());
  for (const Json& pod : Pods())
    client_.Delete(k8s::Pods("ml").Named(pod["metadata"]["name"]), {});
  client_.Delete(k8s::Services("ml").Named("tiny"), {});
  ASSERT_TRUE(WaitUntil([&] { return controller_->CachedJob("ml/tiny") == nullptr; }));
  Settle("ml/tiny");

  Create(TrainingJobs("ml"), tiny("0.25"));
  ASSERT_TRUE(CacheHasJob("tiny"));
  ASSERT_TRUE(ReconcileUntil("ml/tiny", [&] { return Pods().size() == 1; }));
  std::string mounted;
  const std::vector<Json> pods = Pods();
  for (const Json& volume : pods[0]["spec"]["volumes"]) {
    if (volume.contains("configMap"))
      mounted = volume["configMap"]["name"];
  }
  auto cm = client_.Get(k8s::ConfigMaps("ml").Named(mounted));
  ASSERT_TRUE(cm.ok()) << mounted;
  EXPECT_TRUE(ControlledBy(*cm, Job("tiny")["metadata"]["uid"])) << mounted;
  const std::string yaml = (*cm)["data"].value(kTrainerConfigKey, std::string());
  EXPECT_NE(yaml.find("lr: 0.25"), std::string::npos) << yaml;
}

// A job for a gang scheduler whose PodGroup CRD is not served waits, saying why, and is
// looked at again after the discovery TTL; once served, its PodGroup comes first. A PodGroup
// refused (the CRD removed meanwhile) makes discovery ask again.
TEST_F(ControllerTest, AGangSchedulersPodGroupIsCreatedOnceItsCrdIsServed) {
  ControllerOptions options;
  options.discovery_ttl = 50ms;
  ASSERT_NO_FATAL_FAILURE(StartController(options));
  const std::string volcano = R"({"scheduling": {"schedulerName": "volcano"}})";
  Create(TrainingJobs("ml"), JobObject("gang", 2, volcano));
  ASSERT_TRUE(ReconcileUntil(
      "ml/gang", [&] { return Condition("gang", "Created") == "False/PodGroupUnavailable"; }));
  const ReconcileOutcome waiting = Decided("ml/gang");
  EXPECT_EQ(waiting.requeue_after, 50ms);
  EXPECT_TRUE(Pods().empty());

  transport_.volcano_served = true;
  ASSERT_TRUE(ReconcileUntil("ml/gang", [&] { return Pods().size() == 2; }));
  const k8s::ResourceRef podgroups{"scheduling.volcano.sh", "v1beta1", "podgroups", "ml", ""};
  EXPECT_TRUE(client_.Get(podgroups.Named(api::PodGroupName("gang"))).ok());
  // Discovery is asked only before creating: a job that creates nothing needs no answer.
  ASSERT_TRUE(ReconcileUntil("ml/gang", [&] { return Phase("gang") == "Starting"; }));
  options.discovery_ttl = 0s;  // nothing remembered
  ASSERT_NO_FATAL_FAILURE(StartController(options));
  transport_.fail_discovery = true;
  EXPECT_EQ(Settle("ml/gang").result, ReconcileOutcome::Result::kSuccess);
  transport_.fail_discovery = false;

  options.discovery_ttl = 1h;
  ASSERT_NO_FATAL_FAILURE(StartController(options));
  Create(TrainingJobs("ml"), JobObject("first", 1, volcano));
  ASSERT_TRUE(ReconcileUntil("ml/first", [&] { return Phase("first") == "Starting"; }));
  transport_.volcano_served = false;  // served when asked, gone since
  Create(TrainingJobs("ml"), JobObject("second", 1, volcano));
  ASSERT_TRUE(ReconcileUntil(
      "ml/second", [&] { return Condition("second", "Created") == "False/PodGroupUnavailable"; }));
}

// The workers forget a deleted job (it leaves tessera_jobs).
TEST_F(ControllerTest, WorkersForgetADeletedJob) {
  ControllerOptions options;
  options.pod_event_batch = 0s;
  ASSERT_NO_FATAL_FAILURE(StartController(options));
  controller_->RunWorkers();
  Create(TrainingJobs("ml"), JobObject("gpt", 1));
  ASSERT_TRUE(WaitUntil([&] {
    return Sample(metrics_, "tessera_jobs", {{"phase", "Starting"}}) == 1.0;
  }));
  ASSERT_TRUE(client_.Delete(TrainingJobs("ml").Named("gpt"), {}).ok());
  EXPECT_TRUE(WaitUntil([&] {
    return Sample(metrics_, "tessera_jobs", {{"phase", "Starting"}}) == 0.0;
  }));
}

}  // namespace
}  // namespace tessera::reconcile
