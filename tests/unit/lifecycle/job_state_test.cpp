// Names of the lifecycle's enums round-trip through the strings the API uses.
#include "lifecycle/job_state.h"

#include <gtest/gtest.h>

#include <cstddef>
#include <string_view>
#include <utility>

namespace tessera::lifecycle {
namespace {

TEST(JobStateNames, PhasesRoundTrip) {
  for (Phase phase : {Phase::kPending, Phase::kStarting, Phase::kRunning, Phase::kRestarting,
                      Phase::kSucceeded, Phase::kFailed, Phase::kSuspended}) {
    EXPECT_EQ(ParsePhase(ToString(phase)), phase) << ToString(phase);
  }
  EXPECT_EQ(ToString(Phase::kRestarting), "Restarting");
  EXPECT_EQ(ParsePhase(""), std::nullopt);
  EXPECT_EQ(ParsePhase("running"), std::nullopt);  // names are case-sensitive, as in the API
}

TEST(JobStateNames, ConditionTypesAndStatusesRoundTrip) {
  for (ConditionType type :
       {ConditionType::kCreated, ConditionType::kPodsReady, ConditionType::kRunning,
        ConditionType::kRestarting, ConditionType::kSucceeded, ConditionType::kFailed,
        ConditionType::kSuspended}) {
    EXPECT_EQ(ParseConditionType(ToString(type)), type) << ToString(type);
  }
  EXPECT_EQ(ToString(ConditionType::kPodsReady), "PodsReady");
  for (ConditionStatus status :
       {ConditionStatus::kTrue, ConditionStatus::kFalse, ConditionStatus::kUnknown}) {
    EXPECT_EQ(ParseConditionStatus(ToString(status)), status);
  }
  EXPECT_EQ(ParseConditionType("Ready"), std::nullopt);
}

TEST(JobStateNames, WorkerPhasesAndCleanPodPoliciesRoundTrip) {
  for (WorkerPhase phase : {WorkerPhase::kPending, WorkerPhase::kRunning, WorkerPhase::kSucceeded,
                            WorkerPhase::kFailed, WorkerPhase::kUnknown}) {
    EXPECT_EQ(ParseWorkerPhase(ToString(phase)), phase);
  }
  EXPECT_EQ(ParseCleanPodPolicy("Running"), CleanPodPolicy::kRunning);
  EXPECT_EQ(ParseCleanPodPolicy("All"), CleanPodPolicy::kAll);
  EXPECT_EQ(ParseCleanPodPolicy("None"), CleanPodPolicy::kNone);
  EXPECT_EQ(ParseCleanPodPolicy("Never"), std::nullopt);
}

// Each value of an enum is spelled `name`.
template <typename E, size_t N>
void ExpectSpelled(const std::pair<E, std::string_view> (&names)[N]) {
  for (const auto& [value, name] : names)
    EXPECT_EQ(ToString(value), name);
}

// The exact spellings the API uses (round trips alone would pass with a misspelled name).
TEST(JobStateNames, SpelledAsInTheApi) {
  const std::pair<Phase, std::string_view> phases[] = {
      {Phase::kPending, "Pending"},     {Phase::kStarting, "Starting"},
      {Phase::kRunning, "Running"},     {Phase::kRestarting, "Restarting"},
      {Phase::kSucceeded, "Succeeded"}, {Phase::kFailed, "Failed"},
      {Phase::kSuspended, "Suspended"}};
  const std::pair<ConditionType, std::string_view> types[] = {
      {ConditionType::kCreated, "Created"},     {ConditionType::kPodsReady, "PodsReady"},
      {ConditionType::kRunning, "Running"},     {ConditionType::kRestarting, "Restarting"},
      {ConditionType::kSucceeded, "Succeeded"}, {ConditionType::kFailed, "Failed"},
      {ConditionType::kSuspended, "Suspended"}};
  const std::pair<ConditionStatus, std::string_view> statuses[] = {
      {ConditionStatus::kTrue, "True"},
      {ConditionStatus::kFalse, "False"},
      {ConditionStatus::kUnknown, "Unknown"}};
  const std::pair<WorkerPhase, std::string_view> worker_phases[] = {
      {WorkerPhase::kPending, "Pending"},
      {WorkerPhase::kRunning, "Running"},
      {WorkerPhase::kSucceeded, "Succeeded"},
      {WorkerPhase::kFailed, "Failed"},
      {WorkerPhase::kUnknown, "Unknown"}};
  const std::pair<CleanPodPolicy, std::string_view> policies[] = {
      {CleanPodPolicy::kRunning, "Running"},
      {CleanPodPolicy::kAll, "All"},
      {CleanPodPolicy::kNone, "None"}};
  ExpectSpelled(phases);
  ExpectSpelled(types);
  ExpectSpelled(statuses);
  ExpectSpelled(worker_phases);
  ExpectSpelled(policies);
}

TEST(JobStateConditions, FindsConditionsByType) {
  Status status;
  EXPECT_EQ(FindCondition(status, ConditionType::kRunning), nullptr);
  EXPECT_FALSE(IsConditionTrue(status, ConditionType::kRunning));
  status.conditions.push_back(Condition{
      .type = ConditionType::kRunning, .status = ConditionStatus::kFalse, .reason = "Starting"});
  ASSERT_NE(FindCondition(status, ConditionType::kRunning), nullptr);
  EXPECT_EQ(FindCondition(status, ConditionType::kRunning)->reason, "Starting");
  EXPECT_FALSE(IsConditionTrue(status, ConditionType::kRunning));
  status.conditions.back().status = ConditionStatus::kUnknown;
  EXPECT_FALSE(IsConditionTrue(status, ConditionType::kRunning));
  status.conditions.back().status = ConditionStatus::kTrue;
  EXPECT_TRUE(IsConditionTrue(status, ConditionType::kRunning));
}

TEST(JobStatePhases, OnlySucceededAndFailedAreFinished) {
  EXPECT_TRUE(IsFinished(Phase::kSucceeded));
  EXPECT_TRUE(IsFinished(Phase::kFailed));
  for (Phase phase : {Phase::kPending, Phase::kStarting, Phase::kRunning, Phase::kRestarting,
                      Phase::kSuspended}) {
    EXPECT_FALSE(IsFinished(phase)) << ToString(phase);
  }
}

}  // namespace
}  // namespace tessera::lifecycle
