// `tessera-worker rank` as a user runs it: a real process training on tinyshakespeare, its
// metrics scraped over HTTP, stopped by SIGTERM and resumed from its checkpoint; and the
// exit codes and one-line messages of the errors a user can cause.
#include <arpa/inet.h>
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <optional>
#include <regex>
#include <sstream>
#include <thread>

namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;

// The run: 150 steps of 16 x 64 tokens on a 2-layer, 64-wide GPT (120k parameters): 69 s of
// CPU time on 2 threads, measured uninterrupted on a heavily loaded 2-core machine.
//
// Threshold for the final validation loss: 2.9 nats per byte. The reference points, from the
// corpus itself (train split = first 90%, validation = last 10%): a uniform guess costs
// ln(256) = 5.55; the best context-free model, the byte unigram distribution of the train
// split, costs 3.35 on the validation split (its entropy on the train split is 3.31); a
// bigram model (previous byte as context) has conditional entropy 2.45. Reaching 2.9 therefore
// requires the model to use context, 0.45 below the unigram baseline. Measured with this
// configuration (seed 1337, 2 threads): 3.10 at step 50, 2.74 at step 100, 2.65 at step 150,
// both uninterrupted and stopped/resumed (bit-exact resume gives the same 2.6513).
constexpr double kValLossThreshold = 2.9;
constexpr int kSteps = 150;

std::string Env(const char* name) {
  const char* v = std::getenv(name);
  return v ? v : "";
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

// A child process with its stdout and stderr in `log`.
class Worker {
 public:
  Worker(const std::vector<std::string>& args, const std::vector<std::string>& env,
         const fs::path& log)
      : log_(log) {
    pid_ = fork();
    if (pid_ == 0) {
      FILE* f = std::freopen(log.c_str(), "w", stdout);
      if (f == nullptr)
        _exit(127);
      dup2(fileno(stdout), fileno(stderr));
      for (const std::string& kv : env)
        putenv(const_cast<char*>(kv.c_str()));
      std::vector<char*> argv;
      for (const std::string& a : args)
        argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~Worker() {
    if (pid_ > 0 && !exit_code_) {
      kill(pid_, SIGKILL);
      waitpid(pid_, nullptr, 0);
    }
  }

  // The exit code (128+signal when killed), or nullopt if still running at the deadline.
  std::optional<int> Wait(std::chrono::seconds timeout) {
    const auto deadline = Clock::now() + timeout;
    while (!exit_code_) {
      int status = 0;
      const pid_t r = waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (Clock::now() > deadline)
        return std::nullopt;
      std::this_thread::sleep_for(std::chrono::milliseconds(50));
    }
    return exit_code_;
  }

  bool running() { return !exit_code_ && waitpid(pid_, nullptr, WNOHANG) == 0; }
  void Signal(int sig) { kill(pid_, sig); }
  std::string log() const { return ReadFile(log_); }

 private:
  pid_t pid_ = -1;
  fs::path log_;
  std::optional<int> exit_code_;
};

// HTTP/1.0 GET on 127.0.0.1; returns the body, or nullopt when the request fails.
std::optional<std::string> HttpGet(int port, const std::string& path) {
  const int fd = socket(AF_INET, SOCK_STREAM, 0);
  if (fd < 0)
    return std::nullopt;
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_port = htons(static_cast<uint16_t>(port));
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  if (connect(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0) {
    close(fd);
    return std::nullopt;
  }
  const std::string request = "GET " + path + " HTTP/1.0\r\nHost: localhost\r\n\r\n";
  if (send(fd, request.data(), request.size(), 0) != static_cast<ssize_t>(request.size())) {
    close(fd);
    return std::nullopt;
  }
  std::string response;
  char buf[4096];
  for (ssize_t n; (n = recv(fd, buf, sizeof(buf), 0)) > 0;)
    response.append(buf, n);
  close(fd);
  const auto body = response.find("\r\n\r\n");
  if (response.rfind("HTTP/1.1 200", 0) != 0 || body == std::string::npos)
    return std::nullopt;
  return response.substr(body + 4);
}

// Waits until `done` returns true, checking every 100 ms, or the deadline passes.
template <typename F>
bool WaitFor(F done, std::chrono::seconds timeout) {
  const auto deadline = Clock::now() + timeout;
  while (Clock::now() < deadline) {
    if (done())
      return true;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
  }
  return done();
}

class TrainE2E : public ::testing::Test {
 protected:
  void SetUp() override {
    worker_ = Env("TESSERA_WORKER");
    source_ = Env("TESSERA_SOURCE_DIR");
    ASSERT_FALSE(worker_.empty()) << "TESSERA_WORKER is not set (run through ctest)";
    dir_ = fs::path(::testing::TempDir()) /
           ("train-e2e-" +
            std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override { fs::remove_all(dir_); }

  fs::path WriteConfig(const std::string& data_path) {
    const fs::path path = dir_ / "trainer.yaml";
    std::ofstream(path) << "model: {layers: 2, dModel: 64, heads: 4, seqLen: 64, vocab: 256}\n"
                        << "data: {path: " << data_path << ", validationFraction: 0.1}\n"
                        << "batch: {global: 16, microBatches: 2}\n"
                        << "optimizer: {lr: 3.0e-3, weightDecay: 0.1, gradClip: 1.0}\n"
                        << "schedule: {steps: " << kSteps
                        << ", warmupSteps: 20, evalEvery: 50, evalBatches: 4}\n"
                        << "seed: 1337\n"
                        << "checkpoint: {everySteps: 50, keep: 2}\n"
                        << "metrics: {port: 9400}\n"
                        << "logEvery: 10\n";
    return path;
  }

  // Two kernel threads, unless OMP_NUM_THREADS says otherwise: the tsan test preset sets it to
  // 1, since ThreadSanitizer cannot see libgomp's barriers and spent 92% of a 2-thread run
  // (6 s a step) matching the reports its suppressions then drop.
  static std::string KernelThreads() {
    const std::string threads = Env("OMP_NUM_THREADS");
    return threads.empty() ? "2" : threads;
  }

  std::unique_ptr<Worker> Start(const fs::path& config, const std::string& log_name) {
    return std::make_unique<Worker>(
        std::vector<std::string>{worker_, "rank", "--config", config.string(), "--threads",
                                 KernelThreads()},
        std::vector<std::string>{
            "RANK=0", "WORLD_SIZE=1", "TESSERA_CHECKPOINT_DIR=" + (dir_ / "ckpt").string(),
            "TESSERA_METRICS_PORT=0", "TESSERA_PROGRESS_FILE=" + (dir_ / "progress.json").string()},
        dir_ / log_name);
  }

  std::string worker_;
  std::string source_;
  fs::path dir_;
};

TEST_F(TrainE2E, TrainsScrapesStopsResumesAndLearns) {
  const fs::path config = WriteConfig((fs::path(source_) / "data/tinyshakespeare.txt").string());

  // 1. Start; the worker logs the port it picked (TESSERA_METRICS_PORT=0).
  auto run = Start(config, "run1.log");
  int port = 0;
  ASSERT_TRUE(WaitFor(
      [&] {
        std::smatch m;
        const std::string log = run->log();
        if (!std::regex_search(log, m, std::regex("metrics on port ([0-9]+)")))
          return false;
        port = std::stoi(m[1]);
        return true;
      },
      std::chrono::seconds(60)))
      << run->log();

  // 2. /progress is JSON with the current step, once a step is done.
  nlohmann::json progress;
  ASSERT_TRUE(WaitFor(
      [&] {
        auto body = HttpGet(port, "/progress");
        if (!body)
          return false;
        progress = nlohmann::json::parse(*body);
        return progress["step"].get<int64_t>() >= 3;
      },
      std::chrono::seconds(300)))
      << run->log();
  EXPECT_EQ(progress["totalSteps"], kSteps);
  EXPECT_GT(progress["loss"].get<double>(), 0.0);
  EXPECT_GT(progress["tokensPerSecond"].get<double>(), 0.0);
  EXPECT_TRUE(progress.contains("valLoss"));
  EXPECT_EQ(progress["updatedAt"].get<std::string>().back(), 'Z');

  // 3. /metrics has every metric of docs/metrics.md, and its step agrees with /progress.
  const std::optional<std::string> metrics = HttpGet(port, "/metrics");
  ASSERT_TRUE(metrics.has_value());
  for (const char* name :
       {"tessera_train_step ", "tessera_train_loss ", "tessera_train_validation_loss ",
        "tessera_train_tokens_per_second ", "tessera_train_step_seconds_bucket",
        "tessera_train_mfu_ratio ", "tessera_train_learning_rate ", "tessera_train_grad_norm ",
        "tessera_checkpoint_seconds_count", "tessera_memory_bytes{kind=\"parameters\"}",
        "tessera_memory_bytes{kind=\"resident\"}"}) {
    EXPECT_NE(metrics->find(name), std::string::npos) << name << "\n" << *metrics;
  }
  std::smatch m;
  ASSERT_TRUE(std::regex_search(*metrics, m, std::regex("\ntessera_train_step ([0-9]+)")));
  EXPECT_GE(std::stoi(m[1]), progress["step"].get<int>());

  // 4. SIGTERM: the worker finishes the step, writes a checkpoint and exits 128+15.
  ASSERT_TRUE(WaitFor(
      [&] {
        auto body = HttpGet(port, "/progress");
        return body && nlohmann::json::parse(*body)["step"].get<int64_t>() >= 60;
      },
      std::chrono::seconds(600)))
      << run->log();
  run->Signal(SIGTERM);
  const std::optional<int> code = run->Wait(std::chrono::seconds(120));
  ASSERT_TRUE(code.has_value()) << run->log();
  EXPECT_EQ(*code, 143) << run->log();
  std::vector<int64_t> steps;
  for (const auto& e : fs::directory_iterator(dir_ / "ckpt")) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) == 0 && name.find(".tmp") == std::string::npos) {
      steps.push_back(std::stoll(name.substr(5)));
    }
  }
  std::sort(steps.begin(), steps.end());
  // keep: 2 -> the step it stopped at and the last regular one (everySteps: 50) before it.
  ASSERT_EQ(steps.size(), 2u);
  const int64_t stopped_at = steps.back();
  EXPECT_EQ(steps.front(), stopped_at % 50 == 0 ? stopped_at - 50 : stopped_at / 50 * 50);
  EXPECT_GE(stopped_at, 60);
  EXPECT_LT(stopped_at, kSteps);
  // The /progress document as it stopped is left in TESSERA_PROGRESS_FILE.
  EXPECT_EQ(nlohmann::json::parse(ReadFile(dir_ / "progress.json"))["step"], stopped_at);

  // 5. A new process resumes from the newest checkpoint and finishes.
  auto resumed = Start(config, "run2.log");
  const std::optional<int> code2 = resumed->Wait(std::chrono::seconds(600));
  ASSERT_TRUE(code2.has_value()) << resumed->log();
  ASSERT_EQ(*code2, 0) << resumed->log();
  EXPECT_EQ(nlohmann::json::parse(ReadFile(dir_ / "progress.json"))["step"], kSteps);
  EXPECT_NE(resumed->log().find("resumed from " + (dir_ / "ckpt").string() + "/step-" +
                                std::to_string(stopped_at)),
            std::string::npos)
      << resumed->log();

  // 6. The final checkpoint records the validation loss; it must be below the threshold.
  const nlohmann::json meta = nlohmann::json::parse(
      ReadFile(dir_ / "ckpt" / ("step-" + std::to_string(kSteps)) / "meta.json"));
  EXPECT_EQ(meta["step"], kSteps);
  ASSERT_TRUE(meta["valLoss"].is_number()) << meta.dump();
  const double val_loss = meta["valLoss"].get<double>();
  std::cout << "final validation loss " << val_loss << " (threshold " << kValLossThreshold << ")\n";
  EXPECT_LT(val_loss, kValLossThreshold);
  EXPECT_GT(val_loss, 1.0);  // a sanity bound: the split is not memorised in 150 steps
}

TEST_F(TrainE2E, MissingDatasetExitsTwoNamingThePath) {
  const std::string missing = (dir_ / "no-such-corpus.txt").string();
  Worker w({worker_, "rank", "--config", WriteConfig(missing).string()}, {}, dir_ / "w.log");
  const std::optional<int> code = w.Wait(std::chrono::seconds(60));
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 2);
  const std::string log = w.log();
  EXPECT_NE(log.find(missing), std::string::npos) << log;
  EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1) << log;  // one line
}

TEST_F(TrainE2E, BadConfigFieldExitsTwo) {
  const fs::path config = dir_ / "bad.yaml";
  std::ofstream(config) << "data: {path: x.txt}\nschedule: {stepz: 3}\n";
  Worker w({worker_, "rank", "--config", config.string()}, {}, dir_ / "w.log");
  const std::optional<int> code = w.Wait(std::chrono::seconds(60));
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 2);
  EXPECT_NE(w.log().find("schedule.stepz: unknown field"), std::string::npos) << w.log();
}

TEST_F(TrainE2E, InvalidTrainingJobExitsTwoWithTheApiFieldPath) {
  const fs::path job = dir_ / "job.yaml";
  std::ofstream(job) << "apiVersion: tessera.dev/v1alpha1\nkind: TrainingJob\n"
                     << "metadata: {name: bad}\n"
                     << "spec:\n  workers: 0\n  trainer:\n"
                     << "    model: {layers: 2, dModel: 64, heads: 4, seqLen: 64, vocab: 256}\n"
                     << "    data: {path: x.txt}\n    batch: {global: 16}\n"
                     << "    schedule: {steps: 10}\n";
  Worker w({worker_, "rank", "--config", job.string()}, {}, dir_ / "w.log");
  const std::optional<int> code = w.Wait(std::chrono::seconds(60));
  ASSERT_TRUE(code.has_value());
  EXPECT_EQ(*code, 2);
  EXPECT_NE(w.log().find(job.string() + ": spec.workers"), std::string::npos) << w.log();
}

TEST_F(TrainE2E, CorruptCheckpointExitsThreeNamingTheFile) {
  // A short run leaves a checkpoint; damaging it makes the next start refuse to resume.
  const fs::path config = WriteConfig((fs::path(source_) / "data/tinyshakespeare.txt").string());
  Worker first({worker_, "rank", "--config", config.string(), "--set", "schedule.steps=2", "--set",
                "metrics.port=-1"},
               {"TESSERA_CHECKPOINT_DIR=" + (dir_ / "ckpt").string()}, dir_ / "first.log");
  ASSERT_EQ(first.Wait(std::chrono::seconds(300)), std::optional<int>(0)) << first.log();
  const fs::path shard = dir_ / "ckpt" / "step-2" / "rank-00000.bin";
  ASSERT_TRUE(fs::exists(shard));
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(100);
    f.put('\x42');
  }
  Worker second({worker_, "rank", "--config", config.string(), "--set", "schedule.steps=2", "--set",
                 "metrics.port=-1"},
                {"TESSERA_CHECKPOINT_DIR=" + (dir_ / "ckpt").string()}, dir_ / "second.log");
  ASSERT_EQ(second.Wait(std::chrono::seconds(120)), std::optional<int>(3)) << second.log();
  EXPECT_NE(second.log().find(shard.string()), std::string::npos) << second.log();
  EXPECT_TRUE(fs::exists(shard));
}

// What a user can get wrong on the command line or in the environment of DESIGN.md §3 ends
// at once with exit 2 and one line naming the option or variable; the edges of the ranges
// and an empty variable (unset) are accepted.
TEST_F(TrainE2E, CommandLineAndEnvironmentErrorsExitTwoNamingTheOptionOrVariable) {
  const std::string config = WriteConfig((fs::path(source_) / "data/tinyshakespeare.txt").string());
  struct Case {
    std::vector<std::string> args;  // after the worker's path
    std::vector<std::string> env;
    int code;
    std::string want;  // the first line starts with it
    bool one_line = true;
  };
  const std::vector<std::string> rank = {"rank", "--config", config};
  auto with = [&](std::vector<std::string> extra) {
    std::vector<std::string> args = rank;
    args.insert(args.end(), extra.begin(), extra.end());
    return args;
  };
  const std::vector<Case> cases = {
      {rank, {"RANK=1x"}, 2, "tessera-worker: RANK=1x: expected an integer in [0, 1048576]"},
      {rank, {"WORLD_SIZE=0"}, 2, "tessera-worker: WORLD_SIZE=0: expected an integer in [1, "},
      {rank,
       {"TESSERA_METRICS_PORT=65536"},
       2,
       "tessera-worker: TESSERA_METRICS_PORT=65536: expected an integer in [-1, 65535]"},
      {rank,
       {"LOCAL_RANK=x"},
       2,
       "tessera-worker: LOCAL_RANK=x: expected an integer in [0, 1048576]"},
      // The largest RANK the variable takes, then refused by the world of one rank.
      {rank, {"RANK=1048576"}, 2, "tessera-worker: RANK=1048576: not in [0, WORLD_SIZE=1)"},
      {rank, {"TESSERA_MESH=bogus"}, 2, "tessera-worker: TESSERA_MESH=bogus: "},
      {rank,
       {"TESSERA_COMPUTE_NICE=99"},
       2,
       "tessera-worker: TESSERA_COMPUTE_NICE=99: expected an integer from 0"},
      // Checked before joining the world, which would otherwise fail on the rendezvous.
      {with({"--set", "batch.global=7"}),
       {"WORLD_SIZE=2", "RANK=1"},
       2,
       "tessera-worker: batch.global: 7 is not divisible by data-parallel ranks (2)"},
      {with({"--set", "nosuch.field=1"}), {}, 2, "tessera-worker: --set nosuch.field: "},
      // NaN passes a bare `< 0` check. Before, a NaN or infinite decay made the weights NaN
      // (a one-step run exited 0, this one 5 telling to lower optimizer.lr), a NaN gradClip
      // clipped nothing and a NaN peak was taken as none.
      {with({"--set", "optimizer.weightDecay=.nan"}),
       {},
       2,
       "tessera-worker: optimizer.weightDecay: must be a finite number >= 0, got nan"},
      {with({"--set", "optimizer.weightDecay=.inf"}),
       {},
       2,
       "tessera-worker: optimizer.weightDecay: must be a finite number >= 0, got inf"},
      {with({"--set", "optimizer.gradClip=.nan"}),
       {},
       2,
       "tessera-worker: optimizer.gradClip: must be a finite number >= 0 (0 disables), got nan"},
      {with({"--set", "metrics.peakFlopsPerSecond=.nan"}),
       {},
       2,
       "tessera-worker: metrics.peakFlopsPerSecond: must be a finite number >= 0 (0 = not "
       "reported), got nan"},
      // The parser's refusals, one line each naming the command whose --help says more.
      {{"rank"},
       {},
       2,
       "tessera-worker rank: --config is required (see tessera-worker rank --help)"},
      {with({"--threads", "5000"}),
       {},
       2,
       "tessera-worker rank: --threads: Value 5000 not in range"},
      {{}, {}, 2, "tessera-worker: no command; run `tessera-worker rank --config FILE`"},
      {{"agent"}, {}, 2, "tessera-worker agent: give --config FILE"},
      // A range check lets NaN through (before, the agent took it and ran).
      {{"agent", "--grace", "nan", "--", "true"},
       {},
       2,
       "tessera-worker agent: --grace: Value nan is not a number (see tessera-worker agent "
       "--help)"},
      {{"agent", "--grace", "86401", "--", "true"},
       {},
       2,
       "tessera-worker agent: --grace: Value 86401 not in range"},
      {{"agent", "--grace", "-1", "--", "true"},
       {},
       2,
       "tessera-worker agent: --grace: Value -1 not in range"},
      {{"agent", "--config", config, "--", "true"},
       {},
       2,
       "tessera-worker agent: --config " + config + " and a command after -- (true) both given"},
      {{"agent", "--set", "a=b", "--", "true"},
       {},
       2,
       "tessera-worker agent: --set applies to the built-in trainer (--config)"},
      {{"agent", "--threads", "2", "--", "true"},
       {},
       2,
       "tessera-worker agent: --threads applies to the built-in trainer (--config)"},
      {{"--version"}, {}, 0, "tessera ", false},
      {with({"--set", "schedule.steps=1", "--threads", "1"}),
       {"TESSERA_METRICS_PORT=-1", "WORLD_SIZE=", "RANK="},
       0,
       "",
       false},
  };
  for (size_t i = 0; i < cases.size(); ++i) {
    const Case& k = cases[i];
    std::vector<std::string> args = {worker_};
    args.insert(args.end(), k.args.begin(), k.args.end());
    Worker w(args, k.env, dir_ / ("case" + std::to_string(i) + ".log"));
    const std::optional<int> code = w.Wait(std::chrono::seconds(120));
    const std::string log = w.log();
    SCOPED_TRACE("case " + std::to_string(i) + ":\n" + log);
    ASSERT_TRUE(code.has_value());
    EXPECT_EQ(*code, k.code);
    EXPECT_EQ(log.rfind(k.want, 0), 0u);
    if (k.one_line) {
      EXPECT_EQ(std::count(log.begin(), log.end(), '\n'), 1);
    }
    if (k.code == 0 && k.want.empty()) {
      EXPECT_NE(log.find("done: 1 steps"), std::string::npos);
      EXPECT_EQ(log.find("metrics on port"), std::string::npos);  // TESSERA_METRICS_PORT=-1
    }
  }
}

// `agent --grace S` is seconds: when one rank fails, a rank that ignores SIGTERM is killed S
// seconds later, as the agent's line says. Rank 1 fails once rank 0 ignores SIGTERM.
TEST_F(TrainE2E, AgentGraceIsSecondsBeforeSigkill) {
  const std::string ready = (dir_ / "rank0-ignores-sigterm").string();
  Worker w(
      {worker_, "agent", "--grace", "1", "--", "sh", "-c",
       "if [ \"$LOCAL_RANK\" = 1 ]; then while [ ! -e " + ready +
           " ]; do sleep 0.01; done; exit 7; fi; trap '' TERM; touch " + ready + "; exec sleep 60"},
      {"TESSERA_PROCS_PER_NODE=2"}, dir_ / "agent.log");
  const std::optional<int> code = w.Wait(std::chrono::seconds(60));
  ASSERT_TRUE(code.has_value()) << w.log();
  EXPECT_EQ(*code, 7) << w.log();
  EXPECT_NE(w.log().find("agent: ranks still running 1 s after SIGTERM; killing them"),
            std::string::npos)
      << w.log();
}

// SIGINT and SIGTERM: the step in progress finishes, a checkpoint is written there and the
// process exits 128 + the signal.
TEST_F(TrainE2E, SignalWritesACheckpointAndExits128PlusTheSignal) {
  const fs::path config = WriteConfig((fs::path(source_) / "data/tinyshakespeare.txt").string());
  for (int sig : {SIGINT, SIGTERM}) {
    const fs::path ckpt = dir_ / ("ckpt-" + std::to_string(sig));
    Worker w({worker_, "rank", "--config", config.string(), "--set", "schedule.steps=100000",
              "--threads", "1"},
             {"TESSERA_METRICS_PORT=-1", "TESSERA_CHECKPOINT_DIR=" + ckpt.string()},
             dir_ / ("signal-" + std::to_string(sig) + ".log"));
    ASSERT_TRUE(WaitFor([&] { return w.log().find("step 1/100000") != std::string::npos; },
                        std::chrono::seconds(120)))
        << w.log();
    w.Signal(sig);
    const std::optional<int> code = w.Wait(std::chrono::seconds(120));
    ASSERT_TRUE(code.has_value()) << w.log();
    EXPECT_EQ(*code, 128 + sig) << w.log();
    std::smatch m;
    const std::string log = w.log();
    ASSERT_TRUE(
        std::regex_search(log, m, std::regex("stopped by signal ([0-9]+) at step ([0-9]+)")))
        << log;
    EXPECT_EQ(std::stoi(m[1]), sig);
    EXPECT_TRUE(fs::exists(ckpt / ("step-" + m[2].str()) / "meta.json")) << log;
  }
}

// A signal that comes during the last step asks for what the run does anyway: it finishes
// the step, evaluates and writes the final checkpoint. The run is then finished, and exit 0
// says so; it used to exit 143, which failed the attempt of a run that had trained every step
// (a gang restart to find the last checkpoint, or with backoffLimit 0 a Failed job). The
// final evaluation over 64 x 16 windows keeps the rank busy for a while after step 1.
TEST_F(TrainE2E, ASignalDuringTheLastStepStillEndsTheFinishedRunWithZero) {
  const fs::path config = WriteConfig((fs::path(source_) / "data/tinyshakespeare.txt").string());
  const fs::path ckpt = dir_ / "ckpt";
  Worker w({worker_, "rank", "--config", config.string(), "--set", "schedule.steps=2", "--set",
            "schedule.warmupSteps=1", "--set", "schedule.evalEvery=0", "--set",
            "schedule.evalBatches=64", "--threads", "1"},
           {"TESSERA_METRICS_PORT=-1", "TESSERA_CHECKPOINT_DIR=" + ckpt.string()},
           dir_ / "last-step.log");
  ASSERT_TRUE(WaitFor([&] { return w.log().find("step 1/2 ") != std::string::npos; },
                      std::chrono::seconds(120)))
      << w.log();
  w.Signal(SIGTERM);
  const std::optional<int> code = w.Wait(std::chrono::seconds(120));
  ASSERT_TRUE(code.has_value()) << w.log();
  EXPECT_EQ(*code, 0) << w.log();
  EXPECT_NE(w.log().find("done: 2 steps"), std::string::npos) << w.log();
  EXPECT_TRUE(fs::exists(ckpt / "step-2" / "meta.json")) << w.log();
}

}  // namespace
