// The reasons the job state machine writes into conditions, events and lastFailure, spelled
// once so the controller, the local runner and tests agree. docs/lifecycle.md explains each.
#pragma once

namespace tessera::lifecycle::reason {

// Why an attempt or the job failed (lastFailure.reason, Restarting / Failed conditions).
inline constexpr char kWorkerFailed[] = "WorkerFailed";
inline constexpr char kNodeLost[] = "NodeLost";
inline constexpr char kWorkerDeleted[] = "WorkerDeleted";
inline constexpr char kWorkerMissing[] = "WorkerMissing";
inline constexpr char kGangStartupTimeout[] = "GangStartupTimeout";
inline constexpr char kProgressDeadlineExceeded[] = "ProgressDeadlineExceeded";
inline constexpr char kPermanentExitCode[] = "PermanentExitCode";
inline constexpr char kBackoffLimitExceeded[] = "BackoffLimitExceeded";
inline constexpr char kDeadlineExceeded[] = "DeadlineExceeded";
inline constexpr char kInvalidSpec[] = "InvalidSpec";

// Other transitions (events and True conditions).
inline constexpr char kJobCreated[] = "JobCreated";
inline constexpr char kWorkersCreated[] = "WorkersCreated";
inline constexpr char kAllWorkersRunning[] = "AllWorkersRunning";
inline constexpr char kAllWorkersReady[] = "AllWorkersReady";
inline constexpr char kWorkersNotReady[] = "WorkersNotReady";
inline constexpr char kSucceeded[] = "Succeeded";
inline constexpr char kSuspended[] = "Suspended";
inline constexpr char kResumed[] = "Resumed";

// Why an attempt cannot be created yet (Created False; Observation::creation_blocked).
inline constexpr char kPodGroupUnavailable[] = "PodGroupUnavailable";
// The apiserver refused to create one of the attempt's objects (a ResourceQuota, a webhook).
inline constexpr char kFailedCreate[] = "FailedCreate";

}  // namespace tessera::lifecycle::reason
