// Computed defaults and the validation driver. The rules themselves are in rules.cpp and the
// field constraints in schema.cpp; this file only runs them.
#include "api/validate.h"

#include "api/codec.h"
#include "api/rules.h"
#include "api/schema.h"

namespace tessera::api {
namespace {

// True when the object a rule is attached to exists in the encoded job (a rule on
// spec.trainer.model runs only when there is a trainer).
bool ObjectPresent(const nlohmann::json& encoded, const std::string& dotted_path) {
  const nlohmann::json* node = &encoded;
  size_t start = 0;
  while (start < dotted_path.size()) {
    size_t dot = dotted_path.find('.', start);
    if (dot == std::string::npos)
      dot = dotted_path.size();
    const std::string key = dotted_path.substr(start, dot - start);
    if (!node->is_object() || !node->contains(key))
      return false;
    node = &(*node)[key];
    start = dot + 1;
  }
  return node->is_object();
}

// Runs every rule whose object is present in `document` (the job's JSON with schema defaults).
std::vector<FieldError> RuleErrors(const TrainingJob& defaulted, const nlohmann::json& document) {
  std::vector<FieldError> errors;
  for (const auto& located : AllRules()) {
    if (located.rule->transition || !ObjectPresent(document, located.object_path))
      continue;
    if (auto detail = located.rule->check(defaulted)) {
      errors.push_back({located.ErrorPath(), located.Message(*detail)});
    }
  }
  return errors;
}

}  // namespace

void ApplyDefaults(TrainingJob& job) {
  auto& spec = job.spec;
  if (!spec.procs_per_worker)
    spec.procs_per_worker = EffectiveProcsPerWorker(spec);
  if (!spec.parallelism.data) {
    const int64_t data = EffectiveData(spec);
    if (data > 0)
      spec.parallelism.data = data;
  }
  if (spec.trainer) {
    auto& m = spec.trainer->model;
    if (const ModelPreset* preset = FindModelPreset(m.preset)) {
      if (!m.layers)
        m.layers = preset->layers;
      if (!m.d_model)
        m.d_model = preset->d_model;
      if (!m.heads)
        m.heads = preset->heads;
      if (!m.seq_len)
        m.seq_len = preset->seq_len;
      if (!m.vocab)
        m.vocab = preset->vocab;
    }
    if (!m.vocab)
      m.vocab = 256;
  }
}

std::vector<FieldError> Validate(const TrainingJob& job) {
  TrainingJob defaulted = job;
  defaulted.status = {};
  ApplyDefaults(defaulted);
  nlohmann::json encoded = EncodeJson(defaulted);
  std::vector<FieldError> errors = CheckSchema(encoded);
  for (auto& e : RuleErrors(defaulted, encoded))
    errors.push_back(std::move(e));
  return errors;
}

std::vector<FieldError> ValidateDocument(const nlohmann::json& document) {
  // The apiserver drops the status of a create (the status subresource owns it) before it
  // validates, so a status in a job file is not checked for types, enums or bounds; but its
  // strict decoding still refuses an unknown field in it ("status.foo"), so that is checked.
  if (document.is_object() && document.contains("status")) {
    nlohmann::json without_status = document;
    without_status.erase("status");
    std::vector<FieldError> errors;
    for (FieldError& e : CheckSchema({{"status", document["status"]}})) {
      if (e.path.starts_with("status.") && e.message == "unknown field")
        errors.push_back(std::move(e));
    }
    for (FieldError& e : ValidateDocument(without_status))
      errors.push_back(std::move(e));
    return errors;
  }
  DecodeResult decoded = DecodeJson(document);
  std::vector<FieldError> errors = std::move(decoded.errors);
  if (decoded.job) {
    ApplyDefaults(*decoded.job);
    nlohmann::json defaulted = document;
    ApplySchemaDefaults(defaulted);
    for (auto& e : RuleErrors(*decoded.job, defaulted))
      errors.push_back(std::move(e));
  }
  return errors;
}

}  // namespace tessera::api
