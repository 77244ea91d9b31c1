// Data parallelism end to end: `tessera-worker rank` processes with the environment of
// DESIGN.md §3 (RANK, WORLD_SIZE, TESSERA_RDZV_ENDPOINT, TESSERA_RDZV_TOKEN), rank 0 serving
// the rendezvous store, Gloo on loopback. The correctness anchor: 2 and 4 ranks, with bucketed
// all-reduce or ZeRO-1, follow the loss curve of one rank with the same global batch. The
// per-step losses are read from the checkpoints (one per step), which also exercises the
// sharded checkpoint protocol. And the failure path: kill -9 of one rank ends the others with
// exit code 6 naming it, and a restarted gang resumes to the same final loss.
#include <netinet/in.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <gtest/gtest.h>

#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <map>
#include <nlohmann/json.hpp>
#include <optional>
#include <sstream>
#include <thread>

namespace {
namespace fs = std::filesystem;
using Clock = std::chrono::steady_clock;
using namespace std::chrono_literals;

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

int FreePort() {
  const int fd = ::socket(AF_INET, SOCK_STREAM, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  addr.sin_port = 0;
  socklen_t len = sizeof(addr);
  if (::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof(addr)) != 0 ||
      ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len) != 0) {
    ::close(fd);
    return -1;
  }
  ::close(fd);
  return ntohs(addr.sin_port);
}

// One rank process; its stdout and stderr go to `log`.
class Rank {
 public:
  Rank(const std::vector<std::string>& args, const std::vector<std::string>& env,
       const fs::path& log)
      : log_(log) {
    std::fflush(stdout);  // or the child's freopen would flush our buffer a second time
    pid_ = ::fork();
    if (pid_ == 0) {
      FILE* f = std::freopen(log.c_str(), "w", stdout);
      if (f == nullptr)
        _exit(127);
      ::dup2(::fileno(stdout), ::fileno(stderr));
      for (const std::string& kv : env)
        ::putenv(const_cast<char*>(kv.c_str()));
      std::vector<char*> argv;
      for (const std::string& a : args)
        argv.push_back(const_cast<char*>(a.c_str()));
      argv.push_back(nullptr);
      ::execv(argv[0], argv.data());
      _exit(127);
    }
  }
  ~Rank() {
    if (pid_ > 0 && !exit_code_) {
      ::kill(pid_, SIGKILL);
      ::waitpid(pid_, nullptr, 0);
    }
  }
  Rank(const Rank&) = delete;
  Rank& operator=(const Rank&) = delete;

  // The exit code (128 + signal when killed), or nullopt when still running at `deadline`.
  std::optional<int> Wait(Clock::time_point deadline) {
    while (!exit_code_) {
      int status = 0;
      const pid_t r = ::waitpid(pid_, &status, WNOHANG);
      if (r == pid_) {
        exit_code_ = WIFEXITED(status) ? WEXITSTATUS(status) : 128 + WTERMSIG(status);
        break;
      }
      if (Clock::now() >= deadline)
        return std::nullopt;
      std::this_thread::sleep_for(5ms);
    }
    return exit_code_;
  }
  void Kill() { ::kill(pid_, SIGKILL); }
  std::string log() const { return ReadFile(log_); }

 private:
  pid_t pid_ = -1;
  fs::path log_;
  std::optional<int> exit_code_;
};

struct Layout {
  int ranks = 1;
  int zero_stage = 0;
};

class DataParallelTest : public ::testing::Test {
 protected:
  void SetUp() override {
    worker_ = Env("TESSERA_WORKER");
    source_ = Env("TESSERA_SOURCE_DIR");
    ASSERT_FALSE(worker_.empty()) << "TESSERA_WORKER is not set (run through ctest)";
    ASSERT_TRUE(fs::exists(source_ / "data/tinyshakespeare.txt"));
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    dir_ = fs::temp_directory_path() /
           (std::string("tessera-dp-") + info->name() + "-" + std::to_string(::getpid()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
  }
  void TearDown() override {
    if (!HasFailure())
      fs::remove_all(dir_);
  }

  // A trainer file: a 2-layer GPT, 16 sequences of 32 bytes per step in 2 micro-batches per
  // rank, buckets small enough that the 35k parameters make several.
  fs::path WriteConfig(const std::string& name, int64_t steps, int checkpoint_every, int keep,
                       int global_batch = 16) {
    const fs::path path = dir_ / (name + ".yaml");
    std::ofstream out(path);
    out << "model: {layers: 2, dModel: 32, heads: 2, seqLen: 32, vocab: 256}\n"
        << "data: {path: " << (source_ / "data/tinyshakespeare.txt").string() << "}\n"
        << "batch: {global: " << global_batch << ", microBatches: 2}\n"
        << "optimizer: {lr: 1.0e-3}\n"
        << "schedule: {steps: " << steps << ", warmupSteps: 5, evalEvery: 0, evalBatches: 1}\n"
        << "checkpoint: {dir: " << (dir_ / name / "ckpt").string()
        << ", everySteps: " << checkpoint_every << ", keep: " << keep << "}\n"
        << "metrics: {port: -1}\n"
        << "parallelism: {bucketMiB: 0.02}\n"
        << "logEvery: 10\n";
    return path;
  }

  // Starts `layout.ranks` processes on `config`.
  std::vector<std::unique_ptr<Rank>> Start(const fs::path& config, const Layout& layout,
                                           const std::string& tag,
                                           const std::vector<std::string>& extra_env = {}) {
    const int port = FreePort();
    std::vector<std::unique_ptr<Rank>> ranks;
    for (int r = 0; r < layout.ranks; ++r) {
      std::vector<std::string> env = {
          "RANK=" + std::to_string(r),
          "WORLD_SIZE=" + std::to_string(layout.ranks),
          "TESSERA_RDZV_ENDPOINT=127.0.0.1:" + std::to_string(port),
          "TESSERA_RDZV_TOKEN=dp-e2e",
          "TESSERA_COMM_HOST=127.0.0.1",
          "TESSERA_MESH=data=" + std::to_string(layout.ranks) + ",pipeline=1,tensor=1",
      };
      env.insert(env.end(), extra_env.begin(), extra_env.end());
      ranks.push_back(std::make_unique<Rank>(
          std::vector<std::string>{worker_, "rank", "--config", config.string(), "--threads", "1",
                                   "--set",
                                   "parallelism.zeroStage=" + std::to_string(layout.zero_stage)},
          env, dir_ / (tag + "-rank" + std::to_string(r) + ".log")));
    }
    return ranks;
  }

  // Runs to completion; every rank must exit 0.
  void RunToEnd(const fs::path& config, const Layout& layout, const std::string& tag) {
    auto ranks = Start(config, layout, tag);
    const auto deadline = Clock::now() + 300s;
    for (size_t r = 0; r < ranks.size(); ++r) {
      const std::optional<int> code = ranks[r]->Wait(deadline);
      ASSERT_EQ(code, std::optional<int>(0)) << tag << " rank " << r << ":\n" << ranks[r]->log();
    }
  }

  // The loss each checkpoint recorded, by step.
  static std::map<int64_t, double> Losses(const fs::path& ckpt) {
    std::map<int64_t, double> losses;
    for (const auto& entry : fs::directory_iterator(ckpt)) {
      const fs::path meta = entry.path() / "meta.json";
      if (!fs::exists(meta))
        continue;
      const nlohmann::json j = nlohmann::json::parse(ReadFile(meta));
      losses[j.at("step").get<int64_t>()] = j.at("loss").get<double>();
    }
    return losses;
  }

  // Trains 50 steps with one rank and with `layout`, a checkpoint every step, and compares.
  void ExpectSameCurveAsOneRank(const Layout& layout) {
    constexpr int kSteps = 50;
    const fs::path one = WriteConfig("one", kSteps, 1, kSteps);
    const std::string name =
        "dp" + std::to_string(layout.ranks) + "z" + std::to_string(layout.zero_stage);
    const fs::path many = WriteConfig(name, kSteps, 1, kSteps);
    ASSERT_NO_FATAL_FAILURE(RunToEnd(one, {1, 0}, "one"));
    ASSERT_NO_FATAL_FAILURE(RunToEnd(many, layout, name));
    const auto reference = Losses(dir_ / "one" / "ckpt");
    const auto losses = Losses(dir_ / name / "ckpt");
    ASSERT_EQ(reference.size(), static_cast<size_t>(kSteps));
    ASSERT_EQ(losses.size(), static_cast<size_t>(kSteps));
    double worst = 0;
    for (const auto& [step, loss] : reference) {
      const double rel = std::abs(losses.at(step) - loss) / std::abs(loss);
      worst = std::max(worst, rel);
      EXPECT_LT(rel, 1e-5) << "step " << step << ": one rank " << loss << ", " << layout.ranks
                           << " ranks " << losses.at(step);
    }
    // The model learned something (the comparison is not between two flat lines).
    EXPECT_LT(reference.at(kSteps), reference.at(1) - 0.5);
    std::printf("%d ranks, zeroStage %d: largest relative loss difference over %d steps %.3g\n",
                layout.ranks, layout.zero_stage, kSteps, worst);

    // Who wrote which file: rank 0 alone replicates; with ZeRO-1 every rank its shard.
    const fs::path last = dir_ / name / "ckpt" / ("step-" + std::to_string(kSteps));
    const nlohmann::json meta = nlohmann::json::parse(ReadFile(last / "meta.json"));
    const size_t writers = layout.zero_stage == 1 ? static_cast<size_t>(layout.ranks) : 1;
    EXPECT_EQ(meta.at("files").size(), writers) << meta.dump();
    EXPECT_EQ(meta.at("worldSize").get<int>(), layout.ranks);
    EXPECT_EQ(meta.at("optimizer").at("zeroStage").get<int>(), layout.zero_stage);
  }

  std::string worker_;
  fs::path source_;
  fs::path dir_;
};

TEST_F(DataParallelTest, TwoRanksFollowOneRank) {
  ExpectSameCurveAsOneRank({2, 0});
}

TEST_F(DataParallelTest, FourRanksFollowOneRank) {
  ExpectSameCurveAsOneRank({4, 0});
}

TEST_F(DataParallelTest, ZeroTwoRanksFollowOneRank) {
  ExpectSameCurveAsOneRank({2, 1});
}

TEST_F(DataParallelTest, ZeroFourRanksFollowOneRank) {
  ExpectSameCurveAsOneRank({4, 1});
}

// kill -9 of rank 1 mid-training (ZeRO-1, 3 ranks): the other ranks exit with code 6 within
// the (shortened) communication timeout, naming rank 1; a new gang resumes from the newest
// checkpoint and ends at the loss of an uninterrupted run.
TEST_F(DataParallelTest, ZeroKilledRankEndsTheGangThenResumes) {
  constexpr int64_t kSteps = 400;
  const Layout layout{3, 1};
  const fs::path straight = WriteConfig("straight", kSteps, 100, 1, 24);
  ASSERT_NO_FATAL_FAILURE(RunToEnd(straight, layout, "straight"));
  const double expected = Losses(dir_ / "straight" / "ckpt").at(kSteps);

  const fs::path config = WriteConfig("killed", kSteps, 20, 2, 24);
  const std::vector<std::string> timeout = {"TESSERA_COMM_TIMEOUT=5"};
  {
    auto ranks = Start(config, layout, "first", timeout);
    const fs::path ckpt = dir_ / "killed" / "ckpt";
    const auto give_up = Clock::now() + 120s;
    while (!fs::exists(ckpt / "step-40") && Clock::now() < give_up) {
      ASSERT_FALSE(ranks[0]->Wait(Clock::now())) << "ended before step 40:\n" << ranks[0]->log();
      std::this_thread::sleep_for(2ms);
    }
    ASSERT_TRUE(fs::exists(ckpt / "step-40")) << ranks[0]->log();
    ranks[1]->Kill();
    const auto killed_at = Clock::now();
    for (int r : {0, 2}) {
      const std::optional<int> code = ranks[static_cast<size_t>(r)]->Wait(killed_at + 30s);
      ASSERT_TRUE(code.has_value()) << "rank " << r << " still running 30 s after the kill";
      const std::string log = ranks[static_cast<size_t>(r)]->log();
      EXPECT_EQ(*code, 6) << log;
      EXPECT_NE(log.find("rank 1"), std::string::npos) << log;
    }
    std::printf("the other ranks exited %.2f s after the kill (TESSERA_COMM_TIMEOUT=5)\n",
                std::chrono::duration<double>(Clock::now() - killed_at).count());
  }
  ASSERT_NO_FATAL_FAILURE(RunToEnd(config, layout, "second"));
  const std::string log = ReadFile(dir_ / "second-rank0.log");
  EXPECT_NE(log.find("resumed from"), std::string::npos) << log;
  const double resumed = Losses(dir_ / "killed" / "ckpt").at(kSteps);
  // Same world size, same order of every reduction: the resumed run is the same run.
  EXPECT_NEAR(resumed, expected, 1e-6 * std::abs(expected));
}

}  // namespace
