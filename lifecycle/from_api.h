// Maps a TrainingJob (api/) onto the lifecycle's Policy, so the controller and `tessera run`
// read the run policy the same way. A separate library (tessera_lifecycle_api) keeps the
// lifecycle itself free of api/; nothing here validates the job.
#pragma once

#include "api/job.h"
#include "lifecycle/job_state.h"

namespace tessera::lifecycle {

// The policy of `job` (after api::ApplyDefaults): workers, runPolicy (backoffLimit,
// permanentExitCodes, activeDeadlineSeconds, progressDeadlineSeconds with 0 meaning off,
// ttlSecondsAfterFinished, cleanPodPolicy), suspend, scheduling.gang and
// startupTimeoutSeconds (0 meaning off), metadata.generation. An unknown cleanPodPolicy maps
// to kRunning (validation refuses it before this is called). Pure; thread-safe.
Policy PolicyFromJob(const api::TrainingJob& job);

}  // namespace tessera::lifecycle
