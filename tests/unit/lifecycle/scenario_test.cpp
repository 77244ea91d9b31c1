// Whole job lives, driven the way the controller and the local runner drive the machine:
// decide, apply the actions to a simulated set of workers, let the world move, decide again.
#include <gtest/gtest.h>

#include <map>
#include <string>
#include <vector>

#include "lifecycle/decide.h"

namespace tessera::lifecycle {
namespace {

using std::chrono::seconds;

TimePoint T(int64_t s) {
  return TimePoint(seconds(1'700'000'000 + s));
}

// The workers of one job, keyed by index (as pod names are). Creating a worker whose name is
// taken fails the test, as it would fail on a cluster.
class World {
 public:
  void Apply(const Decision& decision) {
    for (const Action& action : decision.actions) {
      if (const auto* create = std::get_if<CreateWorkers>(&action)) {
        ++create_actions;
        for (int64_t index : create->indices) {
          EXPECT_EQ(workers_.count(index), 0u) << "name clash: worker-" << index;
          workers_[index] = Worker{.index = index, .attempt = create->attempt};
          ++created;
        }
      } else if (const auto* remove = std::get_if<DeleteWorkers>(&action)) {
        for (int64_t index : remove->indices) {
          if (remove->force) {
            workers_.erase(index);
          } else if (workers_.count(index)) {
            workers_[index].deleting = true;
          }
        }
      } else if (std::holds_alternative<DeleteJob>(action)) {
        job_deleted = true;
      } else if (const auto* event = std::get_if<RecordEvent>(&action)) {
        events.push_back(event->reason);
      }
    }
  }

  // Graceful deletes complete (except on lost nodes, where nothing completes).
  void FinishDeletes() {
    std::erase_if(workers_, [](const auto& entry) {
      return entry.second.deleting && !entry.second.node_lost;
    });
  }

  void StartAll() {
    for (auto& [index, worker] : workers_) {
      if (!worker.deleting && worker.phase == WorkerPhase::kPending) {
        worker.phase = WorkerPhase::kRunning;
        worker.ready = true;
      }
    }
  }

  void Exit(int64_t index, int64_t code) {
    Worker& worker = workers_.at(index);
    worker.phase = code == 0 ? WorkerPhase::kSucceeded : WorkerPhase::kFailed;
    worker.exit_code = code;
    worker.ready = false;
  }

  void LoseNode(int64_t index) { workers_.at(index).node_lost = true; }

  Observation Observe() const {
    Observation observation;
    for (const auto& [index, worker] : workers_) {
      observation.workers.push_back(worker);
    }
    return observation;
  }

  size_t size() const { return workers_.size(); }

  int create_actions = 0;
  int created = 0;
  bool job_deleted = false;
  std::vector<std::string> events;

 private:
  std::map<int64_t, Worker> workers_;
};

// Decides at T(t) and applies the actions; the status is carried forward.
struct Driver {
  Policy policy{};
  Status status{};
  World world{};

  Decision Step(int64_t t) {
    Decision decision = Decide(policy, status, world.Observe(), T(t));
    world.Apply(decision);
    status = decision.status;
    return decision;
  }
};

TEST(LifecycleScenario, FailureRestartsTheGangAndTheJobThenSucceeds) {
  Driver job{.policy = Policy{.workers = 3}};
  job.Step(0);
  EXPECT_EQ(job.status.phase, Phase::kStarting);
  EXPECT_EQ(job.world.size(), 3u);

  job.world.StartAll();
  job.Step(20);
  EXPECT_EQ(job.status.phase, Phase::kRunning);

  job.world.Exit(1, 137);
  job.Step(100);
  EXPECT_EQ(job.status.phase, Phase::kRestarting);
  EXPECT_EQ(job.status.restarts, 1);

  // The old gang is still terminating: nothing may be created under its names.
  job.Step(101);
  EXPECT_EQ(job.status.phase, Phase::kRestarting);
  EXPECT_EQ(job.world.create_actions, 1);

  job.world.FinishDeletes();
  job.Step(105);
  EXPECT_EQ(job.status.phase, Phase::kStarting);
  EXPECT_EQ(job.status.attempt, 1);
  EXPECT_EQ(job.world.create_actions, 2);

  job.world.StartAll();
  job.Step(110);
  EXPECT_EQ(job.status.phase, Phase::kRunning);
  EXPECT_FALSE(IsConditionTrue(job.status, ConditionType::kRestarting));

  job.world.Exit(0, 0);
  job.Step(900);
  EXPECT_EQ(job.status.phase, Phase::kSucceeded);
  EXPECT_TRUE(IsConditionTrue(job.status, ConditionType::kSucceeded));
  EXPECT_EQ(job.status.restarts, 1);
  EXPECT_EQ(job.status.last_failure->exit_code, 137);
  EXPECT_EQ(job.world.created, 6);
  EXPECT_EQ(
      job.world.events,
      (std::vector<std::string>{"JobCreated", "WorkersCreated", "AllWorkersRunning", "WorkerFailed",
                                "WorkersCreated", "AllWorkersRunning", "Succeeded"}));

  // Terminal: more decisions create nothing and record nothing.
  job.world.FinishDeletes();
  const size_t events = job.world.events.size();
  job.Step(1000);
  job.Step(2000);
  EXPECT_EQ(job.world.create_actions, 2);
  EXPECT_EQ(job.world.events.size(), events);
}

TEST(LifecycleScenario, BackoffLimitBoundsTheNumberOfAttempts) {
  Driver job{.policy = Policy{.workers = 2, .backoff_limit = 2}};
  int64_t t = 0;
  for (int attempt = 0; attempt < 10 && !IsFinished(job.status.phase); ++attempt) {
    job.Step(t++);
    job.world.StartAll();
    job.Step(t++);
    job.world.Exit(1, 1);
    job.Step(t++);
    job.world.FinishDeletes();
  }
  EXPECT_EQ(job.status.phase, Phase::kFailed);
  EXPECT_EQ(FindCondition(job.status, ConditionType::kFailed)->reason, "BackoffLimitExceeded");
  EXPECT_EQ(job.status.restarts, 2);
  EXPECT_EQ(job.world.create_actions, 3);  // attempts 0, 1, 2
}

// A caller whose view lags its own creates (a slow informer cache, a status write that
// landed before the cache saw the pods) never creates an attempt twice.
TEST(LifecycleScenario, ALaggingViewNeverCreatesTwice) {
  const Policy policy{.workers = 4};
  const Observation nothing_seen;
  Status status;
  int creates = 0;
  for (int64_t t = 0; t < 250; t += 10) {
    const Decision decision = Decide(policy, status, nothing_seen, T(t));
    for (const Action& action : decision.actions) {
      creates += std::holds_alternative<CreateWorkers>(action);
    }
    status = decision.status;
  }
  EXPECT_EQ(creates, 1);
  EXPECT_EQ(status.phase, Phase::kStarting);
}

TEST(LifecycleScenario, LostNodeIsForceDeletedAndTheGangRestarted) {
  Driver job{.policy = Policy{.workers = 2}};
  job.Step(0);
  job.world.StartAll();
  job.Step(5);
  job.world.LoseNode(1);
  const Decision decision = job.Step(400);
  EXPECT_EQ(job.status.phase, Phase::kRestarting);
  EXPECT_EQ(job.status.last_failure->reason, "NodeLost");
  EXPECT_EQ(job.status.last_failure->worker, "worker-1");
  EXPECT_NE(
      std::find(decision.actions.begin(), decision.actions.end(), Action(DeleteWorkers{{1}, true})),
      decision.actions.end());
  job.world.FinishDeletes();
  job.Step(401);
  EXPECT_EQ(job.status.phase, Phase::kStarting);
  EXPECT_EQ(job.status.attempt, 1);
}

TEST(LifecycleScenario, SuspendAndResumeStartAFreshAttemptWithoutARestart) {
  Driver job{.policy = Policy{.workers = 2}};
  job.Step(0);
  job.world.StartAll();
  job.Step(5);

  job.policy.suspend = true;
  job.Step(50);
  EXPECT_EQ(job.status.phase, Phase::kSuspended);
  job.world.FinishDeletes();
  EXPECT_EQ(job.world.size(), 0u);
  const Decision quiet = job.Step(60);
  EXPECT_TRUE(quiet.actions.empty());

  job.policy.suspend = false;
  job.Step(1000);
  EXPECT_EQ(job.status.phase, Phase::kStarting);
  EXPECT_EQ(job.status.attempt, 1);
  EXPECT_EQ(job.status.restarts, 0);
  EXPECT_EQ(job.status.start_time, T(1000));
  const Condition* suspended = FindCondition(job.status, ConditionType::kSuspended);
  ASSERT_NE(suspended, nullptr);
  EXPECT_EQ(suspended->status, ConditionStatus::kFalse);
  EXPECT_EQ(suspended->last_transition_time, T(1000));
}

// Conditions keep the time they last flipped through a whole life, not the time of the
// latest decision.
TEST(LifecycleScenario, TransitionTimesMoveOnlyWhenAConditionFlips) {
  Driver job{.policy = Policy{.workers = 2}};
  job.Step(0);
  job.world.StartAll();
  job.Step(10);
  job.Step(20);
  job.Step(30);
  const Condition* created = FindCondition(job.status, ConditionType::kCreated);
  const Condition* running = FindCondition(job.status, ConditionType::kRunning);
  ASSERT_NE(created, nullptr);
  ASSERT_NE(running, nullptr);
  EXPECT_EQ(created->last_transition_time, T(0));
  EXPECT_EQ(running->last_transition_time, T(10));

  job.world.Exit(0, 1);
  job.Step(40);  // Running flips to False
  job.Step(50);
  running = FindCondition(job.status, ConditionType::kRunning);
  EXPECT_EQ(running->status, ConditionStatus::kFalse);
  EXPECT_EQ(running->last_transition_time, T(40));
  EXPECT_EQ(FindCondition(job.status, ConditionType::kCreated)->last_transition_time, T(0));
}

}  // namespace
}  // namespace tessera::lifecycle
