// The TrainingJob controller (DESIGN.md §5): informers on jobs, their pods and nodes fill
// caches and enqueue job keys; N workers take keys from a rate-limited
// queue and reconcile one job at a time. Reconcile reads only the caches, decides with
// lifecycle::Decide, creates and deletes the difference (with expectations, so a lagging cache
// never causes a second create), writes /status only when it changed, and records events.
// It does not elect a leader (main.cpp does, and starts workers only while leading).
#pragma once

#include <nlohmann/json.hpp>

#include <atomic>
#include <chrono>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <thread>
#include <vector>

#include "controller/k8s/discovery.h"
#include "controller/k8s/informer.h"
#include "controller/k8s/rest.h"
#include "controller/k8s/workqueue.h"
#include "controller/reconcile/events.h"
#include "controller/reconcile/expectations.h"
#include "controller/reconcile/job_view.h"
#include "controller/reconcile/metrics.h"
#include "controller/reconcile/progress.h"
#include "controller/reconcile/status.h"
#include "lifecycle/decide.h"

namespace tessera::reconcile {

// The TrainingJob resource.
k8s::ResourceRef TrainingJobs(std::string ns = "");

// The line the controller logs when an informer's list (`relist`) or watch of `resource`
// (trainingjobs, pods, nodes) fails, with what to check for the usual causes (a missing CRD, an
// identity without the permission, refused credentials); empty for a watch whose
// resourceVersion expired (410 Gone), after which the informer simply lists again.
std::string DescribeInformerFailure(const std::string& resource, const k8s::ApiError& error,
                                    bool relist);

struct ControllerOptions {
  std::string namespace_;  // watch this namespace only; empty: all namespaces
  int workers = 4;         // concurrent reconciles (of different jobs)
  std::chrono::steady_clock::duration expectation_ttl = std::chrono::minutes(2);
  int64_t watch_timeout_seconds = 300;
  k8s::WorkQueueRateLimiter::Options queue;  // per-key back-off after errors
  int max_parallel_creates = 16;             // pod creates of one attempt in flight at once
  // A pod event reconciles its job this long after it, once for all the events of that time
  // (the Job controller batches pod events the same way, by one second): the 8 pods of a gang
  // are added, bound and started close together, and one reconcile and one status write see
  // them all. Zero: at once. Job events (spec changes, deletion) are never delayed.
  std::chrono::steady_clock::duration pod_event_batch = std::chrono::seconds(1);
  // How long whether a gang scheduler's PodGroup CRD is served is remembered; a job waiting
  // for it is looked at again this often.
  std::chrono::steady_clock::duration discovery_ttl = std::chrono::seconds(10);
  // Optional: the client's RestOptions::cancel. Stop cancels it once the queue is shut down,
  // so that a reconcile's request in flight ends at once instead of at its timeout.
  k8s::Cancellation* cancel_requests = nullptr;
};

// What one reconcile did, for the worker loop and tests.
struct ReconcileOutcome {
  enum class Result { kSuccess, kConflict, kError };
  Result result = Result::kSuccess;
  std::optional<std::chrono::milliseconds> requeue_after;  // decide again after this
  std::string error;                                       // for kConflict/kError
};

// Thread-safe. Lifetime: construct, Start, (RunWorkers while leading), Stop.
class Controller {
 public:
  // `client`, `events`, `metrics` (nullable) and `poller` (nullable: no progress) must outlive
  // the controller.
  Controller(k8s::RestClient& client, EventSink& events, ControllerMetrics* metrics,
             ProgressPoller* poller, ControllerOptions options);
  ~Controller();  // Stop()
  Controller(const Controller&) = delete;
  Controller& operator=(const Controller&) = delete;

  // Starts the informers. Returns at once.
  void StartInformers();
  // True once every informer has listed once.
  bool Synced() const;
  // Waits until Synced or `timeout`; returns Synced().
  bool WaitForSync(std::chrono::steady_clock::duration timeout) const;
  // Starts the reconcile workers (after WaitForSync). Idempotent; nothing after Stop. May race
  // Stop (leadership won on the elector's thread while the process is told to stop).
  void RunWorkers();
  // Shuts the queue down (the queued keys are dropped: no worker takes another), cancels the
  // requests in flight (options.cancel_requests), stops the informers and waits for the
  // workers to return from the key in hand. After it returns no worker sends a request.
  // Without cancel_requests a request in flight may hold it up to the client's timeout.
  // Idempotent.
  void Stop();

  // Reconciles the job `key` ("namespace/name") once, now. For the workers and for tests.
  ReconcileOutcome Reconcile(const std::string& key);

  // The job `key` as the cache holds it; null when absent.
  k8s::ObjectPtr CachedJob(const std::string& key) const { return jobs_->Get(key); }
  // Adds `key` to the queue (tests; informer handlers do this).
  void Enqueue(const std::string& key);
  size_t QueueLength() const { return queue_.Len(); }
  Expectations& expectations() { return expectations_; }

 private:
  struct Written {
    std::string uid;
    nlohmann::json status;  // as sent
    PrunedFields pruned;
  };

  void Worker();
  void OnPod(const k8s::ObjectPtr& pod, bool deleted);
  void OnNode(const k8s::ObjectPtr& old_node, const k8s::ObjectPtr& node);
  void Forget(const std::string& key);
  // Creates `object`; one that exists already counts as created, but for one whose controller
  // is not `owner_uid` when that is given (an error then names its controller).
  // After a create of `named` was answered "already exists": nullopt when the object there is
  // `owner_uid`'s (an earlier create of this job, unseen by the cache), else `what` and a line
  // naming its controller, then `then` (what happens next).
  std::optional<std::string> ExistingOwnedBy(const k8s::ResourceRef& named,
                                             const std::string& owner_uid, const std::string& what,
                                             const std::string& then);
  std::optional<std::string> EnsureCreated(const k8s::ResourceRef& ref,
                                           const nlohmann::json& object,
                                           const std::string& owner_uid = "");
  // Whether the attempt `decision` would start can be created: nullopt when it can (or starts
  // none), else why not (the job's PodGroup CRD is not served). An error when discovery
  // failed.
  k8s::Result<std::optional<lifecycle::Observation::Blocker>> CreationBlocker(
      const JobView& view, const lifecycle::Decision& decision);
  // Creates what an attempt's pods need, concurrently: the PodGroup (with a gang scheduler),
  // Service, Secret and, with the built-in trainer, the attempt's ConfigMap; deletes the
  // previous attempt's ConfigMap. The first error, or nullopt.
  std::optional<std::string> PrepareAttempt(const api::TrainingJob& job, int64_t attempt);
  // Creates `pods` (expecting each), up to max_parallel_creates at once; the first error.
  std::optional<std::string> CreatePods(const std::string& key, const nlohmann::json& job,
                                        const std::vector<nlohmann::json>& pods);
  // Writes the job's EndpointSlice when its endpoints differ from the last written: POST the
  // first time (PUT when it exists, from before a restart), then PUT (POST when it has gone).
  // Nothing while no pod has an IP and none was written. The error.
  std::optional<std::string> SyncEndpointSlice(const std::string& key, const api::TrainingJob& job,
                                               const std::vector<const nlohmann::json*>& pods);
  void UpdatePhaseCounts(const std::string& key, const std::string& phase);
  // After creating an attempt's objects: a failure (a quota, an admission webhook, a template
  // the apiserver refuses) is recorded as one Warning event FailedCreate with the apiserver's
  // answer, not again until a create has succeeded; the retries are in the log.
  void NoteCreateOutcome(const std::string& key, const nlohmann::json& job,
                         const std::optional<std::string>& error);
  // Logs each event and records it on `job` (a TrainingJob object).
  void RecordEvents(const std::string& key, const nlohmann::json& job,
                    const std::vector<lifecycle::RecordEvent>& events);
  // Writes `status` (with `detail`) to the job `object` through the status subresource, unless
  // it encodes as `before` (the stored status, re-encoded) and `force` is false. The outcome:
  // kSuccess (written or unchanged), kConflict or kError with its message in `error`; and
  // `gone` when the job was deleted meanwhile (kSuccess: nothing to do).
  ReconcileOutcome WriteStatus(const std::string& key, const nlohmann::json& object,
                               const lifecycle::Status& status, const ProgressDetail& detail,
                               const nlohmann::json& before, bool force, bool* gone);

  k8s::RestClient& client_;
  EventSink& events_;
  ControllerMetrics* metrics_;
  ProgressPoller* poller_;
  ControllerOptions options_;

  std::unique_ptr<k8s::Informer> jobs_;
  std::unique_ptr<k8s::Informer> pods_;
  std::unique_ptr<k8s::Informer> nodes_;
  k8s::WorkQueue queue_;
  Expectations expectations_;
  k8s::Discovery discovery_;

  std::mutex mu_;  // guards written_, slices_, phases_ and failing_creates_
  std::map<std::string, Written> written_;
  // key -> the job's EndpointSlice as last written (uid, address type, endpoints): an
  // unchanged one is not sent again.
  std::map<std::string, std::string> slices_;
  std::map<std::string, std::string> phases_;  // key -> phase, for tessera_jobs{phase}
  std::set<std::string> failing_creates_;      // keys whose FailedCreate event is recorded

  std::mutex lifecycle_mu_;  // guards workers_ and the decision to set stopped_
  std::atomic<bool> stopped_{false};
  std::vector<std::thread> workers_;
};

}  // namespace tessera::reconcile
