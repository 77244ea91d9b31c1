#include "controller/reconcile/job_view.h"

#include "api/codec.h"
#include "api/validate.h"
#include "controller/k8s/object.h"
#include "controller/reconcile/observe.h"
#include "lifecycle/from_api.h"

namespace tessera::reconcile {
namespace {

std::string JoinErrors(const std::vector<api::FieldError>& errors) {
  std::string out;
  for (const auto& e : errors) {
    if (!out.empty())
      out += "; ";
    out += api::FormatError(e);
  }
  return out;
}

}  // namespace

JobView ViewJob(const nlohmann::json& object) {
  JobView view;
  const nlohmann::json& meta = k8s::Metadata(object);
  auto str = [&](const char* key) { return k8s::StringAt(meta, key); };
  view.resource_version = str("resourceVersion");
  view.deleting = Deleting(object);

  // Only what the API types know: the server adds metadata (managedFields, timestamps) that is
  // none of the codec's business, and the status is the controller's own.
  auto or_default = [](std::string value, const char* fallback) {
    return value.empty() ? std::string(fallback) : value;
  };
  nlohmann::json doc = {
      {"apiVersion", or_default(k8s::StringAt(object, "apiVersion"), api::kApiVersion)},
      {"kind", or_default(k8s::StringAt(object, "kind"), api::kKind)}};
  nlohmann::json m = nlohmann::json::object();
  for (const char* key : {"name", "namespace", "uid", "generation", "labels", "annotations"}) {
    if (meta.contains(key))
      m[key] = meta[key];
  }
  doc["metadata"] = m;
  if (object.is_object() && object.contains("spec"))
    doc["spec"] = object["spec"];

  api::DecodeResult decoded = api::DecodeJson(doc);
  if (decoded.job) {
    view.job = *decoded.job;
  } else {
    view.job.metadata.name = str("name");
    view.job.metadata.name_space = str("namespace");
    view.job.metadata.uid = str("uid");
    auto gen = meta.find("generation");
    if (gen != meta.end() && gen->is_number_integer())
      view.job.metadata.generation = gen->get<int64_t>();
  }
  std::vector<api::FieldError> errors = decoded.errors;
  if (decoded.job && errors.empty()) {
    errors = api::Validate(view.job);
    if (errors.empty())
      api::ApplyDefaults(view.job);
  }
  if (!errors.empty())
    view.invalid = JoinErrors(errors);
  return view;
}

lifecycle::Policy PolicyOf(const JobView& view) {
  if (!view.invalid)
    return lifecycle::PolicyFromJob(view.job);
  lifecycle::Policy policy;
  policy.generation = view.job.metadata.generation;
  policy.invalid_spec = "invalid spec: " + *view.invalid;
  return policy;
}

}  // namespace tessera::reconcile
