#include "lifecycle/job_state.h"

#include <array>
#include <utility>

namespace tessera::lifecycle {
namespace {

// One table per enum, so ToString and Parse cannot disagree.
template <typename E, size_t N>
using Names = std::array<std::pair<E, std::string_view>, N>;

constexpr Names<Phase, 7> kPhaseNames = {{
    {Phase::kPending, "Pending"},
    {Phase::kStarting, "Starting"},
    {Phase::kRunning, "Running"},
    {Phase::kRestarting, "Restarting"},
    {Phase::kSucceeded, "Succeeded"},
    {Phase::kFailed, "Failed"},
    {Phase::kSuspended, "Suspended"},
}};

constexpr Names<ConditionType, 7> kConditionTypeNames = {{
    {ConditionType::kCreated, "Created"},
    {ConditionType::kPodsReady, "PodsReady"},
    {ConditionType::kRunning, "Running"},
    {ConditionType::kRestarting, "Restarting"},
    {ConditionType::kSucceeded, "Succeeded"},
    {ConditionType::kFailed, "Failed"},
    {ConditionType::kSuspended, "Suspended"},
}};

constexpr Names<ConditionStatus, 3> kConditionStatusNames = {{
    {ConditionStatus::kTrue, "True"},
    {ConditionStatus::kFalse, "False"},
    {ConditionStatus::kUnknown, "Unknown"},
}};

constexpr Names<WorkerPhase, 5> kWorkerPhaseNames = {{
    {WorkerPhase::kPending, "Pending"},
    {WorkerPhase::kRunning, "Running"},
    {WorkerPhase::kSucceeded, "Succeeded"},
    {WorkerPhase::kFailed, "Failed"},
    {WorkerPhase::kUnknown, "Unknown"},
}};

constexpr Names<CleanPodPolicy, 3> kCleanPodPolicyNames = {{
    {CleanPodPolicy::kRunning, "Running"},
    {CleanPodPolicy::kAll, "All"},
    {CleanPodPolicy::kNone, "None"},
}};

template <typename E, size_t N>
std::string_view NameOf(const Names<E, N>& names, E value) {
  for (const auto& [v, name] : names) {
    if (v == value) {
      return name;
    }
  }
  return "Unknown";
}

template <typename E, size_t N>
std::optional<E> ValueOf(const Names<E, N>& names, std::string_view name) {
  for (const auto& [v, n] : names) {
    if (n == name) {
      return v;
    }
  }
  return std::nullopt;
}

}  // namespace

const Condition* FindCondition(const Status& status, ConditionType type) {
  for (const Condition& condition : status.conditions) {
    if (condition.type == type) {
      return &condition;
    }
  }
  return nullptr;
}

bool IsConditionTrue(const Status& status, ConditionType type) {
  const Condition* condition = FindCondition(status, type);
  return condition != nullptr && condition->status == ConditionStatus::kTrue;
}

bool IsFinished(Phase phase) {
  return phase == Phase::kSucceeded || phase == Phase::kFailed;
}

std::string_view ToString(Phase phase) {
  return NameOf(kPhaseNames, phase);
}
std::string_view ToString(ConditionType type) {
  return NameOf(kConditionTypeNames, type);
}
std::string_view ToString(ConditionStatus status) {
  return NameOf(kConditionStatusNames, status);
}
std::string_view ToString(WorkerPhase phase) {
  return NameOf(kWorkerPhaseNames, phase);
}
std::string_view ToString(CleanPodPolicy policy) {
  return NameOf(kCleanPodPolicyNames, policy);
}

std::optional<Phase> ParsePhase(std::string_view name) {
  return ValueOf(kPhaseNames, name);
}
std::optional<ConditionType> ParseConditionType(std::string_view name) {
  return ValueOf(kConditionTypeNames, name);
}
std::optional<ConditionStatus> ParseConditionStatus(std::string_view name) {
  return ValueOf(kConditionStatusNames, name);
}
std::optional<WorkerPhase> ParseWorkerPhase(std::string_view name) {
  return ValueOf(kWorkerPhaseNames, name);
}
std::optional<CleanPodPolicy> ParseCleanPodPolicy(std::string_view name) {
  return ValueOf(kCleanPodPolicyNames, name);
}

std::optional<size_t> FailureToBlame(std::span<const int64_t> exit_codes) {
  std::optional<size_t> blamed;
  for (size_t i = 0; i < exit_codes.size(); ++i) {
    if (exit_codes[i] != 0 && (!blamed || BlamedFirstOnATie(exit_codes[i], exit_codes[*blamed]))) {
      blamed = i;
    }
  }
  return blamed;
}

}  // namespace tessera::lifecycle
