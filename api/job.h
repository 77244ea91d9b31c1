// TrainingJob (tessera.dev/v1alpha1) as plain C++ structs: the spec a user writes and the status
// the controller reports (DESIGN.md §2). Pure data; decoding, defaults and validation live in
// api/codec.h and api/validate.h, the field definitions in api/schema.h.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace tessera::api {

inline constexpr char kGroup[] = "tessera.dev";
inline constexpr char kVersion[] = "v1alpha1";
inline constexpr char kApiVersion[] = "tessera.dev/v1alpha1";
inline constexpr char kKind[] = "TrainingJob";

// One problem with a job, at a field path such as `spec.parallelism.tensor` or
// `spec.runPolicy.permanentExitCodes[1]`.
struct FieldError {
  std::string path;
  std::string message;
  bool operator==(const FieldError&) const = default;
};

// "path: message", the form `tessera validate` prints after the file name.
std::string FormatError(const FieldError& error);

struct ObjectMeta {
  std::string name;
  std::string name_space;  // `namespace` in YAML
  std::string uid;
  int64_t generation = 0;
  std::map<std::string, std::string> labels;
  std::map<std::string, std::string> annotations;
};

struct Parallelism {
  std::optional<int64_t> data;  // default: workers × procsPerWorker / (pipeline × tensor)
  int64_t pipeline = 1;
  int64_t tensor = 1;
  int64_t zero_stage = 0;  // 0 = replicated optimizer state, 1 = sharded (ZeRO-1)
  int64_t micro_batches = 1;
  double bucket_mib = 25;         // gradient all-reduce bucket size
  std::string schedule = "1F1B";  // GPipe | 1F1B
};

struct ModelSpec {
  // The largest shape the API accepts (the CRD's maximums); the trainer's own YAML is held to
  // the same, as larger ones exhaust memory planning or overflow the parameter count.
  static constexpr int64_t kMaxLayers = 1024;
  static constexpr int64_t kMaxDModel = 65536;
  static constexpr int64_t kMaxHeads = 1024;
  static constexpr int64_t kMaxSeqLen = 131072;
  static constexpr int64_t kMaxVocab = 1048576;

  std::string preset;  // "" or a name from ModelPresets()
  std::optional<int64_t> layers;
  std::optional<int64_t> d_model;
  std::optional<int64_t> heads;
  std::optional<int64_t> seq_len;
  std::optional<int64_t> vocab;  // default: the preset's, else 256
};

struct DataSpec {
  std::optional<std::string> path;
  std::string tokenizer = "byte";  // byte | uint16
  double validation_fraction = 0.1;
};

struct BatchSpec {
  std::optional<int64_t> global;  // sequences per optimizer step
};

struct OptimizerSpec {
  double lr = 3.0e-4;
  double weight_decay = 0.1;
  double beta1 = 0.9;
  double beta2 = 0.95;
  double grad_clip = 1.0;  // 0 disables clipping
};

struct LrSchedule {
  std::optional<int64_t> steps;
  int64_t warmup_steps = 0;
  std::string decay = "cosine";  // cosine | linear | constant
};

struct CheckpointSpec {
  std::optional<std::string> dir;
  int64_t every_steps = 200;
  int64_t keep = 3;
};

struct TrainerSpec {
  ModelSpec model;
  DataSpec data;
  BatchSpec batch;
  OptimizerSpec optimizer;
  LrSchedule schedule;
  std::string precision = "fp32";  // fp32 | bf16
  int64_t seed = 1337;
  std::optional<CheckpointSpec> checkpoint;  // absent: no checkpoints
};

struct RunPolicy {
  int64_t backoff_limit = 3;
  std::vector<int64_t> permanent_exit_codes = {2};
  std::optional<int64_t> active_deadline_seconds;
  int64_t progress_deadline_seconds = 600;  // 0 disables
  std::optional<int64_t> ttl_seconds_after_finished;
  std::string clean_pod_policy = "Running";  // Running | All | None
};

struct SchedulingSpec {
  bool gang = true;
  std::string scheduler_name;
  std::string queue;
  std::string priority_class_name;
  int64_t startup_timeout_seconds = 300;
};

struct MetricsSpec {
  int64_t port = 9400;
};

struct TrainingJobSpec {
  int64_t workers = 1;
  int64_t gpus_per_worker = 0;
  std::optional<int64_t> procs_per_worker;  // default: gpusPerWorker, at least 1
  Parallelism parallelism;
  std::optional<TrainerSpec> trainer;  // absent: the worker container's command runs
  nlohmann::json pod_template = nlohmann::json::object();  // `template`: a PodTemplateSpec
  bool suspend = false;
  RunPolicy run_policy;
  SchedulingSpec scheduling;
  MetricsSpec metrics;
};

struct Condition {
  std::string type;  // Created | PodsReady | Running | Restarting | Succeeded | Failed | Suspended
  std::string status;  // True | False | Unknown
  std::string reason;
  std::string message;
  std::string last_transition_time;  // RFC 3339
  int64_t observed_generation = 0;
  bool operator==(const Condition&) const = default;
};

struct WorkerCounts {
  int64_t active = 0;
  int64_t ready = 0;
  int64_t succeeded = 0;
  int64_t failed = 0;
  bool operator==(const WorkerCounts&) const = default;
};

struct LastFailure {
  std::string reason;
  std::string message;
  std::string worker;
  int64_t exit_code = 0;
  bool operator==(const LastFailure&) const = default;
};

struct Progress {
  int64_t step = 0;
  int64_t total_steps = 0;
  double loss = 0;
  double tokens_per_second = 0;
  std::string updated_at;  // RFC 3339, empty when never updated
  bool operator==(const Progress&) const = default;
};

struct TrainingJobStatus {
  std::string phase;  // "" before the controller's first write; see PhaseValues()
  std::vector<Condition> conditions;
  WorkerCounts workers;
  int64_t restarts = 0;
  LastFailure last_failure;
  Progress progress;
  std::string start_time;
  std::string completion_time;
  int64_t observed_generation = 0;
  bool operator==(const TrainingJobStatus&) const = default;
};

struct TrainingJob {
  ObjectMeta metadata;
  TrainingJobSpec spec;
  TrainingJobStatus status;
};

// A named model shape that `spec.trainer.model.preset` expands to.
struct ModelPreset {
  std::string name;
  int64_t layers, d_model, heads, seq_len, vocab;
};

// Every preset, e.g. gpt2-124m = 12 layers, dModel 768, 12 heads, seqLen 1024, vocab 50257.
const std::vector<ModelPreset>& ModelPresets();

// The preset called `name`, or nullptr.
const ModelPreset* FindModelPreset(const std::string& name);

}  // namespace tessera::api
