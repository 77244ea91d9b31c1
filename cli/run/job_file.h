// Reading the one TrainingJob that `tessera run` and `tessera plan` take, and what its worker
// container asks for. Knows nothing of processes.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "api/job.h"

namespace tessera::cli {

// Reads `file` ("-": standard input) as exactly one TrainingJob, applies the `path=value`
// overrides of `sets` in order, checks it with the api's rules and fills *job with defaults
// applied. On any problem prints it on stderr — one `<command>: ...` line, or the lines
// `tessera validate` prints for each invalid field — and returns false.
bool LoadJobFile(const std::string& command, const std::string& file,
                 const std::vector<std::string>& sets, api::TrainingJob* job);

// Where the container named `worker` is in spec.template.spec.containers; nullopt without one.
std::optional<size_t> WorkerContainerIndex(const api::TrainingJob& job);

// The worker container's command and args (bring your own trainer), or empty when it has no
// command (the built-in trainer). Copies the container into *container when there is one.
std::vector<std::string> WorkerCommand(const api::TrainingJob& job, nlohmann::json* container);

}  // namespace tessera::cli
