#include "worker/train/trainer.h"

#include <spdlog/sinks/ostream_sink.h>
#include <spdlog/spdlog.h>

#include <gtest/gtest.h>
#include <nlohmann/json.hpp>

#include <fcntl.h>
#include <linux/fs.h>
#include <sys/ioctl.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <functional>
#include <regex>
#include <sstream>

#include "tests/unit/train/loopback_http.h"
#include "worker/model/gpt.h"
#include "worker/train/checkpoint.h"
#include "worker/train/data_loader.h"
#include "worker/train/gpu_replica.h"
#include "worker/train/plan.h"

namespace tessera::train {
namespace {
namespace fs = std::filesystem;

// The body of GET `path` from the trainer's metrics server on 127.0.0.1:port.
std::string HttpGet(int port, const std::string& path) {
  const std::string answer = test::LoopbackExchange(port, "GET " + path + " HTTP/1.0\r\n\r\n");
  const size_t body = answer.find("\r\n\r\n");
  return body == std::string::npos ? answer : answer.substr(body + 4);
}

// The value of the sample `name` (with its labels, if any) in Prometheus text; NaN if absent.
double MetricValue(const std::string& text, const std::string& name) {
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.rfind(name + " ", 0) == 0)
      return std::stod(line.substr(name.size() + 1));
  }
  return std::nan("");
}

// Collects the messages the trainer logs while it exists.
class LogCapture {
 public:
  LogCapture() : sink_(std::make_shared<spdlog::sinks::ostream_sink_mt>(out_)) {
    sink_->set_pattern("%v");
    spdlog::default_logger()->sinks().push_back(sink_);
  }
  ~LogCapture() {
    auto& sinks = spdlog::default_logger()->sinks();
    sinks.erase(std::remove(sinks.begin(), sinks.end(), sink_), sinks.end());
  }
  LogCapture(const LogCapture&) = delete;
  LogCapture& operator=(const LogCapture&) = delete;

  // The first number of every line matching `pattern` (one capture group), in order.
  std::vector<int64_t> Numbers(const std::string& pattern) const {
    std::vector<int64_t> found;
    std::istringstream in(out_.str());
    const std::regex re(pattern);
    std::smatch m;
    for (std::string line; std::getline(in, line);) {
      if (std::regex_search(line, m, re))
        found.push_back(std::stoll(m[1]));
    }
    return found;
  }
  std::string text() const { return out_.str(); }

 private:
  std::ostringstream out_;
  std::shared_ptr<spdlog::sinks::ostream_sink_mt> sink_;
};

class TrainerTest : public ::testing::Test {
 protected:
  void SetUp() override {
    dir_ =
        fs::path(::testing::TempDir()) /
        ("trainer-" + std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()));
    fs::remove_all(dir_);
    fs::create_directories(dir_);
    // A small corpus with structure to learn: one pangram line repeated, 22.5 KB.
    std::ofstream out(dir_ / "corpus.txt");
    for (int i = 0; i < 500; ++i)
      out << "the quick brown fox jumps over the lazy dog.\n";
  }
  void TearDown() override { fs::remove_all(dir_); }

  TrainerConfig Config() const {
    TrainerConfig c;
    c.model = {.layers = 2, .d_model = 32, .heads = 2, .seq_len = 16, .vocab = 256};
    c.data.path = (dir_ / "corpus.txt").string();
    c.batch = {.global = 8, .micro_batches = 2};
    c.optimizer.lr = 3e-3;
    c.schedule = {.steps = 12, .warmup_steps = 3, .eval_every = 4, .eval_batches = 1};
    c.seed = 11;
    c.metrics.port = -1;
    return c;
  }

  static RankContext Rank() { return {.kernel_threads = 2}; }

  // Rewrites checkpoint `step` of `dir` after `change` edited its meta.json fields or its shard
  // (written again through CheckpointStore, so sizes and checksums stay consistent).
  static void RewriteCheckpoint(
      const std::string& dir, int64_t step,
      const std::function<void(CheckpointMeta*, ShardContents*)>& change) {
    CheckpointStore store(dir);
    CheckpointMeta meta;
    ASSERT_TRUE(store.ReadMeta(step, &meta).ok());
    ShardContents shard;
    ASSERT_TRUE(store.ReadShard(meta, "rank-00000.bin", &shard).ok());
    change(&meta, &shard);
    fs::remove_all(store.StepDir(step));
    std::vector<ShardTensor> tensors;
    for (size_t i = 0; i < shard.names.size(); ++i)
      tensors.push_back({shard.names[i], shard.values[i]});
    meta.files.clear();
    const Status st = store.Save(meta, {{"rank-00000.bin", tensors}});
    ASSERT_TRUE(st.ok()) << st.message();
  }

  static Status Train(const TrainerConfig& c, const RunOptions& options, TrainResult* result) {
    std::unique_ptr<Trainer> trainer;
    if (Status st = Trainer::Create(c, Rank(), &trainer); !st.ok())
      return st;
    return trainer->Run(options, result);
  }

  fs::path dir_;
};

// Interrupting after step 5 and resuming reproduces the uninterrupted run bit for bit: the
// loss of every later step and the final parameters and optimizer state (same sha256).
TEST_F(TrainerTest, ResumeIsBitExact) {
  TrainerConfig straight = Config();
  straight.checkpoint = {.dir = (dir_ / "straight").string(), .every_steps = 5, .keep = 5};
  TrainResult full;
  ASSERT_TRUE(Train(straight, {}, &full).ok());
  ASSERT_EQ(full.losses.size(), 12u);

  TrainerConfig interrupted = straight;
  interrupted.checkpoint.dir = (dir_ / "interrupted").string();
  TrainResult first;
  ASSERT_TRUE(Train(interrupted, {.stop_after_step = 5}, &first).ok());
  EXPECT_TRUE(first.stopped);
  EXPECT_EQ(first.steps_completed, 5);
  TrainResult second;
  const Status st = Train(interrupted, {}, &second);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(second.start_step, 5);
  EXPECT_EQ(second.steps_completed, 12);
  ASSERT_EQ(second.losses.size(), 7u);
  for (size_t i = 0; i < 5; ++i)
    EXPECT_EQ(first.losses[i], full.losses[i]) << "step " << i + 1;
  for (size_t i = 0; i < 7; ++i) {
    EXPECT_EQ(second.losses[i], full.losses[5 + i]) << "step " << 6 + i;  // exact, not near
  }
  EXPECT_EQ(second.val_loss, full.val_loss);

  CheckpointStore a(straight.checkpoint.dir), b(interrupted.checkpoint.dir);
  CheckpointMeta ma, mb;
  ASSERT_TRUE(a.ReadMeta(12, &ma).ok());
  ASSERT_TRUE(b.ReadMeta(12, &mb).ok());
  EXPECT_EQ(ma.files.at(0).sha256, mb.files.at(0).sha256);
  EXPECT_EQ(a.CompleteSteps(), (std::vector<int64_t>{5, 10, 12}));
}

TEST_F(TrainerTest, LossFallsOnALearnableCorpus) {
  TrainerConfig c = Config();
  c.optimizer.lr = 1e-2;
  c.schedule.steps = 40;
  c.schedule.eval_every = 0;
  TrainResult r;
  ASSERT_TRUE(Train(c, {}, &r).ok());
  // The first loss is near ln(256) = 5.55 (uniform over bytes). The corpus's character
  // unigram entropy is 3.12 nats, the best a model without context can do; 2.5 can only be
  // reached by using context. Measured: 1.80 after 40 steps (seed 11, 2 threads).
  EXPECT_GT(r.losses.front(), 5.0f);
  ASSERT_TRUE(r.val_loss.has_value());
  EXPECT_LT(*r.val_loss, 2.5);
}

// The gradient of one step is the mean over the global batch however it is split into
// micro-batches, so the losses agree to float rounding.
TEST_F(TrainerTest, MicroBatchAccumulationMatchesOneBatch) {
  TrainerConfig one = Config();
  one.batch.micro_batches = 1;
  TrainerConfig four = Config();
  four.batch.micro_batches = 4;
  TrainResult r1, r4;
  Status st = Train(one, {}, &r1);
  ASSERT_TRUE(st.ok()) << st.message();
  st = Train(four, {}, &r4);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(r1.losses.size(), r4.losses.size());
  for (size_t i = 0; i < r1.losses.size(); ++i) {
    EXPECT_NEAR(r1.losses[i], r4.losses[i], 2e-4) << "step " << i + 1;
  }
}

TEST_F(TrainerTest, CheckpointOfAnotherConfigurationIsRefused) {
  TrainerConfig c = Config();
  c.checkpoint = {.dir = (dir_ / "ckpt").string(), .every_steps = 0, .keep = 2};
  TrainResult r;
  ASSERT_TRUE(Train(c, {.stop_after_step = 2}, &r).ok());
  c.optimizer.lr = 1e-3;
  const Status st = Train(c, {}, &r);
  EXPECT_EQ(st.code(), ExitCode::kCheckpointRefused);
  EXPECT_NE(st.message().find((dir_ / "ckpt" / "step-2" / "meta.json").string()), std::string::npos)
      << st.message();
  EXPECT_NE(st.message().find("optimizer.lr: 0.003 vs 0.001"), std::string::npos) << st.message();
}

TEST_F(TrainerTest, CorruptCheckpointIsRefusedAndKept) {
  TrainerConfig c = Config();
  c.checkpoint = {.dir = (dir_ / "ckpt").string(), .every_steps = 0, .keep = 2};
  TrainResult r;
  ASSERT_TRUE(Train(c, {.stop_after_step = 3}, &r).ok());
  const fs::path shard = dir_ / "ckpt" / "step-3" / "rank-00000.bin";
  const auto size = fs::file_size(shard);
  {
    std::fstream f(shard, std::ios::in | std::ios::out | std::ios::binary);
    f.seekp(static_cast<std::streamoff>(size / 2));
    f.put('\x55');
  }
  const Status st = Train(c, {}, &r);
  EXPECT_EQ(st.exit_code(), 3);
  EXPECT_NE(st.message().find(shard.string()), std::string::npos) << st.message();
  EXPECT_NE(st.message().find("sha256"), std::string::npos) << st.message();
  EXPECT_TRUE(fs::exists(shard));  // never deleted or overwritten
  EXPECT_EQ(CheckpointStore(c.checkpoint.dir).CompleteSteps(), (std::vector<int64_t>{3}));
}

TEST_F(TrainerTest, DatasetChangedSinceTheCheckpointIsRefused) {
  TrainerConfig c = Config();
  c.checkpoint = {.dir = (dir_ / "ckpt").string(), .every_steps = 0, .keep = 2};
  TrainResult r;
  ASSERT_TRUE(Train(c, {.stop_after_step = 1}, &r).ok());
  std::ofstream(dir_ / "corpus.txt", std::ios::app) << std::string(5000, 'x');
  const Status st = Train(c, {}, &r);
  EXPECT_EQ(st.exit_code(), 3);
  EXPECT_NE(st.message().find("dataset changed: restore it or use another checkpoint.dir"),
            std::string::npos)
      << st.message();
}

TEST_F(TrainerTest, MissingDatasetIsBadConfigNamingThePath) {
  TrainerConfig c = Config();
  c.data.path = (dir_ / "nope.txt").string();
  std::unique_ptr<Trainer> trainer;
  const Status st = Trainer::Create(c, Rank(), &trainer);
  EXPECT_EQ(st.exit_code(), 2);
  EXPECT_NE(st.message().find(c.data.path), std::string::npos) << st.message();
}

// 131072 tokens a sequence (the API's longest): a micro-batch's attention probabilities alone
// are 1 TiB, which no machine here has. Refused before anything is allocated, with the numbers, not
// as std::bad_alloc (or the kernel's OOM killer) in the first step.
TEST_F(TrainerTest, AConfigurationThatCannotFitInMemoryIsBadConfig) {
  TrainerConfig c = Config();
  c.model.seq_len = 1 << 17;
  std::unique_ptr<Trainer> trainer;
  const Status st = Trainer::Create(c, Rank(), &trainer);
  EXPECT_EQ(st.exit_code(), 2);
  EXPECT_EQ(st.message().rfind("batch.global, model.seqLen: this rank needs at least ", 0), 0u)
      << st.message();
  EXPECT_NE(st.message().find("for micro-batches of 4 sequences of 131072 tokens, 1 alive at "
                              "once (attention probabilities 1.0 TiB)"),
            std::string::npos)
      << st.message();
  EXPECT_EQ(trainer, nullptr);
}

TEST_F(TrainerTest, RankOutsideTheWorldIsRefused) {
  for (const RankContext& rank :
       {RankContext{.rank = 2, .world_size = 2}, RankContext{.rank = -1, .world_size = 1}}) {
    std::unique_ptr<Trainer> trainer;
    const Status st = Trainer::Create(Config(), rank, &trainer);
    EXPECT_EQ(st.exit_code(), 2) << st.message();
    EXPECT_NE(st.message().find(
                  fmt::format("RANK={}: not in [0, WORLD_SIZE={})", rank.rank, rank.world_size)),
              std::string::npos)
        << st.message();
  }
}

TEST_F(TrainerTest, SeveralRanksWithoutAGroupAreABug) {
  std::unique_ptr<Trainer> trainer;
  const Status st = Trainer::Create(Config(), {.rank = 0, .world_size = 2}, &trainer);
  EXPECT_EQ(st.exit_code(), 1);
  EXPECT_NE(st.message().find("world group"), std::string::npos) << st.message();
}

TEST_F(TrainerTest, StopRequestFinishesTheStepAndCheckpoints) {
  TrainerConfig c = Config();
  c.checkpoint = {.dir = (dir_ / "ckpt").string(), .every_steps = 0, .keep = 2};
  std::unique_ptr<Trainer> trainer;
  ASSERT_TRUE(Trainer::Create(c, Rank(), &trainer).ok());
  trainer->RequestStop();
  TrainResult r;
  ASSERT_TRUE(trainer->Run({}, &r).ok());
  EXPECT_TRUE(r.stopped);
  EXPECT_EQ(r.steps_completed, 1);
  EXPECT_EQ(CheckpointStore(c.checkpoint.dir).CompleteSteps(), (std::vector<int64_t>{1}));
}

TEST_F(TrainerTest, FinishedRunResumesToNothing) {
  TrainerConfig c = Config();
  c.schedule.steps = 3;
  c.checkpoint = {.dir = (dir_ / "ckpt").string(), .every_steps = 0, .keep = 2};
  TrainResult r;
  ASSERT_TRUE(Train(c, {}, &r).ok());
  ASSERT_TRUE(Train(c, {}, &r).ok());
  EXPECT_EQ(r.start_step, 3);
  EXPECT_TRUE(r.losses.empty());
  EXPECT_FALSE(r.stopped);
}

TEST_F(TrainerTest, StopAfterStepZeroTrainsNothing) {
  TrainerConfig c = Config();
  TrainResult r;
  ASSERT_TRUE(Train(c, {.stop_after_step = 0}, &r).ok());
  EXPECT_EQ(r.steps_completed, 0);
  EXPECT_TRUE(r.losses.empty());
  EXPECT_TRUE(r.stopped);
}

// Log lines every logEvery steps, on the first step a run executes and on the last; the
// validation loss every evalEvery steps and after the last one, not where a run is stopped.
TEST_F(TrainerTest, LogsAndEvaluatesOnTheirCadence) {
  TrainerConfig c = Config();
  c.log_every = 5;
  c.checkpoint = {.dir = (dir_ / "ckpt").string(), .every_steps = 0, .keep = 2};
  const std::string step_line = "^step ([0-9]+)/12 loss ";
  const std::string val_line = "^step ([0-9]+) val_loss ";
  TrainResult r;
  {
    LogCapture log;
    ASSERT_TRUE(Train(c, {.stop_after_step = 7}, &r).ok());
    EXPECT_EQ(log.Numbers(step_line), (std::vector<int64_t>{1, 5}));
    EXPECT_EQ(log.Numbers(val_line), (std::vector<int64_t>{4}));
    EXPECT_EQ(log.text().find("done: "), std::string::npos) << log.text();
  }
  LogCapture log;
  ASSERT_TRUE(Train(c, {}, &r).ok());
  EXPECT_EQ(log.Numbers(step_line), (std::vector<int64_t>{8, 10, 12}));
  EXPECT_EQ(log.Numbers(val_line), (std::vector<int64_t>{8, 12}));
  EXPECT_EQ(log.Numbers("^done: ([0-9]+) steps"), (std::vector<int64_t>{12}));
}

// meta.json records the last step's loss and validation loss and the samples drawn; only the
// newest checkpoint.keep directories stay.
TEST_F(TrainerTest, CheckpointRecordsTheRunAndKeepsTheNewest) {
  TrainerConfig c = Config();
  c.schedule.steps = 6;
  c.schedule.eval_every = 0;
  c.checkpoint = {.dir = (dir_ / "ckpt").string(), .every_steps = 2, .keep = 2};
  TrainResult r;
  ASSERT_TRUE(Train(c, {}, &r).ok());
  CheckpointStore store(c.checkpoint.dir);
  EXPECT_EQ(store.CompleteSteps(), (std::vector<int64_t>{4, 6}));
  CheckpointMeta meta;
  ASSERT_TRUE(store.ReadMeta(6, &meta).ok());
  EXPECT_EQ(static_cast<float>(meta.loss), r.losses.back());
  EXPECT_EQ(meta.val_loss, r.val_loss);
  EXPECT_EQ(meta.rng_counter, 6 * c.batch.global);
  EXPECT_EQ(meta.data_cursor.samples_consumed, 6 * c.batch.global);
}

// Makes `dir`'s entries undeletable (immutable as root: FS_IMMUTABLE_FL; otherwise no write
// permission); false when this file system or user cannot. Undone by MakeDeletable.
bool MakeUndeletable(const fs::path& dir) {
  if (::geteuid() != 0) {
    fs::permissions(dir, fs::perms::owner_read | fs::perms::owner_exec);
    return true;
  }
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int flags = 0;
  bool done = false;
  if (fd >= 0 && ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0) {
    flags |= FS_IMMUTABLE_FL;
    done = ::ioctl(fd, FS_IOC_SETFLAGS, &flags) == 0;
  }
  if (fd >= 0)
    ::close(fd);
  return done;
}

void MakeDeletable(const fs::path& dir) {
  if (::geteuid() != 0) {
    fs::permissions(dir, fs::perms::owner_all);
    return;
  }
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_CLOEXEC);
  int flags = 0;
  if (fd >= 0 && ::ioctl(fd, FS_IOC_GETFLAGS, &flags) == 0) {
    flags &= ~FS_IMMUTABLE_FL;
    ::ioctl(fd, FS_IOC_SETFLAGS, &flags);
  }
  if (fd >= 0)
    ::close(fd);
}

// checkpoint.keep is housekeeping: an older checkpoint that cannot be deleted (held open by a
// reader on NFS, a read-only snapshot) is a warning naming it, and training goes on with the
// checkpoint just written standing. Once it failed the rank with exit code 4 after every
// checkpoint, costing a gang restart each time and the job at the backoff limit.
TEST_F(TrainerTest, AnOldCheckpointThatCannotBeDeletedIsAWarningNotAFailure) {
  TrainerConfig c = Config();
  c.schedule.steps = 6;
  c.schedule.eval_every = 0;
  c.checkpoint = {.dir = (dir_ / "ckpt").string(), .every_steps = 2, .keep = 1};
  TrainResult r;
  ASSERT_TRUE(Train(c, {.stop_after_step = 2}, &r).ok());
  const fs::path stuck = dir_ / "ckpt" / "step-2";
  if (!MakeUndeletable(stuck))
    GTEST_SKIP() << "cannot make " << stuck << " undeletable here";
  LogCapture log;
  const Status st = Train(c, {}, &r);
  MakeDeletable(stuck);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(r.steps_completed, 6);
  // step-4 was pruned all the same; step-2 stays, named in a warning.
  EXPECT_EQ(CheckpointStore(c.checkpoint.dir).CompleteSteps(), (std::vector<int64_t>{2, 6}));
  EXPECT_NE(log.text().find(stuck.string() + ": cannot delete"), std::string::npos) << log.text();
}

TEST_F(TrainerTest, UnwritableCheckpointDirectoryIsIoError) {
  std::ofstream(dir_ / "file") << "not a directory";
  TrainerConfig c = Config();
  c.checkpoint = {.dir = (dir_ / "file" / "ckpt").string(), .every_steps = 0, .keep = 2};
  TrainResult r;
  const Status st = Train(c, {.stop_after_step = 1}, &r);
  EXPECT_EQ(st.exit_code(), 4) << st.message();
  EXPECT_NE(st.message().find(c.checkpoint.dir), std::string::npos) << st.message();
}

// A huge learning rate sends the parameters to infinity: the run ends with exit code 5 at the
// first step whose loss is not finite, naming it, and writes no checkpoint there.
TEST_F(TrainerTest, NonFiniteLossEndsTheRunWithExitCodeFive) {
  TrainerConfig c = Config();
  c.optimizer.lr = 1e38;
  c.schedule.warmup_steps = 0;
  c.checkpoint = {.dir = (dir_ / "ckpt").string(), .every_steps = 1, .keep = 20};
  TrainResult r;
  const Status st = Train(c, {}, &r);
  EXPECT_EQ(st.exit_code(), 5) << st.message();
  const std::vector<int64_t> written = CheckpointStore(c.checkpoint.dir).CompleteSteps();
  ASSERT_FALSE(written.empty());
  const int64_t diverged = written.back() + 1;
  EXPECT_EQ(st.message().rfind(fmt::format("step {}: loss ", diverged), 0), 0u) << st.message();
  EXPECT_NE(st.message().find("are not finite; lower optimizer.lr"), std::string::npos)
      << st.message();
}

// Every field Resume compares with this job refuses a checkpoint that differs in it (exit 3,
// naming meta.json or the shard); the zeroStage of a one-rank job does not matter.
TEST_F(TrainerTest, ResumeRefusesACheckpointThatDoesNotFitThisJob) {
  struct Case {
    std::string name;
    std::function<void(CheckpointMeta*, ShardContents*)> change;
    std::string want;              // in the message; empty: resumes
    std::string advice = "move ";  // and what to do
  };
  const std::vector<Case> cases = {
      {"mesh", [](CheckpointMeta* m, ShardContents*) { m->mesh = "data=2,pipeline=1,tensor=1"; },
       "mesh 'data=2,pipeline=1,tensor=1' (1 ranks) does not match",
       "run with the mesh it was written with or use another checkpoint.dir"},
      {"worldSize", [](CheckpointMeta* m, ShardContents*) { m->world_size = 2; },
       "mesh 'data=1,pipeline=1,tensor=1' (2 ranks) does not match",
       "run with the mesh it was written with or use another checkpoint.dir"},
      {"config hash", [](CheckpointMeta* m, ShardContents*) { m->config_hash = "0"; },
       "another configuration (config hash differs: checkpoint vs this job)",
       "restore the configuration or use another checkpoint.dir"},
      {"cursor step", [](CheckpointMeta* m, ShardContents*) { m->data_cursor.step = 1; },
       "data cursor (step 1, 16 samples), optimizer steps 2 or seed 11 do not match step 2"},
      {"samples", [](CheckpointMeta* m, ShardContents*) { m->data_cursor.samples_consumed = 8; },
       "data cursor (step 2, 8 samples)"},
      {"optimizer steps", [](CheckpointMeta* m, ShardContents*) { m->optimizer_steps = 1; },
       "optimizer steps 1 or seed"},
      {"seed", [](CheckpointMeta* m, ShardContents*) { m->rng_seed = 12; }, "or seed 12 do not"},
      {"params", [](CheckpointMeta*, ShardContents* s) { s->values[0].pop_back(); },
       "rank-00000.bin: tensor 'params' has 34175 values, this rank needs 34176"},
      {"zeroStage", [](CheckpointMeta* m, ShardContents*) { m->zero_stage = 1; }, ""},
  };
  for (const Case& k : cases) {
    SCOPED_TRACE(k.name);
    TrainerConfig c = Config();
    c.checkpoint = {.dir = (dir_ / ("ckpt-" + k.name)).string(), .every_steps = 0, .keep = 2};
    TrainResult r;
    ASSERT_TRUE(Train(c, {.stop_after_step = 2}, &r).ok());
    RewriteCheckpoint(c.checkpoint.dir, 2, k.change);
    const Status st = Train(c, {.stop_after_step = 3}, &r);
    if (k.want.empty()) {
      EXPECT_TRUE(st.ok()) << st.message();
      EXPECT_EQ(r.start_step, 2);
      continue;
    }
    EXPECT_EQ(st.exit_code(), 3) << st.message();
    EXPECT_NE(st.message().find(k.want), std::string::npos) << st.message();
    const std::string advice =
        k.advice == "move " ? "; move " + CheckpointStore(c.checkpoint.dir).StepDir(2) + " aside"
                            : "; " + k.advice;
    EXPECT_NE(st.message().find(advice), std::string::npos) << st.message();
  }
}

// The mean loss over the first evalBatches x batch.global validation windows (or all of them
// when the split has fewer), whatever the micro-batch size: compared with the same model
// evaluating one window at a time.
TEST_F(TrainerTest, ValidationLossIsTheMeanOverTheEvaluatedWindows) {
  struct Case {
    double validation_fraction;
    int micro_batches;
    int64_t windows;  // evaluated
  };
  // 22500 tokens: 10% is 132 windows of 17, more than 2 x 8; 1% is 14, fewer.
  for (const Case& k : {Case{0.1, 2, 16}, Case{0.01, 2, 14}, Case{0.01, 8, 14}}) {
    SCOPED_TRACE(testing::Message() << k.validation_fraction << " " << k.micro_batches);
    TrainerConfig c = Config();
    c.data.validation_fraction = k.validation_fraction;
    c.batch.micro_batches = k.micro_batches;
    c.schedule.eval_batches = 2;
    std::unique_ptr<Trainer> trainer;
    ASSERT_TRUE(Trainer::Create(c, Rank(), &trainer).ok());
    TrainResult r;
    ASSERT_TRUE(trainer->Run({.stop_after_step = 0}, &r).ok());  // initialises the parameters

    TokenDataset data;
    ASSERT_TRUE(TokenDataset::Load(c.data.path, c.data.tokenizer, c.model.vocab,
                                   c.data.validation_fraction, c.model.seq_len, &data)
                    .ok());
    const DataLoader loader(&data, c.model.seq_len, c.batch.global, c.seed);
    ASSERT_EQ(std::min<int64_t>(16, loader.validation_windows()), k.windows);
    model::Gpt reference(c.model);
    reference.InitParameters(c.seed);
    double sum = 0;
    for (int64_t w = 0; w < k.windows; ++w) {
      Batch b;
      loader.ValidationBatch(w, 1, &b);
      sum += reference.Forward(b.tokens, b.targets, b.B, b.T);
    }
    EXPECT_NEAR(trainer->ValidationLoss(), sum / static_cast<double>(k.windows), 1e-5);
  }
}

// tessera_train_grad_norm is the L2 norm, before clipping, of the gradient of the mean loss
// over the whole global batch however it is split into micro-batches: compared with the same
// model's gradient of one batch of all the step's sequences.
TEST_F(TrainerTest, ReportedGradientNormIsTheGlobalBatchsBeforeClipping) {
  TrainerConfig c = Config();
  c.metrics.port = 0;
  TokenDataset data;
  ASSERT_TRUE(TokenDataset::Load(c.data.path, c.data.tokenizer, c.model.vocab,
                                 c.data.validation_fraction, c.model.seq_len, &data)
                  .ok());
  const DataLoader loader(&data, c.model.seq_len, c.batch.global, c.seed);
  model::Gpt reference(c.model);
  reference.InitParameters(c.seed);
  reference.ZeroGradients();
  Batch b;
  loader.TrainBatch(0, 0, c.batch.global, &b);
  reference.Forward(b.tokens, b.targets, b.B, b.T);
  reference.Backward();
  double squares = 0;
  for (float g : reference.gradients())
    squares += static_cast<double>(g) * g;
  const double want = std::sqrt(squares);
  ASSERT_GT(want, c.optimizer.grad_clip);  // so clipping could have changed it

  for (int micro_batches : {1, 4}) {
    SCOPED_TRACE(micro_batches);
    c.batch.micro_batches = micro_batches;
    std::unique_ptr<Trainer> trainer;
    ASSERT_TRUE(Trainer::Create(c, Rank(), &trainer).ok());
    TrainResult r;
    ASSERT_TRUE(trainer->Run({.stop_after_step = 1}, &r).ok());
    const std::string metrics = HttpGet(trainer->metrics_port(), "/metrics");
    EXPECT_NEAR(MetricValue(metrics, "tessera_train_grad_norm"), want, 1e-4 * want) << metrics;
  }
}

// /metrics after a run: the step, losses, memory of parameters, gradients and AdamW state
// (4, 4 and 8 bytes a parameter), activations, and no MFU without a peak; /progress of a run
// that resumed a finished checkpoint shows that checkpoint's step, loss and validation loss.
TEST_F(TrainerTest, MetricsShowTheRunAndTheCheckpointItResumed) {
  TrainerConfig c = Config();
  c.schedule.steps = 3;
  c.metrics.port = 0;
  c.checkpoint = {.dir = (dir_ / "ckpt").string(), .every_steps = 0, .keep = 2};
  const double parameters = static_cast<double>(model::Gpt(c.model).parameters().size());
  TrainResult r;
  {
    std::unique_ptr<Trainer> trainer;
    ASSERT_TRUE(Trainer::Create(c, Rank(), &trainer).ok());
    ASSERT_GT(trainer->metrics_port(), 0);
    ASSERT_TRUE(trainer->Run({}, &r).ok());
    const std::string m = HttpGet(trainer->metrics_port(), "/metrics");
    EXPECT_EQ(MetricValue(m, "tessera_train_step"), 3) << m;
    EXPECT_FLOAT_EQ(static_cast<float>(MetricValue(m, "tessera_train_loss")), r.losses.back());
    ASSERT_TRUE(r.val_loss.has_value());
    EXPECT_DOUBLE_EQ(MetricValue(m, "tessera_train_validation_loss"), *r.val_loss) << m;
    EXPECT_EQ(MetricValue(m, "tessera_train_mfu_ratio"), 0) << m;
    EXPECT_EQ(MetricValue(m, "tessera_memory_bytes{kind=\"parameters\"}"), 4 * parameters) << m;
    EXPECT_EQ(MetricValue(m, "tessera_memory_bytes{kind=\"gradients\"}"), 4 * parameters) << m;
    EXPECT_EQ(MetricValue(m, "tessera_memory_bytes{kind=\"optimizer\"}"), 8 * parameters) << m;
    EXPECT_GT(MetricValue(m, "tessera_memory_bytes{kind=\"activations\"}"), 0) << m;
  }
  CheckpointMeta meta;
  ASSERT_TRUE(CheckpointStore(c.checkpoint.dir).ReadMeta(3, &meta).ok());
  std::unique_ptr<Trainer> trainer;
  ASSERT_TRUE(Trainer::Create(c, Rank(), &trainer).ok());
  TrainResult resumed;
  ASSERT_TRUE(trainer->Run({}, &resumed).ok());
  EXPECT_EQ(resumed.start_step, 3);
  EXPECT_EQ(resumed.val_loss, meta.val_loss);
  const nlohmann::json progress =
      nlohmann::json::parse(HttpGet(trainer->metrics_port(), "/progress"));
  EXPECT_EQ(progress["step"], 3) << progress.dump();
  EXPECT_EQ(progress["loss"].get<double>(), meta.loss) << progress.dump();
  EXPECT_EQ(progress["valLoss"].get<double>(), *meta.val_loss) << progress.dump();
}

// With a peak (metrics.peakFlopsPerSecond), the last step's MFU is its tokens a second times
// the FLOPs of one over the peak (of the one rank here).
TEST_F(TrainerTest, MfuIsTheStepsFlopsOverThePeak) {
  TrainerConfig c = Config();
  c.schedule.steps = 2;
  c.metrics.port = 0;
  c.metrics.peak_flops_per_second = 1e9;
  std::unique_ptr<Trainer> trainer;
  ASSERT_TRUE(Trainer::Create(c, Rank(), &trainer).ok());
  TrainResult r;
  ASSERT_TRUE(trainer->Run({}, &r).ok());
  const std::string m = HttpGet(trainer->metrics_port(), "/metrics");
  const double tokens_per_second = MetricValue(m, "tessera_train_tokens_per_second");
  ASSERT_GT(tokens_per_second, 0) << m;
  const double want = FlopsPerToken(c.model) * tokens_per_second / 1e9;
  EXPECT_NEAR(MetricValue(m, "tessera_train_mfu_ratio"), want, 1e-5 * want) << m;
}

// precision bf16 is the GPU model; where none is visible the job fails at once, exit 2,
// naming the field and the way out (the GpuTrainerTest cases train on a GPU).
TEST_F(TrainerTest, Bf16WithoutAGpuIsBadConfigNamingPrecision) {
  int device = -1;
  if (CheckGpu(0, &device).ok())
    GTEST_SKIP() << "a CUDA device is visible: GpuTrainerTest.* train in bf16 on it";
  TrainerConfig c = Config();
  c.precision = Precision::kBf16;
  std::unique_ptr<Trainer> trainer;
  const Status st = Trainer::Create(c, Rank(), &trainer);
  EXPECT_EQ(st.exit_code(), 2);
  EXPECT_EQ(st.message().rfind("precision: bf16 needs a CUDA GPU", 0), 0u) << st.message();
  EXPECT_NE(st.message().find("use precision fp32"), std::string::npos) << st.message();
}

// The trainer with the CUDA model (precision bf16) on a GPU; skipped elsewhere.
class GpuTrainerTest : public TrainerTest {
 protected:
  void SetUp() override {
    int device = -1;
    if (!CheckGpu(0, &device).ok())
      GTEST_SKIP() << "no CUDA device: GpuTrainerTest runs on a machine with a GPU";
    TrainerTest::SetUp();
  }
  TrainerConfig Bf16() const {
    TrainerConfig c = Config();
    c.precision = Precision::kBf16;
    return c;
  }
};

// Same data, same initial parameters, the same optimizer: the bf16 run follows the fp32 CPU
// run's loss curve within bf16 rounding, and learns.
TEST_F(GpuTrainerTest, Bf16TracksTheFp32Run) {
  TrainResult cpu, gpu;
  ASSERT_TRUE(Train(Config(), {}, &cpu).ok());
  const Status st = Train(Bf16(), {}, &gpu);
  ASSERT_TRUE(st.ok()) << st.message();
  ASSERT_EQ(gpu.losses.size(), cpu.losses.size());
  for (size_t i = 0; i < cpu.losses.size(); ++i) {
    const double rel = std::abs(gpu.losses[i] - cpu.losses[i]) / std::abs(cpu.losses[i]);
    EXPECT_TRUE(rel <= 3e-2) << "step " << i + 1 << ": gpu " << gpu.losses[i] << " cpu "
                             << cpu.losses[i];
  }
  EXPECT_LT(gpu.losses.back(), gpu.losses.front() - 1.0f);
  ASSERT_TRUE(gpu.val_loss.has_value() && cpu.val_loss.has_value());
  EXPECT_NEAR(*gpu.val_loss, *cpu.val_loss, 3e-2 * *cpu.val_loss);
}

// A checkpoint holds the device's parameters, AdamW moments and step count: the resumed run
// continues the uninterrupted one (moments reset to zero would change the next steps).
TEST_F(GpuTrainerTest, ResumeContinuesTheRun) {
  TrainerConfig straight = Bf16();
  straight.checkpoint = {.dir = (dir_ / "straight").string(), .every_steps = 5, .keep = 5};
  TrainResult full;
  ASSERT_TRUE(Train(straight, {}, &full).ok());
  TrainerConfig interrupted = straight;
  interrupted.checkpoint.dir = (dir_ / "interrupted").string();
  TrainResult first, second;
  ASSERT_TRUE(Train(interrupted, {.stop_after_step = 5}, &first).ok());
  const Status st = Train(interrupted, {}, &second);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(second.start_step, 5);
  ASSERT_EQ(second.losses.size(), 7u);
  for (size_t i = 0; i < 7; ++i) {
    EXPECT_NEAR(second.losses[i], full.losses[5 + i], 1e-4 * full.losses[5 + i])
        << "step " << 6 + i;
  }
  CheckpointStore store(interrupted.checkpoint.dir);
  CheckpointMeta meta;
  ASSERT_TRUE(store.ReadMeta(5, &meta).ok());
  EXPECT_EQ(meta.optimizer_steps, 5);
}

}  // namespace
}  // namespace tessera::train
