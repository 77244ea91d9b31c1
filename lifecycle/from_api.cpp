#include "lifecycle/from_api.h"

namespace tessera::lifecycle {

Policy PolicyFromJob(const api::TrainingJob& job) {
  const api::TrainingJobSpec& spec = job.spec;
  const api::RunPolicy& run = spec.run_policy;
  Policy policy;
  policy.workers = spec.workers;
  policy.backoff_limit = run.backoff_limit;
  policy.permanent_exit_codes = run.permanent_exit_codes;
  policy.active_deadline_seconds = run.active_deadline_seconds;
  policy.progress_deadline_seconds = run.progress_deadline_seconds > 0
                                         ? std::optional<int64_t>(run.progress_deadline_seconds)
                                         : std::nullopt;
  policy.ttl_seconds_after_finished = run.ttl_seconds_after_finished;
  policy.clean_pod_policy =
      ParseCleanPodPolicy(run.clean_pod_policy).value_or(CleanPodPolicy::kRunning);
  policy.suspend = spec.suspend;
  policy.gang = spec.scheduling.gang;
  policy.startup_timeout_seconds =
      spec.scheduling.startup_timeout_seconds > 0
          ? std::optional<int64_t>(spec.scheduling.startup_timeout_seconds)
          : std::nullopt;
  policy.generation = job.metadata.generation;
  return policy;
}

}  // namespace tessera::lifecycle
