// Reading and writing TrainingJobs: YAML (yaml-cpp) and JSON (nlohmann) in, JSON out. Decoding
// applies the schema's defaults and reports every structural problem with its field path; it
// does not apply computed defaults or cross-field rules (api/validate.h does).
#pragma once

#include <cstddef>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/job.h"

namespace tessera::api {

// The documents of a YAML stream as JSON values (empty documents skipped), or a syntax error.
// Scalars are typed as the Kubernetes YAML reader types them (YAML 1.1: true/false/yes/no/on/off
// are booleans, plain numbers are numbers, quoted scalars are strings). A key repeated in one
// mapping is an error, as in kubectl.
struct ParsedYaml {
  std::vector<nlohmann::json> documents;
  std::string error;  // "line L, column C: what"; empty when parsing succeeded
  bool ok() const { return error.empty(); }
};
ParsedYaml ParseYaml(const std::string& text);

// The text of a job file, `path` or standard input for "-"; on failure `error` says why in a
// few words ("cannot read the file: No such file or directory", "is a directory"), to follow
// the path in a message.
struct FileText {
  std::string text;
  std::string error;
  bool ok() const { return error.empty(); }
};
// A job file over kMaxJobFileBytes is refused ("larger than 16 MiB; ...").
inline constexpr size_t kMaxJobFileBytes = size_t{16} << 20;
FileText ReadJobFile(const std::string& path);

struct DecodeResult {
  // Set when the document has the right shape (no wrong types, no unknown fields), even if it
  // has other errors; the job then carries the schema's defaults. A status of the wrong shape
  // alone is left out of the job (its errors are listed) rather than keeping the job unset.
  std::optional<TrainingJob> job;
  // Every schema error: unknown fields, wrong types, missing required fields, enums, bounds.
  std::vector<FieldError> errors;
};

// Decodes one TrainingJob object.
DecodeResult DecodeJson(const nlohmann::json& document);

// Decodes a YAML text holding exactly one document; a syntax error, or not exactly one
// document, is reported as one error with an empty path.
DecodeResult DecodeYaml(const std::string& text);

// The job as a Kubernetes JSON object. Optional fields that are unset are left out; the status
// is left out while it is empty, and empty status strings are left out.
nlohmann::json EncodeJson(const TrainingJob& job);

// The status alone (for a PATCH of the status subresource).
nlohmann::json EncodeStatusJson(const TrainingJobStatus& status);

}  // namespace tessera::api
