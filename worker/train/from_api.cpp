#include "worker/train/from_api.h"

#include <fmt/format.h>

#include <nlohmann/json.hpp>

#include "api/codec.h"
#include "api/validate.h"

namespace tessera::train {
namespace {

// Narrows an api integer into an int field, refusing values that do not fit.
Status ToInt(int64_t value, const char* path, int* out) {
  if (value < INT32_MIN || value > INT32_MAX) {
    return BadConfig(fmt::format("{}: {} is out of range", path, value));
  }
  *out = static_cast<int>(value);
  return Status::Ok();
}

}  // namespace

Status TrainerConfigFromJob(const api::TrainingJob& job, TrainerConfig* out) {
  if (!job.spec.trainer) {
    return BadConfig("spec.trainer: missing; the built-in trainer needs it");
  }
  const api::TrainerSpec& t = *job.spec.trainer;
  TrainerConfig c;

  // Model: a preset first, then explicit fields on top of it.
  if (!t.model.preset.empty()) {
    if (!model::GptPreset(t.model.preset, &c.model)) {
      return BadConfig(
          fmt::format("spec.trainer.model.preset: unknown preset '{}'", t.model.preset));
    }
    c.model_preset = t.model.preset;
  }
  const std::pair<const std::optional<int64_t>*, std::pair<const char*, int*>> model_fields[] = {
      {&t.model.layers, {"spec.trainer.model.layers", &c.model.layers}},
      {&t.model.d_model, {"spec.trainer.model.dModel", &c.model.d_model}},
      {&t.model.heads, {"spec.trainer.model.heads", &c.model.heads}},
      {&t.model.seq_len, {"spec.trainer.model.seqLen", &c.model.seq_len}},
      {&t.model.vocab, {"spec.trainer.model.vocab", &c.model.vocab}},
  };
  for (const auto& [value, field] : model_fields) {
    if (*value) {
      if (Status st = ToInt(**value, field.first, field.second); !st.ok())
        return st;
    }
  }

  if (!t.data.path || t.data.path->empty()) {
    return BadConfig("spec.trainer.data.path: missing; name the training text file");
  }
  c.data.path = *t.data.path;
  c.data.tokenizer = t.data.tokenizer;
  c.data.validation_fraction = t.data.validation_fraction;

  if (t.batch.global) {
    if (Status st = ToInt(*t.batch.global, "spec.trainer.batch.global", &c.batch.global); !st.ok())
      return st;
  }
  if (Status st = ToInt(job.spec.parallelism.micro_batches, "spec.parallelism.microBatches",
                        &c.batch.micro_batches);
      !st.ok()) {
    return st;
  }

  if (Status st = ToInt(job.spec.parallelism.zero_stage, "spec.parallelism.zeroStage",
                        &c.parallel.zero_stage);
      !st.ok()) {
    return st;
  }
  c.parallel.bucket_mib = job.spec.parallelism.bucket_mib;
  c.parallel.schedule = job.spec.parallelism.schedule;

  c.optimizer.lr = t.optimizer.lr;
  c.optimizer.weight_decay = t.optimizer.weight_decay;
  c.optimizer.beta1 = t.optimizer.beta1;
  c.optimizer.beta2 = t.optimizer.beta2;
  c.optimizer.grad_clip = t.optimizer.grad_clip;

  if (t.schedule.steps)
    c.schedule.steps = *t.schedule.steps;
  c.schedule.warmup_steps = t.schedule.warmup_steps;
  // The trainer's own reader decides which decays it implements, so the two never drift.
  {
    TrainerConfig decay_only;
    const Status st =
        ParseTrainerConfigYaml("schedule: {decay: " + nlohmann::json(t.schedule.decay).dump() + "}",
                               "spec.trainer", &decay_only);
    if (!st.ok()) {
      return BadConfig(fmt::format(
          "spec.trainer.schedule.decay: '{}' is not supported by the built-in trainer ({})",
          t.schedule.decay, st.message()));
    }
    c.schedule.decay = decay_only.schedule.decay;
  }

  if (t.precision == "bf16") {
    c.precision = Precision::kBf16;
  } else if (t.precision != "fp32") {
    return BadConfig(
        fmt::format("spec.trainer.precision: '{}' is not one of fp32, bf16", t.precision));
  }
  if (t.seed < 0) {
    return BadConfig(fmt::format("spec.trainer.seed: {} is negative", t.seed));
  }
  c.seed = static_cast<uint64_t>(t.seed);

  if (t.checkpoint) {
    c.checkpoint.dir = t.checkpoint->dir.value_or("");
    c.checkpoint.every_steps = t.checkpoint->every_steps;
    if (Status st = ToInt(t.checkpoint->keep, "spec.trainer.checkpoint.keep", &c.checkpoint.keep);
        !st.ok()) {
      return st;
    }
  } else {
    c.checkpoint.dir.clear();
  }
  if (Status st = ToInt(job.spec.metrics.port, "spec.metrics.port", &c.metrics.port); !st.ok())
    return st;

  *out = std::move(c);
  return Status::Ok();
}

Status LoadTrainerConfigOrJob(const std::string& path, TrainerConfig* out) {
  const api::FileText file = api::ReadJobFile(path);
  if (!file.ok())
    return BadConfig(fmt::format("{}: {}", path, file.error));
  const api::ParsedYaml parsed = api::ParseYaml(file.text);
  if (!parsed.ok())
    return BadConfig(fmt::format("{}: not valid YAML: {}", path, parsed.error));
  if (parsed.documents.size() > 1) {
    return BadConfig(
        fmt::format("{}: holds {} YAML documents; expected one", path, parsed.documents.size()));
  }
  const bool object = parsed.documents.size() == 1 && parsed.documents[0].is_object() &&
                      parsed.documents[0].contains("kind");
  if (!object)
    return ParseTrainerConfigYaml(file.text, path, out);

  const nlohmann::json& document = parsed.documents[0];
  if (const std::vector<api::FieldError> errors = api::ValidateDocument(document);
      !errors.empty()) {
    return BadConfig(fmt::format("{}: {}", path, api::FormatError(errors.front())));
  }
  api::DecodeResult decoded = api::DecodeJson(document);
  if (!decoded.job)  // not reached: ValidateDocument reports what DecodeJson would
    return BadConfig(fmt::format("{}: not a TrainingJob", path));
  api::ApplyDefaults(*decoded.job);
  if (Status st = TrainerConfigFromJob(*decoded.job, out); !st.ok())
    return BadConfig(fmt::format("{}: {}", path, st.message()));
  return Status::Ok();
}

std::string TrainerConfigYaml(const TrainerConfig& c) {
  // JSON is YAML; nlohmann writes doubles so that they read back to the same value.
  nlohmann::ordered_json j = {
      {"model",
       {{"layers", c.model.layers},
        {"dModel", c.model.d_model},
        {"heads", c.model.heads},
        {"seqLen", c.model.seq_len},
        {"vocab", c.model.vocab}}},
      {"data",
       {{"path", c.data.path},
        {"tokenizer", c.data.tokenizer},
        {"validationFraction", c.data.validation_fraction}}},
      {"batch", {{"global", c.batch.global}, {"microBatches", c.batch.micro_batches}}},
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
        {"minLrRatio", c.schedule.min_lr_ratio},
        {"evalEvery", c.schedule.eval_every},
        {"evalBatches", c.schedule.eval_batches}}},
      {"precision", PrecisionName(c.precision)},
      {"seed", c.seed},
      {"checkpoint",
       {{"dir", c.checkpoint.dir},
        {"everySteps", c.checkpoint.every_steps},
        {"keep", c.checkpoint.keep}}},
      {"metrics",
       {{"port", c.metrics.port}, {"peakFlopsPerSecond", c.metrics.peak_flops_per_second}}},
      {"parallelism",
       {{"zeroStage", c.parallel.zero_stage},
        {"bucketMiB", c.parallel.bucket_mib},
        {"schedule", c.parallel.schedule}}},
      {"logEvery", c.log_every},
  };
  return j.dump(2) + "\n";
}

}  // namespace tessera::train
