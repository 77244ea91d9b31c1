// The configuration of the built-in GPT trainer: plain structs with documented defaults, read
// from YAML (the `trainer:` section of a TrainingJob, or the same fields at the top level).
// Knows nothing of Kubernetes; environment overrides are applied by the caller.
#pragma once

#include <cstdint>
#include <string>

#include "worker/model/gpt.h"
#include "worker/train/lr_schedule.h"
#include "worker/train/status.h"

namespace tessera::train {

struct DataConfig {
  std::string path;                  // UTF-8 text file; required
  std::string tokenizer = "byte";    // "byte" (a text file, vocab >= 256) | "uint16" (token ids)
  double validation_fraction = 0.1;  // tail of the corpus held out, in (0, 1)
};

struct BatchConfig {
  int global = 64;        // sequences per optimizer step, over all data-parallel ranks
  int micro_batches = 1;  // per step and rank; global / (ranks * micro_batches) sequences each
};

struct OptimizerConfig {
  double lr = 3.0e-4;         // peak learning rate
  double weight_decay = 0.1;  // decoupled; not applied to biases and layer-norm gains
  double beta1 = 0.9;
  double beta2 = 0.95;
  double eps = 1.0e-8;
  double grad_clip = 1.0;  // maximum global L2 norm of the gradient; 0 disables clipping
};

struct ScheduleConfig {
  int64_t steps = 2000;        // optimizer steps of the whole run
  int64_t warmup_steps = 100;  // linear warm-up from lr/warmup_steps to lr
  Decay decay = Decay::kCosine;
  double min_lr_ratio = 0.1;  // cosine decays to lr * min_lr_ratio at the last step
  int64_t eval_every = 100;   // validation loss every this many steps (and at the end); 0 = end
  int eval_batches = 8;       // validation batches of `batch.global` sequences each
};

struct CheckpointConfig {
  std::string dir;            // empty: no checkpoints (and no resume)
  int64_t every_steps = 200;  // also written after the last step; 0 = only at the end
  int keep = 3;               // newest complete checkpoints retained; >= 1
};

struct MetricsConfig {
  int port = 9400;                   // /metrics and /progress; 0 = pick a free port; -1 = off
  double peak_flops_per_second = 0;  // for tessera_train_mfu_ratio; 0 = not reported
};

// How ranks share the work (DESIGN.md §6). One-rank jobs ignore it. The mesh itself
// (data x pipeline x tensor) comes from TESSERA_MESH, set by the controller or `tessera run`
// from spec.parallelism.
struct ParallelConfig {
  int zero_stage = 0;      // 0: every rank keeps the whole AdamW state; 1: sharded (ZeRO-1)
  double bucket_mib = 25;  // gradient all-reduce bucket size in MiB (as PyTorch DDP's default)
  std::string schedule = "1F1B";  // pipeline schedule over the micro-batches: GPipe | 1F1B
};

// Arithmetic of forward and backward. fp32: the CPU model (worker/model/cpu). bf16: the CUDA
// model (worker/model/cuda) on this rank's GPU, bf16 activations and products with fp32
// master weights, gradients and AdamW state; data parallelism only (pipeline and tensor 1,
// zeroStage 0), gradients all-reduced by NCCL.
enum class Precision { kFp32, kBf16 };

struct TrainerConfig {
  model::GptConfig model;
  std::string model_preset;  // informational: the preset the model came from, if any
  DataConfig data;
  BatchConfig batch;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  uint64_t seed = 1337;  // parameters and data order
  CheckpointConfig checkpoint;
  MetricsConfig metrics;
  ParallelConfig parallel;
  Precision precision = Precision::kFp32;
  int log_every = 10;  // a log line every this many steps (and the first and last)
};

// Parses the trainer's own YAML (the trainer fields at the top level) into *out, starting from
// its current values. Field names are camelCase as in DESIGN.md §2. Unknown fields, wrong types
// and syntax errors are refused, naming the field path or line. `source` names the text in
// messages (a file name). Does not check value ranges: see ValidateTrainerConfig. A TrainingJob
// file is read by LoadTrainerConfigOrJob (worker/train/from_api.h) instead.
Status ParseTrainerConfigYaml(const std::string& yaml_text, const std::string& source,
                              TrainerConfig* out);

// Applies one `key=value` override, key a dotted camelCase path ("schedule.steps=10").
Status ApplyTrainerConfigOverride(const std::string& assignment, TrainerConfig* out);

// Checks value ranges and relations for `world_size` ranks arranged as data x `pipeline` x
// `tensor` (batch divisibility by the data-parallel ranks, heads divide dModel and the tensor
// ranks, at least one block per stage, vocab >= 256 for the byte tokenizer, ...). The first
// problem found is returned as kBadConfig naming the field.
Status ValidateTrainerConfig(const TrainerConfig& config, int world_size, int pipeline = 1,
                             int tensor = 1);

// The fields that determine the training trajectory, as canonical JSON text (sorted keys):
// model, tokenizer, validation fraction, global batch, optimizer, schedule (not eval), seed.
// Paths, ports, checkpoint cadence, logging and micro-batching are excluded, so a job can be
// resumed on another mount or with a different micro-batch split.
std::string TrajectoryJson(const TrainerConfig& config);

// sha256 of TrajectoryJson, in hex: the config hash stored in checkpoints.
std::string ConfigHash(const TrainerConfig& config);

const char* DecayName(Decay decay);
const char* PrecisionName(Precision precision);  // "fp32" | "bf16"

}  // namespace tessera::train
