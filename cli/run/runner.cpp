#include "cli/run/runner.h"

#include <fcntl.h>
#include <sched.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <fmt/format.h>

#include <algorithm>
#include <cerrno>
#include <chrono>
#include <csignal>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <map>
#include <optional>
#include <set>
#include <sstream>
#include <thread>

#include <nlohmann/json.hpp>

#include "api/codec.h"
#include "api/contract.h"
#include "api/rules.h"
#include "cli/run/job_file.h"
#include "cli/run/process.h"
#include "cli/run/progress.h"
#include "cli/run/sample.h"
#include "lifecycle/decide.h"
#include "lifecycle/from_api.h"
#include "lifecycle/reasons.h"
#include "worker/process_state.h"
#include "worker/train/checkpoint.h"
#include "worker/train/from_api.h"
#include "worker/train/memory.h"
#include "worker/train/plan.h"
#include "worker/train/status.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;
static_assert(lifecycle::kCommunicationFailedExitCode ==
                  static_cast<int>(train::ExitCode::kCommFailed),
              "the lifecycle's tie rule names the trainer's exit code for a lost peer");
using Clock = std::chrono::steady_clock;
using lifecycle::Phase;

volatile std::sig_atomic_t g_stop_signal = 0;
volatile std::sig_atomic_t g_stop_count = 0;

void OnStopSignal(int signal) {
  g_stop_signal = signal;
  g_stop_count = g_stop_count + 1;
}

double SecondsSince(Clock::time_point start) {
  return std::chrono::duration<double>(Clock::now() - start).count();
}

// One line on stderr, then the exit code for "nothing started".
int BadConfig(const std::string& message) {
  std::cerr << "tessera run: " << message << "\n";
  return kRunBadConfig;
}

bool WriteFileAtomically(const fs::path& path, const std::string& text) {
  const fs::path tmp = path.string() + ".tmp";
  {
    std::ofstream out(tmp, std::ios::binary | std::ios::trunc);
    out << text;
    if (!out)
      return false;
  }
  std::error_code ec;
  fs::rename(tmp, path, ec);
  return !ec;
}

// Why `command` cannot be run as execvp would run it (a name without '/' is looked up in this
// process's PATH); empty when it can.
std::string WhyNotExecutable(const std::string& command) {
  if (command.empty())
    return "the command is empty";
  if (command.find('/') != std::string::npos) {
    if (::access(command.c_str(), X_OK) == 0 && !fs::is_directory(command))
      return "";
    return ::access(command.c_str(), F_OK) != 0 ? "no such file" : "not an executable file";
  }
  const char* path = std::getenv("PATH");
  const std::string dirs = path != nullptr ? path : "/usr/local/bin:/usr/bin:/bin";
  std::stringstream in(dirs);
  for (std::string dir; std::getline(in, dir, ':');) {
    const fs::path candidate = fs::path(dir.empty() ? "." : dir) / command;
    if (::access(candidate.c_str(), X_OK) == 0 && !fs::is_directory(candidate))
      return "";
  }
  return "not found in PATH (" + dirs + ")";
}

int UsableCores() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0)
    return std::max(1, CPU_COUNT(&set));
  return std::max(1u, std::thread::hardware_concurrency());
}

int TerminalWidth() {
  winsize ws{};
  if (::ioctl(STDERR_FILENO, TIOCGWINSZ, &ws) == 0 && ws.ws_col > 0)
    return ws.ws_col;
  return 100;
}

// `signaled`: the process was killed by signal code - 128; otherwise it exited with `code`
// itself, which a rank also does above 128 (143 after a checkpoint, stopped by SIGTERM or with
// the rank a signal stopped).
std::string SignalDescription(int code, bool signaled) {
  if (signaled && code > 128 && code < 128 + 65) {
    const char* name = ::sigabbrev_np(code - 128);
    return fmt::format("killed by signal {} (SIG{})", code - 128, name ? name : "?");
  }
  return fmt::format("exited with code {}", code);
}

// One rank process of a local worker.
struct Rank {
  int64_t rank = 0;
  int64_t local_rank = 0;
  pid_t pid = -1;
  int metrics_port = 0;
  std::string log_path;
  std::optional<int> exit_code;
  bool signaled = false;  // exit_code is 128 + the signal that killed it
  std::optional<lifecycle::TimePoint> finished_at;
};

// The local stand-in for a pod: the ranks of one worker index in one attempt.
struct LocalWorker {
  int64_t index = 0;
  int64_t attempt = 0;
  std::vector<Rank> ranks;
  bool deleting = false;
  std::optional<Clock::time_point> kill_at;     // SIGKILL then, if still running
  std::optional<Clock::time_point> abandon_at;  // ranks SIGKILL left are left behind then
  bool failure_reported = false;

  bool AllExited() const {
    return std::all_of(ranks.begin(), ranks.end(),
                       [](const Rank& r) { return r.exit_code.has_value(); });
  }
  // The rank to blame, by the lifecycle's rule for workers (docs/lifecycle.md): the earliest
  // finish; among ranks reaped in the same poll (stamped alike) one that did not just lose a
  // peer, then the lowest rank. nullptr when none failed.
  const Rank* FirstFailure() const {
    const Rank* first = nullptr;
    for (const Rank& r : ranks) {
      if (!r.exit_code || *r.exit_code == 0)
        continue;
      if (first == nullptr || *r.finished_at < *first->finished_at ||
          (*r.finished_at == *first->finished_at &&
           lifecycle::BlamedFirstOnATie(*r.exit_code, *first->exit_code))) {
        first = &r;
      }
    }
    return first;
  }
};

// What the summary reports.
struct Summary {
  std::string phase;
  std::string reason;
  std::string message;
  int exit_code = 0;
  int64_t steps = 0;
  int64_t total_steps = 0;
  std::optional<double> train_loss;
  std::optional<double> val_loss;
  std::optional<double> tokens_per_second;
  double wall_seconds = 0;
  int64_t restarts = 0;
  int64_t attempts = 0;
  std::string checkpoint;
  std::string run_dir;
  std::string sample;
};

class LocalRun {
 public:
  LocalRun(const RunOptions& options, api::TrainingJob job,
           std::optional<train::TrainerConfig> trainer, std::vector<std::string> byo_command,
           nlohmann::json container, fs::path run_dir, std::string worker_binary,
           int run_dir_lock_fd)
      : options_(options),
        job_(std::move(job)),
        trainer_(std::move(trainer)),
        byo_command_(std::move(byo_command)),
        container_(std::move(container)),
        run_dir_(std::move(run_dir)),
        worker_binary_(std::move(worker_binary)),
        run_dir_lock_fd_(run_dir_lock_fd),
        policy_(lifecycle::PolicyFromJob(job_)),
        procs_per_worker_(api::EffectiveProcsPerWorker(job_.spec)),
        tty_(::isatty(STDERR_FILENO) == 1) {}

  int Run();

 private:
  void Reap();
  lifecycle::Observation Observe();
  void PollProgress();
  // Rank 0 of `attempt` has exited: its last /progress document, which it wrote to
  // FinalProgressPath() as it ended, is the latest report (the last poll may be up to a
  // progress interval older).
  void ReadFinalProgress(int64_t attempt);
  fs::path FinalProgressPath() const { return run_dir_ / "progress.json"; }
  void Apply(const lifecycle::Action& action);
  void CreateWorkers(const lifecycle::CreateWorkers& create);
  void DeleteWorkers(const lifecycle::DeleteWorkers& del);
  void EnforceKillDeadlines();
  // options_.signal_group, else SignalProcessGroup.
  void Signal(pid_t pgid, int signal);
  // The worker's ranks that outlived SIGKILL by options_.reap_after_kill_seconds: each named,
  // counted as killed, and no longer waited for.
  void LeaveBehindTheRunning(LocalWorker& worker);
  std::chrono::milliseconds ReapAfterKill() const {
    return std::chrono::milliseconds(static_cast<int64_t>(options_.reap_after_kill_seconds * 1000));
  }
  // Stops every process left (SIGTERM, grace, SIGKILL; at once on a second Ctrl-C) and reaps.
  void StopEverything(bool graceful);
  void Say(const std::string& line);
  void ShowProgress(bool force_line);
  void ClearBar();
  void WriteStatusFile();
  Summary BuildSummary(int exit_code, const std::string& phase, const std::string& reason,
                       const std::string& message);
  void PrintSummary(const Summary& s);
  bool WriteSummaryJson(const Summary& s);

  const RunOptions& options_;
  api::TrainingJob job_;
  std::optional<train::TrainerConfig> trainer_;
  std::vector<std::string> byo_command_;
  nlohmann::json container_;
  fs::path run_dir_;
  std::string worker_binary_;
  int run_dir_lock_fd_;  // every rank holds it too (ProcessSpec::inherited_fd)
  lifecycle::Policy policy_;
  int64_t procs_per_worker_;
  int gpus_ = LocalGpuCount();
  bool tty_;

  lifecycle::Status status_;
  std::map<int64_t, LocalWorker> workers_;
  std::vector<pid_t> all_groups_;  // every rank's process group, of every attempt
  std::set<pid_t> left_behind_;    // ranks stuck in the kernel (LeaveBehindTheRunning)
  Clock::time_point started_ = Clock::now();
  ProgressTracker progress_;  // rank 0's /progress
  Clock::time_point next_poll_ = Clock::now();
  Clock::time_point next_line_ = Clock::now();
  bool bar_shown_ = false;
  bool checkpoint_advice_given_ = false;
  std::string last_status_json_;
};

void LocalRun::Say(const std::string& line) {
  ClearBar();
  std::cout << line << std::endl;
}

void LocalRun::ClearBar() {
  if (bar_shown_) {
    std::cerr << "\r\x1b[K" << std::flush;
    bar_shown_ = false;
  }
}

void LocalRun::Reap() {
  std::map<pid_t, ReapedChild> exited;
  for (const ReapedChild& child : ReapExitedChildren())
    exited[child.pid] = child;  // ranks, and orphans of ranks adopted as subreaper (ignored)
  // One time for every exit seen in this poll: their order within it is unknown, so the
  // lifecycle's tie rule decides which to blame, not the order of this loop.
  const lifecycle::TimePoint now = std::chrono::system_clock::now();
  for (auto& [index, worker] : workers_) {
    for (Rank& r : worker.ranks) {
      if (r.exit_code)
        continue;
      auto it = exited.find(r.pid);
      if (it == exited.end())
        continue;
      r.exit_code = it->second.code;
      r.signaled = it->second.signaled;
      r.finished_at = now;
      // Whatever the rank left behind in its group goes with it.
      Signal(r.pid, SIGKILL);
      if (index == 0 && r.rank == 0)
        ReadFinalProgress(worker.attempt);
    }
    const Rank* failed = worker.FirstFailure();
    if (failed != nullptr && !worker.failure_reported && !worker.deleting) {
      worker.failure_reported = true;
      std::string text = fmt::format(
          "worker-{} rank {} (pid {}) {}; last lines of {}:", index, failed->rank, failed->pid,
          SignalDescription(*failed->exit_code, failed->signaled), failed->log_path);
      for (const std::string& line : TailLines(failed->log_path, 5))
        text += "\n  | " + line;
      Say(text);
      // The trainer's advice for a refused checkpoint names checkpoint.dir, which has no
      // effect here: say what does, once.
      if (trainer_ && *failed->exit_code == static_cast<int>(train::ExitCode::kCheckpointRefused) &&
          !checkpoint_advice_given_) {
        checkpoint_advice_given_ = true;
        Say(fmt::format(
            "tessera run: exit code 3: a checkpoint in {} is corrupt or from another job or "
            "configuration; a corrupt one: move the step directory a rank's line names aside "
            "and run with --resume again to continue from an older one; another configuration: "
            "locally that directory replaces the job's checkpoint.dir, so run without --resume to "
            "start afresh (its checkpoints are removed), or pass another --workdir to keep them",
            trainer_->checkpoint.dir));
      }
      // The agent's rule (DESIGN.md §3): one rank down stops the worker's other ranks.
      for (const Rank& r : worker.ranks) {
        if (!r.exit_code)
          Signal(r.pid, SIGKILL);
      }
    }
  }
}

lifecycle::Observation LocalRun::Observe() {
  lifecycle::Observation obs;
  for (const auto& [index, worker] : workers_) {
    lifecycle::Worker w;
    w.index = index;
    w.attempt = worker.attempt;
    w.deleting = worker.deleting;
    if (const Rank* failed = worker.FirstFailure()) {
      w.phase = lifecycle::WorkerPhase::kFailed;
      w.exit_code = *failed->exit_code;
      w.finished_at = failed->finished_at;
      w.reason = failed->signaled ? "Signaled" : "Error";
      w.message = fmt::format("rank {} {}", failed->rank,
                              SignalDescription(*failed->exit_code, failed->signaled));
    } else if (worker.AllExited()) {
      w.phase = lifecycle::WorkerPhase::kSucceeded;
      w.exit_code = 0;
      for (const Rank& r : worker.ranks)
        w.finished_at = std::max(w.finished_at.value_or(*r.finished_at), *r.finished_at);
    } else {
      w.phase = lifecycle::WorkerPhase::kRunning;
      w.ready = true;
    }
    obs.workers.push_back(std::move(w));
  }
  if (progress_.latest() && progress_.attempt() == status_.attempt)
    obs.progress =
        lifecycle::Observation::ProgressReport{progress_.attempt(), progress_.latest()->step};
  return obs;
}

void LocalRun::PollProgress() {
  if (!trainer_ || Clock::now() < next_poll_)
    return;
  next_poll_ = Clock::now() + std::chrono::milliseconds(
                                  static_cast<int64_t>(options_.progress_interval_seconds * 1000));
  auto it = workers_.find(0);
  if (it == workers_.end() || it->second.deleting || it->second.ranks.empty() ||
      it->second.ranks[0].exit_code) {
    return;
  }
  const LocalWorker& zero = it->second;
  const std::optional<api::ProgressDocument> report =
      FetchProgress(zero.ranks[0].metrics_port, 500);
  if (!report)
    return;
  progress_.Record(*report, zero.attempt, Clock::now());
}

void LocalRun::ReadFinalProgress(int64_t attempt) {
  if (!trainer_)
    return;
  std::ifstream in(FinalProgressPath());
  if (!in)
    return;  // killed, or ended before its trainer was built
  std::ostringstream text;
  text << in.rdbuf();
  if (const std::optional<api::ProgressDocument> report = api::DecodeProgressJson(text.str()))
    progress_.Record(*report, attempt, Clock::now());
}

void LocalRun::ShowProgress(bool force_line) {
  const std::optional<api::ProgressDocument>& latest = progress_.latest();
  if (!latest || latest->step == 0)
    return;  // nothing trained yet (loading data, building the model)
  ProgressView view;
  view.report = *latest;
  view.attempt = status_.attempt;
  view.restarts = status_.restarts;
  view.eta_seconds = progress_.EtaSeconds();
  if (tty_ && !force_line) {
    std::cerr << "\r" << FormatProgressBar(view, TerminalWidth() - 1) << "\x1b[K" << std::flush;
    bar_shown_ = true;
    return;
  }
  if (force_line || Clock::now() >= next_line_) {
    next_line_ = Clock::now() + std::chrono::milliseconds(
                                    static_cast<int64_t>(options_.log_interval_seconds * 1000));
    Say(FormatProgressLine(view));
  }
}

void LocalRun::CreateWorkers(const lifecycle::CreateWorkers& create) {
  // Fresh ports per attempt: the previous attempt's may linger in TIME_WAIT. None of them in
  // the range --metrics-port reserves.
  const int64_t world = api::WorldSize(job_.spec);
  auto reserved = [&](int port) {
    return options_.metrics_port > 0 && port >= options_.metrics_port &&
           port < options_.metrics_port + world;
  };
  int rdzv_port = FreeLoopbackPort();
  while (reserved(rdzv_port))
    rdzv_port = FreeLoopbackPort();
  int master_port = FreeLoopbackPort();
  while (master_port == rdzv_port || reserved(master_port))
    master_port = FreeLoopbackPort();
  const std::string endpoint = fmt::format("127.0.0.1:{}", rdzv_port);
  const std::string token = RandomHex(16);
  const std::string checkpoint_dir = trainer_ ? trainer_->checkpoint.dir : "";
  const char* omp = std::getenv("OMP_NUM_THREADS");
  const std::string threads =
      std::to_string(std::max<int64_t>(1, UsableCores() / std::max<int64_t>(1, world)));

  // Rank 0 writes it as it ends (ReadFinalProgress); a previous attempt's is not this one's.
  std::error_code ignored;
  fs::remove(FinalProgressPath(), ignored);
  for (int64_t index : create.indices) {
    LocalWorker worker;
    worker.index = index;
    worker.attempt = create.attempt;
    auto env = api::WorkerEnvironment(job_, create.attempt, index, endpoint, token);
    for (auto& [key, value] : env) {
      if (key == "MASTER_PORT" || key == "PET_MASTER_PORT")
        value = std::to_string(master_port);
      if (key == "TESSERA_NAMESPACE" && value.empty())
        value = "default";
      if (key == "TESSERA_CHECKPOINT_DIR")
        value = checkpoint_dir;
    }
    if (container_.contains("env") && container_["env"].is_array()) {
      for (const nlohmann::json& e : container_["env"]) {
        if (e.is_object() && e.contains("name") && e["name"].is_string() && e.contains("value") &&
            e["value"].is_string()) {
          env.emplace_back(e["name"].get<std::string>(), e["value"].get<std::string>());
        }
      }
    }
    for (int64_t local = 0; local < procs_per_worker_; ++local) {
      Rank r;
      r.local_rank = local;
      r.rank = index * procs_per_worker_ + local;
      r.metrics_port = options_.metrics_port > 0 ? options_.metrics_port + static_cast<int>(r.rank)
                                                 : FreeLoopbackPort();
      r.log_path =
          (run_dir_ / "logs" / fmt::format("worker-{}-rank-{}.log", index, r.rank)).string();
      ProcessSpec spec;
      spec.env = env;
      for (auto& [key, value] : spec.env) {
        if (key == "TESSERA_METRICS_PORT")
          value = std::to_string(r.metrics_port);
      }
      spec.env.emplace_back("RANK", std::to_string(r.rank));
      spec.env.emplace_back("LOCAL_RANK", std::to_string(local));
      spec.env.emplace_back("LOCAL_WORLD_SIZE", std::to_string(procs_per_worker_));
      spec.env.emplace_back("GROUP_RANK", std::to_string(index));
      if (trainer_ && r.rank == 0)
        spec.env.emplace_back("TESSERA_PROGRESS_FILE", FinalProgressPath().string());
      // Every rank is on this machine: Gloo listens and connects on loopback.
      spec.env.emplace_back("TESSERA_COMM_HOST", "127.0.0.1");
      // A job that asks for GPUs gets one per rank, as the agent pins them in a pod.
      if (job_.spec.gpus_per_worker > 0 && !GpusChosenByUser() && gpus_ > 0)
        spec.env.emplace_back("CUDA_VISIBLE_DEVICES", std::to_string(r.rank % gpus_));
      if (omp == nullptr || *omp == '\0')
        spec.env.emplace_back("OMP_NUM_THREADS", threads);
      if (trainer_) {
        spec.argv = {worker_binary_, "rank", "--config", (run_dir_ / "trainer.yaml").string()};
      } else {
        spec.argv = byo_command_;
      }
      spec.log_path = r.log_path;
      spec.inherited_fd = run_dir_lock_fd_;
      {
        std::ofstream log(r.log_path, std::ios::app);
        log << fmt::format("==== tessera run: attempt {}, worker {}, rank {} ====\n",
                           create.attempt, index, r.rank);
      }
      std::string error;
      r.pid = StartProcessGroup(spec, &error);
      if (r.pid > 0)
        all_groups_.push_back(r.pid);
      if (r.pid < 0) {
        // Reported as a failed rank, so the lifecycle decides (restart or fail) as for a crash.
        Say(fmt::format("worker-{} rank {}: cannot start: {}", index, r.rank, error));
        r.exit_code = 127;
        r.finished_at = std::chrono::system_clock::now();
      }
      worker.ranks.push_back(std::move(r));
    }
    workers_[index] = std::move(worker);
  }
  if (trainer_) {
    const int port = workers_.count(0) ? workers_[0].ranks[0].metrics_port : 0;
    Say(
        fmt::format("attempt {}: {} rank(s) started; rank 0 metrics on "
                    "http://127.0.0.1:{}/metrics and /progress",
                    create.attempt, world, port));
  } else {
    Say(fmt::format("attempt {}: {} rank(s) started: {} (MASTER_ADDR=127.0.0.1 MASTER_PORT={})",
                    create.attempt, world, fmt::join(byo_command_, " "), master_port));
  }
  WriteStatusFile();
}

void LocalRun::DeleteWorkers(const lifecycle::DeleteWorkers& del) {
  for (int64_t index : del.indices) {
    auto it = workers_.find(index);
    if (it == workers_.end())
      continue;
    LocalWorker& worker = it->second;
    if (worker.AllExited()) {
      workers_.erase(it);
      continue;
    }
    if (!worker.deleting || del.force) {
      for (const Rank& r : worker.ranks) {
        if (!r.exit_code)
          Signal(r.pid, del.force ? SIGKILL : SIGTERM);
      }
      worker.deleting = true;
      worker.kill_at = Clock::now() + std::chrono::milliseconds(
                                          static_cast<int64_t>(options_.grace_seconds * 1000));
    }
  }
}

void LocalRun::EnforceKillDeadlines() {
  for (auto it = workers_.begin(); it != workers_.end();) {
    LocalWorker& worker = it->second;
    if (worker.deleting && worker.AllExited()) {
      it = workers_.erase(it);
      continue;
    }
    if (worker.deleting && worker.kill_at && Clock::now() >= *worker.kill_at) {
      for (const Rank& r : worker.ranks) {
        if (!r.exit_code)
          Signal(r.pid, SIGKILL);
      }
      if (!worker.abandon_at)
        worker.abandon_at = Clock::now() + ReapAfterKill();
    }
    if (worker.abandon_at && Clock::now() >= *worker.abandon_at)
      LeaveBehindTheRunning(worker);
    ++it;
  }
}

void LocalRun::Apply(const lifecycle::Action& action) {
  if (const auto* create = std::get_if<lifecycle::CreateWorkers>(&action)) {
    CreateWorkers(*create);
  } else if (const auto* del = std::get_if<lifecycle::DeleteWorkers>(&action)) {
    DeleteWorkers(*del);
  } else if (const auto* event = std::get_if<lifecycle::RecordEvent>(&action)) {
    // Creation events are told by CreateWorkers with the ports; the rest as they come.
    if (event->reason != lifecycle::reason::kWorkersCreated)
      Say(fmt::format("{}: {}", event->reason, event->message));
  }
  // DeleteJob (ttlSecondsAfterFinished) has no local meaning: the run directory stays.
}

void LocalRun::Signal(pid_t pgid, int signal) {
  if (options_.signal_group) {
    options_.signal_group(pgid, signal);
  } else {
    SignalProcessGroup(pgid, signal);
  }
}

void LocalRun::LeaveBehindTheRunning(LocalWorker& worker) {
  for (Rank& r : worker.ranks) {
    if (r.exit_code)
      continue;
    Say(fmt::format(
        "warning: rank {} (pid {}) is still there {} s after SIGKILL ({}): a process stuck in "
        "the kernel, as on a hung filesystem or GPU driver, cannot die until the kernel lets it; "
        "going on without it",
        r.rank, r.pid, options_.reap_after_kill_seconds, worker::KernelState(r.pid)));
    r.exit_code = 128 + SIGKILL;
    r.signaled = true;
    r.finished_at = std::chrono::system_clock::now();
    left_behind_.insert(r.pid);
  }
}

void LocalRun::StopEverything(bool graceful) {
  const auto kill_at =
      Clock::now() +
      std::chrono::milliseconds(static_cast<int64_t>(graceful ? options_.grace_seconds * 1000 : 0));
  const int count_at_start = g_stop_count;
  for (auto& [index, worker] : workers_) {
    worker.deleting = true;  // what they exit with now is our doing, not a failure to report
    for (const Rank& r : worker.ranks) {
      if (!r.exit_code)
        Signal(r.pid, graceful ? SIGTERM : SIGKILL);
    }
  }
  bool killed = !graceful;
  std::optional<Clock::time_point> abandon_at;
  if (killed)
    abandon_at = Clock::now() + ReapAfterKill();
  while (true) {
    Reap();
    bool running = false;
    for (auto& [index, worker] : workers_)
      running = running || !worker.AllExited();
    if (!running)
      break;
    if (abandon_at && Clock::now() >= *abandon_at) {
      for (auto& [index, worker] : workers_)
        LeaveBehindTheRunning(worker);
      break;
    }
    if (!killed && (Clock::now() >= kill_at || g_stop_count > count_at_start)) {
      if (g_stop_count > count_at_start)
        Say("second interrupt: killing every rank now");
      for (auto& [index, worker] : workers_) {
        for (const Rank& r : worker.ranks) {
          if (!r.exit_code)
            Signal(r.pid, SIGKILL);
        }
      }
      killed = true;
      abandon_at = Clock::now() + ReapAfterKill();
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(50));
  }
  // The ranks are gone; what they started may not be. Kill and reap every process left in
  // their groups (orphans come to us as subreaper), for a bounded time.
  const auto give_up = Clock::now() + std::chrono::seconds(10);
  while (true) {
    std::vector<pid_t> left;
    for (pid_t pgid : all_groups_) {
      if (!left_behind_.count(pgid) && ProcessGroupExists(pgid))
        left.push_back(pgid);
    }
    ReapExitedChildren();
    if (left.empty())
      break;
    if (Clock::now() >= give_up) {
      Say(fmt::format("warning: process group {} would not go away", left.front()));
      break;
    }
    for (pid_t pgid : left)
      Signal(pgid, SIGKILL);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  WriteStatusFile();
}

void LocalRun::WriteStatusFile() {
  nlohmann::ordered_json ranks = nlohmann::ordered_json::array();
  for (const auto& [index, worker] : workers_) {
    for (const Rank& r : worker.ranks) {
      nlohmann::ordered_json j = {{"worker", index},   {"attempt", worker.attempt},
                                  {"rank", r.rank},    {"localRank", r.local_rank},
                                  {"pid", r.pid},      {"metricsPort", r.metrics_port},
                                  {"log", r.log_path}, {"running", !r.exit_code.has_value()}};
      if (r.exit_code)
        j["exitCode"] = *r.exit_code;
      ranks.push_back(std::move(j));
    }
  }
  // Once a stop signal came, the run ends Interrupted whatever the lifecycle's phase.
  const std::string phase =
      g_stop_signal != 0 ? "Interrupted" : std::string(lifecycle::ToString(status_.phase));
  const nlohmann::ordered_json doc = {{"job", job_.metadata.name},  {"phase", phase},
                                      {"attempt", status_.attempt}, {"restarts", status_.restarts},
                                      {"runnerPid", ::getpid()},    {"ranks", ranks}};
  const std::string text = doc.dump(2) + "\n";
  if (text != last_status_json_ && WriteFileAtomically(run_dir_ / "status.json", text))
    last_status_json_ = text;
}

Summary LocalRun::BuildSummary(int exit_code, const std::string& phase, const std::string& reason,
                               const std::string& message) {
  Summary s;
  s.phase = phase;
  s.reason = reason;
  s.message = message;
  s.exit_code = exit_code;
  s.wall_seconds = SecondsSince(started_);
  s.restarts = status_.restarts;
  s.attempts = status_.attempt + 1;
  s.run_dir = run_dir_.string();
  if (const std::optional<api::ProgressDocument>& latest = progress_.latest()) {
    s.steps = latest->step;
    s.total_steps = latest->total_steps;
    s.train_loss = latest->loss;
    s.val_loss = latest->val_loss;
  }
  s.tokens_per_second = progress_.MeanTokensPerSecond();
  if (trainer_) {
    s.total_steps = trainer_->schedule.steps;
    // The newest checkpoint, where the run can resume from, holds the exact losses of its
    // step: the last step trained unless the run went on past it.
    if (!trainer_->checkpoint.dir.empty()) {
      train::CheckpointStore store(trainer_->checkpoint.dir);
      train::CheckpointMeta meta;
      if (const std::optional<int64_t> step = store.NewestComplete();
          step && store.ReadMeta(*step, &meta).ok()) {
        s.checkpoint = store.StepDir(*step);
        if (meta.step >= s.steps) {
          s.steps = meta.step;
          s.train_loss = meta.loss;
          if (meta.val_loss)
            s.val_loss = meta.val_loss;
        }
      }
    }
  }
  return s;
}

void LocalRun::PrintSummary(const Summary& s) {
  ClearBar();
  auto loss = [](const std::optional<double>& v) {
    return v ? fmt::format("{:.4f}", *v) : std::string("n/a");
  };
  std::ostringstream out;
  out << fmt::format("\n{} {} in {}", job_.metadata.name, s.phase, FormatDuration(s.wall_seconds));
  if (!s.reason.empty())
    out << fmt::format(" ({}: {})", s.reason, s.message);
  out << "\n";
  if (trainer_) {
    out << fmt::format("  steps        {}/{}\n", s.steps, s.total_steps);
    out << fmt::format("  train loss   {}\n", loss(s.train_loss));
    out << fmt::format("  val loss     {}\n", loss(s.val_loss));
    out << fmt::format("  tokens/s     {}\n", s.tokens_per_second
                                                  ? fmt::format("{:.0f}", *s.tokens_per_second)
                                                  : std::string("n/a"));
  }
  out << fmt::format("  wall time    {:.1f} s\n", s.wall_seconds);
  out << fmt::format("  restarts     {}\n", s.restarts);
  if (trainer_)
    out << fmt::format("  checkpoint   {}\n", s.checkpoint.empty() ? "none" : s.checkpoint);
  out << fmt::format("  logs         {}\n", (run_dir_ / "logs").string());
  std::cout << out.str() << std::flush;
}

bool LocalRun::WriteSummaryJson(const Summary& s) {
  if (options_.summary_json.empty())
    return true;
  auto opt = [](const std::optional<double>& v) {
    return v ? nlohmann::ordered_json(*v) : nlohmann::ordered_json(nullptr);
  };
  nlohmann::ordered_json j = {
      {"job", job_.metadata.name},
      {"phase", s.phase},
      {"reason", s.reason},
      {"message", s.message},
      {"exit_code", s.exit_code},
      {"steps", s.steps},
      {"total_steps", s.total_steps},
      {"final_train_loss", opt(s.train_loss)},
      {"final_val_loss", opt(s.val_loss)},
      {"tokens_per_second", opt(s.tokens_per_second)},
      {"wall_seconds", s.wall_seconds},
      {"restarts", s.restarts},
      {"attempts", s.attempts},
      {"checkpoint", s.checkpoint.empty() ? nlohmann::ordered_json(nullptr)
                                          : nlohmann::ordered_json(s.checkpoint)},
      {"run_dir", s.run_dir},
      {"builtin_trainer", trainer_.has_value()},
  };
  if (!s.sample.empty())
    j["sample"] = s.sample;
  std::ofstream out(options_.summary_json, std::ios::trunc);
  out << j.dump(2) << "\n";
  if (!out) {
    std::cerr << "tessera run: " << options_.summary_json << ": cannot write the summary\n";
    return false;
  }
  return true;
}

int LocalRun::Run() {
  Say(fmt::format(
      "tessera run: job {}: {} worker(s) x {} rank(s), {}; run directory {}", job_.metadata.name,
      job_.spec.workers, procs_per_worker_,
      trainer_ ? "built-in trainer" : "command " + fmt::format("{}", fmt::join(byo_command_, " ")),
      run_dir_.string()));
  while (true) {
    Reap();
    if (g_stop_signal != 0)
      break;
    EnforceKillDeadlines();
    PollProgress();
    const lifecycle::Decision decision =
        lifecycle::Decide(policy_, status_, Observe(), std::chrono::system_clock::now());
    const bool restarted = decision.status.restarts > status_.restarts;
    status_ = decision.status;
    for (const lifecycle::Action& action : decision.actions)
      Apply(action);
    if (restarted)
      progress_.Restarted();
    WriteStatusFile();
    if (lifecycle::IsFinished(status_.phase))
      break;
    if (status_.phase == Phase::kRunning)
      ShowProgress(false);
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }

  if (g_stop_signal != 0) {
    const int signal = g_stop_signal;
    // status.json says Interrupted from now on, as the summary will; the ranks' entries show
    // them stop.
    WriteStatusFile();
    Say(
        fmt::format("{}: asking every rank to checkpoint and stop (SIGTERM; SIGKILL after {} s; "
                    "press Ctrl-C again to kill now)",
                    signal == SIGINT ? "interrupted" : "terminated", options_.grace_seconds));
    StopEverything(/*graceful=*/true);
    const int code = signal == SIGINT ? kRunInterrupted : kRunTerminated;
    const Summary s = BuildSummary(code, "Interrupted", "", "");
    PrintSummary(s);
    WriteSummaryJson(s);
    return code;
  }

  // Finished: the lifecycle's clean-up ran; locally nothing may outlive the run.
  StopEverything(/*graceful=*/true);
  const lifecycle::Condition* failed =
      lifecycle::FindCondition(status_, lifecycle::ConditionType::kFailed);
  int code = kRunSucceeded;
  std::string reason;
  std::string message;
  if (status_.phase == Phase::kFailed) {
    reason = failed ? failed->reason : "";
    message = failed ? failed->message : "";
    code = reason == lifecycle::reason::kPermanentExitCode ? kRunPermanentExit : kRunFailed;
  }
  Summary s = BuildSummary(code, std::string(lifecycle::ToString(status_.phase)), reason, message);
  if (code == kRunSucceeded && trainer_ && options_.sample_chars > 0 &&
      trainer_->data.tokenizer != "byte") {
    Say("sample: only a model trained with the byte tokenizer can be sampled as text");
  } else if (code == kRunSucceeded && trainer_ && options_.sample_chars > 0) {
    SampleOptions sample;
    sample.prompt = options_.sample_prompt;
    sample.length = options_.sample_chars;
    sample.seed = trainer_->seed;
    if (train::Status st = SampleText(*trainer_, sample, &s.sample); !st.ok())
      Say("sample: " + st.message());
  }
  PrintSummary(s);
  if (!s.sample.empty()) {
    std::cout << fmt::format("\nsample ({} bytes after {:?}, temperature 0.8):\n{}{}\n",
                             s.sample.size(), options_.sample_prompt, options_.sample_prompt,
                             s.sample);
  }
  if (!WriteSummaryJson(s) && code == kRunSucceeded)
    code = kRunFailed;
  return code;
}

std::string DefaultWorkerBinary() {
  if (const char* env = std::getenv("TESSERA_WORKER_BINARY"); env != nullptr && *env != '\0')
    return env;
  std::error_code ec;
  const fs::path self = fs::read_symlink("/proc/self/exe", ec);
  if (ec)
    return "tessera-worker";
  return (self.parent_path() / "tessera-worker").string();
}

}  // namespace

int RunJob(const RunOptions& options) {
  api::TrainingJob job;
  if (!LoadJobFile("tessera run", options.file, options.sets, &job))
    return kRunBadConfig;
  if (job.spec.suspend) {
    return BadConfig(options.file +
                     ": spec.suspend is true, so there is nothing to run; set it to false "
                     "(--set spec.suspend=false)");
  }

  if (!options.summary_json.empty()) {
    // Checked now, not after the training it would summarise.
    const fs::path parent = fs::absolute(options.summary_json).parent_path();
    std::error_code ec;
    if (!fs::is_directory(parent, ec) || ::access(parent.c_str(), W_OK) != 0) {
      return BadConfig("--summary-json " + options.summary_json + ": the directory " +
                       parent.string() + " does not exist or is not writable");
    }
  }

  nlohmann::json container = nlohmann::json::object();
  const std::vector<std::string> byo = WorkerCommand(job, &container);
  std::optional<train::TrainerConfig> trainer;
  std::string worker_binary;
  const fs::path run_dir = fs::absolute(
      options.workdir.empty() ? fs::path("runs") / job.metadata.name : fs::path(options.workdir));
  if (!byo.empty()) {
    // Here the command runs on this machine, so a missing one is the job's mistake, said once,
    // rather than exit code 127 from every rank and a gang restart after each.
    if (const std::string why = WhyNotExecutable(byo.front()); !why.empty()) {
      return BadConfig(fmt::format(
          "{}: spec.template.spec.containers[{}].command[0]: {}: {}; give a path to an "
          "executable, relative to the working directory ({}), or a name on PATH",
          options.file, *WorkerContainerIndex(job), byo.front(), why, fs::current_path().string()));
    }
  } else {
    if (!job.spec.trainer) {
      return BadConfig(options.file +
                       ": spec.trainer: missing, and the worker container has no command; give "
                       "one of them");
    }
    const int64_t world = api::WorldSize(job.spec);
    train::TrainerConfig config;
    if (train::Status st = train::TrainerConfigFromJob(job, &config); !st.ok())
      return BadConfig(options.file + ": " + st.message());
    std::error_code ec;
    if (!fs::is_regular_file(config.data.path, ec)) {
      return BadConfig(fmt::format(
          "{}: spec.trainer.data.path: {}: no such file (relative paths are relative to the "
          "working directory, {})",
          options.file, config.data.path, fs::current_path().string()));
    }
    config.data.path = fs::absolute(config.data.path).string();
    // Locally the job's checkpoint.dir (a path inside the pod) is replaced by the run
    // directory's; cadence and retention stay as the job says.
    if (job.spec.trainer->checkpoint)
      config.checkpoint.dir = (run_dir / "checkpoints").string();
    config.metrics.port = 0;
    train::TrainingPlan plan;  // refuses what ValidateTrainerConfig refuses
    if (train::Status st = train::PlanTraining(
            config, static_cast<int>(world), static_cast<int>(job.spec.parallelism.pipeline),
            static_cast<int>(job.spec.parallelism.tensor), &plan);
        !st.ok())
      return BadConfig(options.file + ": " + st.message());
    // Every rank runs here: together they must fit in this machine's memory (each rank checks
    // only its own share, and all of them start at once).
    if (config.precision == train::Precision::kFp32) {
      const std::optional<int64_t> available = train::AvailableMemoryBytes();
      if (available && plan.all_ranks_bytes() > *available) {
        return BadConfig(fmt::format(
            "{}: spec.trainer.batch.global, spec.trainer.model.seqLen: the {} ranks need {} "
            "together (the largest {}), and this machine has {} available; lower batch.global "
            "or model.seqLen, raise parallelism.microBatches, or run fewer ranks (tessera plan "
            "shows every rank's figures)",
            options.file, world, train::FormatBytes(plan.all_ranks_bytes()),
            train::FormatBytes(plan.largest_rank_bytes()), train::FormatBytes(*available)));
      }
    }
    // bf16 is the GPU model, with NCCL between ranks: one GPU each.
    if (config.precision == train::Precision::kBf16 && !GpusChosenByUser() &&
        LocalGpuCount() < world) {
      return BadConfig(fmt::format(
          "{}: spec.trainer.precision: bf16 needs a GPU per rank: {} rank(s), and this machine "
          "has {} (/dev/nvidia*); lower spec.workers x procsPerWorker, or use fp32 to train on "
          "the CPU",
          options.file, world, LocalGpuCount()));
    }
    trainer = config;
    worker_binary = options.worker_binary.empty() ? DefaultWorkerBinary() : options.worker_binary;
    if (::access(worker_binary.c_str(), X_OK) != 0) {
      const char* env = std::getenv("TESSERA_WORKER_BINARY");
      if (options.worker_binary.empty() && env != nullptr && *env != '\0') {
        return BadConfig(worker_binary +
                         " (from TESSERA_WORKER_BINARY): tessera-worker not found or not "
                         "executable; point TESSERA_WORKER_BINARY at tessera-worker, unset it to "
                         "use the one next to tessera, or pass --worker-binary");
      }
      return BadConfig(worker_binary +
                       ": tessera-worker not found or not executable; build it next to tessera, "
                       "set TESSERA_WORKER_BINARY or pass --worker-binary");
    }
  }

  if (options.metrics_port > 0) {
    // Checked before anything starts: a rank that cannot bind its port would fail every
    // attempt the same way.
    const int64_t world = api::WorldSize(job.spec);
    const int64_t last = options.metrics_port + world - 1;
    if (last > 65535) {
      return BadConfig(fmt::format(
          "--metrics-port {}: the {} rank(s) need ports {}..{}, past 65535; choose a port of at "
          "most {}",
          options.metrics_port, world, options.metrics_port, last, 65536 - world));
    }
    for (int64_t rank = 0; rank < world; ++rank) {
      const int port = options.metrics_port + static_cast<int>(rank);
      if (!PortIsFree(port)) {
        return BadConfig(fmt::format(
            "--metrics-port {}: port {} (rank {}) is in use; choose another port (the ranks "
            "take {}..{}) or leave --metrics-port out",
            options.metrics_port, port, rank, options.metrics_port, last));
      }
    }
  }

  std::error_code ec;
  fs::create_directories(run_dir / "logs", ec);
  if (ec)
    return BadConfig(run_dir.string() + ": cannot create the run directory: " + ec.message());
  // One `tessera run` per run directory at a time. The lock goes with the process and with the
  // ranks it starts, which inherit it: a runner killed by SIGKILL leaves ranks that checkpoint
  // and stop (PR_SET_PDEATHSIG), and a second run must not start on the directory meanwhile.
  const int lock_fd = ::open((run_dir / ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0644);
  if (lock_fd < 0 || ::flock(lock_fd, LOCK_EX | LOCK_NB) != 0) {
    return BadConfig(run_dir.string() +
                     ": another tessera run is using this run directory (or the ranks of one "
                     "that was killed are still checkpointing); wait for it or pass --workdir");
  }
  if (!options.resume) {
    // A fresh start: the previous run's checkpoints go, said in one line (they are the work of
    // that run), and all of them or the run does not start (a rank would resume from a
    // leftover).
    const fs::path checkpoints = run_dir / "checkpoints";
    const std::vector<int64_t> steps = train::CheckpointStore(checkpoints.string()).CompleteSteps();
    fs::remove_all(checkpoints, ec);
    if (ec) {
      ::close(lock_fd);
      return BadConfig(fmt::format(
          "{}: cannot remove the previous run's checkpoints ({}); remove them yourself, or run "
          "with --resume to continue from them",
          checkpoints.string(), ec.message()));
    }
    if (!steps.empty()) {
      std::cout << fmt::format(
          "tessera run: {}: removed the previous run's {} checkpoint(s), the newest step-{} "
          "(--resume continues from them instead)\n",
          checkpoints.string(), steps.size(), steps.back());
    }
    for (const auto& entry : fs::directory_iterator(run_dir / "logs", ec))
      fs::remove(entry.path(), ec);
  }
  nlohmann::json resolved = api::EncodeJson(job);
  if (!WriteFileAtomically(run_dir / "job.json", resolved.dump(2) + "\n") ||
      (trainer &&
       !WriteFileAtomically(run_dir / "trainer.yaml", train::TrainerConfigYaml(*trainer)))) {
    ::close(lock_fd);
    return BadConfig(run_dir.string() + ": cannot write into the run directory");
  }

  g_stop_signal = 0;
  g_stop_count = 0;
  struct sigaction action {};
  action.sa_handler = OnStopSignal;
  sigemptyset(&action.sa_mask);
  struct sigaction old_int {
  }, old_term{}, old_pipe{};
  ::sigaction(SIGINT, &action, &old_int);
  ::sigaction(SIGTERM, &action, &old_term);
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  ::sigaction(SIGPIPE, &ignore, &old_pipe);

  BecomeSubreaper();
  LocalRun run(options, std::move(job), std::move(trainer), byo, std::move(container), run_dir,
               worker_binary, lock_fd);
  const int rc = run.Run();

  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  ::sigaction(SIGPIPE, &old_pipe, nullptr);
  ::close(lock_fd);
  return rc;
}

int LocalGpuCount() {
  int count = 0;
  std::error_code ec;
  while (fs::exists("/dev/nvidia" + std::to_string(count), ec))
    ++count;
  return count;
}

bool GpusChosenByUser() {
  return std::getenv("CUDA_VISIBLE_DEVICES") != nullptr;
}

}  // namespace tessera::cli
