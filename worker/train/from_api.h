// Maps a TrainingJob's `spec.trainer` (api/) onto the built-in trainer's TrainerConfig, and
// writes a TrainerConfig back as the YAML `tessera-worker rank --config` reads. Used by
// `tessera run`, the controller and `tessera-worker rank` (for a TrainingJob file); knows
// nothing of processes or the environment contract.
#pragma once

#include <string>

#include "api/job.h"
#include "worker/train/config.h"
#include "worker/train/status.h"

namespace tessera::train {

// Fills *out from `job` (after api::ApplyDefaults): spec.trainer (model, data, batch,
// optimizer, schedule, seed, checkpoint), spec.parallelism.microBatches and
// spec.metrics.port. Fields the job leaves unset keep TrainerConfig's defaults. A job without
// spec.trainer, or asking for something this trainer cannot do (a decay it does not implement,
// precision `bf16` on CPU, no data path), is kBadConfig naming the field. An absent
// spec.trainer.checkpoint gives an empty checkpoint.dir (no checkpoints). Does not check value
// ranges (ValidateTrainerConfig does). Pure; thread-safe.
Status TrainerConfigFromJob(const api::TrainingJob& job, TrainerConfig* out);

// The trainer's configuration in the file at `path`: a TrainingJob (a mapping with `kind`),
// read as `tessera run` reads one — the api's schema, cross-field rules and defaults, then
// TrainerConfigFromJob — or else the trainer's own YAML (ParseTrainerConfigYaml, starting from
// *out). Every problem is kBadConfig in one line naming the file and the field: an unreadable
// file, a YAML syntax error, the first of the job's `tessera validate` errors.
Status LoadTrainerConfigOrJob(const std::string& path, TrainerConfig* out);

// `config` as YAML text (the trainer fields at the top level) that ParseTrainerConfigYaml
// reads back into an equal configuration, numbers included. Pure; thread-safe.
std::string TrainerConfigYaml(const TrainerConfig& config);

}  // namespace tessera::train
