// What `tessera run` (RunJob in cli/run/runner.h) makes of its ranks: restarts and the backoff
// limit, permanent exit codes, which rank is blamed, which ranks are killed and which get the
// grace period, signals to the runner, the environment each rank gets, and the checks made
// before anything starts, and what it shows of rank 0's progress. Every case is a
// bring-your-own-command job whose ranks run a small sh script, but the progress cases: there
// the built-in trainer's rank is a stand-in (--worker-binary) serving /progress documents. RunJob
// runs in a child process of its own (it forks ranks, installs signal handlers and becomes a
// subreaper), with an alarm that turns a hang into a failure. The child's output goes to out.txt in
// the case's directory, which the test reads afterwards with the run directory's status.json and
// the summary.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <sched.h>
#include <signal.h>
#include <sys/file.h>
#include <sys/ioctl.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <initializer_list>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include <nlohmann/json.hpp>

#include "cli/run/command.h"
#include "cli/run/process.h"
#include "cli/run/progress.h"
#include "cli/run/runner.h"
#include "tests/unit/test_files.h"
#include "worker/train/checkpoint.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::ReadEnv;
using testing::ReadFile;

nlohmann::json ReadJson(const fs::path& path) {
  return nlohmann::json::parse(ReadFile(path), nullptr, /*allow_exceptions=*/false);
}

// Waits up to 10 s for `path` to exist.
bool WaitForFile(const fs::path& path) {
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!fs::exists(path)) {
    if (std::chrono::steady_clock::now() >= deadline)
      return false;
    std::this_thread::sleep_for(5ms);
  }
  return true;
}

// One job in a directory of its own (emptied first): `workers` x `procs` ranks, each running
// `script` with sh, with DIR (the case's directory) in its environment. `spec` is added to
// the job's spec as YAML lines, indented by two spaces; the default allows no restart.
struct LocalJob {
  LocalJob(int workers, int procs, const std::string& script,
           const std::string& spec = "  runPolicy: {backoffLimit: 0}\n") {
    dir = fs::path(::testing::TempDir()) /
          (std::string("runner-outcome-") +
           ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
    std::ofstream(dir / "rank.sh") << script;
    std::ofstream(dir / "job.yaml")
        << "apiVersion: tessera.dev/v1alpha1\n"
           "kind: TrainingJob\n"
           "metadata: {name: local}\n"
           "spec:\n"
           "  workers: "
        << workers << "\n  procsPerWorker: " << procs
        << "\n"
           "  template:\n"
           "    spec:\n"
           "      containers:\n"
           "      - name: worker\n"
           "        command: [sh, "
        << (dir / "rank.sh").string()
        << "]\n"
           "        env: [{name: DIR, value: "
        << dir.string() << "}, {name: FROM_THE_CONTAINER, value: container}]\n"
        << spec;
    options.file = (dir / "job.yaml").string();
    options.workdir = (dir / "run").string();
    options.summary_json = (dir / "summary.json").string();
    options.grace_seconds = 30;
    options.reap_after_kill_seconds = 5;
  }

  // RunJob's exit code, from a child process; -1 when it did not exit.
  int Run(const std::function<void()>& before = nullptr) const {
    const pid_t pid = ::fork();
    if (pid == 0) {
      ::alarm(60);
      const int out = ::open((dir / "out.txt").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
      ::dup2(out, STDOUT_FILENO);
      ::dup2(out, STDERR_FILENO);
      if (before)
        before();
      const int code = RunJob(options);
      std::fflush(stdout);
      std::cout.flush();
      ::_exit(code);
    }
    int status = 0;
    ::waitpid(pid, &status, 0);
    return WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  }

  std::string Out() const { return ReadFile(dir / "out.txt"); }
  nlohmann::json Summary() const { return ReadJson(dir / "summary.json"); }
  nlohmann::json Status() const { return ReadJson(dir / "run" / "status.json"); }
  // The exit code status.json gives rank `rank`, -1 when none.
  int RankExitCode(int rank) const {
    const nlohmann::json status = Status();
    for (const auto& r : status["ranks"]) {
      if (r["rank"] == rank)
        return r.value("exitCode", -1);
    }
    return -1;
  }

  fs::path dir;
  RunOptions options;
};

TEST(RunnerOutcomeTest, AFailingGangIsRestartedUntilTheBackoffLimitThenTheRunFails) {
  LocalJob job(1, 1, "echo \"$TESSERA_ATTEMPT\" >> \"$DIR/attempts\"; exit 1\n",
               "  runPolicy: {backoffLimit: 2}\n");
  EXPECT_EQ(job.Run(), kRunFailed);
  EXPECT_EQ(ReadFile(job.dir / "attempts"), "0\n1\n2\n");
  const nlohmann::json s = job.Summary();
  EXPECT_EQ(s["phase"], "Failed");
  EXPECT_EQ(s["reason"], "BackoffLimitExceeded");
  EXPECT_EQ(s["exit_code"], kRunFailed);
  EXPECT_EQ(s["restarts"], 2);
  EXPECT_EQ(s["attempts"], 3);
  EXPECT_EQ(job.Status()["phase"], "Failed");
}

TEST(RunnerOutcomeTest, AGangThatSucceedsAfterARestartEndsTheRunWithZero) {
  LocalJob job(1, 2, "[ \"$TESSERA_ATTEMPT\" = 0 ] && [ \"$RANK\" = 1 ] && exit 1\nexit 0\n",
               "  runPolicy: {backoffLimit: 3}\n");
  EXPECT_EQ(job.Run(), kRunSucceeded);
  const nlohmann::json s = job.Summary();
  EXPECT_EQ(s["phase"], "Succeeded");
  EXPECT_EQ(s["exit_code"], kRunSucceeded);
  EXPECT_EQ(s["restarts"], 1);
  EXPECT_EQ(s["attempts"], 2);
  EXPECT_EQ(job.Status()["phase"], "Succeeded");
}

TEST(RunnerOutcomeTest, APermanentExitCodeFailsTheJobAtOnceWithItsOwnExitCode) {
  LocalJob job(1, 1, "echo \"$TESSERA_ATTEMPT\" >> \"$DIR/attempts\"; exit 42\n",
               "  runPolicy: {backoffLimit: 3, permanentExitCodes: [42]}\n");
  EXPECT_EQ(job.Run(), kRunPermanentExit);
  EXPECT_EQ(ReadFile(job.dir / "attempts"), "0\n");
  const nlohmann::json s = job.Summary();
  EXPECT_EQ(s["reason"], "PermanentExitCode");
  EXPECT_EQ(s["restarts"], 0);
  EXPECT_NE(s["message"].get<std::string>().find("42"), std::string::npos) << s["message"];
}

TEST(RunnerOutcomeTest, ARankKilledBySignalNIsReportedWithExitCode128PlusN) {
  LocalJob job(1, 1, "kill -9 $$\n");
  EXPECT_EQ(job.Run(), kRunFailed);
  EXPECT_EQ(job.RankExitCode(0), 137);
  EXPECT_NE(job.Summary()["message"].get<std::string>().find("137"), std::string::npos);
  EXPECT_NE(job.Out().find("worker-0 rank 0 (pid "), std::string::npos);
  EXPECT_NE(job.Out().find(") killed by signal 9 (SIGKILL); last lines of"), std::string::npos)
      << job.Out();
}

TEST(RunnerOutcomeTest, TheRankThatFailedFirstIsBlamedNotTheOneKilledBecauseOfIt) {
  // Rank 0 is killed (137) when rank 1 fails, in a later poll.
  LocalJob job(1, 2,
               "if [ \"$RANK\" = 1 ]; then echo line-of-rank-1; exit 4; fi\n"
               "sleep 30 & wait\n");
  EXPECT_EQ(job.Run(), kRunFailed);
  EXPECT_EQ(job.RankExitCode(0), 137);
  EXPECT_EQ(job.RankExitCode(1), 4);
  const std::string out = job.Out();
  EXPECT_NE(out.find("worker-0 rank 1 (pid "), std::string::npos) << out;
  EXPECT_NE(out.find(") exited with code 4; last lines of"), std::string::npos) << out;
  EXPECT_NE(out.find("  | line-of-rank-1"), std::string::npos) << out;
  EXPECT_EQ(out.find("worker-0 rank 0 (pid "), std::string::npos) << out;
  EXPECT_NE(job.Summary()["message"].get<std::string>().find("exit code 4"), std::string::npos)
      << job.Summary()["message"];
}

TEST(RunnerOutcomeTest, ALostPeerIsNotBlamedWhenAnotherRankFailedInTheSamePoll) {
  // Rank 0 exits 0 at once; when the runner, having reaped it, kills what it left in its
  // group, the hook lets ranks 1 (exit 6, a lost peer) and 2 (exit 4) go and waits until both
  // have exited, so that the runner's next poll finds them together.
  LocalJob job(1, 3,
               "[ \"$RANK\" = 0 ] && exit 0\n"
               "echo $$ > \"$DIR/pid-$RANK.tmp\"; mv \"$DIR/pid-$RANK.tmp\" \"$DIR/pid-$RANK\"\n"
               "while [ ! -f \"$DIR/go\" ]; do sleep 0.01; done\n"
               "[ \"$RANK\" = 1 ] && exit 6\n"
               "exit 4\n");
  const fs::path dir = job.dir;
  bool released = false;
  job.options.signal_group = [dir, released](pid_t pgid, int signal) mutable {
    if (signal == SIGKILL && !released) {
      released = true;
      std::ofstream(dir / "go");
      for (int rank : {1, 2}) {
        const fs::path pid_file = dir / ("pid-" + std::to_string(rank));
        if (!WaitForFile(pid_file))
          break;  // the outcome will show it
        const pid_t pid = std::stoi(ReadFile(pid_file));
        siginfo_t info{};
        const auto deadline = std::chrono::steady_clock::now() + 10s;
        while (info.si_pid != pid && std::chrono::steady_clock::now() < deadline &&
               ::waitid(P_PID, pid, &info, WEXITED | WNOHANG | WNOWAIT) == 0) {
          std::this_thread::sleep_for(5ms);
        }
      }
    }
    ::kill(-pgid, signal);
  };
  EXPECT_EQ(job.Run(), kRunFailed);
  EXPECT_EQ(job.RankExitCode(1), 6);
  EXPECT_EQ(job.RankExitCode(2), 4);
  const std::string out = job.Out();
  EXPECT_NE(out.find("worker-0 rank 2 (pid "), std::string::npos) << out;
  EXPECT_EQ(out.find("worker-0 rank 1 (pid "), std::string::npos) << out;
  EXPECT_NE(job.Summary()["message"].get<std::string>().find("exit code 4"), std::string::npos)
      << job.Summary()["message"];
}

// Ranks that wait for SIGTERM: on it they take `delay` seconds (a checkpoint), then leave a
// file term-<RANK> and exit 0. Each says it is ready (ready-<RANK>) once its trap is set.
std::string StopsOnSigterm(const std::string& delay) {
  return "trap 'sleep " + delay +
         "; echo term > \"$DIR/term-$RANK\"; exit 0' TERM\n"
         "touch \"$DIR/ready-$RANK\"\n"
         "sleep 30 & wait\n";
}

// Waits (at most 10 s) until ready-0 .. ready-<ranks - 1> exist in $DIR.
std::string WaitForReady(int ranks) {
  std::string script = "i=0; while [ $i -lt 1000 ]; do n=0\n";
  for (int r = 0; r < ranks; ++r)
    script += "  [ -f \"$DIR/ready-" + std::to_string(r) + "\" ] && n=$((n+1))\n";
  script += "  [ $n = " + std::to_string(ranks) + " ] && break; sleep 0.01; i=$((i+1)); done\n";
  return script;
}

TEST(RunnerOutcomeTest, AFailedRankKillsItsWorkersOtherRanksAndTheOtherWorkersGetTheGrace) {
  // Worker 1 is ranks 2 and 3; in attempt 0 rank 3 fails once the others are ready, and the
  // gang is stopped for a restart; attempt 1 succeeds.
  LocalJob job(2, 2,
               "[ \"$TESSERA_ATTEMPT\" = 1 ] && exit 0\n"
               "if [ \"$RANK\" = 3 ]; then\n" +
                   WaitForReady(3) + "  exit 5\nfi\n" + StopsOnSigterm("1"),
               "  runPolicy: {backoffLimit: 1}\n");
  EXPECT_EQ(job.Run(), kRunSucceeded);
  EXPECT_TRUE(fs::exists(job.dir / "term-0"));
  EXPECT_TRUE(fs::exists(job.dir / "term-1"));
  EXPECT_FALSE(fs::exists(job.dir / "term-2")) << "rank 2 was asked to stop, not killed";
  const std::string out = job.Out();
  EXPECT_NE(out.find("worker-1 rank 3 (pid "), std::string::npos) << out;
  EXPECT_NE(out.find(") exited with code 5; last lines of"), std::string::npos) << out;
  EXPECT_EQ(out.find("worker-0 rank"), std::string::npos) << "a stopped worker is no failure";
}

TEST(RunnerOutcomeTest, ARankOfAnotherWorkerThatIgnoresSigtermIsKilledAfterTheGrace) {
  // In attempt 0 rank 1 fails and the gang is stopped for a restart; attempt 1 succeeds.
  LocalJob job(2, 1,
               "[ \"$TESSERA_ATTEMPT\" = 1 ] && exit 0\n"
               "if [ \"$RANK\" = 1 ]; then\n" +
                   WaitForReady(1) +
                   "  exit 5\nfi\n"
                   "trap '' TERM; touch \"$DIR/ready-0\"; sleep 30\n",
               "  runPolicy: {backoffLimit: 1}\n");
  job.options.grace_seconds = 0.2;
  EXPECT_EQ(job.Run(), kRunSucceeded);
  EXPECT_EQ(job.Out().find("still there"), std::string::npos) << job.Out();
}

TEST(RunnerOutcomeTest, SigtermToTheRunnerGivesEveryRankTheGraceAndExits143) {
  // Rank 1 sends SIGTERM to the runner, its parent, once rank 0 is ready.
  LocalJob job(1, 2,
               "if [ \"$RANK\" = 1 ]; then\n" + WaitForReady(1) +
                   "  kill -TERM $PPID\n  sleep 30 & wait; exit 0\nfi\n" + StopsOnSigterm("1"));
  EXPECT_EQ(job.Run(), kRunTerminated);
  EXPECT_TRUE(fs::exists(job.dir / "term-0")) << "rank 0 was killed before the grace ended";
  const nlohmann::json s = job.Summary();
  EXPECT_EQ(s["phase"], "Interrupted");
  EXPECT_EQ(s["exit_code"], kRunTerminated);
  EXPECT_EQ(job.Status()["phase"], "Interrupted");
  EXPECT_EQ(job.Out().find("would not go away"), std::string::npos) << job.Out();
}

TEST(RunnerOutcomeTest, SigintToTheRunnerExits130) {
  LocalJob job(1, 1, "kill -INT $PPID; sleep 30 & wait\n");
  EXPECT_EQ(job.Run(), kRunInterrupted);
  EXPECT_EQ(job.Summary()["phase"], "Interrupted");
}

TEST(RunnerOutcomeTest, ARankThatIgnoresSigtermWhenTheRunnerIsStoppedIsKilledAfterTheGrace) {
  LocalJob job(1, 1, "trap '' TERM; kill -TERM $PPID; sleep 30\n");
  job.options.grace_seconds = 0.2;
  // SIGKILL takes half a second to land (a helper process sends it), as for a process with a
  // lot of memory to give back: the runner waits for it, well within reap_after_kill.
  job.options.signal_group = [](pid_t pgid, int signal) {
    if (signal != SIGKILL) {
      ::kill(-pgid, signal);
    } else if (::fork() == 0) {
      ::usleep(500 * 1000);
      ::kill(-pgid, SIGKILL);
      ::_exit(0);
    }
  };
  EXPECT_EQ(job.Run(), kRunTerminated);
  EXPECT_EQ(job.RankExitCode(0), 137);
  EXPECT_EQ(job.Out().find("still there"), std::string::npos) << job.Out();
}

TEST(RunnerOutcomeTest, ARankOutlivingSigkillInAGangRestartIsLeftBehindAndTheNextAttemptRuns) {
  // SIGKILL lost, as for a process stuck in the kernel; in attempt 0 rank 0 ignores SIGTERM
  // and rank 1 fails; attempt 1 succeeds.
  LocalJob job(
      2, 1,
      "[ \"$TESSERA_ATTEMPT\" = 1 ] && exit 0\n"
      "if [ \"$RANK\" = 1 ]; then\n" +
          WaitForReady(1) +
          "  exit 5\nfi\n"
          "trap '' TERM; echo $$ > \"$DIR/stuck\"; touch \"$DIR/ready-0\"; exec sleep 30\n",
      "  runPolicy: {backoffLimit: 1}\n");
  job.options.grace_seconds = 0.2;
  job.options.reap_after_kill_seconds = 0.5;
  job.options.signal_group = [](pid_t pgid, int signal) {
    if (signal != SIGKILL)
      ::kill(-pgid, signal);
  };
  EXPECT_EQ(job.Run(), kRunSucceeded);
  const std::string out = job.Out();
  EXPECT_NE(out.find("warning: rank 0 (pid "), std::string::npos) << out;
  EXPECT_NE(out.find("is still there 0.5 s after SIGKILL"), std::string::npos) << out;
  ::kill(-std::stoi(ReadFile(job.dir / "stuck")), SIGKILL);
}

TEST(RunnerOutcomeTest, ARankExitingWith128WasNotKilledByASignal) {
  LocalJob job(1, 1, "exit 128\n");
  EXPECT_EQ(job.Run(), kRunFailed);
  EXPECT_NE(job.Out().find(") exited with code 128; last lines of"), std::string::npos)
      << job.Out();
  EXPECT_NE(
      job.Summary()["message"].get<std::string>().find("(Error: rank 0 exited with code 128)"),
      std::string::npos)
      << job.Summary()["message"];
}

// A built-in rank that a signal stopped, and every rank that stopped with it, exits 143
// itself after its checkpoint: no signal killed it, and none may be named (after SIGTERM to
// rank 1 alone, rank 0 was reported "killed by signal 15 (SIGTERM)").
TEST(RunnerOutcomeTest, ARankExitingWith143ItselfWasNotKilledBySigterm) {
  LocalJob job(1, 1, "exit 143\n");
  EXPECT_EQ(job.Run(), kRunFailed);
  EXPECT_EQ(job.RankExitCode(0), 143);
  EXPECT_NE(job.Out().find(") exited with code 143; last lines of"), std::string::npos)
      << job.Out();
  EXPECT_EQ(job.Out().find("killed by signal"), std::string::npos) << job.Out();
  EXPECT_NE(
      job.Summary()["message"].get<std::string>().find("(Error: rank 0 exited with code 143)"),
      std::string::npos)
      << job.Summary()["message"];
}

TEST(RunnerOutcomeTest, ARankKilledBySigtermIsSaidToBe) {
  LocalJob job(1, 1, "kill -TERM $$\n");
  EXPECT_EQ(job.Run(), kRunFailed);
  EXPECT_EQ(job.RankExitCode(0), 143);
  EXPECT_NE(job.Out().find(") killed by signal 15 (SIGTERM); last lines of"), std::string::npos)
      << job.Out();
  EXPECT_NE(job.Summary()["message"].get<std::string>().find(
                "(Signaled: rank 0 killed by signal 15 (SIGTERM))"),
            std::string::npos)
      << job.Summary()["message"];
}

TEST(RunnerOutcomeTest, ARankThatOutlivesSigkillWhenTheRunnerIsStoppedIsLeftBehindNamed) {
  // SIGKILL lost, as for a process stuck in the kernel; the rank ignores SIGTERM.
  LocalJob job(1, 1, "trap '' TERM; kill -TERM $PPID; exec sleep 30\n");
  job.options.grace_seconds = 0.2;
  job.options.reap_after_kill_seconds = 0.5;
  job.options.signal_group = [](pid_t pgid, int signal) {
    if (signal != SIGKILL)
      ::kill(-pgid, signal);
  };
  EXPECT_EQ(job.Run(), kRunTerminated);
  const std::string out = job.Out();
  EXPECT_NE(out.find("warning: rank 0 (pid "), std::string::npos) << out;
  EXPECT_NE(out.find("is still there 0.5 s after SIGKILL"), std::string::npos) << out;
  EXPECT_EQ(out.find("would not go away"), std::string::npos) << out;
  EXPECT_EQ(job.RankExitCode(0), 137);
  ::kill(-static_cast<pid_t>(job.Status()["ranks"][0]["pid"].get<int>()), SIGKILL);
}

// A port p such that p .. p + count - 1 are free now.
int FreePorts(int count) {
  for (int tries = 0; tries < 100; ++tries) {
    const int base = FreeLoopbackPort();
    bool free = base > 0 && base + count - 1 <= 65535;
    for (int p = base; free && p < base + count; ++p)
      free = PortIsFree(p);
    if (free)
      return base;
  }
  return 0;
}

TEST(RunnerOutcomeTest, EveryRankGetsTheEnvironmentOfItsPlaceInTheGang) {
  // Ranks of worker 0 wait for worker 1's, which the job's success would otherwise stop.
  LocalJob job(2, 2,
               "env > \"$DIR/env-$RANK.tmp\"; mv \"$DIR/env-$RANK.tmp\" \"$DIR/env-$RANK\"\n"
               "[ \"$GROUP_RANK\" = 0 ] && while [ ! -f \"$DIR/env-2\" ] || [ ! -f "
               "\"$DIR/env-3\" ]; do sleep 0.01; done\n"
               "exit 0\n");
  job.options.metrics_port = FreePorts(4);
  ASSERT_GT(job.options.metrics_port, 0);
  EXPECT_EQ(job.Run([] { ::unsetenv("OMP_NUM_THREADS"); }), kRunSucceeded);
  cpu_set_t cpus;
  ASSERT_EQ(sched_getaffinity(0, sizeof(cpus), &cpus), 0);
  const std::string threads = std::to_string(std::max(1, CPU_COUNT(&cpus) / 4));
  std::string master_port;
  for (int rank = 0; rank < 4; ++rank) {
    SCOPED_TRACE("rank " + std::to_string(rank));
    std::map<std::string, std::string> env = ReadEnv(job.dir / ("env-" + std::to_string(rank)));
    EXPECT_EQ(env["RANK"], std::to_string(rank));
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(rank % 2));
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
    EXPECT_EQ(env["GROUP_RANK"], std::to_string(rank / 2));
    EXPECT_EQ(env["TESSERA_NODE_RANK"], std::to_string(rank / 2));
    EXPECT_EQ(env["WORLD_SIZE"], "4");
    EXPECT_EQ(env["TESSERA_ATTEMPT"], "0");
    EXPECT_EQ(env["TESSERA_NAMESPACE"], "default");
    EXPECT_EQ(env["TESSERA_COMM_HOST"], "127.0.0.1");
    EXPECT_EQ(env["TESSERA_METRICS_PORT"], std::to_string(job.options.metrics_port + rank));
    EXPECT_EQ(env["TESSERA_CHECKPOINT_DIR"], "");
    EXPECT_EQ(env["MASTER_ADDR"], "127.0.0.1");
    EXPECT_EQ(env["PET_MASTER_PORT"], env["MASTER_PORT"]);
    EXPECT_EQ(env["FROM_THE_CONTAINER"], "container");
    EXPECT_EQ(env["OMP_NUM_THREADS"], threads);
    if (rank == 0)
      master_port = env["MASTER_PORT"];
    EXPECT_EQ(env["MASTER_PORT"], master_port) << "one master for the whole gang";
  }
  EXPECT_NE(master_port, "29500") << "a free port, not the pod's";
}

TEST(RunnerOutcomeTest, ARanksThreadsAreTheUsersWhenOmpNumThreadsIsSetElseTheCoresShared) {
  LocalJob job(1, 1, "echo \"$OMP_NUM_THREADS\" > \"$DIR/threads\"\n");
  EXPECT_EQ(job.Run([] { ::setenv("OMP_NUM_THREADS", "3", 1); }), kRunSucceeded);
  EXPECT_EQ(ReadFile(job.dir / "threads"), "3\n");
  // Unset, one rank gets every usable core.
  EXPECT_EQ(job.Run([] { ::unsetenv("OMP_NUM_THREADS"); }), kRunSucceeded);
  cpu_set_t cpus;
  ASSERT_EQ(sched_getaffinity(0, sizeof(cpus), &cpus), 0);
  EXPECT_EQ(ReadFile(job.dir / "threads"), std::to_string(CPU_COUNT(&cpus)) + "\n");
}

TEST(RunnerOutcomeTest, ARankThatCannotStartFailsTheAttemptWithExitCode127) {
  // Its log file is a directory (kept by --resume), so it cannot be opened.
  LocalJob job(1, 1, "exit 0\n");
  fs::create_directories(job.dir / "run" / "logs" / "worker-0-rank-0.log");
  job.options.resume = true;
  EXPECT_EQ(job.Run(), kRunFailed);
  EXPECT_NE(job.Out().find("worker-0 rank 0: cannot start: "), std::string::npos) << job.Out();
  EXPECT_EQ(job.RankExitCode(0), 127);
}

TEST(RunnerOutcomeTest, RunningRanksAreReadySoTheStartupTimeoutDoesNotEndTheRun) {
  // Running ranks are ready: the job runs past its 1 s startup timeout and succeeds.
  LocalJob job(1, 1, "sleep 2; exit 0\n",
               "  runPolicy: {backoffLimit: 0}\n  scheduling: {startupTimeoutSeconds: 1}\n");
  EXPECT_EQ(job.Run(), kRunSucceeded);
}

TEST(RunnerOutcomeTest, RunningAgainWithoutResumeStartsNewLogsAndResumeKeepsThem) {
  LocalJob job(1, 1, "echo ran\n");
  const fs::path log = job.dir / "run" / "logs" / "worker-0-rank-0.log";
  ASSERT_EQ(job.Run(), kRunSucceeded);
  std::ofstream(job.dir / "run" / "logs" / "old.log") << "old\n";
  ASSERT_EQ(job.Run(), kRunSucceeded);
  EXPECT_EQ(ReadFile(log), "==== tessera run: attempt 0, worker 0, rank 0 ====\nran\n");
  EXPECT_FALSE(fs::exists(job.dir / "run" / "logs" / "old.log"));
  job.options.resume = true;
  ASSERT_EQ(job.Run(), kRunSucceeded);
  EXPECT_EQ(ReadFile(log),
            "==== tessera run: attempt 0, worker 0, rank 0 ====\nran\n"
            "==== tessera run: attempt 0, worker 0, rank 0 ====\nran\n");
}

TEST(RunnerOutcomeTest, ASummaryThatCannotBeWrittenFailsASucceededRun) {
  LocalJob job(1, 1, "exit 0\n");
  fs::create_directories(job.dir / "summary.json");  // a directory: not writable as a file
  EXPECT_EQ(job.Run(), kRunFailed);
  EXPECT_NE(job.Out().find("cannot write the summary"), std::string::npos) << job.Out();
}

// `tessera run` killed by SIGKILL: its ranks get SIGTERM and go on to checkpoint and stop. Until
// the last has exited the run directory stays locked (the ranks inherit the lock), so a second
// run cannot start on it meanwhile; once only the lock went with the runner, and a `--resume`
// started at once resumed from an older checkpoint while the orphan wrote a newer one (then
// refused it, exit 3, "a checkpoint for this step exists already"), and a run without `--resume`
// deleted the checkpoints the orphan was writing into.
TEST(RunnerOutcomeTest, ARunnerKilledBySigkillLeavesItsRunDirectoryLockedUntilItsRanksExit) {
  // A rank that, told to stop, goes on "checkpointing" until the test releases it.
  LocalJob job(1, 1,
               "trap 'while [ ! -e \"$DIR/release\" ]; do sleep 0.01; done; exit 143' TERM\n"
               "touch \"$DIR/started\"\n"
               "while :; do sleep 0.01; done\n");
  const pid_t runner = ::fork();
  if (runner == 0) {
    ::alarm(60);
    const int out = ::open((job.dir / "out.txt").c_str(), O_WRONLY | O_CREAT | O_APPEND, 0644);
    ::dup2(out, STDOUT_FILENO);
    ::dup2(out, STDERR_FILENO);
    ::_exit(RunJob(job.options));
  }
  ASSERT_TRUE(WaitForFile(job.dir / "started")) << job.Out();
  ::kill(runner, SIGKILL);
  ::waitpid(runner, nullptr, 0);
  const auto lock_is_free = [&] {
    const int fd = ::open((job.dir / "run" / ".lock").c_str(), O_RDWR | O_CLOEXEC);
    const bool free = fd >= 0 && ::flock(fd, LOCK_EX | LOCK_NB) == 0;
    if (fd >= 0)
      ::close(fd);
    return free;
  };
  EXPECT_FALSE(lock_is_free()) << "the orphaned rank still runs, but the directory is free";
  std::ofstream(job.dir / "release").flush();
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!lock_is_free() && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(lock_is_free()) << "the rank exited, but the directory is still locked";
}

TEST(RunnerOutcomeTest, ARunDirectoryInUseIsRefusedBeforeAnythingStarts) {
  LocalJob job(1, 1, "touch \"$DIR/ran\"\n");
  fs::create_directories(job.dir / "run");
  const int lock = ::open((job.dir / "run" / ".lock").c_str(), O_RDWR | O_CREAT, 0644);
  ASSERT_EQ(::flock(lock, LOCK_EX | LOCK_NB), 0);
  EXPECT_EQ(job.Run(), kRunBadConfig);
  ::close(lock);
  EXPECT_NE(job.Out().find("another tessera run is using this run directory"), std::string::npos);
  EXPECT_FALSE(fs::exists(job.dir / "ran"));
}

// The checks before anything starts: each refused with exit code 2 and one line naming it.
TEST(RunnerOutcomeTest, WhatCannotRunIsRefusedBeforeAnythingStarts) {
  struct Case {
    std::string name;
    std::string command;  // command[0] of the worker container
    std::string extra;    // more spec lines
    std::string says;
  };
  const Case cases[] = {
      {"a missing path", "./no-such-program", "", "./no-such-program: no such file"},
      {"a directory", "/tmp", "", "/tmp: not an executable file"},
      {"a name not on PATH", "no-such-program-on-path", "",
       "no-such-program-on-path: not found in PATH"},
      {"a suspended job", "sh", "  suspend: true\n", "spec.suspend is true"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    LocalJob job(1, 1, "touch \"$DIR/ran\"\n", "  runPolicy: {backoffLimit: 0}\n" + c.extra);
    std::string yaml = ReadFile(job.options.file);
    yaml.replace(yaml.find("command: [sh, "), std::string("command: [sh").size(),
                 "command: [" + c.command);
    std::ofstream(job.options.file) << yaml;
    EXPECT_EQ(job.Run(), kRunBadConfig);
    EXPECT_NE(job.Out().find(c.says), std::string::npos) << job.Out();
    EXPECT_FALSE(fs::exists(job.dir / "ran"));
  }
}

TEST(RunnerOutcomeTest, ASummaryInAMissingDirectoryOrUnderAFileIsRefusedBeforeAnythingStarts) {
  LocalJob job(1, 1, "touch \"$DIR/ran\"\n");
  job.options.summary_json = (job.dir / "missing" / "summary.json").string();
  EXPECT_EQ(job.Run(), kRunBadConfig);
  EXPECT_NE(job.Out().find("does not exist or is not writable"), std::string::npos) << job.Out();
  EXPECT_FALSE(fs::exists(job.dir / "ran"));
  std::ofstream(job.dir / "a-file") << "not a directory\n";
  job.options.summary_json = (job.dir / "a-file" / "summary.json").string();
  EXPECT_EQ(job.Run(), kRunBadConfig);
  EXPECT_FALSE(fs::exists(job.dir / "ran"));
}

TEST(RunnerOutcomeTest, AMetricsPortRangeInUseOrPast65535IsRefused) {
  LocalJob job(1, 2, "touch \"$DIR/ran\"\n");
  // Rank 1's port is taken.
  const int base = FreePorts(2);
  ASSERT_GT(base, 0);
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_ANY);
  addr.sin_port = htons(static_cast<uint16_t>(base + 1));
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  job.options.metrics_port = base;
  EXPECT_EQ(job.Run(), kRunBadConfig);
  ::close(fd);
  EXPECT_NE(job.Out().find("port " + std::to_string(base + 1) + " (rank 1) is in use"),
            std::string::npos)
      << job.Out();
  // Two ranks from 65535 pass 65535.
  job.options.metrics_port = 65535;
  EXPECT_EQ(job.Run(), kRunBadConfig);
  EXPECT_NE(job.Out().find("past 65535; choose a port of at most 65534"), std::string::npos)
      << job.Out();
  EXPECT_FALSE(fs::exists(job.dir / "ran"));
}

TEST(RunnerOutcomeTest, TheHighestPortsAreAcceptedForTheMetrics) {
  if (!PortIsFree(65534) || !PortIsFree(65535))
    GTEST_SKIP() << "ports 65534 and 65535 are in use on this machine";
  LocalJob job(1, 2, "echo \"$TESSERA_METRICS_PORT\" > \"$DIR/port-$RANK\"\n");
  job.options.metrics_port = 65534;
  EXPECT_EQ(job.Run(), kRunSucceeded) << job.Out();
  EXPECT_EQ(ReadFile(job.dir / "port-1"), "65535\n");
}

// A stand-in for `tessera-worker rank`: serves the /progress documents of
// <case dir>/attempt-<TESSERA_ATTEMPT>.json in order, each until it has been read once, then
// writes that file's "final" document, if any, to $TESSERA_PROGRESS_FILE, as the trainer does
// as it ends, and exits with its "exit". With "waitForRunning" it first waits until
// status.json shows the attempt Running: the runner writes it just before it shows progress,
// so whatever it shows then comes from before this attempt's first report.
constexpr char kFakeTrainer[] = R"(#!/usr/bin/python3
import http.server, json, os, sys, time
run_dir = os.path.dirname(sys.argv[sys.argv.index("--config") + 1])
attempt = int(os.environ["TESSERA_ATTEMPT"])
plan = json.load(open(os.path.join(os.path.dirname(run_dir), "attempt-%d.json" % attempt)))
deadline = time.monotonic() + 20
while plan.get("waitForRunning") and time.monotonic() < deadline:
    try:
        status = json.load(open(os.path.join(run_dir, "status.json")))
        if status["phase"] == "Running" and status["attempt"] == attempt:
            break
    except (OSError, ValueError):
        pass
    time.sleep(0.005)
documents = plan["documents"]
class Progress(http.server.BaseHTTPRequestHandler):
    def do_GET(self):
        body = json.dumps(documents.pop(0)).encode()
        self.send_response(200)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
    def log_message(self, *args):
        pass
server = http.server.HTTPServer(("127.0.0.1", int(os.environ["TESSERA_METRICS_PORT"])), Progress)
while documents:
    server.handle_request()
if plan.get("final") and os.environ.get("TESSERA_PROGRESS_FILE"):
    with open(os.environ["TESSERA_PROGRESS_FILE"], "w") as out:
        json.dump(plan["final"], out)
sys.exit(plan["exit"])
)";

// A built-in trainer job of one rank, 10 steps, whose rank is kFakeTrainer; the a-th plan is
// attempt a's (Attempt below). Progress is read at every poll of the runner (100 ms).
struct FakeTrainerJob : LocalJob {
  FakeTrainerJob(std::initializer_list<nlohmann::json> plans) : LocalJob(1, 1, "") {
    const std::vector<nlohmann::json> attempts(plans);
    WriteJob("");
    std::ofstream(dir / "data.txt") << std::string(4096, 'a');
    std::ofstream(dir / "fake-trainer") << kFakeTrainer;
    fs::permissions(dir / "fake-trainer", fs::perms::owner_all);
    for (size_t a = 0; a < attempts.size(); ++a)
      std::ofstream(dir / ("attempt-" + std::to_string(a) + ".json")) << attempts[a].dump();
    options.worker_binary = (dir / "fake-trainer").string();
    options.progress_interval_seconds = 0;
  }

  // The job file, with `trainer` lines added to its trainer section.
  void WriteJob(const std::string& trainer) const {
    std::ofstream(dir / "job.yaml") << "apiVersion: tessera.dev/v1alpha1\n"
                                       "kind: TrainingJob\n"
                                       "metadata: {name: local}\n"
                                       "spec:\n"
                                       "  workers: 1\n"
                                       "  runPolicy: {backoffLimit: 1}\n"
                                       "  trainer:\n"
                                       "    model: {layers: 1, dModel: 16, heads: 2, seqLen: 8}\n"
                                       "    data: {path: "
                                    << (dir / "data.txt").string()
                                    << "}\n"
                                       "    batch: {global: 2}\n"
                                       "    schedule: {steps: 10, warmupSteps: 1}\n"
                                    << trainer;
  }

  // The plain progress lines printed, each once, in order (a line repeats until the next read).
  std::vector<std::string> ProgressLines() const {
    std::vector<std::string> lines;
    std::istringstream out(Out());
    for (std::string line; std::getline(out, line);) {
      if (line.rfind("step ", 0) == 0 && (lines.empty() || lines.back() != line))
        lines.push_back(line);
    }
    return lines;
  }
};

nlohmann::json Doc(int step, double loss, double tokens_per_second) {
  return {{"step", step},
          {"totalSteps", 10},
          {"loss", loss},
          {"valLoss", nullptr},
          {"tokensPerSecond", tokens_per_second},
          {"updatedAt", ""}};
}

// One attempt of the stand-in: its documents, in order, then its exit code.
nlohmann::json Attempt(const std::vector<nlohmann::json>& documents, int exit_code,
                       bool wait_for_running = false) {
  return {{"documents", documents}, {"exit", exit_code}, {"waitForRunning", wait_for_running}};
}

// The same, writing `final` to $TESSERA_PROGRESS_FILE before it exits.
nlohmann::json AttemptEndingAt(const std::vector<nlohmann::json>& documents,
                               const nlohmann::json& final, int exit_code) {
  nlohmann::json attempt = Attempt(documents, exit_code);
  attempt["final"] = final;
  return attempt;
}

bool PythonIsThere() {
  return ::access("/usr/bin/python3", X_OK) == 0;
}

// Attempt 0 reaches step 5 and fails; attempt 1 resumes from a checkpoint at step 3 (its first
// report: step 3, 0 tokens/s) and trains step 4. What is shown is always the current attempt's,
// and the summary's tokens/s is the mean of the two steps trained.
TEST(RunnerOutcomeTest, AfterARestartTheProgressShownAndSummedIsTheNewAttempts) {
  if (!PythonIsThere())
    GTEST_SKIP() << "no /usr/bin/python3 for the stand-in trainer";
  FakeTrainerJob job{Attempt({Doc(0, 0, 0), Doc(5, 2, 1000)}, 1),
                     Attempt({Doc(3, 2.5, 0), Doc(4, 2.4, 3000)}, 0, /*wait_for_running=*/true)};
  job.options.log_interval_seconds = 0;  // a line at every poll
  ASSERT_EQ(job.Run(), kRunSucceeded) << job.Out();
  std::vector<std::string> lines = job.ProgressLines();
  ASSERT_EQ(lines.size(), 3u) << job.Out();
  // The last line has an ETA (a step trained since the resumed one); its value is the clock's.
  const std::regex eta(" eta [0-9]+:[0-9]{2}");
  EXPECT_TRUE(std::regex_search(lines[2], eta)) << lines[2];
  lines[2] = std::regex_replace(lines[2], eta, "");
  EXPECT_EQ(lines, (std::vector<std::string>{
                       "step 5/10 loss 2.0000 tokens/s 1000",
                       "step 3/10 loss 2.5000 tokens/s 0 attempt 1 restarts 1",
                       "step 4/10 loss 2.4000 tokens/s 3000 attempt 1 restarts 1",
                   }));
  const nlohmann::json s = job.Summary();
  EXPECT_EQ(s["steps"], 4);
  EXPECT_EQ(s["total_steps"], 10);
  EXPECT_EQ(s["final_train_loss"], 2.4);
  EXPECT_EQ(s["tokens_per_second"], 2000.0);
  EXPECT_EQ(s["restarts"], 1);
}

// Without a terminal a progress line is printed at most once per log interval.
TEST(RunnerOutcomeTest, PlainProgressLinesComeOncePerLogInterval) {
  if (!PythonIsThere())
    GTEST_SKIP() << "no /usr/bin/python3 for the stand-in trainer";
  FakeTrainerJob job{Attempt({Doc(1, 3, 10), Doc(2, 2.9, 20), Doc(3, 2.8, 30)}, 0)};
  job.options.log_interval_seconds = 3600;
  ASSERT_EQ(job.Run(), kRunSucceeded) << job.Out();
  EXPECT_EQ(job.ProgressLines(), std::vector<std::string>{"step 1/10 loss 3.0000 tokens/s 10"});
  EXPECT_EQ(job.Summary()["tokens_per_second"], 20.0);
}

// On a terminal the progress is a bar on stderr, redrawn in place ("\r", the bar in the
// terminal's width less a column, "\x1b[K" to clear what a longer one left) and cleared before
// anything else is printed.
TEST(RunnerOutcomeTest, OnATerminalTheBarIsRedrawnInPlaceWithinTheWidthThenCleared) {
  if (!PythonIsThere())
    GTEST_SKIP() << "no /usr/bin/python3 for the stand-in trainer";
  FakeTrainerJob job{Attempt({Doc(1, 3, 10), Doc(2, 2.9, 20), Doc(3, 2.8, 30)}, 0)};
  const int master = ::posix_openpt(O_RDWR | O_NOCTTY);
  ASSERT_GE(master, 0);
  ASSERT_EQ(::grantpt(master), 0);
  ASSERT_EQ(::unlockpt(master), 0);
  const std::string terminal = ::ptsname(master);
  winsize size{};
  size.ws_col = 60;
  size.ws_row = 24;
  ASSERT_EQ(::ioctl(master, TIOCSWINSZ, &size), 0);
  // Held open here too, so what the run wrote stays readable after it ends (a few bars: less
  // than the terminal buffers).
  const int held = ::open(terminal.c_str(), O_RDWR | O_NOCTTY);
  ASSERT_GE(held, 0);
  EXPECT_EQ(job.Run([&] { ::dup2(::open(terminal.c_str(), O_RDWR | O_NOCTTY), STDERR_FILENO); }),
            kRunSucceeded)
      << job.Out();
  ::fcntl(master, F_SETFL, O_NONBLOCK);
  std::string screen;
  char buffer[4096];
  for (ssize_t n; (n = ::read(master, buffer, sizeof(buffer))) > 0;)
    screen.append(buffer, static_cast<size_t>(n));
  ::close(held);
  ::close(master);
  ProgressView first;
  first.report = api::DecodeProgressJson(Doc(1, 3, 10).dump()).value();
  ASSERT_EQ(screen.rfind("\r" + FormatProgressBar(first, 59) + "\x1b[K", 0), 0u) << screen;
  EXPECT_LE(FormatProgressBar(first, 59).size(), 59u);
  EXPECT_NE(screen.find("  3/10  loss 2.8000"), std::string::npos) << screen;
  EXPECT_TRUE(screen.ends_with("\r\x1b[K")) << screen;
}

// The summary names the newest checkpoint, where --resume would go on from, and takes its exact
// losses when it is of the last step trained; when the run went on past it, the losses are
// the last /progress's (the checkpoint was once left out then: "checkpoint none").
TEST(RunnerOutcomeTest, TheSummaryNamesTheNewestCheckpointAndItsExactLossesWhenItIsTheLast) {
  if (!PythonIsThere())
    GTEST_SKIP() << "no /usr/bin/python3 for the stand-in trainer";
  struct Case {
    int64_t checkpoint_step;
    double train_loss;
    std::optional<double> val_loss;
  };
  // The rank reports step 4, loss 2.4 and no validation; the checkpoint says 2.25 and 2.5.
  for (const Case& c : {Case{4, 2.25, 2.5}, Case{3, 2.4, std::nullopt}}) {
    SCOPED_TRACE(c.checkpoint_step);
    FakeTrainerJob job{Attempt({Doc(4, 2.4, 3000)}, 0)};
    job.WriteJob("    checkpoint: {dir: ckpt, everySteps: 100}\n");
    job.options.resume = true;
    const train::CheckpointStore store((job.dir / "run" / "checkpoints").string());
    train::CheckpointMeta meta;
    meta.step = c.checkpoint_step;
    meta.loss = 2.25;
    meta.val_loss = 2.5;
    const std::vector<float> params(4, 0.5f);
    ASSERT_TRUE(train::CheckpointStore(store.root())
                    .Save(meta, {{"rank-00000.bin", {{"params", params}}}})
                    .ok());
    ASSERT_EQ(job.Run(), kRunSucceeded) << job.Out();
    const nlohmann::json s = job.Summary();
    EXPECT_EQ(s["steps"], 4);
    EXPECT_EQ(s["final_train_loss"], c.train_loss);
    EXPECT_EQ(s["final_val_loss"], c.val_loss ? nlohmann::json(*c.val_loss) : nlohmann::json());
    EXPECT_EQ(s["checkpoint"], store.StepDir(c.checkpoint_step));
  }
}

// A rank that fails a few steps after the last poll (here: it trains steps 6 to 9 unread, then
// exits with a permanent code) leaves its last document behind; the summary's step, loss and
// throughput are that document's, not the poll's. Only rank 0 is given the file.
TEST(RunnerOutcomeTest, TheSummaryOfAFailedRunHasTheStepRankZeroReachedNotItsLastPoll) {
  if (!PythonIsThere())
    GTEST_SKIP() << "no /usr/bin/python3 for the stand-in trainer";
  FakeTrainerJob job{AttemptEndingAt({Doc(5, 2, 1000)}, Doc(9, 1.5, 3000), 2)};
  ASSERT_EQ(job.Run(), kRunPermanentExit) << job.Out();
  const nlohmann::json s = job.Summary();
  EXPECT_EQ(s["steps"], 9);
  EXPECT_EQ(s["final_train_loss"], 1.5);
  EXPECT_EQ(s["tokens_per_second"], 2000.0);
  EXPECT_NE(job.Out().find("  steps        9/10\n"), std::string::npos) << job.Out();
}

// A document left by an attempt that restarted is not the next attempt's: the summary has the
// last attempt's last poll when that attempt leaves none (a rank killed, or one that ended
// before its trainer was built).
TEST(RunnerOutcomeTest, AFinalDocumentOfAnEarlierAttemptIsNotTheLastAttempts) {
  if (!PythonIsThere())
    GTEST_SKIP() << "no /usr/bin/python3 for the stand-in trainer";
  FakeTrainerJob job{AttemptEndingAt({Doc(5, 2, 1000)}, Doc(9, 1.5, 3000), 1),
                     Attempt({Doc(3, 2.5, 0), Doc(4, 2.4, 2000)}, 1, /*wait_for_running=*/true)};
  ASSERT_EQ(job.Run(), kRunFailed) << job.Out();
  const nlohmann::json s = job.Summary();
  EXPECT_EQ(s["steps"], 4);
  EXPECT_EQ(s["final_train_loss"], 2.4);
  EXPECT_FALSE(fs::exists(job.dir / "run" / "progress.json"));
}

// `tessera run`'s options at and past the ends of their ranges (docs/local-mode.md). A value
// accepted reaches RunJob, which refuses the missing file (exit 2) without starting anything.
TEST(RunnerOutcomeTest, TheCommandLineTakesEachOptionUpToItsLimit) {
  struct Case {
    std::string options;
    bool accepted;
  };
  const Case cases[] = {
      {"--grace-period 0", true},
      {"--grace-period 86400", true},
      {"--grace-period -1", false},
      {"--grace-period 86401", false},
      {"--grace-period nan", false},  // a range check lets NaN through
      {"--sample 0", true},
      {"--sample 1048576", true},
      {"--sample -1", false},
      {"--sample 1048577", false},
      {"--metrics-port 1", true},
      {"--metrics-port 65535", true},
      {"--metrics-port 0", false},
      {"--metrics-port 65536", false},
      {"--prompt hello --resume", true},
      {"--no-such-option", false},
  };
  const std::string missing = (fs::path(::testing::TempDir()) / "no-such-job.yaml").string();
  for (const Case& c : cases) {
    CLI::App app;
    int rc = -1;
    AddRunCommand(&app, &rc);
    bool accepted = true;
    try {
      app.parse("run " + missing + " " + c.options, /*program_name_included=*/false);
    } catch (const CLI::ParseError&) {
      accepted = false;
    }
    EXPECT_EQ(accepted, c.accepted) << c.options;
    EXPECT_EQ(rc, c.accepted ? kRunBadConfig : -1) << c.options;
  }
}

}  // namespace
}  // namespace tessera::cli
