#include "lifecycle/decide.h"

#include <algorithm>
#include <functional>
#include <string>
#include <utility>

#include "lifecycle/reasons.h"

namespace tessera::lifecycle {
namespace {

using std::chrono::seconds;

std::string IndexName(int64_t index) {
  return "worker-" + std::to_string(index);
}

std::string NameOf(const Worker& worker) {
  return worker.name.empty() ? IndexName(worker.index) : worker.name;
}

bool HasFinished(const Worker& worker) {
  return worker.phase == WorkerPhase::kSucceeded || worker.phase == WorkerPhase::kFailed;
}

bool HasStarted(const Worker& worker) {
  return worker.phase == WorkerPhase::kRunning || worker.phase == WorkerPhase::kSucceeded;
}

std::string JoinIndices(const std::vector<int64_t>& indices) {
  std::string joined;
  for (int64_t index : indices) {
    joined += (joined.empty() ? "" : ",") + std::to_string(index);
  }
  return joined;
}

// "worker-2 failed with exit code 1 (OOMKilled: out of memory)".
std::string DescribeExit(const Worker& worker, std::string_view verb) {
  std::string text = NameOf(worker) + " " + std::string(verb);
  if (worker.exit_code) {
    text += " with exit code " + std::to_string(*worker.exit_code);
  }
  if (!worker.reason.empty() || !worker.message.empty()) {
    text += " (" + worker.reason;
    if (!worker.reason.empty() && !worker.message.empty()) {
      text += ": ";
    }
    text += worker.message + ")";
  }
  return text;
}

Failure FailureOf(const Worker& worker, std::string reason, std::string message) {
  return Failure{std::move(reason), std::move(message), NameOf(worker),
                 worker.exit_code.value_or(0)};
}

// Computes one Decision. Run() applies the rules of DESIGN.md §4 in order of precedence; each
// rule is a small method named after it. The object lives for one call.
class Decider {
 public:
  Decider(const Policy& policy, const Status& previous, const Observation& observed, TimePoint now)
      : policy_(policy), previous_(previous), observed_(observed), now_(now) {
    decision_.status = previous;
  }

  Decision Run() {
    AcceptJob();
    RecordProgress();
    if (IsFinished(previous_.phase)) {
      // Finished jobs are terminal: only clean-up and the TTL below.
    } else if (std::optional<Failure> invalid = InvalidSpec()) {
      Fail(reason::kInvalidSpec, invalid->message, *invalid);
    } else if (const Worker* zero = WorkerZeroSucceeded()) {
      Succeed(*zero);
    } else if (std::optional<Failure> permanent = PermanentExitCode()) {
      Fail(reason::kPermanentExitCode, permanent->message, *permanent);
    } else if (policy_.suspend) {
      Suspend();
    } else {
      RunAttempt();
    }
    if (IsFinished(status().phase)) {
      CleanUpFinishedWorkers();
      DeleteJobAfterTtl();
    }
    RefreshConditions();
    CountWorkers();
    ScheduleRequeue();
    return std::move(decision_);
  }

 private:
  Status& status() { return decision_.status; }
  const Status& status() const { return decision_.status; }

  // --- Rules, in the order Run() applies them. ---------------------------------------------

  // The first decision about a job records that it was accepted. A Created condition that is
  // False (creation was blocked) stays so until RefreshConditions finds it unblocked.
  void AcceptJob() {
    const Condition* created = FindCondition(previous_, ConditionType::kCreated);
    if (created == nullptr) {
      // An invalid spec's worker count is not known (the policy holds a default), so it is not
      // named; the InvalidSpec event that follows says what is wrong.
      Event(EventType::kNormal, reason::kJobCreated,
            policy_.invalid_spec
                ? std::string("accepted the job")
                : "accepted a job of " + std::to_string(policy_.workers) + " workers");
    }
    if (created == nullptr || created->status == ConditionStatus::kTrue) {
      SetCondition(ConditionType::kCreated, true, reason::kJobCreated, "job accepted");
    }
  }

  // Worker 0's step arms the progress deadline; the clock restarts whenever the step changes.
  void RecordProgress() {
    if (!observed_.progress || observed_.progress->attempt < previous_.attempt) {
      return;
    }
    const auto& report = *observed_.progress;
    const std::optional<ProgressMark>& mark = status().progress;
    if (!mark || mark->attempt != report.attempt || mark->step != report.step) {
      status().progress = ProgressMark{report.attempt, report.step, now_};
    }
  }

  std::optional<Failure> InvalidSpec() const {
    if (policy_.invalid_spec) {
      return Failure{reason::kInvalidSpec, *policy_.invalid_spec, "", 0};
    }
    if (policy_.workers < 1) {
      return Failure{
          reason::kInvalidSpec,
          "spec.workers must be at least 1 (got " + std::to_string(policy_.workers) + ")", "", 0};
    }
    return std::nullopt;
  }

  // Success is worker 0 of the current attempt exiting 0 on its own (not while being deleted:
  // a worker stopped by a delete may exit 0 after its final checkpoint).
  const Worker* WorkerZeroSucceeded() const {
    for (const Worker* worker : JudgedWorkers()) {
      if (worker->index == 0 && worker->phase == WorkerPhase::kSucceeded && !worker->deleting) {
        return worker;
      }
    }
    return nullptr;
  }

  std::optional<Failure> PermanentExitCode() const {
    const auto& codes = policy_.permanent_exit_codes;
    for (const Worker* worker : JudgedWorkers()) {
      if (worker->phase == WorkerPhase::kFailed && worker->exit_code &&
          std::find(codes.begin(), codes.end(), *worker->exit_code) != codes.end()) {
        return FailureOf(*worker, reason::kPermanentExitCode,
                         DescribeExit(*worker, "failed") + ", listed in permanentExitCodes");
      }
    }
    return std::nullopt;
  }

  // A job that is neither finished nor suspended: deadlines, failures, then the attempt.
  void RunAttempt() {
    if (previous_.phase == Phase::kSuspended) {
      Resume();
    }
    AdoptNewerAttempt();
    if (ActiveDeadlineExceeded()) {
      const std::string message = "job was active longer than activeDeadlineSeconds (" +
                                  std::to_string(*policy_.active_deadline_seconds) + "s)";
      Fail(reason::kDeadlineExceeded, message, Failure{reason::kDeadlineExceeded, message, "", 0});
      return;
    }
    if (std::optional<Failure> failure = AttemptFailure()) {
      RestartOrFail(*failure);
    } else if (std::optional<Failure> timeout = StartupTimeout()) {
      RestartOrFail(*timeout);
    } else if (std::optional<Failure> stalled = ProgressStalled()) {
      RestartOrFail(*stalled);
    }
    if (!IsFinished(status().phase)) {
      DriveAttempt();
    }
  }

  // Workers of a newer attempt than the status knows mean a decision's status write was
  // lost after its creates went through: that attempt is the current one.
  void AdoptNewerAttempt() {
    int64_t newest = status().attempt;
    for (const Worker& worker : observed_.workers) {
      if (InRange(worker)) {
        newest = std::max(newest, worker.attempt);
      }
    }
    if (newest > status().attempt) {
      status().attempt = newest;
      status().attempt_start_time = now_;
      status().start_time = status().start_time.value_or(now_);
      status().phase = Phase::kStarting;
    }
  }

  bool ActiveDeadlineExceeded() const {
    return policy_.active_deadline_seconds && status().start_time &&
           now_ >= *status().start_time + seconds(*policy_.active_deadline_seconds);
  }

  // Any worker of the attempt lost fails the attempt (a collective cannot survive a lost
  // member). A lost node is blamed first (it is never a consequence of another failure), then
  // the earliest exit (see EarliestFailedWorker), then deletions and disappearances.
  std::optional<Failure> AttemptFailure() const {
    const std::vector<const Worker*> workers = JudgedWorkers();
    for (const Worker* worker : workers) {
      if (worker->node_lost) {
        return FailureOf(*worker, reason::kNodeLost,
                         NameOf(*worker) + " is on a lost node (NotReady or unreachable)");
      }
    }
    if (const Worker* failed = EarliestFailedWorker(workers)) {
      return FailureOf(*failed, reason::kWorkerFailed, DescribeExit(*failed, "failed"));
    }
    for (const Worker* worker : workers) {
      if (worker->deleting) {
        return FailureOf(*worker, reason::kWorkerDeleted,
                         NameOf(*worker) + " was deleted while its attempt was running");
      }
    }
    const std::vector<int64_t> missing = MissingIndices();
    if (status().phase == Phase::kRunning && !missing.empty()) {
      const std::string name = IndexName(missing.front());
      return Failure{reason::kWorkerMissing, name + " disappeared while its attempt was running",
                     name, 0};
    }
    return std::nullopt;
  }

  // The failed worker to blame: the earliest finish; a worker with a finish time before one
  // without. Finish times tie often (a container's finishedAt has one-second resolution, the
  // local runner stamps every exit it reaps in one poll alike), and then a lost peer's exit
  // code is the consequence, not the cause: any other code is blamed first, then the lowest
  // index.
  static const Worker* EarliestFailedWorker(const std::vector<const Worker*>& workers) {
    const Worker* earliest = nullptr;
    auto before = [&](const Worker* a, const Worker* b) {
      if (a->finished_at && b->finished_at && *a->finished_at != *b->finished_at) {
        return *a->finished_at < *b->finished_at;
      }
      if (a->finished_at.has_value() != b->finished_at.has_value()) {
        return a->finished_at.has_value();
      }
      const int64_t code_a = a->exit_code.value_or(-1), code_b = b->exit_code.value_or(-1);
      if (BlamedFirstOnATie(code_a, code_b))
        return true;
      if (BlamedFirstOnATie(code_b, code_a))
        return false;
      return a->index < b->index;
    };
    for (const Worker* worker : workers) {
      if (worker->phase == WorkerPhase::kFailed && (!earliest || before(worker, earliest))) {
        earliest = worker;
      }
    }
    return earliest;
  }

  // With gang scheduling every worker must be Running within startupTimeoutSeconds of the
  // attempt's creation, or the whole gang is released and retried; without it, only workers
  // that still do not exist by then count as lost.
  std::optional<Failure> StartupTimeout() const {
    const std::optional<int64_t> timeout = Enabled(policy_.startup_timeout_seconds);
    if (status().phase != Phase::kStarting || !status().attempt_start_time || !timeout ||
        now_ < *status().attempt_start_time + seconds(*timeout)) {
      return std::nullopt;
    }
    const std::string after = std::to_string(*timeout) + "s after attempt " +
                              std::to_string(status().attempt) + " was created";
    if (policy_.gang) {
      const std::vector<int64_t> waiting = IndicesNotStarted();
      if (!waiting.empty()) {
        return Failure{reason::kGangStartupTimeout,
                       "workers [" + JoinIndices(waiting) + "] not running " + after,
                       IndexName(waiting.front()), 0};
      }
      return std::nullopt;
    }
    const std::vector<int64_t> missing = MissingIndices();
    if (!missing.empty()) {
      return Failure{reason::kWorkerMissing,
                     "workers [" + JoinIndices(missing) + "] do not exist " + after,
                     IndexName(missing.front()), 0};
    }
    return std::nullopt;
  }

  // A hung collective shows as a step that stops changing; armed by worker 0's first report
  // in this attempt, so a trainer that never reports progress is never restarted for it.
  std::optional<Failure> ProgressStalled() const {
    const std::optional<ProgressMark>& mark = status().progress;
    const std::optional<int64_t> deadline = Enabled(policy_.progress_deadline_seconds);
    if (status().phase != Phase::kRunning || !deadline || !mark ||
        mark->attempt != status().attempt || now_ < mark->updated_at + seconds(*deadline)) {
      return std::nullopt;
    }
    return Failure{reason::kProgressDeadlineExceeded,
                   "no new training step for " + std::to_string(*deadline) + "s (last step " +
                       std::to_string(mark->step) + ")",
                   "", 0};
  }

  // Restart the whole gang as the next attempt while restarts < backoffLimit; else fail.
  void RestartOrFail(const Failure& failure) {
    status().last_failure = failure;
    if (status().restarts >= policy_.backoff_limit) {
      Fail(reason::kBackoffLimitExceeded,
           failure.message + "; backoffLimit reached (" + std::to_string(policy_.backoff_limit) +
               " restarts)",
           failure);
      return;
    }
    status().restarts += 1;
    status().attempt += 1;
    status().attempt_start_time.reset();
    status().phase = Phase::kRestarting;
    restarted_ = true;
    Event(EventType::kWarning, failure.reason,
          failure.message + "; restarting the gang as attempt " + std::to_string(status().attempt) +
              " (restart " + std::to_string(status().restarts) + " of " +
              std::to_string(policy_.backoff_limit) + ")");
  }

  // Old attempts' workers go first; the next attempt is created, all at once, only when none
  // is left (names are per index). Then Starting becomes Running once every worker runs.
  void DriveAttempt() {
    DeleteWorkers([&](const Worker& worker) { return !IsCurrent(worker); });
    if (!status().attempt_start_time) {
      const bool leftovers = std::any_of(observed_.workers.begin(), observed_.workers.end(),
                                         [&](const Worker& worker) { return !IsCurrent(worker); });
      if (leftovers) {
        return;  // Pending or Restarting until they are gone
      }
      if (observed_.creation_blocked) {
        Block(*observed_.creation_blocked);
        return;  // Pending or Restarting until unblocked
      }
      StartAttempt();
    }
    if (status().phase == Phase::kStarting && IndicesNotStarted().empty()) {
      BecomeRunning();
    }
  }

  void StartAttempt() {
    status().attempt_start_time = now_;
    status().start_time = status().start_time.value_or(now_);
    status().phase = Phase::kStarting;
    const std::vector<int64_t> missing = MissingIndices();
    if (!missing.empty()) {
      Act(CreateWorkers{status().attempt, missing});
      Event(EventType::kNormal, reason::kWorkersCreated,
            "created " + std::to_string(missing.size()) + " workers for attempt " +
                std::to_string(status().attempt));
    }
  }

  // The attempt cannot be created now: say why (Created False), with a warning the first
  // time this reason blocks it.
  void Block(const Observation::Blocker& blocker) {
    blocked_ = true;
    const Condition* before = FindCondition(previous_, ConditionType::kCreated);
    if (before == nullptr || before->status != ConditionStatus::kFalse ||
        before->reason != blocker.reason) {
      Event(EventType::kWarning, blocker.reason, blocker.message);
    }
    SetCondition(ConditionType::kCreated, false, blocker.reason, blocker.message);
  }

  void BecomeRunning() {
    status().phase = Phase::kRunning;
    const Duration startup = std::chrono::ceil<Duration>(now_ - *status().attempt_start_time);
    decision_.attempt_startup = startup;
    Event(EventType::kNormal, reason::kAllWorkersRunning,
          "all " + std::to_string(policy_.workers) + " workers of attempt " +
              std::to_string(status().attempt) + " are running");
  }

  void Succeed(const Worker& zero) {
    status().phase = Phase::kSucceeded;
    status().completion_time = now_;
    const std::string message = NameOf(zero) + " exited with code 0";
    SetCondition(ConditionType::kSucceeded, true, reason::kSucceeded, message);
    Event(EventType::kNormal, reason::kSucceeded, message);
  }

  void Fail(const std::string& why, const std::string& message, const Failure& cause) {
    status().phase = Phase::kFailed;
    status().completion_time = now_;
    status().last_failure = cause;
    SetCondition(ConditionType::kFailed, true, why, message);
    Event(EventType::kWarning, why, message);
  }

  // Suspension deletes every worker and keeps the job; it costs no restart.
  void Suspend() {
    if (previous_.phase != Phase::kSuspended) {
      Event(EventType::kNormal, reason::kSuspended, "job suspended; deleting its workers");
    }
    status().phase = Phase::kSuspended;
    DeleteWorkers([](const Worker&) { return true; });
  }

  // Resuming starts a fresh attempt (when the suspended one had started) and restarts the
  // activeDeadlineSeconds clock, like a Kubernetes Job.
  void Resume() {
    Event(EventType::kNormal, reason::kResumed, "job resumed");
    if (status().attempt_start_time) {
      status().attempt += 1;
      status().attempt_start_time.reset();
    }
    status().start_time.reset();
    status().phase = Phase::kPending;
  }

  void CleanUpFinishedWorkers() {
    status().completion_time = status().completion_time.value_or(now_);
    switch (policy_.clean_pod_policy) {
      case CleanPodPolicy::kAll:
        DeleteWorkers([](const Worker&) { return true; });
        break;
      case CleanPodPolicy::kRunning:
        DeleteWorkers([](const Worker& worker) { return !HasFinished(worker); });
        break;
      case CleanPodPolicy::kNone:
        break;
    }
  }

  void DeleteJobAfterTtl() {
    if (policy_.ttl_seconds_after_finished &&
        now_ >= *status().completion_time + seconds(*policy_.ttl_seconds_after_finished)) {
      Act(DeleteJob{});
    }
  }

  // --- Bookkeeping. ---------------------------------------------------------------------------

  // Succeeded and Failed are set by the transitions that finish the job; the others follow
  // the phase. A condition appears the first time it is True and stays afterwards.
  void RefreshConditions() {
    const Phase phase = status().phase;
    const std::string attempt = std::to_string(status().attempt);
    const std::string phase_name(ToString(phase));

    if (!blocked_) {
      SetCondition(ConditionType::kCreated, true, reason::kJobCreated, "job accepted");
    }

    const bool running = phase == Phase::kRunning;
    SetCondition(
        ConditionType::kRunning, running, running ? reason::kAllWorkersRunning : phase_name,
        running ? "all workers of attempt " + attempt + " are running" : "job is " + phase_name);

    const int64_t ready = ReadyWorkers();
    const bool all_ready = running && ready == policy_.workers;
    SetCondition(ConditionType::kPodsReady, all_ready,
                 all_ready ? reason::kAllWorkersReady : reason::kWorkersNotReady,
                 std::to_string(ready) + "/" + std::to_string(policy_.workers) + " workers ready");

    const bool restarting =
        phase == Phase::kRestarting ||
        (phase == Phase::kStarting &&
         (restarted_ || IsConditionTrue(previous_, ConditionType::kRestarting)));
    const Failure cause = status().last_failure.value_or(Failure{});
    SetCondition(ConditionType::kRestarting, restarting, restarting ? cause.reason : phase_name,
                 restarting ? cause.message : "job is " + phase_name);

    const bool suspended = phase == Phase::kSuspended;
    SetCondition(ConditionType::kSuspended, suspended,
                 suspended ? reason::kSuspended : reason::kResumed,
                 suspended ? "job is suspended" : "job resumed");

    for (Condition& condition : status().conditions) {
      condition.observed_generation = policy_.generation;
    }
    status().observed_generation = policy_.generation;
  }

  void CountWorkers() {
    WorkerCounts counts;
    for (const Worker& worker : observed_.workers) {
      if (!IsCurrent(worker)) {
        continue;
      }
      const bool gone = worker.deleting || worker.node_lost;
      counts.active += !HasFinished(worker) && !gone;
      counts.ready += IsReady(worker);
      counts.succeeded += worker.phase == WorkerPhase::kSucceeded;
      counts.failed += worker.phase == WorkerPhase::kFailed || worker.node_lost;
    }
    status().workers = counts;
  }

  // The earliest time-based transition still ahead: TTL when finished; otherwise (unless
  // suspended, which stops every clock) the active deadline, the startup timeout while
  // Starting and the progress deadline while Running.
  void ScheduleRequeue() {
    std::optional<TimePoint> due;
    auto consider = [&](TimePoint when) {
      if (when > now_ && (!due || when < *due)) {
        due = when;
      }
    };
    const Status& s = status();
    if (IsFinished(s.phase)) {
      if (policy_.ttl_seconds_after_finished) {
        consider(*s.completion_time + seconds(*policy_.ttl_seconds_after_finished));
      }
    } else if (s.phase != Phase::kSuspended) {
      if (policy_.active_deadline_seconds && s.start_time) {
        consider(*s.start_time + seconds(*policy_.active_deadline_seconds));
      }
      const std::optional<int64_t> startup = Enabled(policy_.startup_timeout_seconds);
      if (s.phase == Phase::kStarting && s.attempt_start_time && startup &&
          (policy_.gang || !MissingIndices().empty())) {
        consider(*s.attempt_start_time + seconds(*startup));
      }
      const std::optional<int64_t> progress = Enabled(policy_.progress_deadline_seconds);
      if (s.phase == Phase::kRunning && progress && s.progress &&
          s.progress->attempt == s.attempt) {
        consider(s.progress->updated_at + seconds(*progress));
      }
    }
    if (due) {
      decision_.requeue_after = std::chrono::ceil<Duration>(*due - now_);
    }
  }

  // --- Helpers. -------------------------------------------------------------------------------

  // A timeout that is absent or not positive is off.
  static std::optional<int64_t> Enabled(const std::optional<int64_t>& timeout_seconds) {
    if (timeout_seconds && *timeout_seconds > 0) {
      return timeout_seconds;
    }
    return std::nullopt;
  }

  bool InRange(const Worker& worker) const {
    return worker.index >= 0 && worker.index < policy_.workers;
  }

  bool IsCurrent(const Worker& worker) const {
    return InRange(worker) && worker.attempt == status().attempt;
  }

  bool IsReady(const Worker& worker) const {
    return IsCurrent(worker) && worker.ready && worker.phase == WorkerPhase::kRunning &&
           !worker.deleting && !worker.node_lost;
  }

  // The current attempt's workers whose fate decides the job. None while the job was
  // suspended: their exits are the suspension's doing.
  std::vector<const Worker*> JudgedWorkers() const {
    std::vector<const Worker*> judged;
    if (previous_.phase == Phase::kSuspended) {
      return judged;
    }
    for (const Worker& worker : observed_.workers) {
      if (IsCurrent(worker)) {
        judged.push_back(&worker);
      }
    }
    std::sort(judged.begin(), judged.end(),
              [](const Worker* a, const Worker* b) { return a->index < b->index; });
    return judged;
  }

  const Worker* CurrentWorker(int64_t index) const {
    for (const Worker& worker : observed_.workers) {
      if (worker.index == index && IsCurrent(worker)) {
        return &worker;
      }
    }
    return nullptr;
  }

  std::vector<int64_t> MissingIndices() const {
    std::vector<int64_t> missing;
    for (int64_t index = 0; index < policy_.workers; ++index) {
      if (CurrentWorker(index) == nullptr) {
        missing.push_back(index);
      }
    }
    return missing;
  }

  std::vector<int64_t> IndicesNotStarted() const {
    std::vector<int64_t> waiting;
    for (int64_t index = 0; index < policy_.workers; ++index) {
      const Worker* worker = CurrentWorker(index);
      if (worker == nullptr || !HasStarted(*worker)) {
        waiting.push_back(index);
      }
    }
    return waiting;
  }

  int64_t ReadyWorkers() const {
    return std::count_if(observed_.workers.begin(), observed_.workers.end(),
                         [&](const Worker& worker) { return IsReady(worker); });
  }

  // Deletes the chosen workers: gracefully unless a delete is already pending, and by force,
  // every time, when their node is lost (a graceful delete there never completes).
  void DeleteWorkers(const std::function<bool(const Worker&)>& chosen) {
    std::vector<int64_t> graceful, forced;
    for (const Worker& worker : observed_.workers) {
      if (!chosen(worker)) {
        continue;
      }
      if (worker.node_lost) {
        forced.push_back(worker.index);
      } else if (!worker.deleting) {
        graceful.push_back(worker.index);
      }
    }
    for (auto* indices : {&graceful, &forced}) {
      if (!indices->empty()) {
        std::sort(indices->begin(), indices->end());
        Act(lifecycle::DeleteWorkers{*indices, indices == &forced});
      }
    }
  }

  // Sets a condition; last_transition_time moves only when the status flips. A condition
  // that is not there yet is only added once it is True.
  void SetCondition(ConditionType type, bool is_true, const std::string& why,
                    const std::string& message) {
    const ConditionStatus value = is_true ? ConditionStatus::kTrue : ConditionStatus::kFalse;
    auto& conditions = status().conditions;
    auto it = std::find_if(conditions.begin(), conditions.end(),
                           [&](const Condition& c) { return c.type == type; });
    if (it == conditions.end()) {
      if (is_true) {
        conditions.push_back(Condition{type, value, why, message, now_, policy_.generation});
      }
      return;
    }
    if (it->status != value) {
      it->last_transition_time = now_;
    }
    it->status = value;
    it->reason = why;
    it->message = message;
  }

  // Constructs the action in place (moving a converted variant trips GCC 12's
  // -Wmaybe-uninitialized).
  template <typename A>
  void Act(A action) {
    decision_.actions.emplace_back(std::in_place_type<A>, std::move(action));
  }

  void Event(EventType type, std::string why, std::string message) {
    Act(RecordEvent{type, std::move(why), std::move(message)});
  }

  const Policy& policy_;
  const Status& previous_;
  const Observation& observed_;
  const TimePoint now_;
  Decision decision_;
  bool restarted_ = false;  // a gang restart was decided in this call
  bool blocked_ = false;    // creating the attempt was blocked in this call
};

}  // namespace

Decision Decide(const Policy& policy, const Status& previous, const Observation& observed,
                TimePoint now) {
  return Decider(policy, previous, observed, now).Run();
}

std::string_view ToString(EventType type) {
  return type == EventType::kWarning ? "Warning" : "Normal";
}

std::string Describe(const Action& action) {
  struct Describer {
    std::string operator()(const CreateWorkers& a) const {
      return "create attempt=" + std::to_string(a.attempt) + " [" + JoinIndices(a.indices) + "]";
    }
    std::string operator()(const DeleteWorkers& a) const {
      return std::string(a.force ? "delete force [" : "delete [") + JoinIndices(a.indices) + "]";
    }
    std::string operator()(const DeleteJob&) const { return "delete job"; }
    std::string operator()(const RecordEvent& a) const {
      return "event " + std::string(ToString(a.type)) + " " + a.reason + ": " + a.message;
    }
  };
  return std::visit(Describer{}, action);
}

}  // namespace tessera::lifecycle
