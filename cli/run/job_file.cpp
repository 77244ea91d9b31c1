#include "cli/run/job_file.h"

#include <fmt/format.h>

#include <iostream>

#include "api/codec.h"
#include "api/contract.h"
#include "api/validate.h"
#include "cli/run/set_override.h"

namespace tessera::cli {

bool LoadJobFile(const std::string& command, const std::string& file,
                 const std::vector<std::string>& sets, api::TrainingJob* job) {
  const auto bad = [&](const std::string& message) {
    std::cerr << command << ": " << message << "\n";
    return false;
  };
  const api::FileText text = api::ReadJobFile(file);
  if (!text.ok())
    return bad(file + ": " + text.error);
  const api::ParsedYaml parsed = api::ParseYaml(text.text);
  if (!parsed.ok())
    return bad(file + ": not valid YAML: " + parsed.error);
  if (parsed.documents.size() != 1) {
    return bad(fmt::format("{}: holds {} documents; {} takes exactly one TrainingJob", file,
                           parsed.documents.size(), command));
  }
  nlohmann::json document = parsed.documents.front();
  for (const std::string& assignment : sets) {
    if (const std::string error = ApplySetOverride(assignment, &document); !error.empty())
      return bad(error);
  }
  const std::vector<api::FieldError> errors = api::ValidateDocument(document);
  if (!errors.empty()) {
    // The lines `tessera validate` prints, on stderr.
    for (const api::FieldError& e : errors) {
      std::cerr << file << ": " << (e.path.empty() ? "(document)" : e.path) << ": " << e.message
                << "\n";
    }
    return false;
  }
  // A status in the file (say, from `kubectl get -o yaml`) is ignored, as the apiserver ignores
  // it on create: the run keeps its own status (status.json, job.json).
  if (document.is_object())
    document.erase("status");
  api::DecodeResult decoded = api::DecodeJson(document);
  if (!decoded.job)
    return bad(file + ": not a TrainingJob");
  *job = std::move(*decoded.job);
  api::ApplyDefaults(*job);
  return true;
}

std::optional<size_t> WorkerContainerIndex(const api::TrainingJob& job) {
  const nlohmann::json& tmpl = job.spec.pod_template;
  if (!tmpl.is_object() || !tmpl.contains("spec") || !tmpl["spec"].is_object() ||
      !tmpl["spec"].contains("containers") || !tmpl["spec"]["containers"].is_array()) {
    return std::nullopt;
  }
  const nlohmann::json& containers = tmpl["spec"]["containers"];
  for (size_t i = 0; i < containers.size(); ++i) {
    if (containers[i].is_object() && containers[i].value("name", "") == api::kWorkerContainerName)
      return i;
  }
  return std::nullopt;
}

std::vector<std::string> WorkerCommand(const api::TrainingJob& job, nlohmann::json* container) {
  const std::optional<size_t> index = WorkerContainerIndex(job);
  if (!index)
    return {};
  const nlohmann::json& c = job.spec.pod_template["spec"]["containers"][*index];
  *container = c;
  std::vector<std::string> argv;
  for (const char* key : {"command", "args"}) {
    if (c.contains(key) && c[key].is_array()) {
      for (const nlohmann::json& part : c[key])
        argv.push_back(part.is_string() ? part.get<std::string>() : part.dump());
    }
  }
  if (!c.contains("command") || !c["command"].is_array() || c["command"].empty())
    return {};
  return argv;
}

}  // namespace tessera::cli
