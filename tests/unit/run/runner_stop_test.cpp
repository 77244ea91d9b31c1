// `tessera run` stopping ranks that will not go (RunJob in cli/run/runner.h): a rank that
// outlives SIGKILL, as a process stuck in the kernel does, is named and left behind instead of
// holding the run forever. RunJob runs in a child process of its own (a death test,
// re-executed: it forks ranks and installs signal handlers), with an alarm that turns a hang
// into a failure.
#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <string>

#include "cli/run/runner.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;

class RunnerStopTest : public ::testing::Test {
 protected:
  void SetUp() override { GTEST_FLAG_SET(death_test_style, "threadsafe"); }
};

// Runs, in a directory of its own, two ranks of one worker: rank 1 fails with code 7 as soon
// as rank 0 ignores SIGTERM; rank 0 stays 8 s (not longer: it holds the death test's pipe). No
// restarts. Returns RunJob's exit code; the run's lines go to stderr, where a death test
// reads them.
int RunTwoRanksOneFailing(std::function<void(pid_t, int)> signal_group) {
  ::alarm(60);
  ::dup2(STDERR_FILENO, STDOUT_FILENO);
  char templ[] = "/tmp/tessera-runner-stop-XXXXXX";
  const fs::path dir = ::mkdtemp(templ);
  std::ofstream(dir / "job.yaml")
      << "apiVersion: tessera.dev/v1alpha1\n"
         "kind: TrainingJob\n"
         "metadata: {name: stuck}\n"
         "spec:\n"
         "  workers: 1\n"
         "  procsPerWorker: 2\n"
         "  template:\n"
         "    spec:\n"
         "      containers:\n"
         "      - name: worker\n"
         "        command: [sh, -c, 'if [ \"$RANK\" = 1 ]; then while [ ! -f \"$0/ready\" ]; do "
         "sleep 0.01; done; exit 7; fi; trap \"\" TERM; touch \"$0/ready\"; exec sleep 8', "
      << dir.string()
      << "]\n"
         "  runPolicy: {backoffLimit: 0}\n";
  RunOptions o;
  o.file = (dir / "job.yaml").string();
  o.workdir = (dir / "run").string();
  o.grace_seconds = 0.2;
  o.reap_after_kill_seconds = 0.5;
  o.signal_group = std::move(signal_group);
  const int code = RunJob(o);
  fs::remove_all(dir);
  return code;
}

TEST_F(RunnerStopTest, ARankThatOutlivesSigkillIsNamedAndTheRunEnds) {
  // SIGKILL lost, as for a process stuck in the kernel (state D) that cannot die yet.
  EXPECT_EXIT(std::exit(RunTwoRanksOneFailing([](pid_t pgid, int signal) {
                if (signal != SIGKILL)
                  ::kill(-pgid, signal);
              })),
              ::testing::ExitedWithCode(kRunFailed),
              "warning: rank 0 \\(pid [0-9]+\\) is still there 0.5 s after SIGKILL \\(state "
              "S.*\\): a process stuck in the kernel");
}

TEST_F(RunnerStopTest, ARankThatIgnoresSigtermIsKilled) {
  EXPECT_EXIT(std::exit(RunTwoRanksOneFailing(nullptr)), ::testing::ExitedWithCode(kRunFailed),
              "BackoffLimitExceeded");
}

}  // namespace
}  // namespace tessera::cli
