// Runs N rank processes on this machine by fork, for tests and benchmarks of the process
// groups: binds the store's port first (so it is free and race-free), hands the listening
// socket to rank 0, captures each rank's output and reaps them all by a deadline.
// It is not the job launcher (`tessera run`), which execs the trainer with the env contract.
// RunThreadGang is the in-process variant: one thread per rank, each with its own Gloo group.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "worker/comm/process_group.h"

namespace tessera::comm {

struct RankExit {
  int rank = 0;
  int exit_code = -1;  // valid when !signaled
  int signal = 0;      // the terminating signal, when signaled
  bool signaled = false;
  bool killed_at_deadline = false;
  std::chrono::steady_clock::time_point ended;
  std::string output;  // stdout and stderr of the rank
};

// What a rank runs: `listen_fd` is the store's listening socket on 127.0.0.1:`port` for
// rank 0 (-1 for the others). The return value is the rank's exit code.
using RankMain = std::function<int(int rank, int listen_fd, int port)>;

// Forks `ranks` processes running `main` and waits for all of them, killing any still
// running at `deadline` (SIGKILL, killed_at_deadline). Call it from a single-threaded
// process. Results are indexed by rank. Throws std::runtime_error when it cannot fork/bind.
std::vector<RankExit> RunLocalGang(int ranks, const RankMain& main,
                                   std::chrono::milliseconds deadline);

// Runs fn(rank, group) on `ranks` threads of this process, each with its own store client and
// Gloo group on loopback (rank 0's store served by this call), and joins them. `timeout`
// bounds connecting and every operation. Exceptions thrown by fn are rethrown here (the first
// one) after all threads ended.
void RunThreadGang(int ranks,
                   const std::function<void(int rank, std::shared_ptr<ProcessGroup> group)>& fn,
                   std::chrono::milliseconds timeout = std::chrono::seconds(20));

}  // namespace tessera::comm
