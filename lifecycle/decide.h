// The job state machine shared by the controller and the local runner (DESIGN.md §4): one
// pure function from (policy, previous status, observed workers, now) to the new status and the
// actions that move the world towards it. No I/O, no clock, no threads; docs/lifecycle.md
// lists the rules for users.
#pragma once

#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "lifecycle/job_state.h"

namespace tessera::lifecycle {

// Create these workers of `attempt` (all of an attempt's workers are created in one action).
struct CreateWorkers {
  int64_t attempt = 0;
  std::vector<int64_t> indices{};
  bool operator==(const CreateWorkers&) const = default;
};

// Delete these workers (by index, whatever their attempt). `force` skips the grace period: it
// is set for workers on a lost node, whose kubelet will never confirm a graceful delete.
struct DeleteWorkers {
  std::vector<int64_t> indices{};
  bool force = false;
  bool operator==(const DeleteWorkers&) const = default;
};

// Delete the job itself (ttlSecondsAfterFinished expired); its workers go with it.
struct DeleteJob {
  bool operator==(const DeleteJob&) const = default;
};

enum class EventType { kNormal, kWarning };

// Record an event on the job (a Kubernetes Event, or a log line locally).
struct RecordEvent {
  EventType type = EventType::kNormal;
  std::string reason{};
  std::string message{};
  bool operator==(const RecordEvent&) const = default;
};

using Action = std::variant<CreateWorkers, DeleteWorkers, DeleteJob, RecordEvent>;

struct Decision {
  Status status{};                // persist this; pass it back as `previous` next time
  std::vector<Action> actions{};  // in order; deletes come before creates
  // When the next time-based transition is due (a deadline, the startup timeout, the TTL),
  // measured from `now` and rounded up; absent when only a change in the observed workers can
  // move the job on. Callers decide again no later than this.
  std::optional<Duration> requeue_after{};
  // Set in the decision where the current attempt became Running: how long after its workers
  // were created (tessera_job_startup_seconds).
  std::optional<Duration> attempt_startup{};
  bool operator==(const Decision&) const = default;
};

// Decides what the job's status is now and what to do about it.
//
// Deterministic: the same inputs give the same Decision. Feeding the returned status back
// with an unchanged observation gives the same status, no CreateWorkers and no events (deletes
// of workers still present are repeated; they are idempotent). An attempt's workers are
// created exactly once, in the decision that starts the attempt: a caller whose view lags its
// own creates never creates twice. Callers apply every action; when one fails they should not
// persist the status, and decide again from the previous one (creating an existing worker must
// then count as done).
//
// Thread-safe: it reads only its arguments.
//
// Preconditions, not checked: at most one observed worker per index; `now` does not go back.
// A policy with fewer than one worker, or `invalid_spec` set, fails the job (InvalidSpec).
Decision Decide(const Policy& policy, const Status& previous, const Observation& observed,
                TimePoint now);

// One line describing an action, for logs and test failures, e.g.
// "create attempt=1 [0,1,2,3]", "delete force [2]", "event Warning NodeLost: ...".
std::string Describe(const Action& action);

std::string_view ToString(EventType type);

}  // namespace tessera::lifecycle
