// The job state machine's rules as a table: each row is a named situation (policy, previous
// status, observed workers, now) and what must follow (phase, actions, conditions, requeue).
// Every row is also checked for determinism and for being a fixed point when fed back.
#include "lifecycle/decide.h"

#include <gtest/gtest.h>

#include <functional>
#include <optional>
#include <ostream>
#include <string>
#include <vector>

#include "lifecycle/reasons.h"

namespace tessera::lifecycle {
namespace {

using std::chrono::seconds;

// Every time in the tests is T(s): s seconds after an arbitrary origin.
TimePoint T(int64_t s) {
  return TimePoint(seconds(1'700'000'000 + s));
}

// --- Workers as a caller observes them. ----------------------------------------------------

Worker Up(int64_t index, int64_t attempt = 0) {
  return Worker{.index = index, .attempt = attempt, .phase = WorkerPhase::kRunning, .ready = true};
}

Worker Waiting(int64_t index, int64_t attempt = 0) {
  return Worker{.index = index, .attempt = attempt, .phase = WorkerPhase::kPending};
}

// Exited with `code` (0: Succeeded, else Failed), optionally at T(finished_s).
Worker Done(int64_t index, int64_t code, std::optional<int64_t> finished_s = std::nullopt,
            int64_t attempt = 0) {
  Worker worker{.index = index,
                .attempt = attempt,
                .phase = code == 0 ? WorkerPhase::kSucceeded : WorkerPhase::kFailed,
                .exit_code = code,
                .reason = code == 0 ? "Completed" : "Error"};
  if (finished_s) {
    worker.finished_at = T(*finished_s);
  }
  return worker;
}

Worker Lost(Worker worker) {
  worker.node_lost = true;
  return worker;
}

Worker Deleting(Worker worker) {
  worker.deleting = true;
  return worker;
}

Worker NotReady(Worker worker) {
  worker.ready = false;
  return worker;
}

std::vector<Worker> AllUp(int64_t attempt = 0) {
  return {Up(0, attempt), Up(1, attempt), Up(2, attempt), Up(3, attempt)};
}

std::vector<Worker> AllDeleting(int64_t attempt = 0) {
  return {Deleting(Up(0, attempt)), Deleting(Up(1, attempt)), Deleting(Up(2, attempt)),
          Deleting(Up(3, attempt))};
}

// --- Previous statuses, as a caller would have persisted them. -----------------------------

// "Running=True/AllWorkersRunning" -> a condition that flipped at T(0).
Condition ParseCondition(const std::string& text) {
  const size_t eq = text.find('='), slash = text.find('/');
  Condition condition;
  condition.type = *ParseConditionType(text.substr(0, eq));
  condition.status = *ParseConditionStatus(text.substr(eq + 1, slash - eq - 1));
  condition.reason = text.substr(slash + 1);
  condition.last_transition_time = T(0);
  return condition;
}

struct Past {
  Status status{};

  Past Attempt(int64_t attempt) const {
    Past p = *this;
    p.status.attempt = attempt;
    return p;
  }
  Past Restarts(int64_t restarts) const {
    Past p = *this;
    p.status.restarts = restarts;
    return p;
  }
  Past NotStarted() const {
    Past p = *this;
    p.status.attempt_start_time.reset();
    return p;
  }
  Past Progress(int64_t step, int64_t updated_s, int64_t attempt = 0) const {
    Past p = *this;
    p.status.progress = ProgressMark{attempt, step, T(updated_s)};
    return p;
  }
  Past AttemptStarted(int64_t s) const {
    Past p = *this;
    p.status.attempt_start_time = T(s);
    return p;
  }
  Past With(const std::string& condition) const {
    Past p = *this;
    p.status.conditions.push_back(ParseCondition(condition));
    return p;
  }
};

Past Fresh() {
  return Past{};
}

// Started at T(0): job and attempt.
Past InPhase(Phase phase, std::vector<std::string> conditions) {
  Past p;
  p.status.phase = phase;
  p.status.start_time = T(0);
  p.status.attempt_start_time = T(0);
  for (const std::string& condition : conditions) {
    p = p.With(condition);
  }
  return p;
}

Past Starting() {
  return InPhase(Phase::kStarting, {"Created=True/JobCreated"});
}

Past Running() {
  return InPhase(Phase::kRunning, {"Created=True/JobCreated", "Running=True/AllWorkersRunning",
                                   "PodsReady=True/AllWorkersReady"});
}

// Restarted once after a worker failure; attempt 1 not created yet.
Past Restarting() {
  Past p = InPhase(Phase::kRestarting,
                   {"Created=True/JobCreated", "Running=False/Restarting",
                    "PodsReady=False/WorkersNotReady", "Restarting=True/WorkerFailed"})
               .Attempt(1)
               .Restarts(1)
               .NotStarted();
  p.status.last_failure = Failure{"WorkerFailed", "worker-2 failed", "worker-2", 1};
  return p;
}

// Attempt 1 created after a restart, not running yet.
Past StartingAfterRestart() {
  Past p = Restarting();
  p.status.phase = Phase::kStarting;
  p.status.attempt_start_time = T(0);
  return p;
}

Past Suspended() {
  return InPhase(Phase::kSuspended,
                 {"Created=True/JobCreated", "Running=False/Suspended",
                  "PodsReady=False/WorkersNotReady", "Suspended=True/Suspended"});
}

// Finished at T(completion_s).
Past Finished(Phase phase, int64_t completion_s = 0) {
  Past p =
      InPhase(phase, {"Created=True/JobCreated", "Running=False/" + std::string(ToString(phase)),
                      "PodsReady=False/WorkersNotReady",
                      phase == Phase::kSucceeded ? "Succeeded=True/Succeeded"
                                                 : "Failed=True/BackoffLimitExceeded"});
  p.status.completion_time = T(completion_s);
  return p;
}

// --- The table. ------------------------------------------------------------------------------

struct Case {
  std::string name{};
  Policy policy{};
  Past previous{};
  std::vector<Worker> workers{};
  std::optional<Observation::ProgressReport> progress{};
  std::optional<Observation::Blocker> blocked{};  // Observation::creation_blocked
  int64_t now = 0;                                // seconds
  Phase phase = Phase::kPending;
  std::vector<std::string> actions{};     // see Short()
  std::vector<std::string> conditions{};  // "Type=Status/Reason", in order
  std::optional<int64_t> requeue{};       // seconds
  std::function<void(const Decision&)> check{};
};

// gtest prints a row by its name.
void PrintTo(const Case& c, std::ostream* os) {
  *os << c.name;
}

// Four workers, gang scheduling, DESIGN.md's defaults.
Policy Four() {
  return Policy{.workers = 4};
}

Policy With(Policy policy, const std::function<void(Policy&)>& change) {
  change(policy);
  return policy;
}

// Actions without event messages: "create attempt=1 [0,1]", "event Warning NodeLost".
std::string Short(const Action& action) {
  if (const auto* event = std::get_if<RecordEvent>(&action)) {
    return "event " + std::string(ToString(event->type)) + " " + event->reason;
  }
  return Describe(action);
}

std::vector<std::string> ShortActions(const Decision& decision) {
  std::vector<std::string> out;
  for (const Action& action : decision.actions) {
    out.push_back(Short(action));
  }
  return out;
}

std::vector<std::string> ShortConditions(const Status& status) {
  std::vector<std::string> out;
  for (const Condition& c : status.conditions) {
    out.push_back(std::string(ToString(c.type)) + "=" + std::string(ToString(c.status)) + "/" +
                  c.reason);
  }
  return out;
}

Observation Observe(const Case& c) {
  return Observation{c.workers, c.progress, c.blocked};
}

Decision DecideRow(const Case& c) {
  return Decide(c.policy, c.previous.status, Observe(c), T(c.now));
}

const std::vector<std::string> kCreatedOnly = {"Created=True/JobCreated"};
const std::vector<std::string> kRestartingAfterFailure = {
    "Created=True/JobCreated", "Running=False/Restarting", "PodsReady=False/WorkersNotReady",
    "Restarting=True/WorkerFailed"};

std::function<void(const Decision&)> ExpectFailure(Failure want) {
  return [want](const Decision& d) {
    ASSERT_TRUE(d.status.last_failure.has_value());
    EXPECT_EQ(d.status.last_failure->reason, want.reason);
    EXPECT_EQ(d.status.last_failure->worker, want.worker);
    EXPECT_EQ(d.status.last_failure->exit_code, want.exit_code);
    if (!want.message.empty()) {
      EXPECT_EQ(d.status.last_failure->message, want.message);
    }
  };
}

// The message of the decision's event with `reason`.
std::function<void(const Decision&)> ExpectEventMessage(std::string reason, std::string message) {
  return [=](const Decision& d) {
    for (const Action& a : d.actions) {
      if (const auto* e = std::get_if<RecordEvent>(&a); e && e->reason == reason) {
        EXPECT_EQ(e->message, message);
        return;
      }
    }
    ADD_FAILURE() << "no " << reason << " event";
  };
}

std::function<void(const Decision&)> ExpectCounts(int64_t restarts, int64_t attempt) {
  return [=](const Decision& d) {
    EXPECT_EQ(d.status.restarts, restarts);
    EXPECT_EQ(d.status.attempt, attempt);
  };
}

std::function<void(const Decision&)> All(std::vector<std::function<void(const Decision&)>> fs) {
  return [fs](const Decision& d) {
    for (const auto& f : fs) {
      f(d);
    }
  };
}

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      // --- Starting a job: all workers of an attempt are created together. ---
      {.name = "NewJobCreatesEveryWorkerOfAttemptZero",
       .policy = Four(),
       .previous = Fresh(),
       .now = 0,
       .phase = Phase::kStarting,
       .actions = {"event Normal JobCreated", "create attempt=0 [0,1,2,3]",
                   "event Normal WorkersCreated"},
       .conditions = kCreatedOnly,
       .requeue = 300,
       .check =
           [](const Decision& d) {
             EXPECT_EQ(d.status.start_time, T(0));
             EXPECT_EQ(d.status.attempt_start_time, T(0));
             EXPECT_EQ(d.status.restarts, 0);
           }},
      {.name = "NewJobRequeuesAtTheEarliestDeadline",
       .policy = With(Four(), [](Policy& p) { p.active_deadline_seconds = 100; }),
       .previous = Fresh(),
       .phase = Phase::kStarting,
       .actions = {"event Normal JobCreated", "create attempt=0 [0,1,2,3]",
                   "event Normal WorkersCreated"},
       .conditions = kCreatedOnly,
       .requeue = 100},
      // Without gang scheduling the startup timeout only catches workers that never appear.
      {.name = "NewJobWithoutGangStillTimesWorkersNotSeenYet",
       .policy = With(Four(), [](Policy& p) { p.gang = false; }),
       .previous = Fresh(),
       .phase = Phase::kStarting,
       .actions = {"event Normal JobCreated", "create attempt=0 [0,1,2,3]",
                   "event Normal WorkersCreated"},
       .conditions = kCreatedOnly,
       .requeue = 300},
      {.name = "NewSuspendedJobCreatesNothing",
       .policy = With(Four(), [](Policy& p) { p.suspend = true; }),
       .previous = Fresh(),
       .phase = Phase::kSuspended,
       .actions = {"event Normal JobCreated", "event Normal Suspended"},
       .conditions = {"Created=True/JobCreated", "Suspended=True/Suspended"}},
      {.name = "NewJobDeletesAnOutOfRangeWorkerBeforeCreating",
       .policy = Four(),
       .previous = Fresh(),
       .workers = {Up(7)},
       .phase = Phase::kPending,
       .actions = {"event Normal JobCreated", "delete [7]"},
       .conditions = kCreatedOnly},
      {.name = "FreshStatusKeepsExistingWorkersAndCreatesTheRest",
       .policy = Four(),
       .previous = Fresh(),
       .workers = {Up(0), Up(1)},
       .now = 5,
       .phase = Phase::kStarting,
       .actions = {"event Normal JobCreated", "create attempt=0 [2,3]",
                   "event Normal WorkersCreated"},
       .conditions = kCreatedOnly,
       .requeue = 300},
      {.name = "FreshStatusWithEveryWorkerUpCreatesNoneAndRuns",
       .policy = Four(),
       .previous = Fresh(),
       .workers = AllUp(),
       .now = 5,
       .phase = Phase::kRunning,
       .actions = {"event Normal JobCreated", "event Normal AllWorkersRunning"},
       .conditions = {"Created=True/JobCreated", "Running=True/AllWorkersRunning",
                      "PodsReady=True/AllWorkersReady"}},

      // --- Starting -> Running, and the gang startup timeout. ---
      {.name = "StartingWaitsForPendingWorkers",
       .policy = Four(),
       .previous = Starting(),
       .workers = {Up(0), Up(1), Waiting(2), Waiting(3)},
       .now = 100,
       .phase = Phase::kStarting,
       .conditions = kCreatedOnly,
       .requeue = 200,
       .check =
           [](const Decision& d) {
             EXPECT_EQ(d.status.workers, (WorkerCounts{.active = 4, .ready = 2}));
           }},
      {.name = "StartingNeverRecreatesWorkersNotSeenYet",
       .policy = Four(),
       .previous = Starting(),
       .now = 10,
       .phase = Phase::kStarting,
       .conditions = kCreatedOnly,
       .requeue = 290},
      {.name = "AllWorkersRunningMakesTheJobRunning",
       .policy = Four(),
       .previous = Starting(),
       .workers = AllUp(),
       .now = 42,
       .phase = Phase::kRunning,
       .actions = {"event Normal AllWorkersRunning"},
       .conditions = {"Created=True/JobCreated", "Running=True/AllWorkersRunning",
                      "PodsReady=True/AllWorkersReady"},
       .check = [](const Decision& d) { EXPECT_EQ(d.attempt_startup, seconds(42)); }},
      {.name = "RunningWorkerNotReadyLeavesPodsReadyUnset",
       .policy = Four(),
       .previous = Starting(),
       .workers = {Up(0), Up(1), Up(2), NotReady(Up(3))},
       .now = 42,
       .phase = Phase::kRunning,
       .actions = {"event Normal AllWorkersRunning"},
       .conditions = {"Created=True/JobCreated", "Running=True/AllWorkersRunning"}},
      {.name = "StartupJustBeforeTheTimeoutKeepsWaiting",
       .policy = Four(),
       .previous = Starting(),
       .workers = {Up(0), Up(1), Waiting(2), Waiting(3)},
       .now = 299,
       .phase = Phase::kStarting,
       .conditions = kCreatedOnly,
       .requeue = 1},
      {.name = "GangStartupTimeoutReleasesAndRetriesTheGang",
       .policy = Four(),
       .previous = Starting(),
       .workers = {Up(0), Up(1), Waiting(2), Waiting(3)},
       .now = 300,
       .phase = Phase::kRestarting,
       .actions = {"event Warning GangStartupTimeout", "delete [0,1,2,3]"},
       .conditions = {"Created=True/JobCreated", "Restarting=True/GangStartupTimeout"},
       .check = All({ExpectCounts(1, 1), ExpectFailure({"GangStartupTimeout",
                                                        "workers [2,3] not running 300s after "
                                                        "attempt 0 was created",
                                                        "worker-2", 0})})},
      {.name = "GangStartupTimeoutWithNoRestartsLeftFailsTheJob",
       .policy = Four(),
       .previous = Starting().Restarts(3),
       .workers = {Up(0), Up(1), Waiting(2), Waiting(3)},
       .now = 300,
       .phase = Phase::kFailed,
       .actions = {"event Warning BackoffLimitExceeded", "delete [0,1,2,3]"},
       .conditions = {"Created=True/JobCreated", "Failed=True/BackoffLimitExceeded"},
       .check =
           All({ExpectCounts(3, 0), ExpectFailure({"GangStartupTimeout", "", "worker-2", 0})})},
      // Workers that vanished while Starting: the restart creates the next attempt at once, and
      // the job says it is restarting until that attempt runs.
      {.name = "GangStartupTimeoutWithNoWorkersLeftStartsTheNextAttemptAtOnce",
       .policy = Four(),
       .previous = Starting(),
       .now = 300,
       .phase = Phase::kStarting,
       .actions = {"event Warning GangStartupTimeout", "create attempt=1 [0,1,2,3]",
                   "event Normal WorkersCreated"},
       .conditions = {"Created=True/JobCreated", "Restarting=True/GangStartupTimeout"},
       .requeue = 300,
       .check = ExpectCounts(1, 1)},
      {.name = "WithoutGangPendingWorkersMayWaitPastTheTimeout",
       .policy = With(Four(), [](Policy& p) { p.gang = false; }),
       .previous = Starting(),
       .workers = {Up(0), Up(1), Waiting(2), Waiting(3)},
       .now = 1000,
       .phase = Phase::kStarting,
       .conditions = kCreatedOnly},
      {.name = "WithoutGangNoStartupRequeueOnceEveryWorkerExists",
       .policy = With(Four(), [](Policy& p) { p.gang = false; }),
       .previous = Starting(),
       .workers = {Up(0), Up(1), Waiting(2), Waiting(3)},
       .now = 100,
       .phase = Phase::kStarting,
       .conditions = kCreatedOnly},
      {.name = "WithoutGangAWorkerStillMissingAtTheTimeoutFailsTheAttempt",
       .policy = With(Four(), [](Policy& p) { p.gang = false; }),
       .previous = Starting(),
       .workers = {Up(0), Up(1), Waiting(2)},
       .now = 300,
       .phase = Phase::kRestarting,
       .actions = {"event Warning WorkerMissing", "delete [0,1,2]"},
       .conditions = {"Created=True/JobCreated", "Restarting=True/WorkerMissing"},
       .check = ExpectFailure({"WorkerMissing", "", "worker-3", 0})},

      // --- Any worker failure fails the attempt: gang restart or backoff. ---
      {.name = "WorkerFailureRestartsTheWholeGang",
       .policy = Four(),
       .previous = Running(),
       .workers = {Up(0), Up(1), Done(2, 1), Up(3)},
       .now = 500,
       .phase = Phase::kRestarting,
       .actions = {"event Warning WorkerFailed", "delete [0,1,2,3]"},
       .conditions = kRestartingAfterFailure,
       .check = All({ExpectCounts(1, 1),
                     ExpectFailure({"WorkerFailed", "worker-2 failed with exit code 1 (Error)",
                                    "worker-2", 1}),
                     [](const Decision& d) { EXPECT_FALSE(d.status.attempt_start_time); }})},
      {.name = "RestartingWaitsUntilTheOldWorkersAreGone",
       .policy = Four(),
       .previous = Restarting(),
       .workers = AllDeleting(0),
       .now = 510,
       .phase = Phase::kRestarting,
       .conditions = kRestartingAfterFailure,
       .check = ExpectCounts(1, 1)},
      {.name = "RestartingDeletesOldWorkersNotYetBeingDeleted",
       .policy = Four(),
       .previous = Restarting(),
       .workers = {Deleting(Up(0)), Up(1), Done(2, 1), Up(3)},
       .now = 510,
       .phase = Phase::kRestarting,
       .actions = {"delete [1,2,3]"},
       .conditions = kRestartingAfterFailure},
      {.name = "RestartingCreatesTheNextAttemptOnceTheOldIsGone",
       .policy = Four(),
       .previous = Restarting(),
       .now = 520,
       .phase = Phase::kStarting,
       .actions = {"create attempt=1 [0,1,2,3]", "event Normal WorkersCreated"},
       .conditions = {"Created=True/JobCreated", "Running=False/Starting",
                      "PodsReady=False/WorkersNotReady", "Restarting=True/WorkerFailed"},
       .requeue = 300,
       // A restart starts the attempt's clock, not the job's (activeDeadlineSeconds).
       .check =
           [](const Decision& d) {
             EXPECT_EQ(d.status.attempt_start_time, T(520));
             EXPECT_EQ(d.status.start_time, T(0));
           }},
      {.name = "NextAttemptRunningEndsRestarting",
       .policy = Four(),
       .previous = StartingAfterRestart().AttemptStarted(10),
       .workers = AllUp(1),
       .now = 30,
       .phase = Phase::kRunning,
       .actions = {"event Normal AllWorkersRunning"},
       .conditions = {"Created=True/JobCreated", "Running=True/AllWorkersRunning",
                      "PodsReady=True/AllWorkersReady", "Restarting=False/Running"},
       // Startup is measured from the attempt's creation, not the job's start.
       .check = All({ExpectCounts(1, 1),
                     [](const Decision& d) { EXPECT_EQ(d.attempt_startup, seconds(20)); }})},
      {.name = "FailureWithNoRestartsLeftFailsTheJob",
       .policy = Four(),
       .previous = Running().Restarts(3).Attempt(3),
       .workers = {Up(0, 3), Done(1, 1, 7, 3), Up(2, 3), Up(3, 3)},
       .now = 500,
       .phase = Phase::kFailed,
       .actions = {"event Warning BackoffLimitExceeded", "delete [0,2,3]"},
       .conditions = {"Created=True/JobCreated", "Running=False/Failed",
                      "PodsReady=False/WorkersNotReady", "Failed=True/BackoffLimitExceeded"},
       .check = All({ExpectCounts(3, 3), ExpectFailure({"WorkerFailed", "", "worker-1", 1}),
                     [](const Decision& d) { EXPECT_EQ(d.status.completion_time, T(500)); }})},
      {.name = "BackoffLimitZeroFailsOnTheFirstFailure",
       .policy = With(Four(), [](Policy& p) { p.backoff_limit = 0; }),
       .previous = Running(),
       .workers = {Up(0), Done(1, 1), Up(2), Up(3)},
       .now = 500,
       .phase = Phase::kFailed,
       .actions = {"event Warning BackoffLimitExceeded", "delete [0,2,3]"},
       .conditions = {"Created=True/JobCreated", "Running=False/Failed",
                      "PodsReady=False/WorkersNotReady", "Failed=True/BackoffLimitExceeded"},
       .check = ExpectCounts(0, 0)},
      {.name = "PermanentExitCodeFailsTheJobAtOnce",
       .policy = Four(),
       .previous = Running(),
       .workers = {Up(0), Done(1, 2), Up(2), Up(3)},
       .now = 500,
       .phase = Phase::kFailed,
       .actions = {"event Warning PermanentExitCode", "delete [0,2,3]"},
       .conditions = {"Created=True/JobCreated", "Running=False/Failed",
                      "PodsReady=False/WorkersNotReady", "Failed=True/PermanentExitCode"},
       .check = All({ExpectCounts(0, 0),
                     ExpectFailure({"PermanentExitCode",
                                    "worker-1 failed with exit code 2 (Error), listed in "
                                    "permanentExitCodes",
                                    "worker-1", 2})})},
      {.name = "PermanentExitCodeWhileStartingFailsTheJob",
       .policy = Four(),
       .previous = Starting(),
       .workers = {Done(0, 2), Waiting(1), Waiting(2), Up(3)},
       .now = 20,
       .phase = Phase::kFailed,
       .actions = {"event Warning PermanentExitCode", "delete [1,2,3]"},
       .conditions = {"Created=True/JobCreated", "Failed=True/PermanentExitCode"}},
      {.name = "ExitCodeNotListedAsPermanentIsRetried",
       .policy = Four(),
       .previous = Running(),
       .workers = {Up(0), Done(1, 3), Up(2), Up(3)},
       .now = 500,
       .phase = Phase::kRestarting,
       .actions = {"event Warning WorkerFailed", "delete [0,1,2,3]"},
       .conditions = kRestartingAfterFailure},
      {.name = "WorkerOnALostNodeFailsTheAttemptAndIsForceDeleted",
       .policy = Four(),
       .previous = Running(),
       .workers = {Up(0), Lost(Up(1)), Up(2), Up(3)},
       .now = 500,
       .phase = Phase::kRestarting,
       .actions = {"event Warning NodeLost", "delete [0,2,3]", "delete force [1]"},
       .conditions = {"Created=True/JobCreated", "Running=False/Restarting",
                      "PodsReady=False/WorkersNotReady", "Restarting=True/NodeLost"},
       .check = ExpectFailure(
           {"NodeLost", "worker-1 is on a lost node (NotReady or unreachable)", "worker-1", 0})},
      {.name = "LostWorkerStillPresentIsForceDeletedAgain",
       .policy = Four(),
       .previous = Restarting(),
       .workers = {Deleting(Lost(Up(1)))},
       .now = 900,
       .phase = Phase::kRestarting,
       .actions = {"delete force [1]"},
       .conditions = kRestartingAfterFailure},
      {.name = "LostNodeIsBlamedBeforeThePeersItBroke",
       .policy = Four(),
       .previous = Running(),
       .workers = {Up(0), Lost(Up(1)), Done(2, 1, 3), Done(3, 1, 4)},
       .now = 500,
       .phase = Phase::kRestarting,
       .actions = {"event Warning NodeLost", "delete [0,2,3]", "delete force [1]"},
       .conditions = {"Created=True/JobCreated", "Running=False/Restarting",
                      "PodsReady=False/WorkersNotReady", "Restarting=True/NodeLost"},
       .check = ExpectFailure({"NodeLost", "", "worker-1", 0})},
      {.name = "EarliestExitIsBlamedAmongSeveralFailures",
       .policy = Four(),
       .previous = Running(),
       .workers = {Up(0), Done(1, 134, 12), Up(2), Done(3, 1, 10)},
       .now = 500,
       .phase = Phase::kRestarting,
       .actions = {"event Warning WorkerFailed", "delete [0,1,2,3]"},
       .conditions = kRestartingAfterFailure,
       .check = ExpectFailure({"WorkerFailed", "", "worker-3", 1})},
      // kill -9 of worker 1's rank: worker 0 exits 6 (its peer was lost) within the same
      // second, or the same poll of the local runner. The cause is blamed, not the consequence.
      // An exit whose time is unknown (no finishedAt) is blamed after one whose time is known.
      {.name = "ExitWithAFinishTimeIsBlamedBeforeOneWithout",
       .policy = Four(),
       .previous = Running(),
       .workers = {Up(0), Done(1, 1), Done(2, 137, 12), Up(3)},
       .now = 500,
       .phase = Phase::kRestarting,
       .actions = {"event Warning WorkerFailed", "delete [0,1,2,3]"},
       .conditions = kRestartingAfterFailure,
       .check = ExpectFailure({"WorkerFailed", "", "worker-2", 137})},
      {.name = "LostPeerExitIsNotBlamedOverItsCauseAtTheSameTime",
       .policy = Four(),
       .previous = Running(),
       .workers = {Done(0, kCommunicationFailedExitCode, 10), Done(1, 137, 10), Up(2), Up(3)},
       .now = 500,
       .phase = Phase::kRestarting,
       .actions = {"event Warning WorkerFailed", "delete [0,1,2,3]"},
       .conditions = kRestartingAfterFailure,
       .check = ExpectFailure(
           {"WorkerFailed", "worker-1 failed with exit code 137 (Error)", "worker-1", 137})},
      {.name = "LostPeerExitIsNotBlamedOverItsCauseWithoutFinishTimes",
       .policy = Four(),
       .previous = Running(),
       .workers = {Done(0, kCommunicationFailedExitCode), Up(1), Done(2, 1), Up(3)},
       .now = 500,
       .phase = Phase::kRestarting,
       .actions = {"event Warning WorkerFailed", "delete [0,1,2,3]"},
       .conditions = kRestartingAfterFailure,
       .check = ExpectFailure({"WorkerFailed", "", "worker-2", 1})},
      {.name = "EarlierLostPeerExitIsStillBlamedFirst",
       .policy = Four(),
       .previous = Running(),
       .workers = {Done(0, kCommunicationFailedExitCode, 9), Done(1, 137, 10), Up(2), Up(3)},
       .now = 500,
       .phase = Phase::kRestarting,
       .actions = {"event Warning WorkerFailed", "delete [0,1,2,3]"},
       .conditions = kRestartingAfterFailure,
       .check = ExpectFailure({"WorkerFailed", "", "worker-0", kCommunicationFailedExitCode})},
      {.name = "OnlyLostPeerExitsAreBlamedByIndex",
       .policy = Four(),
       .previous = Running(),
       .workers = {Up(0), Done(1, kCommunicationFailedExitCode, 10), Up(2),
                   Done(3, kCommunicationFailedExitCode, 10)},
       .now = 500,
       .phase = Phase::kRestarting,
       .actions = {"event Warning WorkerFailed", "delete [0,1,2,3]"},
       .conditions = kRestartingAfterFailure,
       .check = ExpectFailure({"WorkerFailed", "", "worker-1", kCommunicationFailedExitCode})},
      {.name = "PermanentExitCodeIsBlamedBeforeASimultaneousFailure",
       .policy = Four(),
       .previous = Running(),
       .workers = {Done(0, 137, 10), Done(1, kCommunicationFailedExitCode, 10), Done(2, 2, 11),
                   Up(3)},
       .now = 500,
       .phase = Phase::kFailed,
       .actions = {"event Warning PermanentExitCode", "delete [3]"},
       .conditions = {"Created=True/JobCreated", "Running=False/Failed",
                      "PodsReady=False/WorkersNotReady", "Failed=True/PermanentExitCode"},
       .check = ExpectFailure({"PermanentExitCode", "", "worker-2", 2})},
      {.name = "WorkerDeletedFromOutsideFailsTheAttempt",
       .policy = Four(),
       .previous = Running(),
       .workers = {Up(0), Up(1), Deleting(Up(2)), Up(3)},
       .now = 500,
       .phase = Phase::kRestarting,
       .actions = {"event Warning WorkerDeleted", "delete [0,1,3]"},
       .conditions = {"Created=True/JobCreated", "Running=False/Restarting",
                      "PodsReady=False/WorkersNotReady", "Restarting=True/WorkerDeleted"},
       .check = ExpectFailure({"WorkerDeleted", "", "worker-2", 0})},
      {.name = "WorkerDisappearedWhileRunningFailsTheAttempt",
       .policy = Four(),
       .previous = Running(),
       .workers = {Up(0), Up(1), Up(2)},
       .now = 500,
       .phase = Phase::kRestarting,
       .actions = {"event Warning WorkerMissing", "delete [0,1,2]"},
       .conditions = {"Created=True/JobCreated", "Running=False/Restarting",
                      "PodsReady=False/WorkersNotReady", "Restarting=True/WorkerMissing"},
       .check = ExpectFailure({"WorkerMissing", "", "worker-3", 0})},
      {.name = "FailedWorkerOfAnOldAttemptCausesNoNewRestart",
       .policy = Four(),
       .previous = Restarting(),
       .workers = {Deleting(Done(2, 1, 3, 0))},
       .now = 510,
       .phase = Phase::kRestarting,
       .conditions = kRestartingAfterFailure,
       .check = ExpectCounts(1, 1)},
      {.name = "OtherWorkerFinishingFirstIsNotAFailure",
       .policy = Four(),
       .previous = Running(),
       .workers = {Up(0), Up(1), Up(2), Done(3, 0)},
       .now = 500,
       .phase = Phase::kRunning,
       .conditions = {"Created=True/JobCreated", "Running=True/AllWorkersRunning",
                      "PodsReady=False/WorkersNotReady"}},

      // --- Success: worker 0 exits 0; the rest per cleanPodPolicy. ---
      // ObserveWorkers takes the exit code of any terminated container: a sidecar that exited 2
      // gives a worker that still runs exit code 2. Only a failed worker's code can be permanent.
      {.name = "PermanentExitCodeOfAWorkerStillRunningIsNoFailure",
       .policy = Four(),
       .previous = Running(),
       .workers = {Up(0), Worker{.index = 1, .phase = WorkerPhase::kRunning, .ready = true,
                                 .exit_code = 2},
                   Up(2), Up(3)},
       .now = 500,
       .phase = Phase::kRunning,
       .conditions = {"Created=True/JobCreated", "Running=True/AllWorkersRunning",
                      "PodsReady=True/AllWorkersReady"}},
      {.name = "WorkerZeroExitingZeroSucceeds",
       .policy = Four(),
       .previous = Running(),
       .workers = {Done(0, 0), Up(1), Up(2), Up(3)},
       .now = 900,
       .phase = Phase::kSucceeded,
       .actions = {"event Normal Succeeded", "delete [1,2,3]"},
       .conditions = {"Created=True/JobCreated", "Running=False/Succeeded",
                      "PodsReady=False/WorkersNotReady", "Succeeded=True/Succeeded"},
       .check =
           [](const Decision& d) {
             EXPECT_EQ(d.status.completion_time, T(900));
             EXPECT_EQ(d.status.workers, (WorkerCounts{.active = 3, .ready = 3, .succeeded = 1}));
           }},
      {.name = "SuccessWithCleanPodPolicyAllDeletesEveryWorker",
       .policy = With(Four(), [](Policy& p) { p.clean_pod_policy = CleanPodPolicy::kAll; }),
       .previous = Running(),
       .workers = {Done(0, 0), Done(1, 0), Up(2), Up(3)},
       .now = 900,
       .phase = Phase::kSucceeded,
       .actions = {"event Normal Succeeded", "delete [0,1,2,3]"},
       .conditions = {"Created=True/JobCreated", "Running=False/Succeeded",
                      "PodsReady=False/WorkersNotReady", "Succeeded=True/Succeeded"}},
      {.name = "SuccessWithCleanPodPolicyNoneDeletesNothing",
       .policy = With(Four(), [](Policy& p) { p.clean_pod_policy = CleanPodPolicy::kNone; }),
       .previous = Running(),
       .workers = {Done(0, 0), Up(1), Up(2), Up(3)},
       .now = 900,
       .phase = Phase::kSucceeded,
       .actions = {"event Normal Succeeded"},
       .conditions = {"Created=True/JobCreated", "Running=False/Succeeded",
                      "PodsReady=False/WorkersNotReady", "Succeeded=True/Succeeded"}},
      {.name = "SuccessKeepsFinishedWorkersUnderCleanPodPolicyRunning",
       .policy = Four(),
       .previous = Running(),
       .workers = {Done(0, 0), Done(1, 0), Waiting(2), Up(3)},
       .now = 900,
       .phase = Phase::kSucceeded,
       .actions = {"event Normal Succeeded", "delete [2,3]"},
       .conditions = {"Created=True/JobCreated", "Running=False/Succeeded",
                      "PodsReady=False/WorkersNotReady", "Succeeded=True/Succeeded"}},
      {.name = "SuccessWinsOverASimultaneousFailure",
       .policy = Four(),
       .previous = Running(),
       .workers = {Done(0, 0), Up(1), Done(2, 1), Up(3)},
       .now = 900,
       .phase = Phase::kSucceeded,
       .actions = {"event Normal Succeeded", "delete [1,3]"},
       .conditions = {"Created=True/JobCreated", "Running=False/Succeeded",
                      "PodsReady=False/WorkersNotReady", "Succeeded=True/Succeeded"}},
      {.name = "WorkerZeroExitingZeroWhileBeingDeletedIsNoSuccess",
       .policy = Four(),
       .previous = Running(),
       .workers = {Deleting(Done(0, 0)), Up(1), Up(2), Up(3)},
       .now = 900,
       .phase = Phase::kRestarting,
       .actions = {"event Warning WorkerDeleted", "delete [1,2,3]"},
       .conditions = {"Created=True/JobCreated", "Running=False/Restarting",
                      "PodsReady=False/WorkersNotReady", "Restarting=True/WorkerDeleted"}},
      {.name = "SuccessForceDeletesAWorkerOnALostNode",
       .policy = Four(),
       .previous = Running(),
       .workers = {Done(0, 0), Up(1), Lost(Up(2)), Up(3)},
       .now = 900,
       .phase = Phase::kSucceeded,
       .actions = {"event Normal Succeeded", "delete [1,3]", "delete force [2]"},
       .conditions = {"Created=True/JobCreated", "Running=False/Succeeded",
                      "PodsReady=False/WorkersNotReady", "Succeeded=True/Succeeded"},
       // A worker on a lost node counts as failed, neither active nor ready.
       .check =
           [](const Decision& d) {
             EXPECT_EQ(d.status.workers,
                       (WorkerCounts{.active = 2, .ready = 2, .succeeded = 1, .failed = 1}));
           }},
      {.name = "SuccessWhileStartingIsStillSuccess",
       .policy = Four(),
       .previous = Starting(),
       .workers = {Done(0, 0), Up(1), Waiting(2), Up(3)},
       .now = 60,
       .phase = Phase::kSucceeded,
       .actions = {"event Normal Succeeded", "delete [1,2,3]"},
       .conditions = {"Created=True/JobCreated", "Succeeded=True/Succeeded"}},

      // --- Finished jobs are terminal; TTL deletes them. ---
      {.name = "FinishedJobCreatesNothing",
       .policy = Four(),
       .previous = Finished(Phase::kFailed),
       .now = 1000,
       .phase = Phase::kFailed,
       .conditions = {"Created=True/JobCreated", "Running=False/Failed",
                      "PodsReady=False/WorkersNotReady", "Failed=True/BackoffLimitExceeded"}},
      {.name = "FinishedJobIgnoresNewWorkerFailures",
       .policy = Four(),
       .previous = Finished(Phase::kFailed),
       .workers = {Done(0, 1), Done(1, 2)},
       .now = 1000,
       .phase = Phase::kFailed,
       .conditions = {"Created=True/JobCreated", "Running=False/Failed",
                      "PodsReady=False/WorkersNotReady", "Failed=True/BackoffLimitExceeded"}},
      {.name = "FinishedJobKeepsStoppingRunningWorkers",
       .policy = Four(),
       .previous = Finished(Phase::kSucceeded),
       .workers = {Done(0, 0), Deleting(Up(1)), Up(3)},
       .now = 1000,
       .phase = Phase::kSucceeded,
       .actions = {"delete [3]"},
       .conditions = {"Created=True/JobCreated", "Running=False/Succeeded",
                      "PodsReady=False/WorkersNotReady", "Succeeded=True/Succeeded"}},
      {.name = "FinishedJobIgnoresSuspend",
       .policy = With(Four(), [](Policy& p) { p.suspend = true; }),
       .previous = Finished(Phase::kSucceeded),
       .now = 1000,
       .phase = Phase::kSucceeded,
       .conditions = {"Created=True/JobCreated", "Running=False/Succeeded",
                      "PodsReady=False/WorkersNotReady", "Succeeded=True/Succeeded"}},
      {.name = "TtlNotYetExpiredRequeuesAtExpiry",
       .policy = With(Four(), [](Policy& p) { p.ttl_seconds_after_finished = 60; }),
       .previous = Finished(Phase::kSucceeded, 100),
       .now = 130,
       .phase = Phase::kSucceeded,
       .conditions = {"Created=True/JobCreated", "Running=False/Succeeded",
                      "PodsReady=False/WorkersNotReady", "Succeeded=True/Succeeded"},
       .requeue = 30},
      {.name = "TtlExpiredDeletesTheJob",
       .policy = With(Four(), [](Policy& p) { p.ttl_seconds_after_finished = 60; }),
       .previous = Finished(Phase::kFailed, 100),
       .now = 160,
       .phase = Phase::kFailed,
       .actions = {"delete job"},
       .conditions = {"Created=True/JobCreated", "Running=False/Failed",
                      "PodsReady=False/WorkersNotReady", "Failed=True/BackoffLimitExceeded"}},
      {.name = "TtlZeroDeletesTheJobAsItFinishes",
       .policy = With(Four(), [](Policy& p) { p.ttl_seconds_after_finished = 0; }),
       .previous = Running(),
       .workers = {Done(0, 0), Up(1), Up(2), Up(3)},
       .now = 900,
       .phase = Phase::kSucceeded,
       .actions = {"event Normal Succeeded", "delete [1,2,3]", "delete job"},
       .conditions = {"Created=True/JobCreated", "Running=False/Succeeded",
                      "PodsReady=False/WorkersNotReady", "Succeeded=True/Succeeded"}},

      // --- Suspend and resume. ---
      {.name = "SuspendDeletesTheWorkersAndKeepsTheJob",
       .policy = With(Four(), [](Policy& p) { p.suspend = true; }),
       .previous = Running(),
       .workers = AllUp(),
       .now = 400,
       .phase = Phase::kSuspended,
       .actions = {"event Normal Suspended", "delete [0,1,2,3]"},
       .conditions = {"Created=True/JobCreated", "Running=False/Suspended",
                      "PodsReady=False/WorkersNotReady", "Suspended=True/Suspended"},
       .check = ExpectCounts(0, 0)},
      {.name = "SuspendedJobWaitsQuietlyForItsWorkersToGo",
       .policy = With(Four(), [](Policy& p) { p.suspend = true; }),
       .previous = Suspended(),
       .workers = AllDeleting(),
       .now = 410,
       .phase = Phase::kSuspended,
       .conditions = {"Created=True/JobCreated", "Running=False/Suspended",
                      "PodsReady=False/WorkersNotReady", "Suspended=True/Suspended"},
       // Workers being deleted are neither active nor ready, though still running.
       .check = [](const Decision& d) { EXPECT_EQ(d.status.workers, WorkerCounts{}); }},
      {.name = "SuspendedJobIgnoresItsWorkersExits",
       .policy = With(Four(), [](Policy& p) { p.suspend = true; }),
       .previous = Suspended(),
       .workers = {Deleting(Done(0, 0)), Done(1, 2)},
       .now = 410,
       .phase = Phase::kSuspended,
       .actions = {"delete [1]"},
       .conditions = {"Created=True/JobCreated", "Running=False/Suspended",
                      "PodsReady=False/WorkersNotReady", "Suspended=True/Suspended"},
       .check = ExpectCounts(0, 0)},
      {.name = "SuspendedJobStopsTheActiveDeadlineClock",
       .policy = With(Four(),
                      [](Policy& p) {
                        p.suspend = true;
                        p.active_deadline_seconds = 100;
                      }),
       .previous = Suspended(),
       .now = 1000,
       .phase = Phase::kSuspended,
       .conditions = {"Created=True/JobCreated", "Running=False/Suspended",
                      "PodsReady=False/WorkersNotReady", "Suspended=True/Suspended"}},
      {.name = "ResumeStartsAFreshAttempt",
       .policy = With(Four(), [](Policy& p) { p.active_deadline_seconds = 1000; }),
       .previous = Suspended(),
       .now = 500,
       .phase = Phase::kStarting,
       .actions = {"event Normal Resumed", "create attempt=1 [0,1,2,3]",
                   "event Normal WorkersCreated"},
       .conditions = {"Created=True/JobCreated", "Running=False/Starting",
                      "PodsReady=False/WorkersNotReady", "Suspended=False/Resumed"},
       .requeue = 300,
       .check = All({ExpectCounts(0, 1),
                     [](const Decision& d) { EXPECT_EQ(d.status.start_time, T(500)); }})},
      {.name = "ResumeWaitsForTheSuspendedWorkersToGo",
       .policy = Four(),
       .previous = Suspended(),
       .workers = {Deleting(Up(2))},
       .now = 500,
       .phase = Phase::kPending,
       .actions = {"event Normal Resumed"},
       .conditions = {"Created=True/JobCreated", "Running=False/Pending",
                      "PodsReady=False/WorkersNotReady", "Suspended=False/Resumed"},
       .check = ExpectCounts(0, 1)},
      {.name = "ResumeOfAJobThatNeverStartedUsesAttemptZero",
       .policy = Four(),
       .previous = Suspended().NotStarted(),
       .now = 500,
       .phase = Phase::kStarting,
       .actions = {"event Normal Resumed", "create attempt=0 [0,1,2,3]",
                   "event Normal WorkersCreated"},
       .conditions = {"Created=True/JobCreated", "Running=False/Starting",
                      "PodsReady=False/WorkersNotReady", "Suspended=False/Resumed"},
       .requeue = 300},

      // --- Deadlines. ---
      {.name = "ActiveDeadlineFailsTheJob",
       .policy = With(Four(), [](Policy& p) { p.active_deadline_seconds = 3600; }),
       .previous = Running(),
       .workers = AllUp(),
       .now = 3600,
       .phase = Phase::kFailed,
       .actions = {"event Warning DeadlineExceeded", "delete [0,1,2,3]"},
       .conditions = {"Created=True/JobCreated", "Running=False/Failed",
                      "PodsReady=False/WorkersNotReady", "Failed=True/DeadlineExceeded"},
       .check = ExpectFailure({"DeadlineExceeded",
                               "job was active longer than activeDeadlineSeconds (3600s)", "", 0})},
      {.name = "ActiveDeadlineAheadIsRequeued",
       .policy = With(Four(), [](Policy& p) { p.active_deadline_seconds = 3600; }),
       .previous = Running(),
       .workers = AllUp(),
       .now = 1000,
       .phase = Phase::kRunning,
       .conditions = {"Created=True/JobCreated", "Running=True/AllWorkersRunning",
                      "PodsReady=True/AllWorkersReady"},
       .requeue = 2600},
      {.name = "ActiveDeadlineBeatsAWorkerFailure",
       .policy = With(Four(), [](Policy& p) { p.active_deadline_seconds = 3600; }),
       .previous = Running(),
       .workers = {Up(0), Up(1), Done(2, 1), Up(3)},
       .now = 3700,
       .phase = Phase::kFailed,
       .actions = {"event Warning DeadlineExceeded", "delete [0,1,3]"},
       .conditions = {"Created=True/JobCreated", "Running=False/Failed",
                      "PodsReady=False/WorkersNotReady", "Failed=True/DeadlineExceeded"},
       .check = ExpectCounts(0, 0)},
      {.name = "ActiveDeadlineAppliesWhileRestarting",
       .policy = With(Four(), [](Policy& p) { p.active_deadline_seconds = 3600; }),
       .previous = Restarting(),
       .workers = {Deleting(Up(1))},
       .now = 3600,
       .phase = Phase::kFailed,
       .actions = {"event Warning DeadlineExceeded"},
       .conditions = {"Created=True/JobCreated", "Running=False/Failed",
                      "PodsReady=False/WorkersNotReady", "Restarting=False/Failed",
                      "Failed=True/DeadlineExceeded"}},
      {.name = "ProgressDeadlineRestartsAStalledGang",
       .policy = Four(),
       .previous = Running().Progress(420, 100),
       .workers = AllUp(),
       .progress = Observation::ProgressReport{.attempt = 0, .step = 420},
       .now = 700,
       .phase = Phase::kRestarting,
       .actions = {"event Warning ProgressDeadlineExceeded", "delete [0,1,2,3]"},
       .conditions = {"Created=True/JobCreated", "Running=False/Restarting",
                      "PodsReady=False/WorkersNotReady",
                      "Restarting=True/ProgressDeadlineExceeded"},
       .check = All({ExpectCounts(1, 1),
                     ExpectFailure({"ProgressDeadlineExceeded",
                                    "no new training step for 600s (last step 420)", "", 0})})},
      {.name = "NewStepRestartsTheProgressClock",
       .policy = Four(),
       .previous = Running().Progress(420, 100),
       .workers = AllUp(),
       .progress = Observation::ProgressReport{.attempt = 0, .step = 421},
       .now = 650,
       .phase = Phase::kRunning,
       .conditions = {"Created=True/JobCreated", "Running=True/AllWorkersRunning",
                      "PodsReady=True/AllWorkersReady"},
       .requeue = 600,
       .check =
           [](const Decision& d) {
             EXPECT_EQ(d.status.progress, (ProgressMark{0, 421, T(650)}));
           }},
      {.name = "SameStepKeepsTheProgressClock",
       .policy = Four(),
       .previous = Running().Progress(420, 100),
       .workers = AllUp(),
       .progress = Observation::ProgressReport{.attempt = 0, .step = 420},
       .now = 650,
       .phase = Phase::kRunning,
       .conditions = {"Created=True/JobCreated", "Running=True/AllWorkersRunning",
                      "PodsReady=True/AllWorkersReady"},
       .requeue = 50},
      {.name = "ProgressDeadlineIsNotArmedWithoutAReport",
       .policy = Four(),
       .previous = Running(),
       .workers = AllUp(),
       .now = 100000,
       .phase = Phase::kRunning,
       .conditions = {"Created=True/JobCreated", "Running=True/AllWorkersRunning",
                      "PodsReady=True/AllWorkersReady"}},
      {.name = "ProgressOfAnOlderAttemptDoesNotArmTheDeadline",
       .policy = Four(),
       .previous = Running().Attempt(1).Progress(420, 100, 0),
       .workers = AllUp(1),
       .progress = Observation::ProgressReport{.attempt = 0, .step = 420},
       .now = 100000,
       .phase = Phase::kRunning,
       .conditions = {"Created=True/JobCreated", "Running=True/AllWorkersRunning",
                      "PodsReady=True/AllWorkersReady"},
       .check =
           [](const Decision& d) {
             EXPECT_EQ(d.status.progress, (ProgressMark{0, 420, T(100)}));
           }},
      // The new attempt's first report arms its deadline even when it repeats the step the old
      // attempt stalled at (it resumed from that step's checkpoint).
      {.name = "NewAttemptsFirstReportOfTheSameStepArmsTheDeadline",
       .policy = Four(),
       .previous = Running().Attempt(1).Progress(420, 100, 0),
       .workers = AllUp(1),
       .progress = Observation::ProgressReport{.attempt = 1, .step = 420},
       .now = 200,
       .phase = Phase::kRunning,
       .conditions = {"Created=True/JobCreated", "Running=True/AllWorkersRunning",
                      "PodsReady=True/AllWorkersReady"},
       .requeue = 600,
       .check =
           [](const Decision& d) {
             EXPECT_EQ(d.status.progress, (ProgressMark{1, 420, T(200)}));
           }},
      {.name = "ProgressOfAnOlderAttemptSchedulesNoDeadline",
       .policy = Four(),
       .previous = Running().Attempt(1).Progress(420, 100, 0),
       .workers = AllUp(1),
       .now = 200,
       .phase = Phase::kRunning,
       .conditions = {"Created=True/JobCreated", "Running=True/AllWorkersRunning",
                      "PodsReady=True/AllWorkersReady"}},
      {.name = "ProgressDeadlineDisabled",
       .policy = With(Four(), [](Policy& p) { p.progress_deadline_seconds.reset(); }),
       .previous = Running().Progress(420, 100),
       .workers = AllUp(),
       .now = 100000,
       .phase = Phase::kRunning,
       .conditions = {"Created=True/JobCreated", "Running=True/AllWorkersRunning",
                      "PodsReady=True/AllWorkersReady"}},
      {.name = "ProgressDeadlineZeroIsOff",
       .policy = With(Four(), [](Policy& p) { p.progress_deadline_seconds = 0; }),
       .previous = Running().Progress(420, 100),
       .workers = AllUp(),
       .now = 100000,
       .phase = Phase::kRunning,
       .conditions = {"Created=True/JobCreated", "Running=True/AllWorkersRunning",
                      "PodsReady=True/AllWorkersReady"}},
      {.name = "StartupTimeoutZeroIsOff",
       .policy = With(Four(), [](Policy& p) { p.startup_timeout_seconds = 0; }),
       .previous = Starting(),
       .workers = {Up(0), Waiting(1), Waiting(2), Waiting(3)},
       .now = 100000,
       .phase = Phase::kStarting,
       .conditions = kCreatedOnly},
      {.name = "ProgressDeadlineWithNoRestartsLeftFailsTheJob",
       .policy = Four(),
       .previous = Running().Restarts(3).Progress(420, 100),
       .workers = AllUp(),
       .now = 700,
       .phase = Phase::kFailed,
       .actions = {"event Warning BackoffLimitExceeded", "delete [0,1,2,3]"},
       .conditions = {"Created=True/JobCreated", "Running=False/Failed",
                      "PodsReady=False/WorkersNotReady", "Failed=True/BackoffLimitExceeded"},
       .check = ExpectFailure({"ProgressDeadlineExceeded", "", "", 0})},

      // --- Creation blocked (no PodGroup CRD, refused creates): wait, and say why once. ---
      {.name = "BlockedCreationWaitsInPendingWithOneWarning",
       .policy = Four(),
       .previous = Fresh(),
       .blocked = Observation::Blocker{reason::kPodGroupUnavailable, "no PodGroup CRD"},
       .now = 0,
       .phase = Phase::kPending,
       .actions = {"event Normal JobCreated", "event Warning PodGroupUnavailable"},
       .conditions = {"Created=False/PodGroupUnavailable"}},
      {.name = "BlockedForAnotherReasonWarnsAgain",
       .policy = Four(),
       .previous = Fresh().With("Created=False/FailedCreate"),
       .blocked = Observation::Blocker{reason::kPodGroupUnavailable, "no PodGroup CRD"},
       .now = 10,
       .phase = Phase::kPending,
       .actions = {"event Warning PodGroupUnavailable"},
       .conditions = {"Created=False/PodGroupUnavailable"}},
      {.name = "UnblockedCreationCreatesTheAttempt",
       .policy = Four(),
       .previous = Fresh().With("Created=False/PodGroupUnavailable"),
       .now = 20,
       .phase = Phase::kStarting,
       .actions = {"create attempt=0 [0,1,2,3]", "event Normal WorkersCreated"},
       .conditions = kCreatedOnly,
       .requeue = 300},
      {.name = "BlockedRestartWaitsInRestarting",
       .policy = Four(),
       .previous = Restarting(),
       .blocked = Observation::Blocker{reason::kFailedCreate, "quota exceeded"},
       .now = 520,
       .phase = Phase::kRestarting,
       .actions = {"event Warning FailedCreate"},
       .conditions = {"Created=False/FailedCreate", "Running=False/Restarting",
                      "PodsReady=False/WorkersNotReady", "Restarting=True/WorkerFailed"},
       .check = ExpectCounts(1, 1)},

      // --- Recovery and bad input. ---
      {.name = "InvalidSpecFailsTheJobAtOnce",
       .policy = With(Four(),
                      [](Policy& p) {
                        p.invalid_spec = "spec.parallelism: data x pipeline x tensor must be 4";
                      }),
       .previous = Running(),
       .workers = AllUp(),
       .now = 10,
       .phase = Phase::kFailed,
       .actions = {"event Warning InvalidSpec", "delete [0,1,2,3]"},
       .conditions = {"Created=True/JobCreated", "Running=False/Failed",
                      "PodsReady=False/WorkersNotReady", "Failed=True/InvalidSpec"}},
      {.name = "ZeroWorkersIsAnInvalidSpec",
       .policy = Policy{.workers = 0},
       .previous = Fresh(),
       .now = 0,
       .phase = Phase::kFailed,
       .actions = {"event Normal JobCreated", "event Warning InvalidSpec"},
       .conditions = {"Created=True/JobCreated", "Failed=True/InvalidSpec"},
       .check = ExpectFailure({"InvalidSpec", "spec.workers must be at least 1 (got 0)", "", 0})},
      // The policy of an invalid spec holds defaults (1 worker), which the event must not
      // report as the job's (it read "accepted a job of 1 workers" for a 3-worker job).
      {.name = "InvalidSpecIsAcceptedWithoutAWorkerCount",
       .policy = With(Policy{}, [](Policy& p) { p.invalid_spec = "invalid spec: x"; }),
       .previous = Fresh(),
       .now = 0,
       .phase = Phase::kFailed,
       .actions = {"event Normal JobCreated", "event Warning InvalidSpec"},
       .conditions = {"Created=True/JobCreated", "Failed=True/InvalidSpec"},
       .check = ExpectEventMessage("JobCreated", "accepted the job")},
      {.name = "ValidSpecIsAcceptedWithItsWorkerCount",
       .policy = Four(),
       .previous = Fresh(),
       .now = 0,
       .phase = Phase::kStarting,
       .actions = {"event Normal JobCreated", "create attempt=0 [0,1,2,3]",
                   "event Normal WorkersCreated"},
       .conditions = {"Created=True/JobCreated"},
       .requeue = 300,
       .check = ExpectEventMessage("JobCreated", "accepted a job of 4 workers")},
      {.name = "NewerAttemptIsAdoptedAfterALostStatusWrite",
       .policy = Four(),
       .previous = Running(),
       .workers = {Waiting(0, 1), Waiting(1, 1), Waiting(2, 1), Waiting(3, 1)},
       .now = 600,
       .phase = Phase::kStarting,
       .conditions = {"Created=True/JobCreated", "Running=False/Starting",
                      "PodsReady=False/WorkersNotReady"},
       .requeue = 300,
       // The attempt's clock starts now; the job's (activeDeadlineSeconds) keeps running.
       .check = All({ExpectCounts(0, 1),
                     [](const Decision& d) {
                       EXPECT_EQ(d.status.attempt_start_time, T(600));
                       EXPECT_EQ(d.status.start_time, T(0));
                     }})},
      {.name = "OutOfRangeWorkerIsDeletedWhileRunning",
       .policy = Four(),
       .previous = Running(),
       .workers = {Up(0), Up(1), Up(2), Up(3), Up(4)},
       .now = 600,
       .phase = Phase::kRunning,
       .actions = {"delete [4]"},
       .conditions = {"Created=True/JobCreated", "Running=True/AllWorkersRunning",
                      "PodsReady=True/AllWorkersReady"}},
      {.name = "NegativeIndexWorkerIsOutOfRange",
       .policy = Four(),
       .previous = Running(),
       .workers = {Up(-1), Up(0), Up(1), Up(2), Up(3)},
       .now = 600,
       .phase = Phase::kRunning,
       .actions = {"delete [-1]"},
       .conditions = {"Created=True/JobCreated", "Running=True/AllWorkersRunning",
                      "PodsReady=True/AllWorkersReady"},
       .check =
           [](const Decision& d) {
             EXPECT_EQ(d.status.workers, (WorkerCounts{.active = 4, .ready = 4}));
           }},
  };
  return cases;
}

class DecideTable : public testing::TestWithParam<Case> {};

TEST_P(DecideTable, GivesTheExpectedDecision) {
  const Case& c = GetParam();
  const Decision d = DecideRow(c);
  EXPECT_EQ(ToString(d.status.phase), ToString(c.phase));
  EXPECT_EQ(ShortActions(d), c.actions);
  EXPECT_EQ(ShortConditions(d.status), c.conditions);
  if (c.requeue) {
    EXPECT_EQ(d.requeue_after, Duration(seconds(*c.requeue)));
  } else {
    EXPECT_EQ(d.requeue_after, std::nullopt);
  }
  if (c.check) {
    c.check(d);
  }
}

TEST_P(DecideTable, IsDeterministic) {
  const Case& c = GetParam();
  EXPECT_EQ(DecideRow(c), DecideRow(c));
}

// Deciding again on the decision's own status, before the world has changed, must neither
// create workers again nor repeat events, and must leave the status as it is.
TEST_P(DecideTable, IsAFixedPointWhenFedBack) {
  const Case& c = GetParam();
  const Decision first = DecideRow(c);
  const Decision again = Decide(c.policy, first.status, Observe(c), T(c.now));
  EXPECT_EQ(again.status, first.status);
  for (const Action& action : again.actions) {
    EXPECT_FALSE(std::holds_alternative<CreateWorkers>(action)) << Describe(action);
    EXPECT_FALSE(std::holds_alternative<RecordEvent>(action)) << Describe(action);
  }
  EXPECT_EQ(again.requeue_after, first.requeue_after);
}

// Conditions keep their lastTransitionTime unless their status flips; every condition
// reports the generation it was computed for.
TEST_P(DecideTable, MovesTransitionTimesOnlyOnFlips) {
  const Case& c = GetParam();
  Policy policy = c.policy;
  policy.generation = 7;
  const Decision d = Decide(policy, c.previous.status, Observe(c), T(c.now));
  for (const Condition& now : d.status.conditions) {
    EXPECT_EQ(now.observed_generation, 7);
    const Condition* before = FindCondition(c.previous.status, now.type);
    if (before != nullptr && before->status == now.status) {
      EXPECT_EQ(now.last_transition_time, before->last_transition_time) << ToString(now.type);
    } else {
      EXPECT_EQ(now.last_transition_time, T(c.now)) << ToString(now.type);
    }
  }
  EXPECT_EQ(d.status.observed_generation, 7);
}

INSTANTIATE_TEST_SUITE_P(Rules, DecideTable, testing::ValuesIn(Cases()),
                         [](const testing::TestParamInfo<Case>& info) { return info.param.name; });

}  // namespace
}  // namespace tessera::lifecycle
