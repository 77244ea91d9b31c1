// A TrainingJob as the controller reads it from its cache: decoded, defaulted and validated
// (api/), or, when that fails, the reason it is invalid (a job that reached the server past an
// older CRD). Pure functions; a malformed object is a value, never an exception.
#pragma once

#include <nlohmann/json.hpp>

#include <optional>
#include <string>

#include "api/job.h"
#include "lifecycle/job_state.h"

namespace tessera::reconcile {

struct JobView {
  // Always carries metadata (name, namespace, uid, generation); spec only when valid.
  api::TrainingJob job;
  // Why the spec is invalid ("spec.workers: must be at least 1; ..."); nullopt when valid.
  std::optional<std::string> invalid;
  std::string resource_version;
  bool deleting = false;  // metadata.deletionTimestamp is set
};

// Decodes `object` (metadata and spec; status is the controller's and is read by status.h),
// applies defaults and validates. Never throws.
JobView ViewJob(const nlohmann::json& object);

// The lifecycle policy of the job: lifecycle::PolicyFromJob for a valid one; for an invalid
// one, a policy that fails it at once with reason InvalidSpec and the message.
lifecycle::Policy PolicyOf(const JobView& view);

}  // namespace tessera::reconcile
