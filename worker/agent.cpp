#include "worker/agent.h"

#include <fcntl.h>
#include <signal.h>
#include <sys/prctl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <fmt/format.h>
#include <spdlog/spdlog.h>

#include <cerrno>
#include <csignal>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <optional>
#include <thread>
#include <utility>
#include <vector>

#include "lifecycle/job_state.h"
#include "worker/process_state.h"
#include "worker/termination_message.h"

namespace tessera::worker {
namespace {

using Clock = std::chrono::steady_clock;

volatile std::sig_atomic_t g_signal = 0;

void OnSignal(int signal) {
  g_signal = signal;
}

// An integer environment variable in [min, max], `fallback` when unset; nullopt when malformed.
std::optional<long> EnvInt(const char* name, long fallback, long min, long max) {
  const char* text = std::getenv(name);
  if (text == nullptr || *text == '\0')
    return fallback;
  char* end = nullptr;
  errno = 0;
  const long v = std::strtol(text, &end, 10);
  if (errno != 0 || *end != '\0' || v < min || v > max) {
    std::fprintf(stderr, "tessera-worker agent: %s=%s: expected an integer in [%ld, %ld]\n", name,
                 text, min, max);
    return std::nullopt;
  }
  return v;
}

struct Child {
  int local_rank = 0;
  int rank = 0;
  pid_t pid = -1;
  bool running = false;
};

pid_t Start(const std::vector<std::string>& command,
            const std::vector<std::pair<std::string, std::string>>& env,
            const std::function<void()>& in_rank_after_fork) {
  std::vector<std::string> args = command;
  std::vector<char*> argv;
  for (std::string& a : args)
    argv.push_back(a.data());
  argv.push_back(nullptr);
  const pid_t parent = ::getpid();
  // SIGTERM and SIGINT wait until the child handles them itself: one that came between fork
  // and exec would run this process's handler there and be lost.
  sigset_t stop_signals, old_mask;
  sigemptyset(&stop_signals);
  sigaddset(&stop_signals, SIGTERM);
  sigaddset(&stop_signals, SIGINT);
  ::sigprocmask(SIG_BLOCK, &stop_signals, &old_mask);
  const pid_t pid = ::fork();
  if (pid != 0) {
    ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
    // Also set the group from the parent, so that signalling -pid works even before the child
    // has run (both calls racing is harmless).
    if (pid > 0)
      ::setpgid(pid, pid);
    return pid;
  }
  if (in_rank_after_fork)
    in_rank_after_fork();
  ::setpgid(0, 0);  // its own group, so a signal reaches whatever it starts too
  ::prctl(PR_SET_PDEATHSIG, SIGKILL);
  if (::getppid() != parent)
    ::_exit(128 + SIGKILL);
  ::signal(SIGTERM, SIG_DFL);
  ::signal(SIGINT, SIG_DFL);
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  for (const auto& [key, value] : env)
    ::setenv(key.c_str(), value.c_str(), 1);
  ::execvp(argv[0], argv.data());
  std::fprintf(stderr, "tessera-worker agent: cannot execute %s: %s\n", argv[0],
               std::strerror(errno));
  ::_exit(127);
}

int ExitCodeOf(int status) {
  return WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
}

bool HasNvidiaDevice() {
  std::error_code ec;
  return std::filesystem::exists("/dev/nvidia0", ec);
}

}  // namespace

int RunAgent(const AgentOptions& options) {
  const std::optional<long> procs = EnvInt("TESSERA_PROCS_PER_NODE", 1, 1, 1024);
  const std::optional<long> node = EnvInt("TESSERA_NODE_RANK", 0, 0, 1 << 20);
  const std::optional<long> metrics_port = EnvInt("TESSERA_METRICS_PORT", -1, -1, 65535);
  if (!procs || !node || !metrics_port)
    return 2;
  if (*metrics_port > 0 && *metrics_port + *procs - 1 > 65535) {
    std::fprintf(stderr,
                 "tessera-worker agent: TESSERA_METRICS_PORT=%ld: ports %ld..%ld for %ld ranks "
                 "pass 65535; choose a lower port\n",
                 *metrics_port, *metrics_port, *metrics_port + *procs - 1, *procs);
    return 2;
  }
  const bool pin_gpus = std::getenv("CUDA_VISIBLE_DEVICES") == nullptr && HasNvidiaDevice();

  g_signal = 0;
  struct sigaction action {};
  action.sa_handler = OnSignal;
  sigemptyset(&action.sa_mask);
  struct sigaction old_term {
  }, old_int{};
  ::sigaction(SIGTERM, &action, &old_term);
  ::sigaction(SIGINT, &action, &old_int);

  std::vector<Child> children;
  int result = 0;
  for (int local = 0; local < *procs; ++local) {
    Child c;
    c.local_rank = local;
    c.rank = static_cast<int>(*node * *procs + local);
    std::vector<std::pair<std::string, std::string>> env = {
        {"RANK", std::to_string(c.rank)},
        {"LOCAL_RANK", std::to_string(local)},
        {"LOCAL_WORLD_SIZE", std::to_string(*procs)},
        {"GROUP_RANK", std::to_string(*node)},
    };
    if (*metrics_port > 0)
      env.emplace_back("TESSERA_METRICS_PORT", std::to_string(*metrics_port + local));
    if (pin_gpus)
      env.emplace_back("CUDA_VISIBLE_DEVICES", std::to_string(local));
    c.pid = Start(options.command, env, options.in_rank_after_fork);
    if (c.pid < 0) {
      std::fprintf(stderr, "tessera-worker agent: cannot start rank %d: %s\n", c.rank,
                   std::strerror(errno));
      result = 1;
      break;
    }
    c.running = true;
    spdlog::info("agent: started rank {} (local rank {}, pid {})", c.rank, local, c.pid);
    children.push_back(c);
  }

  // Supervise: the first failure (or a signal to the agent) stops everyone.
  Clock::time_point kill_at = Clock::time_point::max();     // when SIGKILL follows SIGTERM
  Clock::time_point abandon_at = Clock::time_point::max();  // when ranks SIGKILL left are left
  bool stopping = result != 0;
  // Any signal but SIGKILL is followed by SIGCONT, so that a stopped rank acts on it now
  // instead of lying stopped until the grace ends.
  auto stop_all = [&](int signal) {
    for (const Child& c : children) {
      if (!c.running)
        continue;
      options.send_signal(-c.pid, signal);
      if (signal != SIGKILL)
        options.send_signal(-c.pid, SIGCONT);
    }
  };
  if (stopping) {
    stop_all(SIGTERM);
    kill_at = Clock::now() + options.grace;
  }
  int forwarded = 0;
  for (;;) {
    bool any_running = false;
    std::vector<std::pair<const Child*, int>> exited;  // in this pass, with their codes
    for (Child& c : children) {
      if (!c.running)
        continue;
      int status = 0;
      const pid_t r = ::waitpid(c.pid, &status, WNOHANG);
      if (r != c.pid) {
        any_running = true;
        continue;
      }
      c.running = false;
      options.send_signal(-c.pid, SIGKILL);  // whatever the rank left behind in its group
      exited.emplace_back(&c, ExitCodeOf(status));
    }
    // The failure to report: exits seen in one pass came within one poll, in an unknown order,
    // and a rank that lost its peer (exit 6) is the consequence of the other's failure, not
    // its cause (the lifecycle's tie rule, docs/lifecycle.md); then the lowest local rank.
    std::vector<int64_t> codes;
    for (const auto& [c, code] : exited)
      codes.push_back(code);
    const std::optional<size_t> blamed = lifecycle::FailureToBlame(codes);
    const Child* failed = blamed ? exited[*blamed].first : nullptr;
    for (const auto& [c, code] : exited) {
      if (c == failed && result == 0 && g_signal == 0) {
        result = code;
        spdlog::error("agent: rank {} (pid {}) exited with code {}; stopping the other ranks",
                      c->rank, c->pid, code);
        // Kept only when the rank said nothing itself (killed by a signal, or crashed).
        WriteTerminationMessage(code > 128
                                    ? fmt::format("rank {} was killed by signal {} ({})", c->rank,
                                                  code - 128, strsignal(code - 128))
                                    : fmt::format("rank {} exited with code {}", c->rank, code));
      } else {
        spdlog::info("agent: rank {} (pid {}) exited with code {}", c->rank, c->pid, code);
      }
    }
    if (failed != nullptr && !stopping) {
      stopping = true;
      stop_all(SIGTERM);
      kill_at = Clock::now() + options.grace;
    }
    if (!any_running)
      break;
    if (g_signal != 0 && forwarded == 0) {
      forwarded = g_signal;
      spdlog::info("agent: signal {}: forwarding to every rank", static_cast<int>(g_signal));
      stop_all(g_signal);
      stopping = true;
      kill_at = Clock::now() + options.grace;
    }
    if (Clock::now() >= kill_at) {
      spdlog::warn("agent: ranks still running {} s after SIGTERM; killing them",
                   std::chrono::duration_cast<std::chrono::seconds>(options.grace).count());
      stop_all(SIGKILL);
      kill_at = Clock::time_point::max();
      abandon_at = Clock::now() + options.reap_after_kill;
    }
    if (Clock::now() >= abandon_at) {
      for (const Child& c : children) {
        if (c.running) {
          spdlog::error(
              "agent: rank {} (pid {}) is still there {:.1f} s after SIGKILL ({}): a process "
              "stuck in the kernel, as on a hung filesystem or GPU driver, cannot die until the "
              "kernel lets it; exiting without it",
              c.rank, c.pid, std::chrono::duration<double>(options.reap_after_kill).count(),
              KernelState(c.pid));
        }
      }
      break;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  ::sigaction(SIGTERM, &old_term, nullptr);
  ::sigaction(SIGINT, &old_int, nullptr);
  if (forwarded != 0 && result == 0)
    return 128 + forwarded;
  return result;
}

}  // namespace tessera::worker
