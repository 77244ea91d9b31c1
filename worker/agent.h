// The per-pod worker agent (DESIGN.md §3): starts TESSERA_PROCS_PER_NODE rank processes, each
// with RANK = TESSERA_NODE_RANK * procs + LOCAL_RANK, LOCAL_RANK, LOCAL_WORLD_SIZE, its own
// metrics port (TESSERA_METRICS_PORT + LOCAL_RANK) and, on a machine with NVIDIA devices and
// no CUDA_VISIBLE_DEVICES, its GPU (CUDA_VISIBLE_DEVICES = LOCAL_RANK). It supervises them:
// as soon as one exits non-zero the others get SIGTERM (SIGKILL after a grace period) and the
// agent exits with that rank's code, so the controller sees the pod fail and restarts the gang;
// a rank that is still there options.reap_after_kill after SIGKILL is logged and left behind.
// SIGTERM/SIGINT to the agent are forwarded to every rank (they checkpoint and stop).
#pragma once

#include <signal.h>
#include <sys/types.h>

#include <chrono>
#include <functional>
#include <string>
#include <vector>

namespace tessera::worker {

struct AgentOptions {
  // The command each rank runs (argv[0] an absolute path or found in PATH).
  std::vector<std::string> command;
  // How long ranks may take to stop after SIGTERM before they are killed.
  std::chrono::milliseconds grace{std::chrono::seconds(30)};
  // How long ranks may take to be gone after SIGKILL. A process stuck in the kernel (state D,
  // as on a hung filesystem or GPU driver) cannot die until the kernel lets it; past this the
  // agent logs each one and exits without it rather than hold the pod Running.
  std::chrono::milliseconds reap_after_kill{std::chrono::seconds(30)};
  // Sends a signal, as kill(2) (tests pass one that loses SIGKILL, as such a kernel does).
  std::function<int(pid_t, int)> send_signal = [](pid_t pid, int signal) {
    return ::kill(pid, signal);
  };
  // Tests only: runs in each rank's process just after fork, while it still has the agent's
  // signal handlers (a SIGTERM raised there must still stop the rank, not be lost).
  std::function<void()> in_rank_after_fork;
};

// Runs the ranks to the end and returns the agent's exit code: 0 when every rank exited 0,
// otherwise the first failure's code (128 + signal for a rank killed by a signal; among ranks
// found exited in the same poll, one that did not exit 6, a lost peer, first), or 2 with
// one line on stderr for a bad TESSERA_NODE_RANK / TESSERA_PROCS_PER_NODE. Installs handlers
// for SIGTERM and SIGINT while it runs. Call it from a single-threaded process.
int RunAgent(const AgentOptions& options);

}  // namespace tessera::worker
