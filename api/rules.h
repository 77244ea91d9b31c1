// The cross-field rules of TrainingJob, grouped by the object they are attached to. Each rule is
// written once in C++ and once in CEL, next to each other in rules.cpp; api/schema.cpp attaches
// the groups to the schema tree. Internal to the api library.
#pragma once

#include <cstdint>
#include <vector>

#include "api/job.h"
#include "api/schema.h"

namespace tessera::api {

std::vector<CrossFieldRule> RootRules();        // at the root object (self.metadata, self.spec)
std::vector<CrossFieldRule> SpecRules();        // at spec
std::vector<CrossFieldRule> UpdateRules();      // at spec: what an update may change
std::vector<CrossFieldRule> TrainerRules();     // at spec.trainer
std::vector<CrossFieldRule> ModelRules();       // at spec.trainer.model
std::vector<CrossFieldRule> LrScheduleRules();  // at spec.trainer.schedule
std::vector<CrossFieldRule> SchedulingRules();  // at spec.scheduling
std::vector<CrossFieldRule> MetricsRules();     // at spec.metrics

// Effective values of computed defaults, the same arithmetic the CEL rules spell out.
int64_t EffectiveProcsPerWorker(const TrainingJobSpec& spec);
// data × pipeline × tensor must equal this: workers × procsPerWorker, saturated at int64's
// limits (a valid job is far below them; validation refuses one that overflows).
int64_t WorldSize(const TrainingJobSpec& spec);
// spec.parallelism.data, or world / (pipeline × tensor) when absent (0 when not derivable).
int64_t EffectiveData(const TrainingJobSpec& spec);
// True when the worker container (named "worker") of the pod template has a non-empty command.
bool WorkerHasCommand(const nlohmann::json& pod_template);

}  // namespace tessera::api
