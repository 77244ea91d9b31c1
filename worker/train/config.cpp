#include "worker/train/config.h"

#include <yaml-cpp/yaml.h>

#include <fmt/format.h>

#include <cmath>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <sstream>
#include <tuple>
#include <vector>

#include "api/job.h"
#include "api/utf8.h"
#include "worker/parallel/pipeline/schedule.h"
#include "worker/train/digest.h"

namespace tessera::train {
namespace {

// A field reader: converts `node` into the destination or returns an error naming `path`.
using FieldReader = std::function<Status(const YAML::Node& node, const std::string& path)>;

template <typename T>
Status ReadScalar(const YAML::Node& node, const std::string& path, const char* kind, T* dst) {
  if (!node.IsScalar()) {
    return BadConfig(fmt::format("{}: expected {}", path, kind));
  }
  try {
    *dst = node.as<T>();
  } catch (const YAML::Exception&) {
    return BadConfig(fmt::format("{}: expected {}, got '{}'", path, kind, node.Scalar()));
  }
  return Status::Ok();
}

FieldReader Int(int* dst) {
  return [dst](const YAML::Node& n, const std::string& p) {
    return ReadScalar(n, p, "an integer", dst);
  };
}
FieldReader Int64(int64_t* dst) {
  return [dst](const YAML::Node& n, const std::string& p) {
    return ReadScalar(n, p, "an integer", dst);
  };
}
FieldReader Uint64(uint64_t* dst) {
  return [dst](const YAML::Node& n, const std::string& p) {
    return ReadScalar(n, p, "a non-negative integer", dst);
  };
}
FieldReader Double(double* dst) {
  return [dst](const YAML::Node& n, const std::string& p) {
    return ReadScalar(n, p, "a number", dst);
  };
}
FieldReader String(std::string* dst) {
  return [dst](const YAML::Node& n, const std::string& p) {
    return ReadScalar(n, p, "a string", dst);
  };
}
FieldReader DecayField(Decay* dst) {
  return [dst](const YAML::Node& n, const std::string& p) {
    std::string s;
    if (Status st = ReadScalar(n, p, "a string", &s); !st.ok())
      return st;
    if (s == "cosine") {
      *dst = Decay::kCosine;
    } else if (s == "linear") {
      *dst = Decay::kLinear;
    } else if (s == "constant") {
      *dst = Decay::kConstant;
    } else {
      return BadConfig(fmt::format("{}: '{}' is not one of cosine, linear, constant", p, s));
    }
    return Status::Ok();
  };
}

FieldReader PrecisionField(Precision* dst) {
  return [dst](const YAML::Node& n, const std::string& p) {
    std::string s;
    if (Status st = ReadScalar(n, p, "a string", &s); !st.ok())
      return st;
    if (s == "fp32") {
      *dst = Precision::kFp32;
    } else if (s == "bf16") {
      *dst = Precision::kBf16;
    } else {
      return BadConfig(fmt::format("{}: '{}' is not one of fp32, bf16", p, s));
    }
    return Status::Ok();
  };
}

// Reads a mapping whose keys must all be known.
Status ReadMap(const YAML::Node& node, const std::string& path,
               const std::map<std::string, FieldReader>& fields) {
  if (!node.IsMap()) {
    return BadConfig(fmt::format("{}: expected a mapping", path.empty() ? "<top level>" : path));
  }
  for (const auto& kv : node) {
    const std::string key = kv.first.as<std::string>();
    const std::string field_path = path.empty() ? key : path + "." + key;
    auto it = fields.find(key);
    if (it == fields.end()) {
      return BadConfig(fmt::format("{}: unknown field", field_path));
    }
    if (Status st = it->second(kv.second, field_path); !st.ok())
      return st;
  }
  return Status::Ok();
}

FieldReader Section(std::map<std::string, FieldReader> fields) {
  return [fields = std::move(fields)](const YAML::Node& n, const std::string& p) {
    return ReadMap(n, p, fields);
  };
}

FieldReader ModelField(TrainerConfig* c) {
  return [c](const YAML::Node& n, const std::string& p) {
    if (n.IsMap() && n["preset"]) {
      std::string preset;
      if (Status st = ReadScalar(n["preset"], p + ".preset", "a string", &preset); !st.ok()) {
        return st;
      }
      if (!model::GptPreset(preset, &c->model)) {
        return BadConfig(fmt::format("{}.preset: unknown preset '{}'", p, preset));
      }
      c->model_preset = preset;
    }
    std::string ignored;
    return ReadMap(n, p,
                   {{"preset", String(&ignored)},
                    {"layers", Int(&c->model.layers)},
                    {"dModel", Int(&c->model.d_model)},
                    {"heads", Int(&c->model.heads)},
                    {"seqLen", Int(&c->model.seq_len)},
                    {"vocab", Int(&c->model.vocab)}});
  };
}

std::map<std::string, FieldReader> TrainerFields(TrainerConfig* c) {
  return {
      {"model", ModelField(c)},
      {"data", Section({{"path", String(&c->data.path)},
                        {"tokenizer", String(&c->data.tokenizer)},
                        {"validationFraction", Double(&c->data.validation_fraction)}})},
      {"batch", Section({{"global", Int(&c->batch.global)},
                         {"microBatches", Int(&c->batch.micro_batches)}})},
      {"optimizer", Section({{"lr", Double(&c->optimizer.lr)},
                             {"weightDecay", Double(&c->optimizer.weight_decay)},
                             {"beta1", Double(&c->optimizer.beta1)},
                             {"beta2", Double(&c->optimizer.beta2)},
                             {"eps", Double(&c->optimizer.eps)},
                             {"gradClip", Double(&c->optimizer.grad_clip)}})},
      {"schedule", Section({{"steps", Int64(&c->schedule.steps)},
                            {"warmupSteps", Int64(&c->schedule.warmup_steps)},
                            {"decay", DecayField(&c->schedule.decay)},
                            {"minLrRatio", Double(&c->schedule.min_lr_ratio)},
                            {"evalEvery", Int64(&c->schedule.eval_every)},
                            {"evalBatches", Int(&c->schedule.eval_batches)}})},
      {"precision", PrecisionField(&c->precision)},
      {"seed", Uint64(&c->seed)},
      {"checkpoint", Section({{"dir", String(&c->checkpoint.dir)},
                              {"everySteps", Int64(&c->checkpoint.every_steps)},
                              {"keep", Int(&c->checkpoint.keep)}})},
      {"metrics", Section({{"port", Int(&c->metrics.port)},
                           {"peakFlopsPerSecond", Double(&c->metrics.peak_flops_per_second)}})},
      {"parallelism", Section({{"zeroStage", Int(&c->parallel.zero_stage)},
                               {"bucketMiB", Double(&c->parallel.bucket_mib)},
                               {"schedule", String(&c->parallel.schedule)}})},
      {"logEvery", Int(&c->log_every)},
  };
}

}  // namespace

const char* DecayName(Decay decay) {
  switch (decay) {
    case Decay::kCosine:
      return "cosine";
    case Decay::kLinear:
      return "linear";
    case Decay::kConstant:
      break;
  }
  return "constant";
}

Status ParseTrainerConfigYaml(const std::string& yaml_text, const std::string& source,
                              TrainerConfig* out) {
  TrainerConfig c = *out;
  // yaml-cpp passes invalid UTF-8 through into strings, which JSON output cannot hold.
  if (const auto bad = api::FirstNonTextByte(yaml_text))
    return BadConfig(fmt::format("{}: {}", source, api::NonTextMessage(yaml_text, *bad)));
  try {
    const YAML::Node root = YAML::Load(yaml_text);
    if (Status st = ReadMap(root, "", TrainerFields(&c)); !st.ok())
      return BadConfig(fmt::format("{}: {}", source, st.message()));
  } catch (const YAML::Exception& e) {  // a syntax error, or a key that is not a string
    return BadConfig(
        fmt::format("{}: not valid YAML (line {}): {}", source, e.mark.line + 1, e.msg));
  }
  *out = c;
  return Status::Ok();
}

Status ApplyTrainerConfigOverride(const std::string& assignment, TrainerConfig* out) {
  const auto eq = assignment.find('=');
  if (eq == std::string::npos || eq == 0) {
    return BadConfig(fmt::format("--set '{}': expected key=value", assignment));
  }
  const std::string key = assignment.substr(0, eq);
  const std::string value = assignment.substr(eq + 1);
  // Build the nested mapping {a: {b: value}} for key "a.b" and parse it like a file.
  std::vector<std::string> parts;
  std::stringstream ks(key);
  for (std::string part; std::getline(ks, part, '.');)
    parts.push_back(part);
  // Nothing after '=' is the empty string, as in `tessera run --set` (YAML would read null).
  YAML::Node parsed_value(std::string{});
  try {
    if (!value.empty())
      parsed_value = YAML::Load(value);
  } catch (const YAML::Exception& e) {
    return BadConfig(fmt::format("--set {}: the value is not valid YAML: {}", key, e.msg));
  }
  YAML::Emitter emitter;
  emitter << YAML::BeginMap;
  for (size_t i = 0; i + 1 < parts.size(); ++i) {
    emitter << YAML::Key << parts[i] << YAML::Value << YAML::BeginMap;
  }
  emitter << YAML::Key << parts.back() << YAML::Value << parsed_value;
  for (size_t i = 0; i + 1 < parts.size(); ++i)
    emitter << YAML::EndMap;
  emitter << YAML::EndMap;
  return ParseTrainerConfigYaml(emitter.c_str(), "--set " + key, out);
}

Status ValidateTrainerConfig(const TrainerConfig& c, int world_size, int pipeline, int tensor) {
  const auto positive = [](const char* field, int64_t v) -> Status {
    if (v <= 0)
      return BadConfig(fmt::format("{}: must be positive, got {}", field, v));
    return Status::Ok();
  };
  for (const auto& [field, v] : std::initializer_list<std::pair<const char*, int64_t>>{
           {"model.layers", c.model.layers},
           {"model.dModel", c.model.d_model},
           {"model.heads", c.model.heads},
           {"model.seqLen", c.model.seq_len},
           {"model.vocab", c.model.vocab},
           {"batch.global", c.batch.global},
           {"batch.microBatches", c.batch.micro_batches},
           {"schedule.steps", c.schedule.steps},
           {"schedule.evalBatches", c.schedule.eval_batches},
           {"checkpoint.keep", c.checkpoint.keep},
           {"logEvery", c.log_every}}) {
    if (Status st = positive(field, v); !st.ok())
      return st;
  }
  // The API's bounds: the plan lists every block's tensors and the parameter count multiplies
  // the sizes, so a larger shape would exhaust memory or overflow int64.
  using Bounds = api::ModelSpec;
  for (const auto& [field, v, most] :
       std::initializer_list<std::tuple<const char*, int64_t, int64_t>>{
           {"model.layers", c.model.layers, Bounds::kMaxLayers},
           {"model.dModel", c.model.d_model, Bounds::kMaxDModel},
           {"model.heads", c.model.heads, Bounds::kMaxHeads},
           {"model.seqLen", c.model.seq_len, Bounds::kMaxSeqLen},
           {"model.vocab", c.model.vocab, Bounds::kMaxVocab}}) {
    if (v > most)
      return BadConfig(fmt::format("{}: at most {}, got {}", field, most, v));
  }
  if (c.model.d_model % c.model.heads != 0) {
    return BadConfig(fmt::format("model.heads: {} does not divide model.dModel {}", c.model.heads,
                                 c.model.d_model));
  }
  if (c.data.tokenizer != "byte" && c.data.tokenizer != "uint16") {
    return BadConfig(
        fmt::format("data.tokenizer: '{}' is not one of byte, uint16", c.data.tokenizer));
  }
  if (c.data.tokenizer == "uint16" && c.model.vocab > 65536) {
    return BadConfig(
        fmt::format("model.vocab: {} is larger than the 65536 ids a uint16 token file can hold",
                    c.model.vocab));
  }
  if (c.data.tokenizer == "byte" && c.model.vocab < 256) {
    return BadConfig(fmt::format(
        "model.vocab: {} is smaller than the 256 ids of the byte tokenizer", c.model.vocab));
  }
  if (c.data.path.empty())
    return BadConfig("data.path: required (a text file to train on)");
  if (!(c.data.validation_fraction > 0.0 && c.data.validation_fraction < 1.0)) {
    return BadConfig(
        fmt::format("data.validationFraction: {} is not in (0, 1)", c.data.validation_fraction));
  }
  if (world_size < 1)
    return BadConfig(fmt::format("WORLD_SIZE: {} is not positive", world_size));
  if (pipeline < 1 || tensor < 1 || world_size % (pipeline * tensor) != 0) {
    return BadConfig(
        fmt::format("TESSERA_MESH: pipeline {} x tensor {} does not divide WORLD_SIZE {}", pipeline,
                    tensor, world_size));
  }
  const int data = world_size / (pipeline * tensor);
  const int64_t per_step = static_cast<int64_t>(data) * c.batch.micro_batches;
  if (c.batch.global % per_step != 0) {
    return BadConfig(fmt::format(
        "batch.global: {} is not divisible by data-parallel ranks ({}) x microBatches ({})",
        c.batch.global, data, c.batch.micro_batches));
  }
  if (pipeline > c.model.layers) {
    return BadConfig(
        fmt::format("parallelism.pipeline: {} stages for model.layers {}; each stage needs a block",
                    pipeline, c.model.layers));
  }
  if (c.model.heads > 0 && c.model.heads % tensor != 0) {
    return BadConfig(fmt::format("parallelism.tensor: {} does not divide model.heads {}", tensor,
                                 c.model.heads));
  }
  if (!parallel::ParseSchedule(c.parallel.schedule)) {
    return BadConfig(
        fmt::format("parallelism.schedule: '{}' is not GPipe or 1F1B", c.parallel.schedule));
  }
  if (!(c.optimizer.lr > 0.0) || !std::isfinite(c.optimizer.lr)) {
    return BadConfig(fmt::format("optimizer.lr: must be positive, got {}", c.optimizer.lr));
  }
  // `!(v >= 0)` rather than `v < 0`, which NaN passes (a NaN decay trained to NaN weights).
  if (!(c.optimizer.weight_decay >= 0.0) || !std::isfinite(c.optimizer.weight_decay)) {
    return BadConfig(fmt::format("optimizer.weightDecay: must be a finite number >= 0, got {}",
                                 c.optimizer.weight_decay));
  }
  for (const auto& [field, v] : std::initializer_list<std::pair<const char*, double>>{
           {"optimizer.beta1", c.optimizer.beta1}, {"optimizer.beta2", c.optimizer.beta2}}) {
    if (!(v >= 0.0 && v < 1.0)) {
      return BadConfig(fmt::format("{}: {} is not in [0, 1)", field, v));
    }
  }
  if (!(c.optimizer.eps > 0.0) || !std::isfinite(c.optimizer.eps)) {
    return BadConfig(
        fmt::format("optimizer.eps: must be a finite number > 0, got {}", c.optimizer.eps));
  }
  if (!(c.optimizer.grad_clip >= 0.0) || !std::isfinite(c.optimizer.grad_clip)) {
    return BadConfig(
        fmt::format("optimizer.gradClip: must be a finite number >= 0 (0 disables), got {}",
                    c.optimizer.grad_clip));
  }
  if (c.schedule.warmup_steps < 0)
    return BadConfig("schedule.warmupSteps: must be >= 0");
  if (!(c.schedule.min_lr_ratio >= 0.0 && c.schedule.min_lr_ratio <= 1.0)) {
    return BadConfig("schedule.minLrRatio: must be in [0, 1]");
  }
  if (c.schedule.eval_every < 0)
    return BadConfig("schedule.evalEvery: must be >= 0");
  if (c.checkpoint.every_steps < 0)
    return BadConfig("checkpoint.everySteps: must be >= 0");
  if (c.metrics.port < -1 || c.metrics.port > 65535) {
    return BadConfig(fmt::format("metrics.port: {} is not a port (0 = any free port, -1 = off)",
                                 c.metrics.port));
  }
  if (!(c.metrics.peak_flops_per_second >= 0.0) ||
      !std::isfinite(c.metrics.peak_flops_per_second)) {
    return BadConfig(fmt::format(
        "metrics.peakFlopsPerSecond: must be a finite number >= 0 (0 = not reported), got {}",
        c.metrics.peak_flops_per_second));
  }
  if (c.parallel.zero_stage != 0 && c.parallel.zero_stage != 1) {
    return BadConfig(fmt::format("parallelism.zeroStage: {} is not 0 or 1", c.parallel.zero_stage));
  }
  if (!(c.parallel.bucket_mib > 0.0) || !std::isfinite(c.parallel.bucket_mib)) {
    return BadConfig(fmt::format("parallelism.bucketMiB: must be a positive number, got {}",
                                 c.parallel.bucket_mib));
  }
  if (c.precision == Precision::kBf16 && (pipeline > 1 || tensor > 1)) {
    return BadConfig(fmt::format(
        "precision: bf16 (the GPU model) runs data parallelism only, this mesh has pipeline {} x "
        "tensor {}; set parallelism.pipeline and tensor to 1, or use precision fp32",
        pipeline, tensor));
  }
  if (c.precision == Precision::kBf16 && c.parallel.zero_stage != 0) {
    return BadConfig(
        "parallelism.zeroStage: 1 is not available with precision bf16 (the GPU optimizer is not "
        "sharded); use zeroStage 0, or precision fp32");
  }
  return Status::Ok();
}

std::string TrajectoryJson(const TrainerConfig& c) {
  // nlohmann::json objects keep keys sorted, so the text is canonical.
  nlohmann::json j = {
      {"model",
       {{"layers", c.model.layers},
        {"dModel", c.model.d_model},
        {"heads", c.model.heads},
        {"seqLen", c.model.seq_len},
        {"vocab", c.model.vocab}}},
      {"data",
       {{"tokenizer", c.data.tokenizer}, {"validationFraction", c.data.validation_fraction}}},
      {"batch", {{"global", c.batch.global}}},
      {"optimizer",
       {{"lr", c.optimizer.lr},
        {"weightDecay", c.optimizer.weight_decay},
        {"beta1", c.optimizer.beta1},
        {"beta2", c.optimizer.beta2},
        {"eps", c.optimizer.eps},
        {"gradClip", c.optimizer.grad_clip}}},
      {"schedule",
       {{"steps", c.schedule.steps},
        {"warmupSteps", c.schedule.warmup_steps},
        {"decay", DecayName(c.schedule.decay)},
        {"minLrRatio", c.schedule.min_lr_ratio}}},
      {"seed", c.seed},
  };
  // fp32 is left out, so the hashes of checkpoints written before precision was a choice stay.
  if (c.precision != Precision::kFp32)
    j["precision"] = PrecisionName(c.precision);
  return j.dump();
}

const char* PrecisionName(Precision precision) {
  return precision == Precision::kBf16 ? "bf16" : "fp32";
}

std::string ConfigHash(const TrainerConfig& config) {
  const std::string text = TrajectoryJson(config);
  return Sha256Hex(std::as_bytes(std::span(text)));
}

}  // namespace tessera::train
