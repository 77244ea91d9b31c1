// `tessera plan`: what a TrainingJob will do before anything runs — its ranks and where they
// sit (worker pod, local rank, mesh coordinates), how the batch splits into micro-batches,
// which blocks each pipeline stage holds and what share of the work that is, the ideal
// pipeline bubble, FLOPs per step, and each rank's memory (parameters, gradients, AdamW state,
// activations) — as text or JSON (docs/local-mode.md).
#pragma once

#include <string>
#include <vector>

#include <CLI/CLI.hpp>

namespace tessera::cli {

// Exit codes of `tessera plan`.
inline constexpr int kPlanPrinted = 0;
inline constexpr int kPlanBadJob = 2;  // unreadable, invalid, or a trainer it cannot build

struct PlanOptions {
  std::string file;               // the TrainingJob YAML ("-": standard input)
  std::vector<std::string> sets;  // `path=value` overrides, as `tessera run --set`
  std::string output = "text";    // text | json
};

// Prints the plan on stdout and returns one of the exit codes above; problems are one line
// each on stderr.
int PlanJob(const PlanOptions& options);

// Adds the `plan` subcommand to `app`; its exit code goes to *rc.
void AddPlanCommand(CLI::App* app, int* rc);

}  // namespace tessera::cli
