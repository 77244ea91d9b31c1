// The two mappings from a TrainingJob: lifecycle::PolicyFromJob and
// train::TrainerConfigFromJob (with its YAML round trip).
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>

#include "api/codec.h"
#include "api/validate.h"
#include "lifecycle/from_api.h"
#include "worker/train/from_api.h"

namespace tessera {
namespace {

// Decodes and defaults a job; the schema's required fields are not insisted on, so that tests
// can hand the mappings jobs the validator would refuse.
api::TrainingJob Decode(const std::string& yaml) {
  api::DecodeResult r = api::DecodeYaml(yaml);
  EXPECT_TRUE(r.job.has_value());
  api::TrainingJob job = *r.job;
  api::ApplyDefaults(job);
  return job;
}

constexpr char kJob[] = R"(
apiVersion: tessera.dev/v1alpha1
kind: TrainingJob
metadata: {name: j}
spec:
  workers: 2
  parallelism: {microBatches: 2, zeroStage: 1, bucketMiB: 10, schedule: GPipe}
  trainer:
    model: {layers: 3, dModel: 96, heads: 4, seqLen: 32}
    data: {path: data/x.txt, tokenizer: uint16, validationFraction: 0.2}
    batch: {global: 8}
    optimizer: {lr: 1.5e-3, weightDecay: 0.05, beta1: 0.8, beta2: 0.99, gradClip: 0.5}
    schedule: {steps: 123, warmupSteps: 7, decay: constant}
    seed: 42
    checkpoint: {dir: /ckpt, everySteps: 10, keep: 5}
  runPolicy:
    backoffLimit: 4
    permanentExitCodes: [2, 3]
    activeDeadlineSeconds: 900
    progressDeadlineSeconds: 0
    cleanPodPolicy: All
  scheduling: {gang: false, startupTimeoutSeconds: 60}
  metrics: {port: 9500}
)";

TEST(PolicyFromJob, MapsTheRunPolicy) {
  const lifecycle::Policy p = lifecycle::PolicyFromJob(Decode(kJob));
  EXPECT_EQ(p.workers, 2);
  EXPECT_EQ(p.backoff_limit, 4);
  EXPECT_EQ(p.permanent_exit_codes, (std::vector<int64_t>{2, 3}));
  EXPECT_EQ(p.active_deadline_seconds, std::optional<int64_t>(900));
  EXPECT_FALSE(p.progress_deadline_seconds.has_value());  // 0 is off
  EXPECT_EQ(p.clean_pod_policy, lifecycle::CleanPodPolicy::kAll);
  EXPECT_FALSE(p.gang);
  EXPECT_EQ(p.startup_timeout_seconds, std::optional<int64_t>(60));
  EXPECT_FALSE(p.suspend);
}

TEST(PolicyFromJob, DefaultsMatchTheDesign) {
  const lifecycle::Policy p = lifecycle::PolicyFromJob(
      Decode("apiVersion: tessera.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: j}\n"
             "spec: {trainer: {data: {path: x}}}\n"));
  EXPECT_EQ(p.workers, 1);
  EXPECT_EQ(p.backoff_limit, 3);
  EXPECT_EQ(p.permanent_exit_codes, (std::vector<int64_t>{2}));
  EXPECT_EQ(p.progress_deadline_seconds, std::optional<int64_t>(600));
  EXPECT_FALSE(p.active_deadline_seconds.has_value());
  EXPECT_EQ(p.clean_pod_policy, lifecycle::CleanPodPolicy::kRunning);
  EXPECT_TRUE(p.gang);
}

TEST(TrainerConfigFromJob, MapsEveryTrainerField) {
  train::TrainerConfig c;
  ASSERT_TRUE(train::TrainerConfigFromJob(Decode(kJob), &c).ok());
  EXPECT_EQ(c.model.layers, 3);
  EXPECT_EQ(c.model.d_model, 96);
  EXPECT_EQ(c.model.heads, 4);
  EXPECT_EQ(c.model.seq_len, 32);
  EXPECT_EQ(c.model.vocab, 256);
  EXPECT_EQ(c.data.path, "data/x.txt");
  EXPECT_EQ(c.data.tokenizer, "uint16");
  EXPECT_DOUBLE_EQ(c.data.validation_fraction, 0.2);
  EXPECT_EQ(c.batch.global, 8);
  EXPECT_EQ(c.batch.micro_batches, 2);
  EXPECT_EQ(c.parallel.zero_stage, 1);
  EXPECT_DOUBLE_EQ(c.parallel.bucket_mib, 10);
  EXPECT_EQ(c.parallel.schedule, "GPipe");
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1.5e-3);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.05);
  EXPECT_DOUBLE_EQ(c.optimizer.beta1, 0.8);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.99);
  EXPECT_DOUBLE_EQ(c.optimizer.grad_clip, 0.5);
  EXPECT_EQ(c.schedule.steps, 123);
  EXPECT_EQ(c.schedule.warmup_steps, 7);
  EXPECT_EQ(c.schedule.decay, train::Decay::kConstant);
  EXPECT_EQ(c.seed, 42u);
  EXPECT_EQ(c.checkpoint.dir, "/ckpt");
  EXPECT_EQ(c.checkpoint.every_steps, 10);
  EXPECT_EQ(c.checkpoint.keep, 5);
  EXPECT_EQ(c.metrics.port, 9500);
}

TEST(TrainerConfigFromJob, YamlRoundTripKeepsTheTrajectory) {
  train::TrainerConfig c;
  ASSERT_TRUE(train::TrainerConfigFromJob(Decode(kJob), &c).ok());
  train::TrainerConfig back;
  const train::Status st =
      train::ParseTrainerConfigYaml(train::TrainerConfigYaml(c), "roundtrip", &back);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(train::TrajectoryJson(back), train::TrajectoryJson(c));
  EXPECT_EQ(back.checkpoint.dir, c.checkpoint.dir);
  EXPECT_EQ(back.checkpoint.every_steps, c.checkpoint.every_steps);
  EXPECT_EQ(back.checkpoint.keep, c.checkpoint.keep);
  EXPECT_EQ(back.metrics.port, c.metrics.port);
  EXPECT_EQ(back.batch.micro_batches, c.batch.micro_batches);
}

// TrainerConfigYaml writes every field, so the worker reads back what `tessera run` decided,
// not the trainer's defaults.
TEST(TrainerConfigYaml, RoundTripsEveryField) {
  train::TrainerConfig c;
  c.model = {.layers = 3, .d_model = 48, .heads = 3, .seq_len = 32, .vocab = 300};
  c.data = {.path = "corpus.bin", .tokenizer = "uint16", .validation_fraction = 0.25};
  c.batch = {.global = 12, .micro_batches = 3};
  c.optimizer = {
      .lr = 1e-3, .weight_decay = 0.05, .beta1 = 0.8, .beta2 = 0.99, .eps = 1e-7, .grad_clip = 0.5};
  c.schedule = {.steps = 50,
                .warmup_steps = 5,
                .decay = train::Decay::kLinear,
                .min_lr_ratio = 0.2,
                .eval_every = 10,
                .eval_batches = 2};
  c.seed = 7;
  c.checkpoint = {.dir = "ckpt", .every_steps = 25, .keep = 2};
  c.metrics = {.port = 0, .peak_flops_per_second = 1e11};
  c.parallel = {.zero_stage = 1, .bucket_mib = 8, .schedule = "GPipe"};
  c.precision = train::Precision::kBf16;
  c.log_every = 5;
  train::TrainerConfig back;
  ASSERT_TRUE(train::ParseTrainerConfigYaml(train::TrainerConfigYaml(c), "roundtrip", &back).ok());
  // Every value above differs from TrainerConfig's default, so a field left out shows.
  EXPECT_EQ(train::TrajectoryJson(back), train::TrajectoryJson(c));
  EXPECT_EQ(back.data.path, "corpus.bin");
  EXPECT_EQ(back.batch.micro_batches, 3);
  EXPECT_EQ(back.schedule.eval_every, 10);
  EXPECT_EQ(back.schedule.eval_batches, 2);
  EXPECT_EQ(back.checkpoint.dir, "ckpt");
  EXPECT_EQ(back.checkpoint.every_steps, 25);
  EXPECT_EQ(back.checkpoint.keep, 2);
  EXPECT_EQ(back.metrics.port, 0);
  EXPECT_DOUBLE_EQ(back.metrics.peak_flops_per_second, 1e11);
  EXPECT_EQ(back.parallel.zero_stage, 1);
  EXPECT_DOUBLE_EQ(back.parallel.bucket_mib, 8);
  EXPECT_EQ(back.parallel.schedule, "GPipe");
  EXPECT_EQ(back.log_every, 5);
}

// A preset is expanded by the trainer, and its name is kept for the logs.
TEST(TrainerConfigFromJob, PresetThenExplicitFields) {
  train::TrainerConfig c;
  ASSERT_TRUE(train::TrainerConfigFromJob(
                  Decode("apiVersion: tessera.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: "
                         "j}\nspec: {trainer: {model: {preset: gpt2-124m, seqLen: 256}, data: "
                         "{path: x}}}\n"),
                  &c)
                  .ok());
  EXPECT_EQ(c.model_preset, "gpt2-124m");
  EXPECT_EQ(c.model.layers, 12);
  EXPECT_EQ(c.model.d_model, 768);
  EXPECT_EQ(c.model.seq_len, 256);
}

TEST(TrainerConfigFromJob, Bf16SelectsTheGpuModelAndRoundTrips) {
  const std::string job =
      "apiVersion: tessera.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: j}\nspec:\n"
      "  gpusPerWorker: 1\n  trainer: {data: {path: x}, precision: bf16}\n";
  train::TrainerConfig c;
  ASSERT_TRUE(train::TrainerConfigFromJob(Decode(job), &c).ok());
  EXPECT_EQ(c.precision, train::Precision::kBf16);
  train::TrainerConfig back;
  ASSERT_TRUE(train::ParseTrainerConfigYaml(train::TrainerConfigYaml(c), "roundtrip", &back).ok());
  EXPECT_EQ(back.precision, train::Precision::kBf16);
}

TEST(TrainerConfigFromJob, NoCheckpointSectionMeansNoCheckpoints) {
  train::TrainerConfig c;
  ASSERT_TRUE(train::TrainerConfigFromJob(
                  Decode("apiVersion: tessera.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: "
                         "j}\nspec: {trainer: {data: {path: x}}}\n"),
                  &c)
                  .ok());
  EXPECT_TRUE(c.checkpoint.dir.empty());
}

struct Unsupported {
  std::string set;  // replaces a line of the trainer section
  std::string field;
};

TEST(TrainerConfigFromJob, RefusesWhatTheBuiltinTrainerCannotDo) {
  const std::string head =
      "apiVersion: tessera.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: j}\nspec:\n";
  for (const Unsupported& u : std::vector<Unsupported>{
           {"  trainer: {data: {path: x}, precision: fp16}\n", "spec.trainer.precision"},
           {"  trainer: {data: {}}\n", "spec.trainer.data.path"},
           {"  workers: 1\n", "spec.trainer"},
           {"  trainer: {data: {path: \"\"}}\n", "spec.trainer.data.path: missing"},
           {"  trainer: {data: {path: x}, seed: -1}\n", "spec.trainer.seed: -1 is negative"},
           {"  trainer: {data: {path: x}, schedule: {decay: exponential}}\n",
            "spec.trainer.schedule.decay: 'exponential' is not supported by the built-in trainer"},
           {"  trainer: {data: {path: x}, model: {preset: gpt9}}\n",
            "spec.trainer.model.preset: unknown preset 'gpt9'"},
           {"  trainer: {data: {path: x}, model: {layers: 2147483648}}\n",
            "spec.trainer.model.layers: 2147483648 is out of range"},
           {"  trainer: {data: {path: x}, batch: {global: -2147483649}}\n",
            "spec.trainer.batch.global: -2147483649 is out of range"},
       }) {
    train::TrainerConfig c;
    const train::Status st = train::TrainerConfigFromJob(Decode(head + u.set), &c);
    EXPECT_EQ(st.code(), train::ExitCode::kBadConfig) << u.set;
    EXPECT_EQ(st.message().rfind(u.field, 0), 0u) << st.message();
  }
}

// `tessera-worker rank --config FILE`'s reader, given a file of text.
class LoadTrainerConfigOrJob : public ::testing::Test {
 protected:
  train::Status Load(const std::string& text, train::TrainerConfig* config) {
    const std::filesystem::path path =
        std::filesystem::path(::testing::TempDir()) /
        (std::string(::testing::UnitTest::GetInstance()->current_test_info()->name()) + ".yaml");
    std::ofstream(path) << text;
    path_ = path.string();
    return train::LoadTrainerConfigOrJob(path_, config);
  }
  std::string path_;
};

TEST_F(LoadTrainerConfigOrJob, ReadsATrainingJobAsTesseraRunDoes) {
  // No spec.metrics: once an uncaught YAML::InvalidNode in the worker's own job reader.
  const std::string job = R"(
apiVersion: tessera.dev/v1alpha1
kind: TrainingJob
metadata: {name: gpt}
spec:
  workers: 1
  parallelism: {data: 1, microBatches: 4, zeroStage: 0, bucketMiB: 8}
  trainer:
    model: {layers: 2, dModel: 64, heads: 4, seqLen: 64, vocab: 256}
    data: {path: /data/tinyshakespeare.txt}
    batch: {global: 8}
    schedule: {steps: 20, warmupSteps: 2, decay: linear}
)";
  train::TrainerConfig c;
  const train::Status st = Load(job, &c);
  ASSERT_TRUE(st.ok()) << st.message();
  train::TrainerConfig want;
  ASSERT_TRUE(train::TrainerConfigFromJob(Decode(job), &want).ok());
  EXPECT_EQ(train::TrainerConfigYaml(c), train::TrainerConfigYaml(want));
  EXPECT_EQ(c.data.path, "/data/tinyshakespeare.txt");
  EXPECT_EQ(c.batch.micro_batches, 4);
  EXPECT_EQ(c.metrics.port, 9400);  // the schema's default
  EXPECT_DOUBLE_EQ(c.parallel.bucket_mib, 8);
  EXPECT_EQ(c.schedule.decay, train::Decay::kLinear);

  // The trainer's own YAML still reads as before.
  ASSERT_TRUE(Load("seed: 9\nschedule: {steps: 3}\n", &c).ok());
  EXPECT_EQ(c.seed, 9u);
  EXPECT_EQ(c.schedule.steps, 3);
}

TEST_F(LoadTrainerConfigOrJob, EachProblemIsOneLineNamingTheFileAndField) {
  const std::string head =
      "apiVersion: tessera.dev/v1alpha1\nkind: TrainingJob\nmetadata: {name: gpt}\n";
  const std::string trainer =
      "{model: {preset: gpt2-124m}, data: {path: x}, batch: {global: 8}, schedule: {steps: 5}}";
  struct {
    std::string text;
    std::string want;  // after "<file>: "
  } cases[] = {
      {head + "spec: {workers: 0, trainer: " + trainer + "}\n", "spec.workers: must be >= 1"},
      {head + "spec: {workers: 1}\n", "spec.trainer: set spec.trainer"},
      {head + "spec: {workers: 1, trainer: {model: {preset: gpt9}, data: {path: x}, batch: "
              "{global: 8}, schedule: {steps: 5}}}\n",
       "spec.trainer.model.preset: must be one of"},
      {"apiVersion: v1\nkind: Pod\nmetadata: {name: p}\n", "apiVersion: must be one of"},
      {"a: [1\n", "not valid YAML: line "},
      {"seed: 1\n---\nseed: 2\n", "holds 2 YAML documents; expected one"},
      {"seed: [1]\n", "seed: expected a non-negative integer"},
  };
  for (const auto& c : cases) {
    train::TrainerConfig config;
    const train::Status st = Load(c.text, &config);
    EXPECT_EQ(st.exit_code(), 2) << c.text;
    EXPECT_EQ(st.message().rfind(path_ + ": " + c.want, 0), 0u) << st.message();
    EXPECT_EQ(st.message().find('\n'), std::string::npos) << st.message();
  }
  train::TrainerConfig config;
  const train::Status missing = train::LoadTrainerConfigOrJob("missing/trainer.yaml", &config);
  EXPECT_EQ(missing.exit_code(), 2);
  EXPECT_EQ(missing.message(),
            "missing/trainer.yaml: cannot read the file: No such file or directory");
  const train::Status directory = train::LoadTrainerConfigOrJob(::testing::TempDir(), &config);
  EXPECT_EQ(directory.exit_code(), 2);
  EXPECT_EQ(directory.message(), ::testing::TempDir() + ": is a directory; name a YAML file");
  // An endless file is refused at the size limit instead of read until memory runs out.
  const train::Status endless = train::LoadTrainerConfigOrJob("/dev/zero", &config);
  EXPECT_EQ(endless.exit_code(), 2);
  EXPECT_EQ(endless.message(),
            "/dev/zero: larger than 16 MiB; a job file is a few KiB (is this the right file?)");
}

// A file of exactly the limit is read (and then judged as YAML); one byte more is refused.
TEST(ReadJobFile, TheSizeLimitIsInclusive) {
  const std::string path = ::testing::TempDir() + "/limit.yaml";
  {
    std::ofstream out(path, std::ios::binary);
    out << "# " << std::string(api::kMaxJobFileBytes - 3, 'x') << "\n";
  }
  api::FileText at = api::ReadJobFile(path);
  EXPECT_TRUE(at.ok()) << at.error;
  EXPECT_EQ(at.text.size(), api::kMaxJobFileBytes);
  std::ofstream(path, std::ios::binary | std::ios::app) << "\n";
  const api::FileText over = api::ReadJobFile(path);
  EXPECT_FALSE(over.ok());
  EXPECT_TRUE(over.text.empty());
  std::remove(path.c_str());
}

}  // namespace
}  // namespace tessera
