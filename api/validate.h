// Defaults and validation of a TrainingJob: the offline twin of what the apiserver does with the
// CRD (schema defaults, OpenAPI checks and CEL rules), plus the defaults the CRD cannot express.
// Pure functions; thread-safe.
#pragma once

#include <vector>

#include <nlohmann/json.hpp>

#include "api/job.h"

namespace tessera::api {

// Fills the computed defaults: procsPerWorker = max(gpusPerWorker, 1); parallelism.data =
// workers × procsPerWorker / (pipeline × tensor) when that divides; model fields from the preset
// where not given; vocab = 256 without a preset. The schema's literal defaults (workers 1,
// pipeline 1, lr 3e-4, ...) are already in a decoded job and in a default-constructed one.
// Idempotent.
void ApplyDefaults(TrainingJob& job);

// Every problem with `job` (schema constraints and cross-field rules), each with its field path,
// schema errors (fields in key order) then rule errors. Works on a copy with ApplyDefaults applied.
// Ignores status.
std::vector<FieldError> Validate(const TrainingJob& job);

// Validates one decoded document (e.g. from ParseYaml) as the apiserver validates a create:
// schema errors, then, when the document has the right shape, the cross-field rules. Of a
// top-level `status` only unknown fields are refused: the apiserver's strict decoding refuses
// them, then it drops the status of a create (status subresource) before validating.
// Empty when the job is valid. This is what `tessera validate` prints for each document.
std::vector<FieldError> ValidateDocument(const nlohmann::json& document);

}  // namespace tessera::api
