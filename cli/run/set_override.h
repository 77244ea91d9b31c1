// `tessera run --set path=value`: edits a decoded TrainingJob document (JSON) before it is
// validated, so an override meets exactly the checks of the file itself. Pure; no I/O.
#pragma once

#include <string>

#include <nlohmann/json.hpp>

namespace tessera::cli {

// Applies one `path=value` assignment to `document`. `path` is dotted with optional list
// indices, e.g. `spec.workers`, `spec.trainer.schedule.steps`,
// `spec.template.spec.containers[0].command`; a path that does not start with `metadata`,
// `spec`, `apiVersion` or `kind` is taken relative to `spec`. `value` is read as a YAML value
// (`3` is a number, `true` a boolean, `[sh, -c, "exit 2"]` a list, `"3"` a string). Missing
// objects on the way are created; a list index must exist or be the list's size (appends).
// A path of more than 100 steps, or a value of more than one YAML document, is refused.
// Returns an empty string on success, otherwise one line naming the assignment and the problem;
// `document` is then unchanged.
std::string ApplySetOverride(const std::string& assignment, nlohmann::json* document);

}  // namespace tessera::cli
