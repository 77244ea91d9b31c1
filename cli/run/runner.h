// `tessera run`: one TrainingJob on this machine (DESIGN.md §7). Starts `workers` ×
// `procsPerWorker` rank processes with the environment of DESIGN.md §3 on 127.0.0.1, drives
// them with lifecycle::Decide (gang restart from the newest checkpoint, backoff, permanent exit
// codes, deadlines, progress deadline), shows progress and ends with a summary. No Kubernetes;
// docs/local-mode.md is the user's guide.
#pragma once

#include <sys/types.h>

#include <functional>
#include <string>
#include <vector>

namespace tessera::cli {

// Exit codes of `tessera run` (docs/local-mode.md).
inline constexpr int kRunSucceeded = 0;
inline constexpr int kRunFailed = 1;         // the job failed (backoff limit, deadline, ...)
inline constexpr int kRunBadConfig = 2;      // nothing started: invalid file or environment
inline constexpr int kRunPermanentExit = 3;  // a rank exited with one of permanentExitCodes
inline constexpr int kRunInterrupted = 130;  // SIGINT (Ctrl-C): ranks checkpointed and stopped
inline constexpr int kRunTerminated = 143;   // SIGTERM: the same

struct RunOptions {
  std::string file;               // the TrainingJob YAML
  std::vector<std::string> sets;  // `path=value` overrides, applied in order
  std::string summary_json;       // write the summary here as JSON; empty: do not
  std::string workdir;            // the run directory; empty: runs/<job name>
  bool resume = false;            // keep the run directory's checkpoints and continue
  double grace_seconds = 30;      // SIGTERM to SIGKILL when stopping ranks
  // A rank still there this long after SIGKILL is stuck in the kernel (state D, as on a hung
  // filesystem or GPU driver): it is named and left behind, counted as killed.
  double reap_after_kill_seconds = 30;
  // Signals a rank's process group, as kill(-pgid, signal) (tests pass one that loses SIGKILL,
  // as such a kernel does); null: that.
  std::function<void(pid_t pgid, int signal)> signal_group;
  int sample_chars = 0;  // built-in trainer: print this many sampled bytes at the end
  std::string sample_prompt = "\n";
  std::string worker_binary;  // tessera-worker; empty: $TESSERA_WORKER_BINARY, else next to
                              // the running executable
  // Rank r serves /metrics and /progress on metrics_port + r in every attempt; 0: a free port
  // per rank, chosen afresh for each attempt (status.json says which).
  int metrics_port = 0;
  double progress_interval_seconds = 1;  // how often rank 0's /progress is read
  double log_interval_seconds = 10;      // plain progress lines when stderr is not a terminal
};

// Runs the job and returns one of the exit codes above. Prints events, progress and the
// summary; errors that stop the run before anything starts are one line each on stderr.
// Installs handlers for SIGINT and SIGTERM while it runs. Not reentrant. Every process it
// started has been reaped when it returns, but one stuck in the kernel, which it names.
int RunJob(const RunOptions& options);

// NVIDIA GPUs on this machine: /dev/nvidia0, /dev/nvidia1, ... (0 without a driver). A job of
// precision bf16 needs one a rank to run here, unless GpusChosenByUser.
int LocalGpuCount();
// Whether the user chose the visible GPUs (CUDA_VISIBLE_DEVICES is set); then `tessera run`
// neither pins ranks to GPUs nor counts them.
bool GpusChosenByUser();

}  // namespace tessera::cli
