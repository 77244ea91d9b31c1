#include "cli/run/command.h"

#include <memory>

#include "api/flag_checks.h"
#include "cli/run/runner.h"

namespace tessera::cli {

void AddRunCommand(CLI::App* app, int* rc) {
  auto options = std::make_shared<RunOptions>();
  CLI::App* run = app->add_subcommand(
      "run",
      "Run a TrainingJob on this machine: workers x procsPerWorker rank processes on 127.0.0.1, "
      "gang restarts from the newest checkpoint, progress, summary (docs/local-mode.md). Exit 0: "
      "succeeded; 1: failed; 2: invalid job; 3: permanent exit code; 130: interrupted");
  run->add_option("FILE", options->file, "TrainingJob YAML; - reads standard input")->required();
  run->add_option("--set", options->sets,
                  "Override a field before validation: path=value (YAML value), e.g. "
                  "spec.trainer.schedule.steps=50; repeatable");
  run->add_option("--summary-json", options->summary_json,
                  "Also write the summary as JSON to this file");
  run->add_option("--workdir", options->workdir,
                  "Run directory (checkpoints, logs, resolved job); default runs/<job name>");
  run->add_flag("--resume", options->resume,
                "Continue from the run directory's checkpoints instead of starting afresh");
  run->add_option("--grace-period", options->grace_seconds,
                  "Seconds between SIGTERM (checkpoint and stop) and SIGKILL when stopping ranks")
      ->check(NotNaN())
      ->check(CLI::Range(0.0, 86400.0))
      ->capture_default_str();
  run->add_option("--sample", options->sample_chars,
                  "Built-in trainer: print this many bytes sampled from the final model")
      ->check(CLI::Range(0, 1 << 20));
  run->add_option("--prompt", options->sample_prompt, "Text the sample starts from");
  run->add_option("--metrics-port", options->metrics_port,
                  "Rank r serves /metrics and /progress on this port + r in every attempt (a "
                  "fixed target for Prometheus); default: free ports, new each attempt")
      ->check(CLI::Range(1, 65535));
  run->add_option("--worker-binary", options->worker_binary,
                  "tessera-worker to run ranks with; default: $TESSERA_WORKER_BINARY, else the "
                  "tessera-worker next to this executable");
  run->callback([options, rc] { *rc = RunJob(*options); });
}

}  // namespace tessera::cli
