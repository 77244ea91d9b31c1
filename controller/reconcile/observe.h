// What the controller sees of a job's worker pods, as the lifecycle's Observation: phase,
// readiness, exit code and reason from the worker container, deletion, and whether the pod's
// node is lost. Pure functions of pod and node objects (JSON as the API server returns them)
// and the time; no I/O.
#pragma once

#include <nlohmann/json.hpp>

#include <functional>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "api/progress.h"
#include "lifecycle/job_state.h"

namespace tessera::reconcile {

using Json = nlohmann::json;

// "namespace/job-name" from an object's tessera.dev/job-name label, or "" without one.
std::string JobKeyOf(const Json& object);

// Whether `object` has an owner reference to `uid` with controller: true.
bool ControlledBy(const Json& object, const std::string& uid);

// Its controlling owner reference as "<kind> <name> (uid <uid>)", or "no controller".
std::string DescribeController(const Json& object);

// Whether metadata.deletionTimestamp is set.
bool Deleting(const Json& object);

// A pod's spec.nodeName; "" while it is not bound.
std::string NodeNameOf(const Json& pod);

// A pod's grace period when its spec does not say (Kubernetes' default).
inline constexpr int64_t kDefaultGracePeriodSeconds = 30;

// The node a pod is bound to, looked up by name; nullptr when the node does not exist.
using NodeLookup = std::function<const Json*(const std::string& node_name)>;

// Whether a node's Ready condition is True. A node without the condition is not ready.
bool NodeIsReady(const Json& node);

// When the node's Ready condition last left True (its lastTransitionTime while not True);
// nullopt when the node is ready or the time is unknown.
std::optional<lifecycle::TimePoint> NodeNotReadySince(const Json& node);

struct ObservedWorkers {
  std::vector<lifecycle::Worker> workers;  // one per pod that carries valid tessera labels
  // index -> pod (the object as cached), for deletes and for progress polling.
  std::map<int64_t, const Json*> pods;
  // Soonest moment a worker on a NotReady node will count as lost; nullopt when none waits.
  std::optional<lifecycle::Duration> recheck_after;
  // Rank 0's progress as it ended: the last line of worker 0's terminated message
  // (api::SplitTerminationMessage), with the attempt of its pod; nullopt when there is none.
  struct FinalProgress {
    int64_t attempt = 0;
    api::ProgressDocument progress;
  };
  std::optional<FinalProgress> final_progress;
};

// Maps `pods` (all of one job, any attempt) to lifecycle workers:
//  - index and attempt from the labels tessera.dev/worker-index and tessera.dev/attempt (pods
//    lacking either, or holding two of one index, keep the first by name and skip the rest);
//  - phase from status.phase; ready from the Ready condition;
//  - exit code, reason, message and finish time from the `worker` container's terminated
//    state (else any terminated container, the first with a non-zero code first); a failed
//    pod without one takes status.reason/message (e.g. Evicted); a final progress line ends
//    the message's text and, for worker 0, is final_progress;
//  - deleting when metadata.deletionTimestamp is set;
//  - node_lost for an unfinished pod whose node is gone, whose status.reason is NodeLost, whose
//    phase is Unknown, or whose node has not been Ready for longer than the pod's
//    terminationGracePeriodSeconds (default 30).
// The pointers in the result point into `pods`' objects, which must outlive it.
ObservedWorkers ObserveWorkers(const std::vector<const Json*>& pods, const NodeLookup& nodes,
                               lifecycle::TimePoint now);

}  // namespace tessera::reconcile
