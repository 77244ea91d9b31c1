// The inputs and the status of the job state machine (DESIGN.md §4): a job's run policy, what
// a caller observed of its workers, and the status the machine keeps between decisions.
// Plain data with no I/O; callers map api/ types (or local processes) onto these structs.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace tessera::lifecycle {

// Wall-clock time. The machine never reads a clock: callers pass `now` in.
using TimePoint = std::chrono::system_clock::time_point;
// Durations the machine hands back (requeue_after, startup time), rounded up.
using Duration = std::chrono::milliseconds;

// Which workers are deleted once the job has finished (Succeeded or Failed).
enum class CleanPodPolicy {
  kRunning,  // workers that have not finished (Pending, Running, Unknown); finished ones stay
  kAll,      // every worker, finished or not
  kNone,     // none: every worker is left as it is
};

// The job's spec as far as the lifecycle cares. Defaults are those of DESIGN.md §2.
struct Policy {
  int64_t workers = 1;                               // spec.workers; at least 1
  int64_t backoff_limit = 3;                         // gang restarts before the job fails
  std::vector<int64_t> permanent_exit_codes = {2};   // fail the job at once
  std::optional<int64_t> active_deadline_seconds{};  // from startTime; absent: no deadline
  // No new training step for this long while Running restarts the gang; absent or 0: off.
  std::optional<int64_t> progress_deadline_seconds = 600;
  std::optional<int64_t> ttl_seconds_after_finished{};  // absent: the job is kept
  CleanPodPolicy clean_pod_policy = CleanPodPolicy::kRunning;
  bool suspend = false;
  bool gang = true;                                      // scheduling.gang
  std::optional<int64_t> startup_timeout_seconds = 300;  // absent or 0: off
  int64_t generation = 0;                                // metadata.generation
  // Set when the spec failed validation after it reached the server (an older CRD): the job
  // fails at once with reason InvalidSpec and this message.
  std::optional<std::string> invalid_spec{};
};

enum class WorkerPhase { kPending, kRunning, kSucceeded, kFailed, kUnknown };

// The exit code of a rank whose communication failed: a peer was lost, a collective timed out
// or the rendezvous failed (the built-in trainer's 6, train::ExitCode::kCommFailed,
// docs/training.md). Usually the consequence of another worker's failure rather than its
// cause, so among failures at the same time another exit code is blamed first.
inline constexpr int64_t kCommunicationFailedExitCode = 6;

// The tie rule for failures seen at the same time (one poll, one `finishedAt` second): whether
// `code` is blamed before `other`, that is, any other exit code before a lost peer's. The
// controller (among workers), the local runner and the pod agent (among ranks) order ties by
// it, then by the lowest index.
constexpr bool BlamedFirstOnATie(int64_t code, int64_t other) {
  return code != kCommunicationFailedExitCode && other == kCommunicationFailedExitCode;
}

// The failure to report among exit codes seen at the same time, listed in index order: the
// position of the first non-zero code that BlamedFirstOnATie puts first; nullopt when all are 0.
std::optional<size_t> FailureToBlame(std::span<const int64_t> exit_codes);

// One worker (a pod, or a local agent process) as the caller sees it now. At most one worker
// per index: names are per index (`J-worker-<i>`), whatever the attempt.
struct Worker {
  int64_t index = 0;
  int64_t attempt = 0;  // the attempt that created it (pod label tessera.dev/attempt)
  WorkerPhase phase = WorkerPhase::kPending;
  bool ready = false;
  std::optional<int64_t> exit_code{};      // of the worker container, once terminated
  std::optional<TimePoint> finished_at{};  // when it terminated; orders simultaneous failures
  std::string reason{};                    // e.g. "Error", "OOMKilled", "Evicted"
  std::string message{};
  // Its node has been NotReady or unreachable for longer than the pod's grace period (the
  // caller decides when); such a worker counts as failed and is force-deleted.
  bool node_lost = false;
  bool deleting = false;  // deletion requested (deletionTimestamp set, or SIGTERM sent)
  std::string name{};     // for messages and lastFailure.worker; empty: "worker-<index>"
  bool operator==(const Worker&) const = default;
};

// What the caller observes now.
struct Observation {
  std::vector<Worker> workers{};  // every worker of the job, of any attempt
  // The latest training step worker 0 reported (its /progress), with the attempt of the
  // worker that reported it; absent when nothing could be read this time.
  struct ProgressReport {
    int64_t attempt = 0;
    int64_t step = 0;
  };
  std::optional<ProgressReport> progress{};
  // Something the workers need is missing, so an attempt cannot be created now (the
  // controller sets this when the gang scheduler's PodGroup CRD is absent). While it is set no
  // attempt starts: the job waits in Pending (or Restarting) with condition Created False and
  // this reason and message, and goes on once it is cleared. Workers already created are not
  // affected.
  struct Blocker {
    std::string reason;  // CamelCase, e.g. reason::kPodGroupUnavailable
    std::string message;
  };
  std::optional<Blocker> creation_blocked{};
};

enum class Phase { kPending, kStarting, kRunning, kRestarting, kSucceeded, kFailed, kSuspended };

enum class ConditionType {
  kCreated,
  kPodsReady,
  kRunning,
  kRestarting,
  kSucceeded,
  kFailed,
  kSuspended
};

enum class ConditionStatus { kTrue, kFalse, kUnknown };

// A Kubernetes-style condition. last_transition_time changes only when `status` flips.
struct Condition {
  ConditionType type = ConditionType::kCreated;
  ConditionStatus status = ConditionStatus::kUnknown;
  std::string reason{};  // CamelCase, see lifecycle/reasons.h
  std::string message{};
  TimePoint last_transition_time{};
  int64_t observed_generation = 0;
  bool operator==(const Condition&) const = default;
};

// Why the last attempt (or the job) failed. `worker` is empty when no single worker is to
// blame (a deadline); `exit_code` is 0 when the worker did not exit.
struct Failure {
  std::string reason{};
  std::string message{};
  std::string worker{};
  int64_t exit_code = 0;
  bool operator==(const Failure&) const = default;
};

// Workers of the current attempt, by state.
struct WorkerCounts {
  int64_t active = 0;  // not finished and not being deleted
  int64_t ready = 0;
  int64_t succeeded = 0;
  int64_t failed = 0;  // Failed, or on a lost node
  bool operator==(const WorkerCounts&) const = default;
};

// The last training step seen, and when it last changed; arms the progress deadline.
struct ProgressMark {
  int64_t attempt = 0;  // the attempt whose worker 0 reported it
  int64_t step = 0;
  TimePoint updated_at{};
  bool operator==(const ProgressMark&) const = default;
};

// Everything the machine remembers between decisions. Callers persist all of it (the
// controller in .status, the local runner in memory) and pass it back unchanged. A
// default-constructed Status is a job never seen before.
struct Status {
  Phase phase = Phase::kPending;
  std::vector<Condition> conditions{};  // in the order they first appeared
  WorkerCounts workers{};
  int64_t restarts = 0;                   // gang restarts so far (counted against backoffLimit)
  int64_t attempt = 0;                    // 0 on first start, +1 per gang restart and per resume
  std::optional<TimePoint> start_time{};  // first workers created (reset on resume)
  std::optional<TimePoint> completion_time{};  // when the job finished
  // When the current attempt's workers were created; absent until they are.
  std::optional<TimePoint> attempt_start_time{};
  std::optional<Failure> last_failure{};
  std::optional<ProgressMark> progress{};
  int64_t observed_generation = 0;
  bool operator==(const Status&) const = default;
};

// The condition of `type`, or nullptr.
const Condition* FindCondition(const Status& status, ConditionType type);

// True when the condition of `type` is present with status True.
bool IsConditionTrue(const Status& status, ConditionType type);

// Succeeded or Failed: no more workers are created.
bool IsFinished(Phase phase);

// Names as they appear in the API ("Running", "PodsReady", "True", "Unknown", ...).
std::string_view ToString(Phase phase);
std::string_view ToString(ConditionType type);
std::string_view ToString(ConditionStatus status);
std::string_view ToString(WorkerPhase phase);
std::string_view ToString(CleanPodPolicy policy);

// The inverse of ToString; absent for an unknown name (callers decide what that means).
std::optional<Phase> ParsePhase(std::string_view name);
std::optional<ConditionType> ParseConditionType(std::string_view name);
std::optional<ConditionStatus> ParseConditionStatus(std::string_view name);
std::optional<WorkerPhase> ParseWorkerPhase(std::string_view name);
std::optional<CleanPodPolicy> ParseCleanPodPolicy(std::string_view name);

}  // namespace tessera::lifecycle
