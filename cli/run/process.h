// Rank processes of `tessera run`: started in their own process group with an environment and
// a log file, signalled as a group, reaped without blocking. POSIX (Linux) only; the runner
// that owns them is single-threaded.
#pragma once

#include <sys/types.h>

#include <functional>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace tessera::cli {

struct ProcessSpec {
  std::vector<std::string> argv;  // argv[0] is looked up in PATH when it has no '/'
  // Added to (and overriding) the runner's own environment.
  std::vector<std::pair<std::string, std::string>> env;
  std::string log_path;  // stdout and stderr are appended here; stdin is /dev/null
  // A descriptor of the runner's that the process keeps open across exec (-1: none): the run
  // directory's lock, so that a runner killed with SIGKILL leaves the directory locked until
  // its orphaned ranks, still checkpointing, have exited.
  int inherited_fd = -1;
  // Tests only: runs in the new process just after fork, while it still has the runner's
  // signal handlers (a SIGTERM raised there must still stop it, not be lost).
  std::function<void()> in_child_after_fork;
};

// Starts `spec` as the leader of a new process group (pgid == pid). The child also gets
// SIGTERM if the runner dies (PR_SET_PDEATHSIG), so an orphaned rank still checkpoints and
// stops. Returns the pid, or -1 with *error set (fork failed, log file not writable). A
// program that cannot be executed exits 127 after writing why to its log.
pid_t StartProcessGroup(const ProcessSpec& spec, std::string* error);

// Sends `signal` to every process of the group led by `pgid`; a group already gone is fine.
// Any signal but SIGKILL is followed by SIGCONT, as systemd does, so that a stopped rank
// (SIGSTOP, Ctrl-Z) acts on it now instead of lying stopped until SIGKILL at the grace's end.
void SignalProcessGroup(pid_t pgid, int signal);

// True while any process of the group `pgid` exists (including exited, unreaped members).
bool ProcessGroupExists(pid_t pgid);

// Makes this process the reaper of its orphaned descendants (PR_SET_CHILD_SUBREAPER), so that
// what a rank leaves behind when it dies is reparented here and can be reaped, rather than
// lingering as another process's zombie. Process-wide; call once before starting ranks.
void BecomeSubreaper();

// A child reaped: its exit code is 128 + the signal number for a process killed by a signal, as
// Kubernetes reports it; since a process may also exit with such a code itself (a trainer
// stopped by SIGTERM exits 143 after its checkpoint), `signaled` says which it was.
struct ReapedChild {
  pid_t pid = 0;
  int code = 0;
  bool signaled = false;
};

// Reaps every child (or adopted orphan) that has exited, without blocking.
std::vector<ReapedChild> ReapExitedChildren();

// A free TCP port on 127.0.0.1 at the time of the call (bound to port 0, then released).
// Returns 0 when none could be had.
int FreeLoopbackPort();

// Whether a listener could bind TCP `port` on all interfaces now, as a rank's metrics server
// does (SO_REUSEADDR, so a connection of an earlier listener in TIME_WAIT does not count).
bool PortIsFree(int port);

// `bytes` random bytes from /dev/urandom as lower-case hex.
std::string RandomHex(size_t bytes);

// The last `lines` lines of the text file at `path` (fewer when it is shorter; empty when it
// cannot be read).
std::vector<std::string> TailLines(const std::string& path, size_t lines);

}  // namespace tessera::cli
