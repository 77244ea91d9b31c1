// Rank processes of `tessera run` (cli/run/process.h): the environment, log and signal
// dispositions a started group gets, signalling and reaping groups, and the small helpers
// (ports, random tokens, the tail of a log). Processes are short sh commands; every wait has
// a deadline.
#include "cli/run/process.h"

#include <gtest/gtest.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <set>
#include <sstream>
#include <string>
#include <thread>

#include "tests/unit/test_files.h"

namespace tessera::cli {
namespace {

namespace fs = std::filesystem;
using namespace std::chrono_literals;
using testing::ReadFile;

class ProcessTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::path(::testing::TempDir()) /
        (std::string("process-") + ::testing::UnitTest::GetInstance()->current_test_info()->name());
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }

  // Starts `sh -c script` logging to log.txt in the test's directory; its pid.
  pid_t StartShell(const std::string& script,
                   std::vector<std::pair<std::string, std::string>> env = {}) {
    ProcessSpec spec;
    spec.argv = {"sh", "-c", script};
    spec.env = std::move(env);
    spec.env.emplace_back("DIR", dir_.string());
    spec.log_path = Log().string();
    std::string error;
    const pid_t pid = StartProcessGroup(spec, &error);
    EXPECT_GT(pid, 0) << error;
    return pid;
  }

  // Reaps until `pid` has exited (at most 10 s); its exit code, -1 when it did not exit.
  // Whatever else is reaped on the way is kept in reaped_.
  int WaitForExit(pid_t pid) {
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (std::chrono::steady_clock::now() < deadline) {
      for (const ReapedChild& child : ReapExitedChildren()) {
        reaped_[child.pid] = child.code;
        if (child.signaled)
          killed_by_signal_.insert(child.pid);
      }
      if (reaped_.count(pid))
        return reaped_[pid];
      std::this_thread::sleep_for(5ms);
    }
    return -1;
  }

  fs::path Log() const { return dir_ / "log.txt"; }

  fs::path dir_;
  std::map<pid_t, int> reaped_;
  std::set<pid_t> killed_by_signal_;  // of reaped_, those a signal killed
};

TEST_F(ProcessTest, TheSpecsEnvironmentIsAddedToTheRunnersAndOverridesIt) {
  ::setenv("TESSERA_PROCESS_TEST_OVERRIDDEN", "the runner's", 1);
  ::setenv("TESSERA_PROCESS_TEST_KEPT", "kept", 1);
  ProcessSpec spec;  // env itself, which prints its environment as it got it
  spec.argv = {"env"};
  spec.env = {{"TESSERA_PROCESS_TEST_OVERRIDDEN", "the spec's"}, {"TESSERA_PROCESS_NEW", "new"}};
  spec.log_path = Log().string();
  std::string error;
  const pid_t pid = StartProcessGroup(spec, &error);
  ::unsetenv("TESSERA_PROCESS_TEST_OVERRIDDEN");
  ::unsetenv("TESSERA_PROCESS_TEST_KEPT");
  ASSERT_GT(pid, 0) << error;
  EXPECT_EQ(WaitForExit(pid), 0);
  std::istringstream env(ReadFile(Log()));
  std::vector<std::string> ours;
  for (std::string line; std::getline(env, line);) {
    if (line.rfind("TESSERA_PROCESS_", 0) == 0)
      ours.push_back(line);
  }
  std::sort(ours.begin(), ours.end());
  EXPECT_EQ(ours,
            (std::vector<std::string>{"TESSERA_PROCESS_NEW=new", "TESSERA_PROCESS_TEST_KEPT=kept",
                                      "TESSERA_PROCESS_TEST_OVERRIDDEN=the spec's"}));
}

TEST_F(ProcessTest, BothOutputStreamsAreAppendedToTheLogAndStdinIsDevNull) {
  std::ofstream(Log()) << "before\n";
  // This process's stdin a pipe for the while, so that /dev/null can only come from the start.
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  const int saved_stdin = ::dup(STDIN_FILENO);
  ::dup2(pipe_fds[0], STDIN_FILENO);
  const pid_t pid = StartShell("echo out; echo err >&2; readlink /proc/$$/fd/0");
  ::dup2(saved_stdin, STDIN_FILENO);
  ::close(saved_stdin);
  ::close(pipe_fds[0]);
  ::close(pipe_fds[1]);
  EXPECT_EQ(WaitForExit(pid), 0);
  EXPECT_EQ(ReadFile(Log()), "before\nout\nerr\n/dev/null\n");
}

TEST_F(ProcessTest, TheProcessIsTheLeaderOfItsOwnGroup) {
  const pid_t pid = StartShell("cut -d' ' -f5 /proc/$$/stat > \"$DIR/pgid\"");
  EXPECT_EQ(WaitForExit(pid), 0);
  EXPECT_EQ(std::stoi(ReadFile(dir_ / "pgid")), pid);
  EXPECT_EQ(::getpgid(pid), -1) << "reaped";
}

TEST_F(ProcessTest, TheProcessStartsWithDefaultDispositionsAndNoBlockedSignals) {
  // What a runner ignores or blocks (SIGPIPE, say) does not reach its ranks.
  struct sigaction ignore {};
  ignore.sa_handler = SIG_IGN;
  struct sigaction old_int {
  }, old_term{}, old_pipe{};
  ::sigaction(SIGINT, &ignore, &old_int);
  ::sigaction(SIGTERM, &ignore, &old_term);
  ::sigaction(SIGPIPE, &ignore, &old_pipe);
  sigset_t usr1, old_mask;
  sigemptyset(&usr1);
  sigaddset(&usr1, SIGUSR1);
  ::sigprocmask(SIG_BLOCK, &usr1, &old_mask);
  ProcessSpec spec;  // grep itself, as no shell sits between the runner and the program
  spec.argv = {"grep", "-E", "^Sig(Ign|Blk)", "/proc/self/status"};
  spec.log_path = Log().string();
  std::string error;
  const pid_t pid = StartProcessGroup(spec, &error);
  ASSERT_GT(pid, 0) << error;
  ::sigaction(SIGINT, &old_int, nullptr);
  ::sigaction(SIGTERM, &old_term, nullptr);
  ::sigaction(SIGPIPE, &old_pipe, nullptr);
  ::sigprocmask(SIG_SETMASK, &old_mask, nullptr);
  EXPECT_EQ(WaitForExit(pid), 0);
  std::istringstream status(ReadFile(Log()));
  std::map<std::string, unsigned long long> masks;
  for (std::string name, hex; status >> name >> hex;)
    masks[name] = std::stoull(hex, nullptr, 16);
  ASSERT_EQ(masks.size(), 2u) << ReadFile(Log());
  const auto bit = [](int signal) { return 1ull << (signal - 1); };
  EXPECT_EQ(masks["SigIgn:"] & (bit(SIGINT) | bit(SIGTERM) | bit(SIGPIPE)), 0u);
  EXPECT_EQ(masks["SigBlk:"], 0u);
}

TEST_F(ProcessTest, ACommandThatCannotBeExecutedExits127AndSaysWhyInItsLog) {
  ProcessSpec spec;
  spec.argv = {(dir_ / "no-such-program").string()};
  spec.log_path = Log().string();
  std::string error;
  const pid_t pid = StartProcessGroup(spec, &error);
  ASSERT_GT(pid, 0) << error;
  EXPECT_EQ(WaitForExit(pid), 127);
  EXPECT_NE(ReadFile(Log()).find("tessera run: cannot execute " + spec.argv[0] +
                                 ": No such file or directory"),
            std::string::npos)
      << ReadFile(Log());
}

TEST_F(ProcessTest, NoCommandOrAnUnwritableLogIsAnErrorAndNothingStarts) {
  ProcessSpec spec;
  spec.log_path = Log().string();
  std::string error;
  EXPECT_EQ(StartProcessGroup(spec, &error), -1);
  EXPECT_EQ(error, "no command to run");

  spec.argv = {"sh", "-c", "touch \"$0\"", (dir_ / "ran").string()};
  spec.log_path = dir_.string();  // a directory
  EXPECT_EQ(StartProcessGroup(spec, &error), -1);
  EXPECT_EQ(error.rfind(dir_.string() + ": cannot open the log file: ", 0), 0u) << error;
  std::this_thread::sleep_for(100ms);  // what would have started has had time to run
  EXPECT_FALSE(fs::exists(dir_ / "ran"));
}

// A SIGTERM that reaches a rank between fork and exec (the runner stopping the gang at that
// moment) stops it: it once ran the runner's handler in the new process and was lost, and the
// rank ran on (here it would have exited 0).
TEST_F(ProcessTest, ASigtermThatReachesTheProcessBeforeItsExecStopsIt) {
  struct sigaction count {};
  count.sa_handler = [](int) {};  // the runner's handler only notes the signal
  struct sigaction old_term {};
  ::sigaction(SIGTERM, &count, &old_term);
  ProcessSpec spec;
  spec.argv = {"sh", "-c", "exit 0"};
  spec.log_path = Log().string();
  spec.in_child_after_fork = [] { ::raise(SIGTERM); };
  std::string error;
  const pid_t pid = StartProcessGroup(spec, &error);
  ::sigaction(SIGTERM, &old_term, nullptr);
  ASSERT_GT(pid, 0) << error;
  EXPECT_EQ(WaitForExit(pid), 128 + SIGTERM);
}

TEST_F(ProcessTest, ExitCodesAreReapedAsTheyAreAndSignalNAs128PlusN) {
  const pid_t exits = StartShell("exit 3");
  const pid_t killed = StartShell("kill -9 $$");
  const pid_t terminated = StartShell("kill -TERM $$");
  EXPECT_EQ(WaitForExit(exits), 3);
  EXPECT_EQ(WaitForExit(killed), 128 + SIGKILL);
  EXPECT_EQ(WaitForExit(terminated), 128 + SIGTERM);
  EXPECT_EQ(killed_by_signal_, (std::set<pid_t>{killed, terminated}));
}

// A trainer stopped by SIGTERM exits 143 itself, after its checkpoint: the same code as a
// process that SIGTERM killed, which only the signal set tells apart.
TEST_F(ProcessTest, AnExitWithCode143IsNotASignal) {
  const pid_t exits = StartShell("exit 143");
  EXPECT_EQ(WaitForExit(exits), 143);
  EXPECT_EQ(killed_by_signal_.count(exits), 0u);
}

TEST_F(ProcessTest, AGroupExistsWhileAnyMemberIsLeftAndASignalReachesEveryMember) {
  // Orphans come to this process, so that they are reaped here whatever this machine's init.
  BecomeSubreaper();
  const pid_t pid = StartShell(
      "sleep 30 & echo $! > \"$DIR/child.tmp\"; mv \"$DIR/child.tmp\" "
      "\"$DIR/child\"; exit 0");
  EXPECT_EQ(WaitForExit(pid), 0);
  ASSERT_TRUE(fs::exists(dir_ / "child"));
  const pid_t child = std::stoi(ReadFile(dir_ / "child"));
  EXPECT_TRUE(ProcessGroupExists(pid)) << "its sleep is still there";
  SignalProcessGroup(pid, SIGKILL);
  EXPECT_EQ(WaitForExit(child), 128 + SIGKILL) << "the orphan was reaped here, killed";
  EXPECT_FALSE(ProcessGroupExists(pid));
}

// A rank stopped by SIGSTOP acts on SIGTERM at once (it gets SIGCONT too), instead of lying
// stopped until SIGKILL at the end of the grace.
TEST_F(ProcessTest, AStoppedGroupActsOnSigtermAtOnce) {
  const pid_t pid = StartShell("trap 'exit 7' TERM; kill -STOP $$; exit 0");
  const fs::path stat = fs::path("/proc") / std::to_string(pid) / "stat";
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (ReadFile(stat).find(") T ") == std::string::npos &&
         std::chrono::steady_clock::now() < deadline) {
    std::this_thread::sleep_for(5ms);
  }
  ASSERT_NE(ReadFile(stat).find(") T "), std::string::npos) << "the shell never stopped";
  SignalProcessGroup(pid, SIGTERM);
  EXPECT_EQ(WaitForExit(pid), 7) << "still stopped 10 s after SIGTERM";
}

TEST_F(ProcessTest, NoGroupIsSignalledOrExistsForANonPositiveId) {
  // In a child of its own group, so that a stray signal stays there.
  const pid_t pid = ::fork();
  if (pid == 0) {
    ::setpgid(0, 0);
    struct sigaction count {};
    count.sa_handler = [](int) { ::_exit(1); };
    ::sigaction(SIGUSR1, &count, nullptr);
    SignalProcessGroup(0, SIGUSR1);
    SignalProcessGroup(-1, SIGUSR1);
    ::_exit(ProcessGroupExists(0) || ProcessGroupExists(-1) ? 2 : 0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(pid, &status, 0), pid);
  EXPECT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

TEST_F(ProcessTest, ARankWhoseRunnerDiesGetsSigtermToCheckpoint) {
  // A stand-in runner starts the rank and dies; the rank, orphaned, is told to stop.
  const pid_t runner = ::fork();
  if (runner == 0) {
    ProcessSpec spec;
    spec.argv = {"sh", "-c",
                 "trap 'echo term > \"$0/term\"; exit 0' TERM; touch \"$0/ready\"; "
                 "sleep 30 & wait",
                 dir_.string()};
    spec.log_path = Log().string();
    std::string error;
    if (StartProcessGroup(spec, &error) < 0)
      ::_exit(1);
    const auto deadline = std::chrono::steady_clock::now() + 10s;
    while (!fs::exists(dir_ / "ready") && std::chrono::steady_clock::now() < deadline)
      std::this_thread::sleep_for(5ms);
    ::_exit(0);
  }
  int status = 0;
  ASSERT_EQ(::waitpid(runner, &status, 0), runner);
  const auto deadline = std::chrono::steady_clock::now() + 10s;
  while (!fs::exists(dir_ / "term") && std::chrono::steady_clock::now() < deadline)
    std::this_thread::sleep_for(5ms);
  EXPECT_TRUE(fs::exists(dir_ / "term"));
}

TEST_F(ProcessTest, TailLinesGivesTheLastLinesOfAFile) {
  std::ofstream(dir_ / "seven") << "1\n2\n3\n4\n5\n6\n7\n";
  EXPECT_EQ(TailLines((dir_ / "seven").string(), 3), (std::vector<std::string>{"5", "6", "7"}));
  EXPECT_EQ(TailLines((dir_ / "seven").string(), 7).size(), 7u);
  EXPECT_EQ(TailLines((dir_ / "seven").string(), 10).size(), 7u);
  EXPECT_TRUE(TailLines((dir_ / "seven").string(), 0).empty());
  EXPECT_TRUE(TailLines((dir_ / "missing").string(), 5).empty());
}

TEST_F(ProcessTest, RandomHexGivesTwoLowerCaseHexDigitsPerByte) {
  const std::string a = RandomHex(512);
  ASSERT_EQ(a.size(), 1024u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  bool high_low_nibble = false;  // each nibble takes all 16 values
  bool high_high_nibble = false;
  for (size_t i = 0; i < a.size(); i += 2) {
    high_high_nibble = high_high_nibble || a[i] >= '8';
    high_low_nibble = high_low_nibble || a[i + 1] >= '8';
  }
  EXPECT_TRUE(high_high_nibble);
  EXPECT_TRUE(high_low_nibble);
  EXPECT_NE(RandomHex(16), RandomHex(16));
}

TEST_F(ProcessTest, APortWithAListenerIsNotFreeAndAFreeLoopbackPortIsBindable) {
  const int port = FreeLoopbackPort();
  ASSERT_GT(port, 0);
  EXPECT_TRUE(PortIsFree(port));
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = htons(static_cast<uint16_t>(port));
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)), 0);
  ASSERT_EQ(::listen(fd, 1), 0);
  EXPECT_FALSE(PortIsFree(port));
  ::close(fd);
  EXPECT_TRUE(PortIsFree(port));
}

}  // namespace
}  // namespace tessera::cli
