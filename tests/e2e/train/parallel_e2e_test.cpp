// Data, pipeline, tensor and hybrid parallelism end to end: `tessera-worker rank` processes
// with the environment of DESIGN.md §3 (RANK, WORLD_SIZE, TESSERA_MESH, TESSERA_RDZV_ENDPOINT,
// TESSERA_RDZV_TOKEN), rank 0 serving the rendezvous store, Gloo on loopback. The correctness
// anchor: every layout — 2 and 4 data-parallel ranks with bucketed all-reduce or ZeRO-1,
// pipelines of 2 and 4 stages over 8 micro-batches (1F1B and GPipe), 2 and 4 tensor ranks,
// and the hybrids up to data 2 x pipeline 2 x tensor 2 on 8 processes — follows the loss curve
// of one rank with the same global batch. The per-step losses are read from the checkpoints
// (one per step), which also exercises the sharded checkpoint protocol. And the failure path:
// kill -9 of one rank ends the others with exit code 6 naming it, and a restarted gang
// resumes to the same final loss (data parallel with ZeRO-1, and a hybrid layout).
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
  void Signal(int sig) { ::kill(pid_, sig); }
  std::string log() const { return ReadFile(log_); }

 private:
  pid_t pid_ = -1;
  fs::path log_;
  std::optional<int> exit_code_;
};

struct Layout {
  int data = 1;
  int zero_stage = 0;
  int pipeline = 1;
  int tensor = 1;
  std::string schedule = "1F1B";
  int ranks() const { return data * pipeline * tensor; }
  std::string name() const {
    return "d" + std::to_string(data) + "p" + std::to_string(pipeline) + "t" +
           std::to_string(tensor) + "z" + std::to_string(zero_stage) + schedule;
  }
};

// The model and batch split of a test: data-parallel tests train a 2-layer GPT in 2
// micro-batches per rank; model-parallel ones a 4-layer one with 4 heads (so 4 stages and 4
// tensor ranks fit) in 8 micro-batches.
struct Model {
  int layers = 2;
  int heads = 2;
  int micro_batches = 2;
};
const Model kDataParallelModel{};
const Model kModelParallelModel{4, 4, 8};

class ParallelTest : public ::testing::Test {
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

  // A trainer file: a small GPT, 16 sequences of 32 bytes per step, buckets small enough that
  // the parameters make several.
  fs::path WriteConfig(const std::string& name, int64_t steps, int checkpoint_every, int keep,
                       int global_batch = 16, const Model& model = kDataParallelModel) {
    const fs::path path = dir_ / (name + ".yaml");
    std::ofstream out(path);
    out << "model: {layers: " << model.layers << ", dModel: 32, heads: " << model.heads
        << ", seqLen: 32, vocab: 256}\n"
        << "data: {path: " << (source_ / "data/tinyshakespeare.txt").string() << "}\n"
        << "batch: {global: " << global_batch << ", microBatches: " << model.micro_batches << "}\n"
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
    for (int r = 0; r < layout.ranks(); ++r) {
      std::vector<std::string> env = {
          "RANK=" + std::to_string(r),
          "WORLD_SIZE=" + std::to_string(layout.ranks()),
          "TESSERA_RDZV_ENDPOINT=127.0.0.1:" + std::to_string(port),
          "TESSERA_RDZV_TOKEN=dp-e2e",
          "TESSERA_COMM_HOST=127.0.0.1",
          "TESSERA_MESH=data=" + std::to_string(layout.data) + ",pipeline=" +
              std::to_string(layout.pipeline) + ",tensor=" + std::to_string(layout.tensor),
      };
      env.insert(env.end(), extra_env.begin(), extra_env.end());
      ranks.push_back(std::make_unique<Rank>(
          std::vector<std::string>{worker_, "rank", "--config", config.string(), "--threads", "1",
                                   "--set",
                                   "parallelism.zeroStage=" + std::to_string(layout.zero_stage),
                                   "--set", "parallelism.schedule=" + layout.schedule},
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

  // The gradient norms rank 0 logged (`step N/S loss … grad_norm G …`), by step.
  static std::map<int64_t, double> GradNorms(const std::string& log) {
    std::map<int64_t, double> norms;
    std::istringstream lines(log);
    for (std::string line; std::getline(lines, line);) {
      const auto at = line.find("] step ");
      const auto norm = line.find(" grad_norm ");
      if (at == std::string::npos || norm == std::string::npos)
        continue;
      norms[std::stoll(line.substr(at + 7))] = std::stod(line.substr(norm + 11));
    }
    return norms;
  }

  // Trains `steps` steps with one rank and with `layout`, a checkpoint every step, and
  // compares the curves (relative difference below `tolerance` at every step). Returns the
  // layout's losses.
  std::map<int64_t, double> ExpectSameCurveAsOneRank(const Layout& layout,
                                                     const Model& model = kDataParallelModel,
                                                     int steps = 50, double tolerance = 1e-5) {
    const fs::path one = WriteConfig("one", steps, 1, steps, 16, model);
    const std::string name = layout.name();
    const fs::path many = WriteConfig(name, steps, 1, steps, 16, model);
    if (!fs::exists(dir_ / "one" / "ckpt" / ("step-" + std::to_string(steps))))
      RunToEnd(one, {}, "one");
    if (HasFatalFailure())
      return {};
    RunToEnd(many, layout, name);
    if (HasFatalFailure())
      return {};
    const auto reference = Losses(dir_ / "one" / "ckpt");
    const auto losses = Losses(dir_ / name / "ckpt");
    EXPECT_EQ(reference.size(), static_cast<size_t>(steps));
    EXPECT_EQ(losses.size(), static_cast<size_t>(steps));
    if (reference.size() != static_cast<size_t>(steps) || losses.size() != reference.size())
      return {};
    double worst = 0;
    for (const auto& [step, loss] : reference) {
      const double rel = std::abs(losses.at(step) - loss) / std::abs(loss);
      worst = std::max(worst, rel);
      EXPECT_LT(rel, tolerance) << "step " << step << ": one rank " << loss << ", " << name << " "
                                << losses.at(step);
    }
    // The model learned something (the comparison is not between two flat lines).
    EXPECT_LT(reference.at(steps), reference.at(1) - 0.3);
    // The validation windows are split over the data-parallel ranks and their sums added.
    const auto val_loss = [&](const std::string& run) {
      return nlohmann::json::parse(
                 ReadFile(dir_ / run / "ckpt" / ("step-" + std::to_string(steps)) / "meta.json"))
          .at("valLoss")
          .get<double>();
    };
    EXPECT_NEAR(val_loss(name), val_loss("one"), tolerance * val_loss("one"));
    // The gradient norm counts each gradient value once, however the ranks hold it (the same
    // reduced gradient on every data rank, ZeRO-1 shards, stages, tensor slices).
    const auto reference_norms = GradNorms(ReadFile(dir_ / "one-rank0.log"));
    const auto norms = GradNorms(ReadFile(dir_ / (name + "-rank0.log")));
    EXPECT_GE(reference_norms.size(), 3u);
    EXPECT_EQ(norms.size(), reference_norms.size());
    for (const auto& [step, norm] : reference_norms) {
      // Logged with 3 decimals.
      const auto it = norms.find(step);
      EXPECT_TRUE(it != norms.end()) << "no grad_norm logged at step " << step;
      if (it != norms.end()) {
        EXPECT_NEAR(it->second, norm, 1e-3 + 1e-4 * norm) << "step " << step;
      }
    }
    std::printf("%s (%d ranks): largest relative loss difference over %d steps %.3g\n",
                name.c_str(), layout.ranks(), steps, worst);

    // Who wrote which file: data rank 0 of each (stage, tensor rank) its shard's parameters
    // and optimizer state; with ZeRO-1 every rank its optimizer shard.
    const fs::path last = dir_ / name / "ckpt" / ("step-" + std::to_string(steps));
    const nlohmann::json meta = nlohmann::json::parse(ReadFile(last / "meta.json"));
    const size_t writers = layout.zero_stage == 1
                               ? static_cast<size_t>(layout.ranks())
                               : static_cast<size_t>(layout.pipeline * layout.tensor);
    EXPECT_EQ(meta.at("files").size(), writers) << meta.dump();
    EXPECT_EQ(meta.at("worldSize").get<int>(), layout.ranks());
    EXPECT_EQ(meta.at("optimizer").at("zeroStage").get<int>(), layout.zero_stage);
    return losses;
  }

  // kill -9 of rank 1 after the checkpoint of step 40: the other ranks exit with code 6
  // within the (shortened) communication timeout, naming rank 1; a new gang resumes from the
  // newest checkpoint and ends at the loss of an uninterrupted run.
  void ExpectKilledRankEndsTheGangThenResumes(const Layout& layout, const Model& model,
                                              int64_t steps, int global_batch) {
    const fs::path straight = WriteConfig("straight", steps, 100, 1, global_batch, model);
    ASSERT_NO_FATAL_FAILURE(RunToEnd(straight, layout, "straight"));
    const double expected = Losses(dir_ / "straight" / "ckpt").at(steps);

    const fs::path config = WriteConfig("killed", steps, 20, 2, global_batch, model);
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
      for (int r = 0; r < layout.ranks(); ++r) {
        if (r == 1)
          continue;
        const std::optional<int> code = ranks[static_cast<size_t>(r)]->Wait(killed_at + 30s);
        ASSERT_TRUE(code.has_value()) << "rank " << r << " still running 30 s after the kill";
        const std::string log = ranks[static_cast<size_t>(r)]->log();
        EXPECT_EQ(*code, 6) << log;
        EXPECT_NE(log.find("rank 1"), std::string::npos) << "rank " << r << ":\n" << log;
      }
      std::printf("%s: the other ranks exited %.2f s after the kill (TESSERA_COMM_TIMEOUT=5)\n",
                  layout.name().c_str(),
                  std::chrono::duration<double>(Clock::now() - killed_at).count());
    }
    ASSERT_NO_FATAL_FAILURE(RunToEnd(config, layout, "second"));
    const std::string log = ReadFile(dir_ / "second-rank0.log");
    EXPECT_NE(log.find("resumed from"), std::string::npos) << log;
    const double resumed = Losses(dir_ / "killed" / "ckpt").at(steps);
    // Same layout, same order of every reduction: the resumed run is the same run.
    EXPECT_NEAR(resumed, expected, 1e-6 * std::abs(expected));
  }

  std::string worker_;
  fs::path source_;
  fs::path dir_;
};

TEST_F(ParallelTest, TwoRanksFollowOneRank) {
  ExpectSameCurveAsOneRank({.data = 2});
}

TEST_F(ParallelTest, FourRanksFollowOneRank) {
  ExpectSameCurveAsOneRank({.data = 4});
}

TEST_F(ParallelTest, ZeroTwoRanksFollowOneRank) {
  ExpectSameCurveAsOneRank({.data = 2, .zero_stage = 1});
}

TEST_F(ParallelTest, ZeroFourRanksFollowOneRank) {
  ExpectSameCurveAsOneRank({.data = 4, .zero_stage = 1});
}

TEST_F(ParallelTest, ZeroKilledRankEndsTheGangThenResumes) {
  ExpectKilledRankEndsTheGangThenResumes({.data = 3, .zero_stage = 1}, kDataParallelModel, 400, 24);
}

// Model parallelism changes only where partial sums are added (tensor) or nothing at all
// (pipeline), so the curves agree to float rounding; 30 steps keep the 8-process runs short.
constexpr int kModelParallelSteps = 30;
constexpr double kModelParallelTolerance = 1e-5;

TEST_F(ParallelTest, PipelineTwoStagesFollowOneRank) {
  ExpectSameCurveAsOneRank({.pipeline = 2}, kModelParallelModel, kModelParallelSteps,
                           kModelParallelTolerance);
}

TEST_F(ParallelTest, PipelineFourStagesFollowOneRank) {
  ExpectSameCurveAsOneRank({.pipeline = 4}, kModelParallelModel, kModelParallelSteps,
                           kModelParallelTolerance);
}

// Both schedules run the same micro-batches and add gradients in the same order: the same
// bits.
TEST_F(ParallelTest, PipelineGPipeEquals1F1B) {
  const auto one_f_one_b = ExpectSameCurveAsOneRank({.pipeline = 4}, kModelParallelModel,
                                                    kModelParallelSteps, kModelParallelTolerance);
  const auto gpipe =
      ExpectSameCurveAsOneRank({.pipeline = 4, .schedule = "GPipe"}, kModelParallelModel,
                               kModelParallelSteps, kModelParallelTolerance);
  EXPECT_EQ(one_f_one_b, gpipe);
}

TEST_F(ParallelTest, TensorTwoRanksFollowOneRank) {
  ExpectSameCurveAsOneRank({.tensor = 2}, kModelParallelModel, kModelParallelSteps,
                           kModelParallelTolerance);
}

TEST_F(ParallelTest, TensorFourRanksFollowOneRank) {
  ExpectSameCurveAsOneRank({.tensor = 4}, kModelParallelModel, kModelParallelSteps,
                           kModelParallelTolerance);
}

TEST_F(ParallelTest, HybridDataPipelineFollowsOneRank) {
  ExpectSameCurveAsOneRank({.data = 2, .pipeline = 2}, kModelParallelModel, kModelParallelSteps,
                           kModelParallelTolerance);
}

TEST_F(ParallelTest, HybridDataTensorZeroFollowsOneRank) {
  ExpectSameCurveAsOneRank({.data = 2, .zero_stage = 1, .tensor = 2}, kModelParallelModel,
                           kModelParallelSteps, kModelParallelTolerance);
}

TEST_F(ParallelTest, HybridPipelineTensorFollowsOneRank) {
  ExpectSameCurveAsOneRank({.pipeline = 2, .tensor = 2}, kModelParallelModel, kModelParallelSteps,
                           kModelParallelTolerance);
}

TEST_F(ParallelTest, HybridDataPipelineTensorFollowsOneRank) {
  ExpectSameCurveAsOneRank({.data = 2, .zero_stage = 1, .pipeline = 2, .tensor = 2},
                           kModelParallelModel, kModelParallelSteps, kModelParallelTolerance);
}

TEST_F(ParallelTest, HybridKilledRankEndsTheGangThenResumes) {
  ExpectKilledRankEndsTheGangThenResumes({.data = 2, .pipeline = 2}, kModelParallelModel, 60, 16);
}

// SIGTERM to one rank stops every rank at the same step, after one checkpoint; the ranks
// that got no signal exit 143 as well, not 0 (which would say the run is finished), and say
// which rank the signal stopped (`tessera run` shows the first rank's last lines, rank 0's).
TEST_F(ParallelTest, SignalToOneRankStopsTheGangAtOneStep) {
  const fs::path config = WriteConfig("stop", 100000, 0, 1);
  auto ranks = Start(config, {.data = 2}, "stop");
  const auto give_up = Clock::now() + 120s;
  while (ranks[1]->log().find("step 1/100000") == std::string::npos && Clock::now() < give_up) {
    ASSERT_FALSE(ranks[1]->Wait(Clock::now())) << ranks[1]->log();
    std::this_thread::sleep_for(5ms);
  }
  ranks[1]->Signal(SIGTERM);
  for (size_t r = 0; r < ranks.size(); ++r) {
    EXPECT_EQ(ranks[r]->Wait(Clock::now() + 60s), std::optional<int>(143)) << "rank " << r << ":\n"
                                                                           << ranks[r]->log();
  }
  std::vector<std::string> written;
  for (const auto& entry : fs::directory_iterator(dir_ / "stop" / "ckpt"))
    written.push_back(entry.path().filename().string());
  ASSERT_EQ(written.size(), 1u);
  const std::string step = written[0].substr(std::string("step-").size());
  EXPECT_NE(ranks[1]->log().find("stopped by signal 15 at step " + step), std::string::npos)
      << ranks[1]->log();
  EXPECT_NE(ranks[0]->log().find("stopped at step " + step +
                                 " of 100000 with rank 1, which a signal stopped"),
            std::string::npos)
      << ranks[0]->log();
}

// Three data ranks split the validation windows 1162, 1162, 1161 (3485 in the corpus's tail,
// fewer than evalBatches × global): every window is evaluated once, as with one rank.
TEST_F(ParallelTest, ThreeDataRanksEvaluateEveryValidationWindow) {
  const auto write = [&](const std::string& name) {
    const fs::path path = WriteConfig(name, 2, 0, 1, 18);
    std::string text = ReadFile(path);
    const auto at = text.find("evalBatches: 1}");
    EXPECT_NE(at, std::string::npos) << text;
    text.replace(at, std::string("evalBatches: 1}").size(), "evalBatches: 200}");
    std::ofstream(path) << text;
    return path;
  };
  ASSERT_NO_FATAL_FAILURE(RunToEnd(write("one"), {}, "one"));
  ASSERT_NO_FATAL_FAILURE(RunToEnd(write("three"), {.data = 3}, "three"));
  const auto val_loss = [&](const std::string& run) {
    return nlohmann::json::parse(ReadFile(dir_ / run / "ckpt" / "step-2" / "meta.json"))
        .at("valLoss")
        .get<double>();
  };
  // Leaving out two windows of 3485 moves the mean by about 6e-4 of itself.
  EXPECT_NEAR(val_loss("three"), val_loss("one"), 1e-5 * val_loss("one"));
}

// A checkpoint of data-parallel ranks with sharded AdamW state does not resume with another
// zeroStage: every rank refuses it (exit 3) naming the field.
TEST_F(ParallelTest, ZeroStageOfTheCheckpointMustMatch) {
  const fs::path config = WriteConfig("zero", 2, 0, 1);
  ASSERT_NO_FATAL_FAILURE(RunToEnd(config, {.data = 2, .zero_stage = 1}, "first"));
  auto ranks = Start(config, {.data = 2}, "second");
  for (size_t r = 0; r < ranks.size(); ++r) {
    EXPECT_EQ(ranks[r]->Wait(Clock::now() + 60s), std::optional<int>(3)) << "rank " << r << ":\n"
                                                                         << ranks[r]->log();
  }
  EXPECT_NE(ranks[0]->log().find("written with parallelism.zeroStage 1, this job has 0"),
            std::string::npos)
      << ranks[0]->log();
}

}  // namespace
