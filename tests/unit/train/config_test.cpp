#include "worker/train/config.h"

#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <iterator>
#include <limits>

namespace tessera::train {
namespace {

TEST(TrainerConfig, ParsesEveryField) {
  const char* yaml = R"(
model: {layers: 3, dModel: 48, heads: 3, seqLen: 32, vocab: 256}
data: {path: corpus.txt, tokenizer: byte, validationFraction: 0.2}
batch: {global: 16, microBatches: 2}
optimizer: {lr: 1.0e-3, weightDecay: 0.05, beta1: 0.8, beta2: 0.99, eps: 1.0e-7, gradClip: 0.5}
schedule: {steps: 50, warmupSteps: 5, decay: constant, minLrRatio: 0.2, evalEvery: 10, evalBatches: 2}
precision: fp32
seed: 7
checkpoint: {dir: ckpt, everySteps: 25, keep: 2}
metrics: {port: 0, peakFlopsPerSecond: 1.0e11}
parallelism: {zeroStage: 1, bucketMiB: 8, schedule: GPipe}
logEvery: 5
)";
  TrainerConfig c;
  const Status st = ParseTrainerConfigYaml(yaml, "t.yaml", &c);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(c.model.layers, 3);
  EXPECT_EQ(c.model.d_model, 48);
  EXPECT_EQ(c.model.heads, 3);
  EXPECT_EQ(c.model.seq_len, 32);
  EXPECT_EQ(c.data.path, "corpus.txt");
  EXPECT_DOUBLE_EQ(c.data.validation_fraction, 0.2);
  EXPECT_EQ(c.batch.global, 16);
  EXPECT_EQ(c.batch.micro_batches, 2);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-3);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.05);
  EXPECT_DOUBLE_EQ(c.optimizer.beta1, 0.8);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.99);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-7);
  EXPECT_DOUBLE_EQ(c.optimizer.grad_clip, 0.5);
  EXPECT_EQ(c.schedule.steps, 50);
  EXPECT_EQ(c.schedule.warmup_steps, 5);
  EXPECT_EQ(c.schedule.decay, Decay::kConstant);
  EXPECT_DOUBLE_EQ(c.schedule.min_lr_ratio, 0.2);
  EXPECT_EQ(c.schedule.eval_every, 10);
  EXPECT_EQ(c.schedule.eval_batches, 2);
  EXPECT_EQ(c.seed, 7u);
  EXPECT_EQ(c.checkpoint.dir, "ckpt");
  EXPECT_EQ(c.checkpoint.every_steps, 25);
  EXPECT_EQ(c.checkpoint.keep, 2);
  EXPECT_EQ(c.metrics.port, 0);
  EXPECT_DOUBLE_EQ(c.metrics.peak_flops_per_second, 1e11);
  EXPECT_EQ(c.parallel.zero_stage, 1);
  EXPECT_DOUBLE_EQ(c.parallel.bucket_mib, 8);
  EXPECT_EQ(c.parallel.schedule, "GPipe");
  EXPECT_EQ(c.log_every, 5);
  EXPECT_TRUE(ValidateTrainerConfig(c, 1).ok());
}

// Each decay reads as itself, and DecayName (the config hash, the worker's YAML) writes it back.
TEST(TrainerConfig, EveryDecayReadsAndNamesItself) {
  for (const Decay decay : {Decay::kCosine, Decay::kLinear, Decay::kConstant}) {
    TrainerConfig c;
    c.schedule.decay = decay == Decay::kCosine ? Decay::kLinear : Decay::kCosine;
    const std::string yaml = std::string("schedule: {decay: ") + DecayName(decay) + "}";
    ASSERT_TRUE(ParseTrainerConfigYaml(yaml, "t.yaml", &c).ok()) << yaml;
    EXPECT_EQ(c.schedule.decay, decay) << yaml;
  }
  EXPECT_STREQ(DecayName(Decay::kCosine), "cosine");
  EXPECT_STREQ(DecayName(Decay::kLinear), "linear");
  EXPECT_STREQ(DecayName(Decay::kConstant), "constant");
}

TEST(TrainerConfig, PresetThenExplicitFields) {
  TrainerConfig c;
  ASSERT_TRUE(ParseTrainerConfigYaml("model: {preset: gpt2-124m, seqLen: 256}", "t.yaml", &c).ok());
  EXPECT_EQ(c.model_preset, "gpt2-124m");
  EXPECT_EQ(c.model.layers, 12);
  EXPECT_EQ(c.model.d_model, 768);
  EXPECT_EQ(c.model.seq_len, 256);
}

TEST(TrainerConfig, ErrorsNameTheField) {
  struct Case {
    const char* yaml;
    const char* field;
  } cases[] = {
      {"optimizer: {lrr: 1}", "optimizer.lrr: unknown field"},
      {"schedule: {steps: many}", "schedule.steps: expected an integer"},
      {"schedule: {decay: exponential}", "schedule.decay: 'exponential' is not one of"},
      {"model: {preset: gpt9}", "model.preset: unknown preset"},
      {"precision: fp16", "precision: 'fp16' is not one of fp32, bf16"},
      {"batch: [1, 2]", "batch: expected a mapping"},
      {"model: {layers: 2", "not valid YAML"},
      {"kind: TrainingJob", "kind: unknown field"},  // a job file: LoadTrainerConfigOrJob
  };
  for (const Case& c : cases) {
    TrainerConfig config;
    const Status st = ParseTrainerConfigYaml(c.yaml, "t.yaml", &config);
    EXPECT_EQ(st.exit_code(), 2) << c.yaml;
    EXPECT_NE(st.message().find(c.field), std::string::npos) << c.yaml << " -> " << st.message();
    EXPECT_EQ(st.message().rfind("t.yaml", 0), 0u) << st.message();
  }
}

// The whole line, for problems the table above only finds a part of.
TEST(TrainerConfig, ErrorMessagesInFull) {
  struct Case {
    const char* yaml;
    const char* message;
  } cases[] = {
      {"seed: [1]", "t.yaml: seed: expected a non-negative integer"},
      {"batch: {global: 8}\nschedule: {steps: ten}",
       "t.yaml: schedule.steps: expected an integer, got 'ten'"},
      {"seed: 1\nbatch: {global: 8}\nmodel: {layers: 2}}\nlogEvery: 5\n",
       "t.yaml: not valid YAML (line 3): illegal flow end"},
  };
  for (const Case& c : cases) {
    TrainerConfig config;
    EXPECT_EQ(ParseTrainerConfigYaml(c.yaml, "t.yaml", &config).message(), c.message) << c.yaml;
  }
}

TEST(TrainerConfig, OverridesSetNestedFields) {
  TrainerConfig c;
  ASSERT_TRUE(ApplyTrainerConfigOverride("schedule.steps=10", &c).ok());
  ASSERT_TRUE(ApplyTrainerConfigOverride("optimizer.lr=0.01", &c).ok());
  ASSERT_TRUE(ApplyTrainerConfigOverride("seed=5", &c).ok());
  EXPECT_EQ(c.schedule.steps, 10);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 0.01);
  EXPECT_EQ(c.seed, 5u);
  EXPECT_EQ(ApplyTrainerConfigOverride("schedule.stepz=1", &c).exit_code(), 2);
  EXPECT_EQ(ApplyTrainerConfigOverride("noequals", &c).exit_code(), 2);
}

// `--set checkpoint.dir=` (nothing after '=') is the empty string, as in `tessera run --set`:
// here it turns checkpoints off; a number field says it got '' rather than a null.
TEST(TrainerConfig, AnEmptyOverrideValueIsTheEmptyString) {
  TrainerConfig c;
  c.checkpoint.dir = "/ckpt";
  const Status st = ApplyTrainerConfigOverride("checkpoint.dir=", &c);
  ASSERT_TRUE(st.ok()) << st.message();
  EXPECT_EQ(c.checkpoint.dir, "");
  EXPECT_EQ(ApplyTrainerConfigOverride("seed=", &c).message(),
            "--set seed: seed: expected a non-negative integer, got ''");
}

// A refused override names itself: the key as given, then the problem.
TEST(TrainerConfig, OverrideErrorsNameTheAssignment) {
  TrainerConfig c;
  Status st = ApplyTrainerConfigOverride("schedule.stepz=1", &c);
  EXPECT_EQ(st.message(), "--set schedule.stepz: schedule.stepz: unknown field");
  st = ApplyTrainerConfigOverride("=3", &c);
  EXPECT_EQ(st.exit_code(), 2);
  EXPECT_EQ(st.message(), "--set '=3': expected key=value");
  EXPECT_EQ(ApplyTrainerConfigOverride("seed=many", &c).message(),
            "--set seed: seed: expected a non-negative integer, got 'many'");
}

// A value yaml-cpp cannot parse once ended the worker (an uncaught YAML::ParserException).
TEST(TrainerConfig, OverrideWithBadYamlIsOneError) {
  TrainerConfig c;
  for (const char* bad : {"seed=[1", "seed={", "seed=*x", "optimizer.lr=\"unclosed"}) {
    const Status st = ApplyTrainerConfigOverride(bad, &c);
    EXPECT_EQ(st.exit_code(), 2) << bad;
    EXPECT_NE(st.message().find("not valid YAML"), std::string::npos) << st.message();
  }
  // A mapping key that is not a string: one error, not an exception.
  EXPECT_EQ(ParseTrainerConfigYaml("? [a, b]\n: 1\n", "t.yaml", &c).exit_code(), 2);
}

// yaml-cpp copies such bytes into strings, and TrainerConfigYaml's JSON then threw (found by
// fuzzing the worker's --config reader).
TEST(TrainerConfig, InvalidUtf8IsOneErrorNamingItsPlace) {
  TrainerConfig c;
  Status st = ParseTrainerConfigYaml("seed: 3\ndata: {path: \"a\xFF\"}\n", "t.yaml", &c);
  EXPECT_EQ(st.exit_code(), 2);
  EXPECT_EQ(st.message(),
            "t.yaml: line 2, column 16: not UTF-8 text (byte 0xFF); save the file as UTF-8");
  EXPECT_EQ(c.seed, TrainerConfig{}.seed);  // nothing taken from a refused file
  st = ApplyTrainerConfigOverride("data.path=a\xC3", &c);
  EXPECT_EQ(st.exit_code(), 2);
  EXPECT_NE(st.message().find("not UTF-8 text"), std::string::npos) << st.message();
  EXPECT_TRUE(ParseTrainerConfigYaml("data: {path: caf\xC3\xA9.txt}\n", "t.yaml", &c).ok());
  EXPECT_EQ(c.data.path, "caf\xC3\xA9.txt");
}

TEST(TrainerConfig, ValidationNamesTheField) {
  struct Case {
    std::function<void(TrainerConfig&)> change;
    int world_size;
    const char* field;
  } cases[] = {
      {[](TrainerConfig& c) {
         c.batch.global = 10;
         c.batch.micro_batches = 4;
       },
       1, "batch.global"},
      {[](TrainerConfig& c) { c.batch.global = 8; }, 3, "batch.global"},
      {[](TrainerConfig& c) { c.batch.micro_batches = 0; }, 1, "batch.microBatches"},
      {[](TrainerConfig& c) { c.model.heads = 5; }, 1, "model.heads"},
      {[](TrainerConfig& c) { c.model.vocab = 100; }, 1, "model.vocab"},
      {[](TrainerConfig& c) { c.data.path = ""; }, 1, "data.path"},
      {[](TrainerConfig& c) { c.data.tokenizer = "bpe"; }, 1, "data.tokenizer"},
      {[](TrainerConfig& c) {
         c.data.tokenizer = "uint16";
         c.model.vocab = 70000;
       },
       1, "model.vocab"},
      {[](TrainerConfig& c) { c.data.validation_fraction = 0; }, 1, "data.validationFraction"},
      {[](TrainerConfig& c) { c.data.validation_fraction = 1; }, 1, "data.validationFraction"},
      {[](TrainerConfig& c) { c.optimizer.lr = 0; }, 1, "optimizer.lr"},
      {[](TrainerConfig& c) { c.optimizer.beta2 = 1; }, 1, "optimizer.beta2"},
      {[](TrainerConfig& c) { c.optimizer.grad_clip = -1; }, 1, "optimizer.gradClip"},
      {[](TrainerConfig& c) { c.schedule.steps = 0; }, 1, "schedule.steps"},
      {[](TrainerConfig& c) { c.checkpoint.keep = 0; }, 1, "checkpoint.keep"},
      {[](TrainerConfig& c) { c.metrics.port = 70000; }, 1, "metrics.port"},
      {[](TrainerConfig& c) { c.model.layers = 0; }, 1, "model.layers: must be positive, got 0"},
      {[](TrainerConfig& c) { c.model.d_model = 0; }, 1, "model.dModel: must be positive, got 0"},
      {[](TrainerConfig& c) { c.model.heads = 0; }, 1, "model.heads: must be positive, got 0"},
      {[](TrainerConfig& c) { c.model.seq_len = 0; }, 1, "model.seqLen: must be positive, got 0"},
      {[](TrainerConfig& c) { c.model.vocab = -1; }, 1, "model.vocab: must be positive, got -1"},
      // The API's bounds: past them the plan ran out of memory listing 1298888 blocks' tensors
      // (trainer_config_fuzz), and the parameter count overflowed int64.
      {[](TrainerConfig& c) { c.model.layers = 1298888; }, 1,
       "model.layers: at most 1024, got 1298888"},
      {[](TrainerConfig& c) { c.model.d_model = 1 << 30; }, 1,
       "model.dModel: at most 65536, got 1073741824"},
      {[](TrainerConfig& c) { c.model.heads = 1025; }, 1, "model.heads: at most 1024, got 1025"},
      {[](TrainerConfig& c) { c.model.seq_len = 131073; }, 1,
       "model.seqLen: at most 131072, got 131073"},
      {[](TrainerConfig& c) { c.model.vocab = 1048577; }, 1,
       "model.vocab: at most 1048576, got 1048577"},
      {[](TrainerConfig& c) { c.schedule.eval_batches = 0; }, 1,
       "schedule.evalBatches: must be positive, got 0"},
      {[](TrainerConfig& c) { c.log_every = 0; }, 1, "logEvery: must be positive, got 0"},
      {[](TrainerConfig& c) {
         c.data.tokenizer = "uint16";
         c.model.vocab = 65537;
       },
       1, "model.vocab: 65537 is larger than the 65536 ids"},
      {[](TrainerConfig& c) { c.optimizer.lr = std::numeric_limits<double>::infinity(); }, 1,
       "optimizer.lr: must be positive, got inf"},
      {[](TrainerConfig& c) { c.optimizer.lr = std::nan(""); }, 1, "optimizer.lr"},
      {[](TrainerConfig& c) { c.optimizer.weight_decay = -0.1; }, 1, "optimizer.weightDecay"},
      {[](TrainerConfig& c) { c.optimizer.beta1 = -0.1; }, 1,
       "optimizer.beta1: -0.1 is not in [0, 1)"},
      {[](TrainerConfig& c) { c.optimizer.beta1 = 1; }, 1, "optimizer.beta1: 1 is not in [0, 1)"},
      {[](TrainerConfig& c) { c.optimizer.eps = 0; }, 1, "optimizer.eps"},
      {[](TrainerConfig& c) { c.optimizer.eps = std::numeric_limits<double>::infinity(); }, 1,
       "optimizer.eps: must be a finite number > 0, got inf"},  // every update would be 0
      {[](TrainerConfig& c) { c.schedule.warmup_steps = -1; }, 1, "schedule.warmupSteps"},
      {[](TrainerConfig& c) { c.schedule.min_lr_ratio = 1.5; }, 1, "schedule.minLrRatio"},
      {[](TrainerConfig& c) { c.schedule.min_lr_ratio = -0.1; }, 1, "schedule.minLrRatio"},
      {[](TrainerConfig& c) { c.schedule.eval_every = -1; }, 1, "schedule.evalEvery"},
      {[](TrainerConfig& c) { c.checkpoint.every_steps = -1; }, 1, "checkpoint.everySteps"},
      {[](TrainerConfig& c) { c.metrics.port = -2; }, 1, "metrics.port: -2 is not a port"},
      {[](TrainerConfig& c) { c.metrics.peak_flops_per_second = -1; }, 1,
       "metrics.peakFlopsPerSecond"},
      {[](TrainerConfig& c) { c.parallel.zero_stage = 2; }, 1,
       "parallelism.zeroStage: 2 is not 0 or 1"},
      {[](TrainerConfig& c) { c.parallel.bucket_mib = 0; }, 1, "parallelism.bucketMiB"},
      {[](TrainerConfig& c) { c.parallel.bucket_mib = std::numeric_limits<double>::infinity(); }, 1,
       "parallelism.bucketMiB"},
  };
  for (const Case& k : cases) {
    TrainerConfig c;
    c.data.path = "corpus.txt";
    c.batch.global = 8;
    ASSERT_TRUE(ValidateTrainerConfig(c, 1).ok());
    k.change(c);
    const Status st = ValidateTrainerConfig(c, k.world_size);
    EXPECT_EQ(st.exit_code(), 2) << k.field;
    EXPECT_EQ(st.message().rfind(k.field, 0), 0u) << k.field << " -> " << st.message();
  }
}

// The ends of each range that are allowed, with what they mean (docs/training.md).
TEST(TrainerConfig, ValidationAcceptsTheEndsOfEachRange) {
  const std::function<void(TrainerConfig&)> cases[] = {
      [](TrainerConfig& c) {
        c.data.tokenizer = "uint16";
        c.model.vocab = 65536;
      },
      [](TrainerConfig& c) { c.optimizer.weight_decay = 0; },
      [](TrainerConfig& c) { c.optimizer.beta1 = 0; },
      [](TrainerConfig& c) { c.optimizer.grad_clip = 0; },    // no clipping
      [](TrainerConfig& c) { c.schedule.warmup_steps = 0; },  // no warm-up
      [](TrainerConfig& c) { c.schedule.min_lr_ratio = 0; },
      [](TrainerConfig& c) { c.schedule.min_lr_ratio = 1; },
      [](TrainerConfig& c) { c.schedule.eval_every = 0; },     // only at the end
      [](TrainerConfig& c) { c.checkpoint.every_steps = 0; },  // only at the end
      [](TrainerConfig& c) { c.metrics.port = -1; },           // off
      [](TrainerConfig& c) { c.metrics.port = 0; },            // any free port
      [](TrainerConfig& c) { c.metrics.port = 65535; },
      [](TrainerConfig& c) { c.parallel.zero_stage = 1; },
      [](TrainerConfig& c) {
        c.model.layers = 1024;
        c.model.d_model = 65536;
        c.model.heads = 1024;
        c.model.seq_len = 131072;
        c.model.vocab = 1048576;
      },
  };
  for (size_t i = 0; i < std::size(cases); ++i) {
    TrainerConfig c;
    c.data.path = "corpus.txt";
    c.batch.global = 8;
    cases[i](c);
    const Status st = ValidateTrainerConfig(c, 1);
    EXPECT_TRUE(st.ok()) << "case " << i << ": " << st.message();
  }
}

TEST(ValidateTrainerConfig, ModelParallelLayouts) {
  TrainerConfig c;
  c.data.path = "corpus.txt";
  c.batch.global = 8;
  c.model.layers = 4;
  c.model.heads = 4;
  c.model.d_model = 64;
  // 8 ranks as data 2 x pipeline 2 x tensor 2: the batch splits over the 2 data ranks only.
  EXPECT_TRUE(ValidateTrainerConfig(c, 8, 2, 2).ok());
  c.batch.micro_batches = 4;
  EXPECT_TRUE(ValidateTrainerConfig(c, 8, 2, 2).ok());
  struct Case {
    int world, pipeline, tensor;
    std::string schedule;
    std::string message;
  } cases[] = {
      {6, 4, 1, "1F1B", "TESSERA_MESH: pipeline 4 x tensor 1 does not divide WORLD_SIZE 6"},
      {8, 8, 1, "1F1B",
       "parallelism.pipeline: 8 stages for model.layers 4; each stage needs a "
       "block"},
      {3, 1, 3, "1F1B", "parallelism.tensor: 3 does not divide model.heads 4"},
      {4, 4, 1, "gpipe", "parallelism.schedule: 'gpipe' is not GPipe or 1F1B"},
      {16, 2, 1, "1F1B",
       "batch.global: 8 is not divisible by data-parallel ranks (8) x "
       "microBatches (4)"},
      {0, 1, 1, "1F1B", "WORLD_SIZE: 0 is not positive"},
      {4, 0, 1, "1F1B", "TESSERA_MESH: pipeline 0 x tensor 1 does not divide WORLD_SIZE 4"},
      {4, 1, 0, "1F1B", "TESSERA_MESH: pipeline 1 x tensor 0 does not divide WORLD_SIZE 4"},
      {4, 4, 1, "1F1B", ""},  // one block a stage
  };
  for (const Case& k : cases) {
    TrainerConfig t = c;
    t.parallel.schedule = k.schedule;
    const Status st = ValidateTrainerConfig(t, k.world, k.pipeline, k.tensor);
    EXPECT_EQ(st.exit_code(), k.message.empty() ? 0 : 2) << k.message;
    EXPECT_EQ(st.message(), k.message);
  }
}

TEST(ValidateTrainerConfig, Bf16IsDataParallelOnly) {
  TrainerConfig c;
  ASSERT_TRUE(ParseTrainerConfigYaml("data: {path: corpus.txt}\nbatch: {global: 8}\n"
                                     "precision: bf16\n",
                                     "t.yaml", &c)
                  .ok());
  EXPECT_EQ(c.precision, Precision::kBf16);
  EXPECT_TRUE(ValidateTrainerConfig(c, 4).ok());  // 4 data-parallel replicas
  const Status mesh = ValidateTrainerConfig(c, 4, 2, 1);
  EXPECT_EQ(mesh.exit_code(), 2);
  EXPECT_EQ(mesh.message().rfind("precision: bf16 (the GPU model) runs data parallelism only", 0),
            0u)
      << mesh.message();
  const Status tensor = ValidateTrainerConfig(c, 4, 1, 2);
  EXPECT_EQ(tensor.message().rfind("precision: bf16 (the GPU model) runs data parallelism only", 0),
            0u)
      << tensor.message();
  c.parallel.zero_stage = 1;
  const Status zero = ValidateTrainerConfig(c, 4);
  EXPECT_EQ(zero.exit_code(), 2);
  EXPECT_EQ(
      zero.message().rfind("parallelism.zeroStage: 1 is not available with precision bf16", 0), 0u)
      << zero.message();
}

TEST(ConfigHash, CoversTheTrajectoryOnly) {
  TrainerConfig base;
  base.data.path = "a.txt";
  const std::string h = ConfigHash(base);
  EXPECT_EQ(h.size(), 64u);
  TrainerConfig same = base;
  same.data.path = "/mnt/other/a.txt";
  same.checkpoint.dir = "elsewhere";
  same.metrics.port = 1;
  same.batch.micro_batches = 4;
  same.schedule.eval_every = 7;
  same.schedule.eval_batches = 3;
  same.log_every = 1;
  EXPECT_EQ(ConfigHash(same), h);
  const std::vector<std::function<void(TrainerConfig&)>> changes = {
      [](TrainerConfig& c) { c.optimizer.lr *= 2; },
      [](TrainerConfig& c) { c.seed += 1; },
      [](TrainerConfig& c) { c.batch.global *= 2; },
      [](TrainerConfig& c) { c.model.layers += 1; },
      [](TrainerConfig& c) { c.schedule.steps += 1; },
      [](TrainerConfig& c) { c.schedule.decay = Decay::kConstant; },
      [](TrainerConfig& c) { c.data.validation_fraction = 0.2; },
      [](TrainerConfig& c) { c.precision = Precision::kBf16; },
      [](TrainerConfig& c) { c.model.d_model *= 2; },
      [](TrainerConfig& c) { c.model.heads *= 2; },
      [](TrainerConfig& c) { c.model.seq_len *= 2; },
      [](TrainerConfig& c) { c.model.vocab += 1; },
      [](TrainerConfig& c) { c.data.tokenizer = "uint16"; },
      [](TrainerConfig& c) { c.optimizer.weight_decay = 0; },
      [](TrainerConfig& c) { c.optimizer.beta1 = 0.8; },
      [](TrainerConfig& c) { c.optimizer.beta2 = 0.99; },
      [](TrainerConfig& c) { c.optimizer.eps = 1e-6; },
      [](TrainerConfig& c) { c.optimizer.grad_clip = 0; },
      [](TrainerConfig& c) { c.schedule.warmup_steps += 1; },
      [](TrainerConfig& c) { c.schedule.decay = Decay::kLinear; },
      [](TrainerConfig& c) { c.schedule.min_lr_ratio = 0; },
  };
  for (size_t i = 0; i < changes.size(); ++i) {
    TrainerConfig c = base;
    changes[i](c);
    EXPECT_NE(ConfigHash(c), h) << "change " << i;
  }
}

}  // namespace
}  // namespace tessera::train
