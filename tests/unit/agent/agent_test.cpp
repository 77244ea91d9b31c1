// The pod's agent (worker/agent.h) stopping its ranks: each case runs RunAgent in a child
// process of its own (a death test, re-executed: RunAgent forks and installs signal handlers),
// with an alarm that turns a hang into a failure.
#include <gtest/gtest.h>
#include <signal.h>
#include <spdlog/sinks/stdout_sinks.h>
#include <spdlog/spdlog.h>
#include <unistd.h>

#include <cstdlib>
#include <string>

#include "worker/agent.h"

namespace tessera::worker {
namespace {

using namespace std::chrono_literals;

class AgentStopTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }

  // The agent's log goes to stderr, where a death test reads it.
  static void LogToStderr() { spdlog::set_default_logger(spdlog::stderr_logger_st("agent")); }

  // Two ranks: rank 1 fails with code 7 at once; rank 0 ignores SIGTERM and sleeps. The ranks
  // die with the agent (their parent-death signal), so none outlives a case.
  static AgentOptions TwoRanksOneFailing() {
    ::setenv("TESSERA_PROCS_PER_NODE", "2", 1);
    ::setenv("TESSERA_NODE_RANK", "0", 1);
    ::unsetenv("TESSERA_METRICS_PORT");
    ::setenv("TESSERA_TERMINATION_MESSAGE_PATH", "/dev/null", 1);
    AgentOptions o;
    o.command = {"sh", "-c",
                 "if [ \"$LOCAL_RANK\" = 1 ]; then exit 7; fi; trap '' TERM; exec sleep 600"};
    o.grace = 200ms;
    o.reap_after_kill = 500ms;
    return o;
  }
};

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

}  // namespace
}  // namespace tessera::worker
