#include "controller/reconcile/controller.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <atomic>
#include <functional>
#include <thread>

#include "api/contract.h"
#include "controller/k8s/object.h"
#include "controller/reconcile/cache_trim.h"
#include "controller/reconcile/job_view.h"
#include "controller/reconcile/objects.h"
#include "controller/reconcile/observe.h"
#include "controller/reconcile/rfc3339.h"
#include "lifecycle/decide.h"
#include "lifecycle/reasons.h"

namespace tessera::reconcile {
namespace {

using Json = nlohmann::json;
using k8s::MetaString;
using std::chrono::milliseconds;

constexpr char kIndexJob[] = "job";    // "namespace/job-name" of a pod, service or secret
constexpr char kIndexNode[] = "node";  // spec.nodeName of a pod

milliseconds CeilMs(std::chrono::steady_clock::duration d) {
  return std::chrono::ceil<milliseconds>(d);
}

void Earliest(std::optional<milliseconds>& current, std::optional<milliseconds> candidate) {
  if (candidate && (!current || *candidate < *current))
    current = candidate;
}

// Runs task(0) .. task(n - 1), up to `parallelism` at once (the calling thread is one of the
// runners): a runner takes the next index as soon as it is free, so one slow request does not
// hold back the others. After the first failure no further task starts. Returns the failure
// of the lowest index that failed, or nullopt.
std::optional<std::string> RunEach(size_t n, int parallelism,
                                   const std::function<std::optional<std::string>(size_t)>& task) {
  std::vector<std::optional<std::string>> errors(n);
  std::atomic<size_t> next{0};
  std::atomic<bool> failed{false};
  auto run = [&] {
    for (size_t i = next++; i < n && !failed; i = next++) {
      try {
        errors[i] = task(i);
      } catch (const std::exception& e) {
        errors[i] = std::string("internal error: ") + e.what();
      }
      if (errors[i])
        failed = true;
    }
  };
  const size_t runners = std::min(n, static_cast<size_t>(std::max(1, parallelism)));
  std::vector<std::thread> threads;
  for (size_t r = 1; r < runners; ++r)
    threads.emplace_back(run);
  run();
  for (auto& t : threads)
    t.join();
  for (auto& e : errors) {
    if (e)
      return e;
  }
  return std::nullopt;
}

}  // namespace

k8s::ResourceRef TrainingJobs(std::string ns) {
  return {api::kGroup, api::kVersion, "trainingjobs", std::move(ns), ""};
}

std::string DescribeInformerFailure(const std::string& resource, const k8s::ApiError& error,
                                    bool relist) {
  if (error.IsGone())
    return "";
  const std::string verb = relist ? "list" : "watch";
  std::string line =
      verb + " " + resource + " failed (retrying with back-off): " + error.ToString();
  if (error.code == 404 && resource == "trainingjobs") {
    line += ": is the TrainingJob CRD installed (manifests/crd/, or the chart with crds.enabled)?";
  } else if (error.code == 403) {
    line += ": may this identity list and watch " + resource +
            "? (manifests/rbac/, or the chart's ClusterRole)";
  } else if (error.code == 401) {
    line += ": the API server refused the kubeconfig's credentials";
  }
  return line;
}

Controller::Controller(k8s::RestClient& client, EventSink& events, ControllerMetrics* metrics,
                       ProgressPoller* poller, ControllerOptions options)
    : client_(client),
      events_(events),
      metrics_(metrics),
      poller_(poller),
      options_(std::move(options)),
      queue_(options_.queue),
      expectations_(options_.expectation_ttl),
      discovery_(client_, {.ttl = options_.discovery_ttl}) {
  auto informer_options = [this](const std::string& resource, std::string selector) {
    k8s::InformerOptions o;
    o.label_selector = std::move(selector);
    o.reflector.watch_timeout_seconds = static_cast<int>(options_.watch_timeout_seconds);
    o.reflector.on_watch_restart = [this, resource] {
      if (metrics_)
        metrics_->ObserveWatchRestart(resource);
    };
    // Until every list succeeds the controller is not ready (/readyz) and reconciles nothing:
    // the log says why, each time (the back-off spaces the lines out, up to 30 s apart).
    o.on_error = [resource](const k8s::ApiError& error, bool relist) {
      const std::string line = DescribeInformerFailure(resource, error, relist);
      if (line.empty())
        spdlog::debug("watch {}: resourceVersion expired; listing again", resource);
      else
        spdlog::warn("{}", line);
    };
    return o;
  };
  const std::string& ns = options_.namespace_;
  // The caches keep only what reconcile reads (cache_trim.h).
  k8s::InformerOptions job_options = informer_options("trainingjobs", "");
  job_options.transform = TrimTrainingJob;
  jobs_ = std::make_unique<k8s::Informer>(client_, TrainingJobs(ns), std::move(job_options));
  k8s::InformerOptions pod_options = informer_options("pods", api::kLabelJobName);
  pod_options.transform = TrimPod;
  pod_options.reflector.object_filter = PodFields();
  pods_ = std::make_unique<k8s::Informer>(client_, k8s::Pods(ns), std::move(pod_options));
  k8s::InformerOptions node_options = informer_options("nodes", "");
  node_options.transform = TrimNode;
  node_options.reflector.object_filter = NodeFields();
  nodes_ = std::make_unique<k8s::Informer>(client_, k8s::Nodes(), std::move(node_options));

  jobs_->AddHandlers({
      .on_add = [this](const k8s::ObjectPtr& job) { Enqueue(k8s::KeyOf(*job)); },
      .on_update = [this](const k8s::ObjectPtr&,
                          const k8s::ObjectPtr& job) { Enqueue(k8s::KeyOf(*job)); },
      .on_delete = [this](const k8s::ObjectPtr& job) { Enqueue(k8s::KeyOf(*job)); },
  });
  pods_->AddIndex(kIndexJob, [](const Json& pod) -> std::vector<std::string> {
    std::string key = JobKeyOf(pod);
    if (key.empty())
      return {};
    return {key};
  });
  pods_->AddIndex(kIndexNode, [](const Json& pod) -> std::vector<std::string> {
    std::string node = NodeNameOf(pod);
    if (node.empty())
      return {};
    return {node};
  });
  pods_->AddHandlers({
      .on_add = [this](const k8s::ObjectPtr& pod) { OnPod(pod, false); },
      .on_update = [this](const k8s::ObjectPtr&, const k8s::ObjectPtr& pod) { OnPod(pod, false); },
      .on_delete = [this](const k8s::ObjectPtr& pod) { OnPod(pod, true); },
  });
  nodes_->AddHandlers({
      .on_add = nullptr,
      .on_update = [this](const k8s::ObjectPtr& old_node,
                          const k8s::ObjectPtr& node) { OnNode(old_node, node); },
      .on_delete = [this](const k8s::ObjectPtr& node) { OnNode(node, nullptr); },
  });
}

Controller::~Controller() {
  Stop();
}

void Controller::StartInformers() {
  for (auto* informer : {nodes_.get(), pods_.get(), jobs_.get()})
    informer->Start();
}

bool Controller::Synced() const {
  return jobs_->HasSynced() && pods_->HasSynced() && nodes_->HasSynced();
}

bool Controller::WaitForSync(std::chrono::steady_clock::duration timeout) const {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (auto* informer : {nodes_.get(), pods_.get(), jobs_.get()}) {
    const auto left = deadline - std::chrono::steady_clock::now();
    if (left <= std::chrono::steady_clock::duration::zero() || !informer->WaitForSync(left))
      return Synced();
  }
  return true;
}

void Controller::RunWorkers() {
  std::lock_guard<std::mutex> lock(lifecycle_mu_);
  if (!workers_.empty() || stopped_)
    return;
  for (int i = 0; i < std::max(1, options_.workers); ++i)
    workers_.emplace_back([this] { Worker(); });
}

void Controller::Stop() {
  std::vector<std::thread> workers;
  {
    std::lock_guard<std::mutex> lock(lifecycle_mu_);
    if (stopped_.exchange(true))
      return;
    workers = std::move(workers_);  // a RunWorkers after this starts nothing
  }
  queue_.ShutDown();
  if (options_.cancel_requests != nullptr)
    options_.cancel_requests->Cancel();
  // Informers first: the workers still read the caches, which stay as they are.
  for (auto* informer : {jobs_.get(), pods_.get(), nodes_.get()})
    informer->Stop();
  for (auto& t : workers)
    t.join();
}

void Controller::Enqueue(const std::string& key) {
  if (!key.empty())
    queue_.Add(key);
  if (metrics_)
    metrics_->SetWorkqueueDepth(static_cast<double>(queue_.Len()));
}

void Controller::OnPod(const k8s::ObjectPtr& pod, bool deleted) {
  const std::string key = JobKeyOf(*pod);
  if (key.empty())
    return;
  const std::string name = MetaString(*pod, "name");
  const std::string uid = MetaString(*pod, "uid");
  expectations_.CreationObserved(key, name);
  if (deleted || Deleting(*pod))
    expectations_.DeletionObserved(key, uid);
  queue_.AddAfter(key, options_.pod_event_batch);  // at once when zero
}

void Controller::OnNode(const k8s::ObjectPtr& old_node, const k8s::ObjectPtr& node) {
  const bool was_ready = old_node && NodeIsReady(*old_node);
  const bool is_ready = node && NodeIsReady(*node);
  if (node && was_ready == is_ready)
    return;
  const std::string name = MetaString(node ? *node : *old_node, "name");
  for (const auto& pod : pods_->ByIndex(kIndexNode, name))
    Enqueue(JobKeyOf(*pod));
}

void Controller::Forget(const std::string& key) {
  expectations_.Forget(key);
  if (poller_)
    poller_->Untrack(key);
  std::lock_guard<std::mutex> lock(mu_);
  written_.erase(key);
  slices_.erase(key);
  failing_creates_.erase(key);
  if (phases_.erase(key) && metrics_) {
    std::map<std::string, int64_t> counts;
    for (const auto& [k, phase] : phases_)
      ++counts[phase];
    metrics_->SetJobPhases(counts);
  }
}

void Controller::UpdatePhaseCounts(const std::string& key, const std::string& phase) {
  std::lock_guard<std::mutex> lock(mu_);
  auto& slot = phases_[key];
  if (slot == phase)
    return;
  slot = phase;
  if (!metrics_)
    return;
  std::map<std::string, int64_t> counts;
  for (const auto& [k, p] : phases_)
    ++counts[p];
  metrics_->SetJobPhases(counts);
}

void Controller::Worker() {
  while (auto key = queue_.Get()) {
    const auto started = std::chrono::steady_clock::now();
    ReconcileOutcome outcome;
    try {
      outcome = Reconcile(*key);
    } catch (const std::exception& e) {
      outcome.result = ReconcileOutcome::Result::kError;
      outcome.error = std::string("internal error: ") + e.what();
    }
    const double seconds =
        std::chrono::duration<double>(std::chrono::steady_clock::now() - started).count();
    std::string result = "success";
    switch (outcome.result) {
      case ReconcileOutcome::Result::kSuccess:
        queue_.Forget(*key);
        if (outcome.requeue_after) {
          queue_.AddAfter(*key, *outcome.requeue_after);
          result = "requeue";
        }
        break;
      case ReconcileOutcome::Result::kConflict:
        spdlog::debug("reconcile {}: {}; retrying", *key, outcome.error);
        queue_.AddRateLimited(*key);
        result = "conflict";
        break;
      case ReconcileOutcome::Result::kError:
        if (queue_.ShuttingDown()) {  // its requests were cancelled; nothing is retried
          spdlog::info("reconcile {} stopped by shutdown: {}", *key, outcome.error);
          result = "error";
          break;
        }
        spdlog::warn("reconcile {} failed: {}; retrying", *key, outcome.error);
        queue_.AddRateLimited(*key);
        result = "error";
        break;
    }
    queue_.Done(*key);
    spdlog::debug("reconcile {}: {} in {:.3f} ms", *key, result, seconds * 1000);
    if (metrics_) {
      metrics_->ObserveReconcile(result, seconds);
      metrics_->SetWorkqueueDepth(static_cast<double>(queue_.Len()));
    }
  }
}

void Controller::NoteCreateOutcome(const std::string& key, const Json& job,
                                   const std::optional<std::string>& error) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (!error) {
      failing_creates_.erase(key);
      return;
    }
    if (!failing_creates_.insert(key).second)
      return;  // recorded when this run of failures began
  }
  events_.Record(job, "Warning", "FailedCreate", *error + "; retrying with back-off");
}

std::optional<std::string> Controller::EnsureCreated(const k8s::ResourceRef& ref,
                                                     const Json& object,
                                                     const std::string& owner_uid) {
  auto created = client_.Create(ref, object);
  if (created.ok())
    return std::nullopt;
  const std::string name = MetaString(object, "name");
  const std::string what = "create " + ref.resource + " " + ref.namespace_ + "/" + name + ": ";
  if (!created.error().IsAlreadyExists())
    return what + created.error().ToString();
  if (owner_uid.empty())
    return std::nullopt;
  return ExistingOwnedBy(ref.Named(name), owner_uid, what,
                         "the workers are created once it is gone: delete it, or give the job "
                         "another name");
}

std::optional<std::string> Controller::ExistingOwnedBy(const k8s::ResourceRef& named,
                                                       const std::string& owner_uid,
                                                       const std::string& what,
                                                       const std::string& then) {
  auto existing = client_.Get(named);
  if (!existing.ok())
    return what + "exists already, then reading it failed: " + existing.error().ToString();
  if (ControlledBy(*existing, owner_uid))
    return std::nullopt;
  return what + "one of that name exists that this job does not own (its controller: " +
         DescribeController(*existing) + "); " + then;
}

void Controller::RecordEvents(const std::string& key, const Json& job,
                              const std::vector<lifecycle::RecordEvent>& events) {
  for (const auto& event : events) {
    spdlog::info("{}: {} {}: {}", key, lifecycle::ToString(event.type), event.reason,
                 event.message);
    events_.Record(job, std::string(lifecycle::ToString(event.type)), event.reason, event.message);
  }
}

ReconcileOutcome Controller::WriteStatus(const std::string& key, const Json& object,
                                         const lifecycle::Status& status,
                                         const ProgressDetail& detail, const Json& before,
                                         bool force, bool* gone) {
  ReconcileOutcome out;
  *gone = false;
  const Json new_status = EncodeStatus(status, detail);
  if (new_status == before && !force)
    return out;
  Json updated = object;
  updated["status"] = new_status;
  auto written = client_.UpdateStatus(
      TrainingJobs(MetaString(object, "namespace")).Named(MetaString(object, "name")), updated);
  if (!written.ok()) {
    if (written.error().IsNotFound()) {
      *gone = true;
      return out;
    }
    out.result = written.error().IsConflict() ? ReconcileOutcome::Result::kConflict
                                              : ReconcileOutcome::Result::kError;
    out.error = "update status: " + written.error().ToString();
    return out;
  }
  expectations_.ExpectStatus(key, MetaString(*written, "resourceVersion"));
  std::lock_guard<std::mutex> lock(mu_);
  written_[key] = Written{MetaString(object, "uid"), new_status, PrunedFieldsOf(status)};
  return out;
}

k8s::Result<std::optional<lifecycle::Observation::Blocker>> Controller::CreationBlocker(
    const JobView& view, const lifecycle::Decision& decision) {
  const std::optional<PodGroupApi> pg = view.invalid ? std::nullopt : PodGroupApiOf(view.job);
  const bool creates =
      std::any_of(decision.actions.begin(), decision.actions.end(), [](const lifecycle::Action& a) {
        return std::holds_alternative<lifecycle::CreateWorkers>(a);
      });
  if (!pg || !creates)
    return std::optional<lifecycle::Observation::Blocker>();
  auto served = discovery_.Serves(pg->group, pg->version, pg->resource);
  if (!served.ok())
    return served.error();
  if (*served)
    return std::optional<lifecycle::Observation::Blocker>();
  return std::optional<lifecycle::Observation::Blocker>(lifecycle::Observation::Blocker{
      lifecycle::reason::kPodGroupUnavailable,
      "spec.scheduling.schedulerName is " + pg->scheduler + ", but the API server serves no " +
          pg->resource + "." + pg->group + "/" + pg->version +
          ": install that scheduler (its PodGroup CRD) or change schedulerName; the workers "
          "are created once it is served"});
}

std::optional<std::string> Controller::CreatePods(const std::string& key, const Json& job,
                                                  const std::vector<Json>& pods) {
  const std::string ns = MetaString(job, "namespace");
  const std::string uid = MetaString(job, "uid");
  return RunEach(
      pods.size(), options_.max_parallel_creates,
      [this, &key, &ns, &uid, &pods](size_t i) -> std::optional<std::string> {
        const Json& pod = pods[i];
        const std::string name = pod["metadata"]["name"];
        expectations_.ExpectCreation(key, name);
        auto created = client_.Create(k8s::Pods(ns), pod);
        if (created.ok())
          return std::nullopt;
        expectations_.CreationFailed(key, name);
        const std::string what = "create pod " + ns + "/" + name + ": ";
        if (!created.error().IsAlreadyExists())
          return what + created.error().ToString();
        // Most often an earlier decision's create that went through, unseen by the cache:
        // done. A pod of that name this job does not own (an earlier job's, not yet collected,
        // or anyone's) would hold the worker unseen until the startup timeout: said instead,
        // and retried with back-off until it is gone.
        return ExistingOwnedBy(
            k8s::Pods(ns).Named(name), uid, what,
            "the worker is created once it is gone: delete it unless it is on its way out");
      });
}

std::optional<std::string> Controller::SyncEndpointSlice(const std::string& key,
                                                         const api::TrainingJob& job,
                                                         const std::vector<const Json*>& pods) {
  Json slice = DesiredEndpointSlice(job, pods);
  // Kept as compact text, a few hundred bytes a job rather than a few KiB as a tree.
  const std::string record =
      job.metadata.uid + " " + slice["addressType"].dump() + " " + slice["endpoints"].dump();
  bool first = false;  // none written by this process: most likely none exists
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = slices_.find(key);
    first = it == slices_.end();
    if (first ? slice["endpoints"].empty() : it->second == record)
      return std::nullopt;
  }
  const std::string& ns = job.metadata.name_space;
  const std::string name = slice["metadata"]["name"];
  const k8s::ResourceRef ref = k8s::EndpointSlices(ns).Named(name);
  k8s::Result<Json> written =
      first ? client_.Create(k8s::EndpointSlices(ns), slice) : client_.Update(ref, slice);
  if (!written.ok() && written.error().IsAlreadyExists())  // written before a restart
    written = client_.Update(ref, slice);
  else if (!written.ok() && written.error().IsNotFound())  // deleted by someone
    written = client_.Create(k8s::EndpointSlices(ns), slice);
  if (!written.ok())
    return "write endpointslice " + ns + "/" + name + ": " + written.error().ToString();
  std::lock_guard<std::mutex> lock(mu_);
  slices_[key] = record;
  return std::nullopt;
}

std::optional<std::string> Controller::PrepareAttempt(const api::TrainingJob& job,
                                                      int64_t attempt) {
  const std::string& ns = job.metadata.name_space;
  std::vector<std::function<std::optional<std::string>()>> steps;
  if (const std::optional<PodGroupApi> pg = PodGroupApiOf(job)) {
    steps.push_back([this, pg, &job, &ns]() -> std::optional<std::string> {
      auto err =
          EnsureCreated({pg->group, pg->version, pg->resource, ns, ""}, DesiredPodGroup(job));
      if (err)
        discovery_.Invalidate(pg->group, pg->version);  // the CRD may have gone meanwhile
      return err;
    });
  }
  // Not someone else's Service of the job's name: the workers' DNS names need this headless
  // one, and the job's EndpointSlice would add them to that Service.
  steps.push_back([this, &job, &ns] {
    return EnsureCreated(k8s::Services(ns), DesiredService(job), job.metadata.uid);
  });
  steps.push_back([this, &job, &ns] {
    return EnsureCreated(k8s::Secrets(ns), DesiredSecret(job, NewRendezvousToken()));
  });
  if (RunsBuiltInTrainer(job)) {
    steps.push_back([this, &job, &ns, attempt] {
      return EnsureCreated(k8s::ConfigMaps(ns), DesiredTrainerConfigMap(job, attempt));
    });
  }
  if (attempt > 0) {
    // The previous attempt's configuration; older ones went with their own successors (the
    // garbage collector takes any left with the job).
    steps.push_back([this, &job, &ns, attempt]() -> std::optional<std::string> {
      const std::string name = TrainerConfigMapName(job, attempt - 1);
      auto deleted = client_.Delete(k8s::ConfigMaps(ns).Named(name), {});
      if (deleted.ok() || deleted.error().IsNotFound())
        return std::nullopt;
      return "delete configmap " + ns + "/" + name + ": " + deleted.error().ToString();
    });
  }
  return RunEach(steps.size(), steps.size(), [&steps](size_t i) { return steps[i](); });
}

ReconcileOutcome Controller::Reconcile(const std::string& key) {
  ReconcileOutcome out;
  k8s::ObjectPtr cached = jobs_->Get(key);
  if (!cached) {
    Forget(key);
    return out;
  }
  const Json& object = *cached;
  const JobView view = ViewJob(object);
  if (view.deleting) {
    if (poller_)
      poller_->Untrack(key);
    return out;  // the garbage collector removes what it owns
  }
  const std::string& ns = view.job.metadata.name_space;
  const std::string& name = view.job.metadata.name;
  const std::string& uid = view.job.metadata.uid;
  const Json raw_status =
      object.contains("status") && object["status"].is_object() ? object["status"] : Json();

  // Our own status write shows in the cache as its resourceVersion, or (after a relist that
  // skipped it) as a later object carrying the same status.
  if (auto rv = expectations_.PendingStatus(key)) {
    bool seen = view.resource_version == *rv;
    if (!seen) {
      std::lock_guard<std::mutex> lock(mu_);
      auto it = written_.find(key);
      seen = it != written_.end() && it->second.uid == uid && raw_status == it->second.status;
    }
    if (seen)
      expectations_.ClearStatus(key);
  }
  if (!expectations_.Satisfied(key)) {
    out.requeue_after = CeilMs(expectations_.TimeToExpiry(key));
    return out;
  }

  const auto now = std::chrono::system_clock::now();
  const std::vector<k8s::ObjectPtr> pod_objects = pods_->ByIndex(kIndexJob, key);
  std::vector<const Json*> pods;
  std::vector<PodAge> ages;
  for (const auto& pod : pod_objects) {
    if (!ControlledBy(*pod, uid))
      continue;  // a leftover of an earlier job of the same name; the GC removes it
    pods.push_back(pod.get());
    const Json& labels = k8s::ObjectAt(k8s::Metadata(*pod), "labels");
    PodAge age;
    try {
      const std::string attempt = k8s::StringAt(labels, api::kLabelAttempt);
      age.attempt = attempt.empty() ? 0 : std::stoll(attempt);
    } catch (const std::exception&) {
      continue;
    }
    age.created = ParseTime(MetaString(*pod, "creationTimestamp")).value_or(now);
    ages.push_back(age);
  }
  std::vector<k8s::ObjectPtr> nodes_seen;
  const ObservedWorkers observed = ObserveWorkers(
      pods,
      [this, &nodes_seen](const std::string& node) -> const Json* {
        k8s::ObjectPtr n = nodes_->Get(node);
        if (!n)
          return nullptr;
        nodes_seen.push_back(n);
        return nodes_seen.back().get();
      },
      now);

  const DecodedStatus decoded = DecodeStatus(raw_status);
  std::optional<PrunedFields> remembered;
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = written_.find(key);
    if (it != written_.end() && it->second.uid == uid)
      remembered = it->second.pruned;
  }
  const lifecycle::Status previous = RecoverPrunedFields(decoded, remembered, ages);

  lifecycle::Observation observation;
  observation.workers = observed.workers;
  ProgressDetail detail = decoded.detail;
  const Json* pod0 = observed.pods.count(0) ? observed.pods.at(0) : nullptr;
  // Rank 0's latest report: its last poll, or, once worker 0's container has ended, the progress
  // its termination message holds, later than any poll. (A pod of an older attempt holds its
  // name until it is gone, so that is the newest report; lifecycle keeps the step of an attempt
  // older than the job's.)
  std::optional<ProgressSample> report;
  if (poller_ && pod0)
    report = poller_->Latest(key, MetaString(*pod0, "uid"));
  if (observed.final_progress)
    report = SampleOf(observed.final_progress->progress, observed.final_progress->attempt);
  if (report) {
    observation.progress = lifecycle::Observation::ProgressReport{report->attempt, report->step};
    detail = report->detail;
  }

  const lifecycle::Policy policy = PolicyOf(view);
  lifecycle::Decision decision = lifecycle::Decide(policy, previous, observation, now);
  // A gang scheduler's PodGroup CRD is looked up only when an attempt is about to start; when
  // it is missing, decide again knowing that the attempt cannot be created.
  auto blocker = CreationBlocker(view, decision);
  if (!blocker.ok()) {
    out.result = ReconcileOutcome::Result::kError;
    out.error = "discovery: " + blocker.error().ToString();
    return out;
  }
  if (*blocker) {
    observation.creation_blocked = **blocker;
    decision = lifecycle::Decide(policy, previous, observation, now);
    out.requeue_after = CeilMs(options_.discovery_ttl);
  }
  const lifecycle::Status& status = decision.status;

  // Deletes workers; the first failure, if any.
  auto delete_workers = [&](const lifecycle::DeleteWorkers& del) -> std::optional<std::string> {
    for (int64_t index : del.indices) {
      auto it = observed.pods.find(index);
      if (it == observed.pods.end())
        continue;
      const Json& pod = *it->second;
      if (Deleting(pod) && !del.force)
        continue;  // already on its way out
      const std::string pod_uid = MetaString(pod, "uid");
      const std::string pod_name = MetaString(pod, "name");
      k8s::DeleteOptions options;
      options.precondition_uid = pod_uid;
      if (del.force)
        options.grace_period_seconds = 0;
      expectations_.ExpectDeletion(key, pod_uid);
      auto deleted = client_.Delete(k8s::Pods(ns).Named(pod_name), options);
      if (!deleted.ok()) {
        expectations_.DeletionObserved(key, pod_uid);
        // 404: gone already; 409: the name now holds another pod. Either way, done.
        if (!deleted.error().IsNotFound() && deleted.error().code != 409)
          return "delete pod " + ns + "/" + pod_name + ": " + deleted.error().ToString();
      } else {
        spdlog::info("{}: deleted pod {}{}", key, pod_name, del.force ? " (force)" : "");
      }
    }
    return std::nullopt;
  };

  std::vector<lifecycle::RecordEvent> events;
  std::vector<const lifecycle::DeleteWorkers*> deletes;  // applied once the status is written
  std::optional<std::string> create_error;               // the attempt's objects were refused
  for (const lifecycle::Action& action : decision.actions) {
    std::optional<std::string> err;
    if (const auto* del = std::get_if<lifecycle::DeleteWorkers>(&action)) {
      deletes.push_back(del);
    } else if (const auto* create = std::get_if<lifecycle::CreateWorkers>(&action)) {
      // The PodGroup, Service, Secret and trainer ConfigMap go first, at once, for every
      // create: creating them is cheap and an existing one counts (a Service only when the job
      // owns it, read then), so the controller needs to watch none of them.
      err = PrepareAttempt(view.job, create->attempt);
      if (!err) {
        std::vector<Json> desired;
        for (int64_t index : create->indices)
          desired.push_back(DesiredPod(view.job, index, create->attempt));
        err = CreatePods(key, object, desired);
      }
      NoteCreateOutcome(key, object, err);
      if (!err)
        spdlog::info("{}: {}", key, lifecycle::Describe(action));
      else
        create_error = err;
    } else if (std::holds_alternative<lifecycle::DeleteJob>(action)) {
      k8s::DeleteOptions options;
      options.precondition_uid = uid;
      options.propagation_policy = "Background";
      auto deleted = client_.Delete(TrainingJobs(ns).Named(name), options);
      if (!deleted.ok() && !deleted.error().IsNotFound() && deleted.error().code != 409)
        err = "delete finished job: " + deleted.error().ToString();
      else
        spdlog::info("{}: deleted the job (ttlSecondsAfterFinished)", key);
    } else if (const auto* event = std::get_if<lifecycle::RecordEvent>(&action)) {
      events.push_back(*event);
    }
    if (err && !create_error) {
      // Not persisting the status: the next attempt decides again from the previous one.
      out.result = ReconcileOutcome::Result::kError;
      out.error = *err;
      return out;
    }
    if (create_error)
      break;
  }
  if (create_error) {
    // The attempt's objects were refused (a ResourceQuota, an admission webhook): retried with
    // back-off, and the status says so meanwhile, as condition Created False with reason
    // FailedCreate in phase Pending or Restarting; without it a job whose every create is
    // refused showed no phase at all. Decided again with the creation blocked, whose status is
    // written and whose events are recorded (JobCreated, the first time), but for its
    // FailedCreate: NoteCreateOutcome records the one of this run of failures. Pods created
    // before the refusal are adopted by the next decision as a newer attempt, as after a lost
    // status write.
    out.result = ReconcileOutcome::Result::kError;
    out.error = *create_error;
    observation.creation_blocked =
        lifecycle::Observation::Blocker{lifecycle::reason::kFailedCreate, *create_error};
    const lifecycle::Decision blocked = lifecycle::Decide(policy, previous, observation, now);
    const bool creates =
        std::any_of(blocked.actions.begin(), blocked.actions.end(), [](const lifecycle::Action& a) {
          return std::holds_alternative<lifecycle::CreateWorkers>(a);
        });
    if (creates)
      return out;  // not a new attempt (workers of a running one): the status stands
    bool gone = false;
    const ReconcileOutcome written =
        WriteStatus(key, object, blocked.status, detail, EncodeStatus(previous, decoded.detail),
                    raw_status.is_null(), &gone);
    if (gone || written.result != ReconcileOutcome::Result::kSuccess) {
      if (!gone)
        spdlog::debug("{}: {}", key, written.error);  // the create's error is the outcome
      return out;
    }
    std::vector<lifecycle::RecordEvent> blocked_events;
    for (const lifecycle::Action& action : blocked.actions) {
      const auto* event = std::get_if<lifecycle::RecordEvent>(&action);
      if (event && event->reason != lifecycle::reason::kFailedCreate)
        blocked_events.push_back(*event);
    }
    RecordEvents(key, object, blocked_events);
    UpdatePhaseCounts(key, std::string(lifecycle::ToString(blocked.status.phase)));
    return out;
  }

  bool gone = false;
  const ReconcileOutcome written =
      WriteStatus(key, object, status, detail, EncodeStatus(previous, decoded.detail),
                  raw_status.is_null(), &gone);
  if (gone)
    return out;  // deleted meanwhile
  if (written.result != ReconcileOutcome::Result::kSuccess) {
    out.result = written.result;
    out.error = written.error;
    return out;
  }
  // Workers are deleted only once the status that explains it is written (Suspended,
  // Restarting, finished): a write refused after the deletes would leave the next decision,
  // from the older status, to take them for a lost worker and count a restart (a suspension
  // resumed at once failed a job with backoffLimit 0). A delete that fails is decided again.
  for (const lifecycle::DeleteWorkers* del : deletes) {
    if (auto err = delete_workers(*del)) {
      out.result = ReconcileOutcome::Result::kError;
      out.error = *err;
      break;
    }
  }

  if (!view.invalid) {
    if (auto err = SyncEndpointSlice(key, view.job, pods)) {
      out.result = ReconcileOutcome::Result::kError;
      out.error = *err;
    }
  }

  RecordEvents(key, object, events);
  if (metrics_) {
    if (status.restarts > previous.restarts)
      metrics_->ObserveJobRestart();
    if (decision.attempt_startup)
      metrics_->ObserveJobStartup(std::chrono::duration<double>(*decision.attempt_startup).count());
  }
  UpdatePhaseCounts(key, std::string(lifecycle::ToString(status.phase)));

  // Rank 0's progress is read while the attempt runs.
  if (poller_) {
    const std::string ip = pod0 ? k8s::StringAt(k8s::ObjectAt(*pod0, "status"), "podIP") : "";
    const bool current = pod0 && !observed.workers.empty() &&
                         std::any_of(observed.workers.begin(), observed.workers.end(),
                                     [&](const lifecycle::Worker& w) {
                                       return w.index == 0 && w.attempt == status.attempt;
                                     });
    if (status.phase == lifecycle::Phase::kRunning && current && !ip.empty() && !view.invalid) {
      poller_->Track(key, MetaString(*pod0, "uid"), status.attempt, ip,
                     static_cast<int>(view.job.spec.metrics.port));
    } else {
      poller_->Untrack(key);
    }
  }

  Earliest(out.requeue_after, decision.requeue_after);
  Earliest(out.requeue_after, observed.recheck_after);
  return out;
}

}  // namespace tessera::reconcile
