// Fuzz target: `tessera run --set path=value` and `tessera plan --set` (cli/run/set_override.h).
// Each line of the input is one assignment, applied in order to a job document. Whatever the
// bytes: an assignment is applied, or refused in one line with the document unchanged; what
// the edits make still decodes to a job or to errors, never a crash.
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <sstream>
#include <string>

#include <nlohmann/json.hpp>

#include "api/codec.h"
#include "api/validate.h"
#include "cli/run/set_override.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  nlohmann::json document = {
      {"apiVersion", "tessera.dev/v1alpha1"},
      {"kind", "TrainingJob"},
      {"metadata", {{"name", "fuzz"}}},
      {"spec",
       {{"workers", 2},
        {"parallelism", {{"data", 2}}},
        {"trainer",
         {{"model", {{"layers", 2}, {"dModel", 64}, {"heads", 4}, {"seqLen", 64}, {"vocab", 256}}},
          {"data", {{"path", "data/tinyshakespeare.txt"}}},
          {"batch", {{"global", 16}}}}},
        {"template", {{"spec", {{"containers", {{{"name", "worker"}}}}}}}}}}};
  std::istringstream lines(std::string(reinterpret_cast<const char*>(data), size));
  for (std::string assignment; std::getline(lines, assignment);) {
    const nlohmann::json before = document;
    const std::string error = tessera::cli::ApplySetOverride(assignment, &document);
    if (!error.empty() && document != before) {
      std::fprintf(stderr, "set_override_fuzz: '%s' was refused (%s) but changed the document\n",
                   assignment.c_str(), error.c_str());
      std::abort();
    }
    if (!error.empty() && error.find('\n') != std::string::npos) {
      std::fprintf(stderr, "set_override_fuzz: a refusal of more than one line: %s\n",
                   error.c_str());
      std::abort();
    }
  }
  tessera::api::DecodeResult decoded = tessera::api::DecodeJson(document);
  if (decoded.job) {
    tessera::api::ApplyDefaults(*decoded.job);
    tessera::api::Validate(*decoded.job);
    // The output `tessera run` writes must be representable.
    (void)tessera::api::EncodeJson(*decoded.job).dump();
  }
  return 0;
}
