// The pod's agent (worker/agent.h) stopping its ranks: each case runs RunAgent in a child
// process of its own (a death test, re-executed: RunAgent forks and installs signal handlers),
// with an alarm that turns a hang into a failure.
#include <gtest/gtest.h>
#include <signal.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <sys/prctl.h>
#include <sys/wait.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <thread>

#include "tests/unit/test_files.h"
#include "worker/agent.h"
#include "worker/process_state.h"
#include "worker/termination_message.h"

namespace tessera::worker {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::ReadEnv;
using testing::ReadFile;

class AgentStopTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }

  // The agent's log goes to stderr, where a death test reads it.
  static void LogToStderr() { spdlog::set_default_logger(spdlog::stderr_logger_st("agent")); }

  // Two ranks: rank 1 fails with code 7 as soon as rank 0 ignores SIGTERM; rank 0 sleeps. The ranks
  // die with the agent (their parent-death signal), so none outlives a case.
  static AgentOptions TwoRanksOneFailing() {
    ::setenv("TESSERA_PROCS_PER_NODE", "2", 1);
    ::setenv("TESSERA_NODE_RANK", "0", 1);
    ::unsetenv("TESSERA_METRICS_PORT");
    ::setenv("TESSERA_TERMINATION_MESSAGE_PATH", "/dev/null", 1);
    AgentOptions o;
    // Rank 1 fails once rank 0 ignores SIGTERM (a file named by the agent's pid says so).
    o.command = {"sh", "-c",
                 "ready=\"$0/agent-$PPID-ready\"; if [ \"$LOCAL_RANK\" = 1 ]; then while [ ! -f "
                 "\"$ready\" ]; do sleep 0.01; done; exit 7; fi; trap '' TERM; touch \"$ready\"; "
                 "exec sleep 600",
                 ::testing::TempDir()};
    o.grace = 200ms;
    o.reap_after_kill = 500ms;
    return o;
  }

  // A directory for the case's files, emptied (the same in the death test's child, which
  // runs the test again up to its statement).
  static fs::path CaseDir() {
    const fs::path dir =
        fs::path(::testing::TempDir()) /
        (std::string("agent-") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir);
    fs::create_directories(dir);
    return dir;
  }

  // `procs` ranks of node `node`, each running `script` with sh, $0 being `dir`; a
  // termination message goes to dir/termination-log.
  static AgentOptions Ranks(const fs::path& dir, const std::string& script, int procs = 2,
                            int node = 0) {
    ::setenv("TESSERA_PROCS_PER_NODE", std::to_string(procs).c_str(), 1);
    ::setenv("TESSERA_NODE_RANK", std::to_string(node).c_str(), 1);
    ::unsetenv("TESSERA_METRICS_PORT");
    ::setenv("TESSERA_TERMINATION_MESSAGE_PATH", (dir / "termination-log").c_str(), 1);
    AgentOptions o;
    o.command = {"sh", "-c", script, dir.string()};
    o.grace = 20s;
    o.reap_after_kill = 5s;
    return o;
  }
};

// Rank 0 waits for SIGTERM: on it, it takes a second (a checkpoint), leaves $0/term-0 and
// exits 0. It says it is ready ($0/ready-0) once its trap is set.
constexpr char kRankZeroStopsOnSigterm[] =
    "if [ \"$LOCAL_RANK\" = 0 ]; then\n"
    "  trap 'sleep 1; echo term > \"$0/term-0\"; exit 0' TERM\n"
    "  touch \"$0/ready-0\"; sleep 600 & wait; exit 0\n"
    "fi\n"
    "while [ ! -f \"$0/ready-0\" ]; do sleep 0.01; done\n";

TEST_F(AgentStopTest, ARankThatIgnoresSigtermIsKilledAfterTheGrace) {
  EXPECT_EXIT(
      {
        ::alarm(30);
        LogToStderr();
        std::exit(RunAgent(TwoRanksOneFailing()));
      },
      ::testing::ExitedWithCode(7), "ranks still running 0 s after SIGTERM; killing them");
}

TEST_F(AgentStopTest, ARankThatOutlivesSigkillIsLeftBehindNamed) {
  // SIGKILL lost, as for a process stuck in the kernel (state D) that cannot die yet.
  EXPECT_EXIT(
      {
        ::alarm(30);
        LogToStderr();
        AgentOptions o = TwoRanksOneFailing();
        o.send_signal = [](pid_t pid, int signal) {
          return signal == SIGKILL ? 0 : ::kill(pid, signal);
        };
        std::exit(RunAgent(o));
      },
      ::testing::ExitedWithCode(7),
      "rank 0 \\(pid [0-9]+\\) is still there 0.5 s after SIGKILL \\(state S.*\\): a process "
      "stuck in the kernel");
}

TEST_F(AgentStopTest, EachRankGetsItsGlobalRankLocalRankAndMetricsPort) {
  const fs::path dir = CaseDir();
  EXPECT_EXIT(
      {
        ::alarm(30);
        AgentOptions o = Ranks(dir, "env > \"$0/env-$LOCAL_RANK\"", 2, /*node=*/1);
        ::setenv("TESSERA_METRICS_PORT", "9000", 1);
        std::exit(RunAgent(o));
      },
      ::testing::ExitedWithCode(0), "");
  for (int local = 0; local < 2; ++local) {
    SCOPED_TRACE("local rank " + std::to_string(local));
    std::map<std::string, std::string> env = ReadEnv(dir / ("env-" + std::to_string(local)));
    EXPECT_EQ(env["RANK"], std::to_string(2 + local));
    EXPECT_EQ(env["LOCAL_RANK"], std::to_string(local));
    EXPECT_EQ(env["LOCAL_WORLD_SIZE"], "2");
    EXPECT_EQ(env["GROUP_RANK"], "1");
    EXPECT_EQ(env["TESSERA_METRICS_PORT"], std::to_string(9000 + local));
  }
  EXPECT_FALSE(fs::exists(dir / "env-2"));
}

TEST_F(AgentStopTest, WithMetricsPortZeroEveryRankKeepsZero) {
  const fs::path dir = CaseDir();
  EXPECT_EXIT(
      {
        ::alarm(30);
        AgentOptions o = Ranks(dir, "env > \"$0/env-$LOCAL_RANK\"");
        ::setenv("TESSERA_METRICS_PORT", "0", 1);
        std::exit(RunAgent(o));
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EQ(ReadEnv(dir / "env-0")["TESSERA_METRICS_PORT"], "0");
  EXPECT_EQ(ReadEnv(dir / "env-1")["TESSERA_METRICS_PORT"], "0");
}

TEST_F(AgentStopTest, WithoutProcsOrNodeRankTheAgentRunsOneRankZero) {
  const fs::path dir = CaseDir();
  EXPECT_EXIT(
      {
        ::alarm(30);
        AgentOptions o = Ranks(dir, "env > \"$0/env-$LOCAL_RANK\"");
        ::unsetenv("TESSERA_PROCS_PER_NODE");
        ::unsetenv("TESSERA_NODE_RANK");
        std::exit(RunAgent(o));
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_EQ(ReadEnv(dir / "env-0")["RANK"], "0");
  EXPECT_EQ(ReadEnv(dir / "env-0")["LOCAL_WORLD_SIZE"], "1");
  EXPECT_FALSE(fs::exists(dir / "env-1"));
}

// The agent's environment: malformed or out-of-range values stop it with exit code 2 and one
// line naming the variable, before any rank starts; the edges of the ranges are accepted.
TEST_F(AgentStopTest, TheAgentsEnvironmentIsCheckedBeforeAnyRankStarts) {
  struct Case {
    std::map<std::string, std::string> env;  // "" value: unset
    int exit_code;
    std::string says;
  };
  const Case cases[] = {
      {{{"TESSERA_PROCS_PER_NODE", "2x"}},
       2,
       "TESSERA_PROCS_PER_NODE=2x: expected an integer in \\[1, 1024\\]"},
      {{{"TESSERA_PROCS_PER_NODE", "0"}}, 2, "TESSERA_PROCS_PER_NODE=0: expected an integer"},
      {{{"TESSERA_PROCS_PER_NODE", "99999999999999999999"}}, 2, "expected an integer"},
      {{{"TESSERA_NODE_RANK", "-1"}}, 2, "TESSERA_NODE_RANK=-1: expected an integer"},
      {{{"TESSERA_NODE_RANK", "1048577"}}, 2, "TESSERA_NODE_RANK=1048577: expected an integer"},
      {{{"TESSERA_METRICS_PORT", "abc"}}, 2, "TESSERA_METRICS_PORT=abc: expected an integer"},
      {{{"TESSERA_METRICS_PORT", "65535"}, {"TESSERA_PROCS_PER_NODE", "2"}},
       2,
       "TESSERA_METRICS_PORT=65535: ports 65535..65536 for 2 ranks pass 65535"},
      {{{"TESSERA_METRICS_PORT", "65534"}, {"TESSERA_PROCS_PER_NODE", "2"}}, 0, ""},
      {{{"TESSERA_NODE_RANK", "1048576"}}, 0, ""},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.says);
    const fs::path dir = CaseDir();
    EXPECT_EXIT(
        {
          ::alarm(30);
          AgentOptions o = Ranks(dir, "touch \"$0/ran-$LOCAL_RANK\"", 1);
          for (const auto& [name, value] : c.env)
            ::setenv(name.c_str(), value.c_str(), 1);
          std::exit(RunAgent(o));
        },
        ::testing::ExitedWithCode(c.exit_code), c.says);
    EXPECT_EQ(fs::exists(dir / "ran-0"), c.exit_code == 0);
  }
}

TEST_F(AgentStopTest, AnEmptyProcsPerNodeMeansOneRank) {
  const fs::path dir = CaseDir();
  EXPECT_EXIT(
      {
        ::alarm(30);
        AgentOptions o = Ranks(dir, "touch \"$0/ran-$LOCAL_RANK\"");
        ::setenv("TESSERA_PROCS_PER_NODE", "", 1);
        std::exit(RunAgent(o));
      },
      ::testing::ExitedWithCode(0), "");
  EXPECT_TRUE(fs::exists(dir / "ran-0"));
  EXPECT_FALSE(fs::exists(dir / "ran-1"));
}

// The agent's exit code and termination message for each way a rank can end (rank 0 runs
// until it is stopped).
TEST_F(AgentStopTest, TheAgentExitsWithTheFailedRanksCodeAndSaysWhichRank) {
  struct Case {
    std::string rank_one;  // what rank 1 does
    int exit_code;
    std::string message;  // the termination message; "" none
  };
  const Case cases[] = {
      {"exit 0", 0, ""},
      {"exit 7", 7, "rank 1 exited with code 7"},
      {"exit 128", 128, "rank 1 exited with code 128"},
      {"kill -9 $$", 137, "rank 1 was killed by signal 9 (Killed)"},
      {"kill -TERM $$", 143, "rank 1 was killed by signal 15 (Terminated)"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.rank_one);
    const fs::path dir = CaseDir();
    EXPECT_EXIT(
        {
          ::alarm(30);
          std::exit(RunAgent(Ranks(
              dir, "[ \"$LOCAL_RANK\" = 1 ] && " + c.rank_one + "\n[ \"$LOCAL_RANK\" = 0 ] && [ " +
                       std::to_string(c.exit_code) + " = 0 ] && exit 0\nsleep 600 & wait\n")));
        },
        ::testing::ExitedWithCode(c.exit_code), "");
    EXPECT_EQ(ReadFile(dir / "termination-log"), c.message);
  }
}

// A SIGTERM that reaches a rank between fork and exec (the agent forwarding the kubelet's at
// that moment) stops it: it once ran the agent's handler in the new process and was lost, and
// the rank ran on (here it would have exited 0) until SIGKILL after the grace.
TEST_F(AgentStopTest, ASigtermThatReachesARankBeforeItsExecStopsIt) {
  const fs::path dir = CaseDir();
  EXPECT_EXIT(
      {
        ::alarm(30);
        AgentOptions o = Ranks(dir, "exit 0\n", 1);
        o.in_rank_after_fork = [] { ::raise(SIGTERM); };
        std::exit(RunAgent(o));
      },
      ::testing::ExitedWithCode(128 + SIGTERM), "");
  EXPECT_EQ(ReadFile(dir / "termination-log"), "rank 0 was killed by signal 15 (Terminated)");
}

TEST_F(AgentStopTest, ACommandThatCannotBeExecutedFailsTheRankWithCode127) {
  const fs::path dir = CaseDir();
  EXPECT_EXIT(
      {
        ::alarm(30);
        AgentOptions o = Ranks(dir, "", 1);
        o.command = {(dir / "no-such-program").string()};
        std::exit(RunAgent(o));
      },
      ::testing::ExitedWithCode(127), "cannot execute .*no-such-program: No such file");
  EXPECT_EQ(ReadFile(dir / "termination-log"), "rank 0 exited with code 127");
}

// A send_signal that, at the first SIGKILL (to what a reaped rank left in its group), creates
// $0/go and waits (at most 10 s) until the rank whose pid is in $0/pid has exited.
std::function<int(pid_t, int)> LetRankOneFailAtTheFirstSigkill(const fs::path& dir) {
  return [dir, released = false](pid_t pid, int signal) mutable {
    if (signal == SIGKILL && !released) {
      released = true;
      std::ofstream(dir / "go");
      const auto deadline = std::chrono::steady_clock::now() + 10s;
      while (!fs::exists(dir / "pid") && std::chrono::steady_clock::now() < deadline)
        std::this_thread::sleep_for(5ms);
      const pid_t rank_one = std::stoi(ReadFile(dir / "pid"));
      siginfo_t info{};
      while (info.si_pid != rank_one && std::chrono::steady_clock::now() < deadline &&
             ::waitid(P_PID, rank_one, &info, WEXITED | WNOHANG | WNOWAIT) == 0) {
        std::this_thread::sleep_for(5ms);
      }
    }
    return ::kill(pid, signal);
  };
}

TEST_F(AgentStopTest, ALostPeerIsNotBlamedWhenAnotherRankFailedInTheSamePass) {
  // Rank 0 loses its peer (exit 6) at once; when the agent, having reaped it, kills what it
  // left in its group, the hook lets rank 1 fail (exit 4) and waits until it has exited, so
  // that the agent finds both in one pass.
  const fs::path dir = CaseDir();
  EXPECT_EXIT(
      {
        ::alarm(30);
        AgentOptions o = Ranks(dir,
                               "[ \"$LOCAL_RANK\" = 0 ] && exit 6\n"
                               "echo $$ > \"$0/pid.tmp\"; mv \"$0/pid.tmp\" \"$0/pid\"\n"
                               "while [ ! -f \"$0/go\" ]; do sleep 0.01; done\n"
                               "exit 4\n");
        o.send_signal = LetRankOneFailAtTheFirstSigkill(dir);
        std::exit(RunAgent(o));
      },
      ::testing::ExitedWithCode(4), "");
  EXPECT_EQ(ReadFile(dir / "termination-log"), "rank 1 exited with code 4");
}

TEST_F(AgentStopTest, WhenARankFailsTheOthersGetTheGraceToCheckpoint) {
  const fs::path dir = CaseDir();
  EXPECT_EXIT(
      {
        ::alarm(30);
        std::exit(RunAgent(Ranks(dir, std::string(kRankZeroStopsOnSigterm) + "exit 7\n")));
      },
      ::testing::ExitedWithCode(7), "");
  EXPECT_TRUE(fs::exists(dir / "term-0")) << "rank 0 was killed before the grace ended";
}

// Rank 0 stops itself (SIGSTOP) with its SIGTERM trap set; rank 1 fails once it is stopped.
// Rank 0 still checkpoints at once: SIGCONT follows SIGTERM, so it does not lie stopped for
// the 20 s grace and then die by SIGKILL.
TEST_F(AgentStopTest, AStoppedRankActsOnSigtermAtOnce) {
  const fs::path dir = CaseDir();
  EXPECT_EXIT(
      {
        ::alarm(30);
        std::exit(RunAgent(Ranks(
            dir,
            "if [ \"$LOCAL_RANK\" = 0 ]; then\n"
            "  trap 'echo term > \"$0/term-0\"; exit 0' TERM\n"
            "  echo $$ > \"$0/pid.tmp\"; mv \"$0/pid.tmp\" \"$0/pid-0\"; kill -STOP $$; exit 0\n"
            "fi\n"
            "while [ ! -f \"$0/pid-0\" ]; do sleep 0.01; done\n"
            "while ! grep -q ') T ' \"/proc/$(cat \"$0/pid-0\")/stat\"; do sleep 0.01; done\n"
            "exit 7\n")));
      },
      ::testing::ExitedWithCode(7), "");
  EXPECT_TRUE(fs::exists(dir / "term-0")) << "rank 0 was killed while stopped";
}

TEST_F(AgentStopTest, SigtermToTheAgentIsForwardedAndItExits143WhateverTheRanksExitWith) {
  // Rank 0 exits 5 on SIGTERM, rank 1 0: the agent was stopped, which is no rank's failure.
  const fs::path dir = CaseDir();
  EXPECT_EXIT(
      {
        ::alarm(30);
        std::exit(RunAgent(Ranks(dir,
                                 "if [ \"$LOCAL_RANK\" = 0 ]; then\n"
                                 "  trap 'exit 5' TERM; touch \"$0/ready-0\"; sleep 600 & wait\n"
                                 "fi\n"
                                 "while [ ! -f \"$0/ready-0\" ]; do sleep 0.01; done\n"
                                 "trap 'exit 0' TERM; kill -TERM $PPID; sleep 600 & wait\n")));
      },
      ::testing::ExitedWithCode(128 + SIGTERM), "");
  EXPECT_EQ(ReadFile(dir / "termination-log"), "");
}

TEST_F(AgentStopTest, SigintToTheAgentIsForwardedAsSigintAndItExits130) {
  const fs::path dir = CaseDir();
  EXPECT_EXIT(
      {
        ::alarm(30);
        std::exit(RunAgent(Ranks(dir,
                                 "if [ \"$LOCAL_RANK\" = 0 ]; then\n"
                                 "  trap 'echo int > \"$0/int-0\"; exit 0' INT\n"
                                 "  touch \"$0/ready-0\"; sleep 600 & wait; exit 0\n"
                                 "fi\n"
                                 "while [ ! -f \"$0/ready-0\" ]; do sleep 0.01; done\n"
                                 "trap 'exit 0' INT; kill -INT $PPID; sleep 600 & wait\n")));
      },
      ::testing::ExitedWithCode(128 + SIGINT), "");
  EXPECT_TRUE(fs::exists(dir / "int-0"));
}

TEST_F(AgentStopTest, ARankThatIgnoresAForwardedSigtermIsKilledAfterTheGrace) {
  const fs::path dir = CaseDir();
  EXPECT_EXIT(
      {
        ::alarm(30);
        AgentOptions o = Ranks(dir,
                               "if [ \"$LOCAL_RANK\" = 0 ]; then\n"
                               "  trap '' TERM; touch \"$0/ready-0\"; exec sleep 600\n"
                               "fi\n"
                               "while [ ! -f \"$0/ready-0\" ]; do sleep 0.01; done\n"
                               "kill -TERM $PPID; exit 0\n");
        o.grace = 200ms;
        LogToStderr();
        std::exit(RunAgent(o));
      },
      ::testing::ExitedWithCode(128 + SIGTERM),
      "ranks still running 0 s after SIGTERM; killing them");
}

TEST_F(AgentStopTest, ASignalToTheAgentAfterARankFailedKeepsThatRanksCode) {
  // Rank 1 fails; rank 0, stopped, passes SIGTERM on to the agent before it exits.
  const fs::path dir = CaseDir();
  EXPECT_EXIT(
      {
        ::alarm(30);
        std::exit(RunAgent(Ranks(dir,
                                 "if [ \"$LOCAL_RANK\" = 0 ]; then\n"
                                 "  trap 'kill -TERM $PPID; sleep 0.5; exit 0' TERM\n"
                                 "  touch \"$0/ready-0\"; sleep 600 & wait; exit 0\n"
                                 "fi\n"
                                 "while [ ! -f \"$0/ready-0\" ]; do sleep 0.01; done\n"
                                 "exit 7\n")));
      },
      ::testing::ExitedWithCode(7), "");
}

TEST_F(AgentStopTest, EveryRankIsReapedBeforeTheAgentReturns) {
  EXPECT_EXIT(
      {
        ::alarm(30);
        const int code = RunAgent(TwoRanksOneFailing());
        // No child left, exited or not.
        std::exit(::waitpid(-1, nullptr, WNOHANG) == -1 && errno == ECHILD ? code : 99);
      },
      ::testing::ExitedWithCode(7), "");
}

// The kubelet creates the termination message file empty and reads at most 4096 bytes of it;
// the first failure written to it, usually the cause, is the one kept.
TEST(TerminationMessage, TheFirstMessageIsWrittenCutToWhatTheKubeletReads) {
  const fs::path dir = fs::path(::testing::TempDir()) / "termination-message";
  fs::remove_all(dir);
  fs::create_directories(dir);
  ::setenv("TESSERA_TERMINATION_MESSAGE_PATH", (dir / "log").c_str(), 1);
  EXPECT_EQ(TerminationMessagePath(), (dir / "log").string());
  WriteTerminationMessage(std::string(5000, 'x'));
  EXPECT_EQ(ReadFile(dir / "log"), std::string(4096, 'x'));
  WriteTerminationMessage("a later failure");
  EXPECT_EQ(ReadFile(dir / "log"), std::string(4096, 'x'));
  std::ofstream(dir / "log", std::ios::trunc).flush();  // as the kubelet leaves it
  WriteTerminationMessage("rank 1 exited with code 4");
  EXPECT_EQ(ReadFile(dir / "log"), "rank 1 exited with code 4");
  ::unsetenv("TESSERA_TERMINATION_MESSAGE_PATH");
}

// Rank 0's final progress is the message's last line whether it is written before or after a
// failure's line (ranks and the agent share the file); a later progress line replaces it, a
// later failure leaves the first.
TEST(TerminationMessage, TheFinalProgressLineStaysLastBelowTheFirstFailure) {
  const fs::path dir = fs::path(::testing::TempDir()) / "termination-progress";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path log = dir / "log";
  ::setenv("TESSERA_TERMINATION_MESSAGE_PATH", log.c_str(), 1);
  const std::string early = R"({"step":40,"totalSteps":100})";
  const std::string late = R"({"step":41,"totalSteps":100})";

  std::ofstream(log, std::ios::trunc).flush();
  WriteTerminationMessage("loss is NaN at step 41");
  WriteFinalProgressMessage(late);
  EXPECT_EQ(ReadFile(log), "loss is NaN at step 41\nfinal progress: " + late);

  std::ofstream(log, std::ios::trunc).flush();
  WriteFinalProgressMessage(early);
  EXPECT_EQ(ReadFile(log), "final progress: " + early);
  WriteFinalProgressMessage(late);
  EXPECT_EQ(ReadFile(log), "final progress: " + late);
  WriteTerminationMessage("rank 1 exited with code 6");
  WriteTerminationMessage("rank 0 was killed by signal 15 (Terminated)");
  EXPECT_EQ(ReadFile(log), "rank 1 exited with code 6\nfinal progress: " + late);
  ::unsetenv("TESSERA_TERMINATION_MESSAGE_PATH");
}

// Ranks and the agent write at once (a failing rank, rank 0's progress, the agent's own line):
// whatever the order, the file ends as one failure's line above the progress line.
TEST(TerminationMessage, WritersAtOnceLoseNeitherTheFailureNorTheProgress) {
  const fs::path dir = fs::path(::testing::TempDir()) / "termination-race";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path log = dir / "log";
  ::setenv("TESSERA_TERMINATION_MESSAGE_PATH", log.c_str(), 1);
  const std::string progress = R"({"step":12})";
  const std::regex whole("rank [0-3] exited with code 4\nfinal progress: \\{\"step\":12\\}");
  for (int round = 0; round < 20; ++round) {
    std::ofstream(log, std::ios::trunc).flush();
    int go[2];
    ASSERT_EQ(::pipe(go), 0);
    std::vector<pid_t> writers;
    for (int w = 0; w < 5; ++w) {
      const pid_t pid = ::fork();
      ASSERT_GE(pid, 0);
      if (pid == 0) {
        ::close(go[1]);
        char c;
        (void)!::read(go[0], &c, 1);  // all start together, when the pipe closes
        if (w == 4)
          WriteFinalProgressMessage(progress);
        else
          WriteTerminationMessage("rank " + std::to_string(w) + " exited with code 4");
        ::_exit(0);
      }
      writers.push_back(pid);
    }
    ::close(go[0]);
    ::close(go[1]);
    for (pid_t pid : writers)
      ASSERT_EQ(::waitpid(pid, nullptr, 0), pid);
    const std::string message = ReadFile(log);
    EXPECT_TRUE(std::regex_match(message, whole)) << "round " << round << ": " << message;
  }
  ::unsetenv("TESSERA_TERMINATION_MESSAGE_PATH");
}

// A long failure is cut, between characters, to leave room for the progress line within the
// 4096 bytes the kubelet reads.
TEST(TerminationMessage, ALongFailureIsCutToKeepTheProgressLine) {
  const fs::path dir = fs::path(::testing::TempDir()) / "termination-long";
  fs::remove_all(dir);
  fs::create_directories(dir);
  const fs::path log = dir / "log";
  ::setenv("TESSERA_TERMINATION_MESSAGE_PATH", log.c_str(), 1);
  std::string long_failure;
  while (long_failure.size() < 5000)
    long_failure += "\xc3\xa9";  // é, two bytes
  const std::string progress = R"({"step":7})";
  WriteTerminationMessage(long_failure);
  WriteFinalProgressMessage(progress);
  const std::string message = ReadFile(log);
  EXPECT_LE(message.size(), 4096u);
  const std::string line = "\nfinal progress: " + progress;
  ASSERT_GE(message.size(), line.size());
  EXPECT_EQ(message.substr(message.size() - line.size()), line);
  const std::string kept = message.substr(0, message.size() - line.size());
  EXPECT_EQ(kept.size() % 2, 0u) << "a character was cut in two";
  EXPECT_EQ(kept, long_failure.substr(0, kept.size()));
  EXPECT_GE(kept.size(), 4096u - line.size() - 1);
  ::unsetenv("TESSERA_TERMINATION_MESSAGE_PATH");
}

// A process name may hold ") ": the state is read after the last ')' of /proc/<pid>/stat.
TEST(KernelState, ASleepingProcessIsInStateSWhateverItsName) {
  int ready[2];
  ASSERT_EQ(::pipe(ready), 0);
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::prctl(PR_SET_NAME, "a) R (b", 0, 0, 0);
    ::close(ready[0]);
    ::close(ready[1]);  // the parent reads end-of-file: the name is set
    ::alarm(30);
    ::pause();
    ::_exit(0);
  }
  ::close(ready[1]);
  char byte;
  ASSERT_EQ(::read(ready[0], &byte, 1), 0);
  ::close(ready[0]);
  // Until it reaches pause() it may still be running.
  std::string state = KernelState(pid);
  for (const auto deadline = std::chrono::steady_clock::now() + 10s;
       state.rfind("state S", 0) != 0 && std::chrono::steady_clock::now() < deadline;) {
    std::this_thread::sleep_for(1ms);
    state = KernelState(pid);
  }
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  // The wait channel is named when /proc gives one ("0" when it hides it).
  EXPECT_TRUE(std::regex_match(state, std::regex("state S(, in [A-Za-z_][A-Za-z0-9_.]*)?")))
      << state;
  EXPECT_EQ(KernelState(pid), "state unknown");  // reaped: /proc says nothing
}

}  // namespace
}  // namespace tessera::worker
