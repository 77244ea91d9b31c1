// Cross-field rules: each one is a CEL expression (for the apiserver) and a C++ check (for
// `tessera validate`) written side by side, reporting the same message. The C++ checks run on a
// job after ApplyDefaults; the CEL spells out the same computed defaults (procsPerWorker, data,
// model presets) because the apiserver only applies the schema's literal defaults. The
// transition rules at the end (what an update may change) are CEL only: they compare the
// update with the stored object, which a file checked offline does not have.
#include "api/rules.h"

#include <algorithm>
#include <limits>
#include <optional>
#include <string>
#include <utility>

#include "api/contract.h"
#include "api/utf8.h"

namespace tessera::api {
namespace {

using std::to_string;

// --- CEL fragments for the computed defaults (self = spec unless noted). ---

// procsPerWorker of the spec object `spec` ("self", or "oldSelf" in a transition rule).
std::string ProcsCel(const std::string& spec) {
  return "(has(" + spec + ".procsPerWorker) ? " + spec + ".procsPerWorker : (" + spec +
         ".gpusPerWorker > 0 ? " + spec + ".gpusPerWorker : 1))";
}
const std::string kProcsCel = ProcsCel("self");
const std::string kWorldCel = "(self.workers * " + kProcsCel + ")";
const std::string kPipeCel = "self.parallelism.pipeline";
const std::string kTensorCel = "self.parallelism.tensor";
const std::string kDataCel = "(has(self.parallelism.data) ? self.parallelism.data : (" + kPipeCel +
                             " * " + kTensorCel + " > 0 && " + kWorldCel + " % (" + kPipeCel +
                             " * " + kTensorCel + ") == 0 ? " + kWorldCel + " / (" + kPipeCel +
                             " * " + kTensorCel + ") : 0))";

// The effective value of a model field in CEL: the field, else the preset's value, else
// `fallback`. `model` is the CEL path of the model object.
std::string ModelFieldCel(const std::string& model, const std::string& field,
                          int64_t ModelPreset::*member, int64_t fallback) {
  std::string chain = to_string(fallback);
  const auto& presets = ModelPresets();
  for (auto it = presets.rbegin(); it != presets.rend(); ++it) {
    chain = "(has(" + model + ".preset) && " + model + ".preset == '" + it->name + "' ? " +
            to_string((*it).*member) + " : " + chain + ")";
  }
  return "(has(" + model + "." + field + ") ? " + model + "." + field + " : " + chain + ")";
}

// a × b, or nullopt when it overflows an int64: CEL's integer arithmetic then fails the rule
// (an evaluation error refuses the object), and C++'s would be undefined.
std::optional<int64_t> Mul(int64_t a, int64_t b) {
  int64_t product = 0;
  if (__builtin_mul_overflow(a, b, &product))
    return std::nullopt;
  return product;
}

constexpr const char* kOverflows = "the product overflows a 64-bit integer";

// The effective model value in C++ after ApplyDefaults (presets expanded); 0 when unknown.
int64_t Get(const std::optional<int64_t>& v) {
  return v.value_or(0);
}

}  // namespace

int64_t EffectiveProcsPerWorker(const TrainingJobSpec& spec) {
  if (spec.procs_per_worker)
    return *spec.procs_per_worker;
  return std::max<int64_t>(spec.gpus_per_worker, 1);
}

int64_t WorldSize(const TrainingJobSpec& spec) {
  const int64_t procs = EffectiveProcsPerWorker(spec);
  return Mul(spec.workers, procs)
      .value_or((spec.workers < 0) == (procs < 0) ? std::numeric_limits<int64_t>::max()
                                                  : std::numeric_limits<int64_t>::min());
}

int64_t EffectiveData(const TrainingJobSpec& spec) {
  if (spec.parallelism.data)
    return *spec.parallelism.data;
  const std::optional<int64_t> pt = Mul(spec.parallelism.pipeline, spec.parallelism.tensor);
  if (!pt || *pt <= 0 || WorldSize(spec) % *pt != 0)
    return 0;
  return WorldSize(spec) / *pt;
}

bool WorkerHasCommand(const nlohmann::json& pod_template) {
  if (!pod_template.is_object())
    return false;
  auto spec = pod_template.find("spec");
  if (spec == pod_template.end() || !spec->is_object())
    return false;
  auto containers = spec->find("containers");
  if (containers == spec->end() || !containers->is_array())
    return false;
  for (const auto& c : *containers) {
    if (!c.is_object())
      continue;
    auto name = c.find("name");
    auto command = c.find("command");
    if (name != c.end() && *name == kWorkerContainerName && command != c.end() &&
        command->is_array() && !command->empty()) {
      return true;
    }
  }
  return false;
}

std::vector<CrossFieldRule> RootRules() {
  std::vector<CrossFieldRule> rules;
  rules.push_back({
      .id = "hostname-fits",
      .cel = "!has(self.spec) || !has(self.spec.workers) || self.spec.workers < 1 || "
             "size(self.metadata.name) + 8 + size(string(self.spec.workers - 1)) <= 63",
      .message = "too long: every pod hostname <name>-worker-<i> must fit a 63-character DNS "
                 "label",
      .field_path = ".metadata.name",
      .summary = "every pod hostname `<name>-worker-<i>` fits a 63-character DNS label",
      .check = [](const TrainingJob& job) -> std::optional<std::string> {
        const int64_t w = job.spec.workers;
        if (w < 1)
          return std::nullopt;
        const std::string host = WorkerPodName(job.metadata.name, w - 1);
        // Characters, as CEL's size() counts them (a name that is not ASCII also fails the
        // name's pattern).
        const int64_t length = Utf8Length(host);
        if (length <= 63)
          return std::nullopt;
        // A name of thousands of characters is shown by its first and last 40, not whole.
        const std::string shown = length <= 100 ? host
                                                : host.substr(0, Utf8Offset(host, 40)) + "..." +
                                                      host.substr(Utf8Offset(host, length - 40));
        return shown + " has " + to_string(length) + " characters";
      },
  });
  return rules;
}

std::vector<CrossFieldRule> SpecRules() {
  std::vector<CrossFieldRule> rules;
  const std::string heads = ModelFieldCel("self.trainer.model", "heads", &ModelPreset::heads, 0);
  const std::string layers = ModelFieldCel("self.trainer.model", "layers", &ModelPreset::layers, 0);

  rules.push_back({
      .id = "parallel-product",
      .cel = "!has(self.parallelism.data) || self.parallelism.data * " + kPipeCel + " * " +
             kTensorCel + " == " + kWorldCel,
      .message = "data x pipeline x tensor must equal workers x procsPerWorker",
      .field_path = ".parallelism",
      .summary = "`data × pipeline × tensor` equals `workers × procsPerWorker`",
      .check = [](const TrainingJob& job) -> std::optional<std::string> {
        const auto& s = job.spec;
        const auto& p = s.parallelism;
        if (!p.data)
          return std::nullopt;
        const std::optional<int64_t> data_pipeline = Mul(*p.data, p.pipeline);
        const std::optional<int64_t> product =
            data_pipeline ? Mul(*data_pipeline, p.tensor) : std::nullopt;
        if (!product || !Mul(s.workers, EffectiveProcsPerWorker(s)))
          return std::string(kOverflows);
        if (*product == WorldSize(s))
          return std::nullopt;
        return to_string(*p.data) + "x" + to_string(p.pipeline) + "x" + to_string(p.tensor) +
               " = " + to_string(*product) + ", but " + to_string(s.workers) + "x" +
               to_string(EffectiveProcsPerWorker(s)) + " = " + to_string(WorldSize(s));
      },
  });

  rules.push_back({
      .id = "data-derivable",
      .cel = "has(self.parallelism.data) || " + kPipeCel + " < 1 || " + kTensorCel + " < 1 || " +
             kWorldCel + " % (" + kPipeCel + " * " + kTensorCel + ") == 0",
      .message = "without data, pipeline x tensor must divide workers x procsPerWorker",
      .field_path = ".parallelism",
      .summary = "without `data`, `pipeline × tensor` divides `workers × procsPerWorker` "
                 "(data is derived from them)",
      .check = [](const TrainingJob& job) -> std::optional<std::string> {
        const auto& s = job.spec;
        const auto& p = s.parallelism;
        if (p.data || p.pipeline < 1 || p.tensor < 1)
          return std::nullopt;
        const std::optional<int64_t> pt = Mul(p.pipeline, p.tensor);
        if (!pt || !Mul(s.workers, EffectiveProcsPerWorker(s)))
          return std::string(kOverflows);
        if (WorldSize(s) % *pt == 0)
          return std::nullopt;
        return to_string(*pt) + " does not divide " + to_string(WorldSize(s));
      },
  });

  rules.push_back({
      .id = "tensor-divides-heads",
      .cel = "!has(self.trainer) || !has(self.trainer.model) || " + kTensorCel + " < 1 || " +
             heads + " < 1 || " + heads + " % " + kTensorCel + " == 0",
      .message = "tensor must divide spec.trainer.model.heads",
      .field_path = ".parallelism.tensor",
      .summary = "`parallelism.tensor` divides `trainer.model.heads`",
      .check = [](const TrainingJob& job) -> std::optional<std::string> {
        if (!job.spec.trainer)
          return std::nullopt;
        const int64_t t = job.spec.parallelism.tensor;
        const int64_t h = Get(job.spec.trainer->model.heads);
        if (t < 1 || h < 1 || h % t == 0)
          return std::nullopt;
        return to_string(t) + " does not divide " + to_string(h);
      },
  });

  rules.push_back({
      .id = "layers-cover-stages",
      .cel = "!has(self.trainer) || !has(self.trainer.model) || " + layers + " < 1 || " + layers +
             " >= " + kPipeCel,
      .message = "pipeline stages must not outnumber spec.trainer.model.layers",
      .field_path = ".parallelism.pipeline",
      .summary = "`trainer.model.layers` ≥ `parallelism.pipeline` (every stage holds a layer)",
      .check = [](const TrainingJob& job) -> std::optional<std::string> {
        if (!job.spec.trainer)
          return std::nullopt;
        const int64_t l = Get(job.spec.trainer->model.layers);
        const int64_t p = job.spec.parallelism.pipeline;
        if (l < 1 || l >= p)
          return std::nullopt;
        return to_string(p) + " stages, " + to_string(l) + " layers";
      },
  });

  rules.push_back({
      .id = "batch-divides",
      .cel = "!has(self.trainer) || !has(self.trainer.batch) || !has(self.trainer.batch.global) "
             "|| " +
             kDataCel +
             " < 1 || self.parallelism.microBatches < 1 || self.trainer.batch.global % (" +
             kDataCel + " * self.parallelism.microBatches) == 0",
      .message = "must be divisible by data x microBatches",
      .field_path = ".trainer.batch.global",
      .summary = "`trainer.batch.global` is divisible by `data × microBatches`",
      .check = [](const TrainingJob& job) -> std::optional<std::string> {
        if (!job.spec.trainer || !job.spec.trainer->batch.global)
          return std::nullopt;
        const int64_t g = *job.spec.trainer->batch.global;
        const int64_t d = EffectiveData(job.spec);
        const int64_t m = job.spec.parallelism.micro_batches;
        if (d < 1 || m < 1)
          return std::nullopt;
        const std::optional<int64_t> dm = Mul(d, m);
        if (!dm)
          return std::string(kOverflows);
        if (g % *dm == 0)
          return std::nullopt;
        return to_string(g) + " is not divisible by " + to_string(d) + "x" + to_string(m);
      },
  });

  const std::string has_command =
      "(has(self.template) && has(self.template.spec) && has(self.template.spec.containers) && "
      "self.template.spec.containers.exists(c, has(c.name) && c.name == '" +
      std::string(kWorkerContainerName) + "' && has(c.command) && size(c.command) > 0))";
  rules.push_back({
      .id = "trainer-or-command",
      .cel = "has(self.trainer) || " + has_command,
      .message = "set spec.trainer (the built-in GPT trainer) or a command in the container "
                 "named worker of spec.template",
      .field_path = ".trainer",
      .summary = "`trainer` or a `command` in the template's container named `worker`",
      .check = [](const TrainingJob& job) -> std::optional<std::string> {
        if (job.spec.trainer || WorkerHasCommand(job.spec.pod_template))
          return std::nullopt;
        return "";
      },
  });
  rules.push_back({
      .id = "trainer-xor-command",
      .cel = "!has(self.trainer) || !" + has_command,
      .message = "spec.trainer and a command in the worker container of spec.template are "
                 "exclusive: remove one",
      .field_path = ".trainer",
      .summary = "not both `trainer` and a worker `command`",
      .check = [](const TrainingJob& job) -> std::optional<std::string> {
        if (!job.spec.trainer || !WorkerHasCommand(job.spec.pod_template))
          return std::nullopt;
        return "";
      },
  });

  rules.push_back({
      .id = "bf16-needs-gpus",
      .cel = "!has(self.trainer) || !has(self.trainer.precision) || self.trainer.precision != "
             "'bf16' || self.gpusPerWorker > 0",
      .message = "bf16 runs on GPUs only: set spec.gpusPerWorker or use fp32",
      .field_path = ".trainer.precision",
      .summary = "`trainer.precision: bf16` needs `gpusPerWorker` > 0",
      .check = [](const TrainingJob& job) -> std::optional<std::string> {
        if (!job.spec.trainer || job.spec.trainer->precision != "bf16" ||
            job.spec.gpus_per_worker > 0) {
          return std::nullopt;
        }
        return "";
      },
  });
  // The GPU model (bf16) is data-parallel with a whole AdamW state per rank
  // (worker/train/config.cpp, the end of ValidateTrainerConfig).
  const std::string bf16_cel =
      "has(self.trainer) && has(self.trainer.precision) && self.trainer.precision == 'bf16'";
  rules.push_back({
      .id = "bf16-data-parallel-only",
      .cel = "!(" + bf16_cel + ") || (" + kPipeCel + " == 1 && " + kTensorCel + " == 1)",
      .message = "bf16 (the GPU model) runs data parallelism only: set spec.parallelism.pipeline "
                 "and tensor to 1, or use precision fp32",
      .field_path = ".trainer.precision",
      .summary = "`trainer.precision: bf16` needs `parallelism.pipeline` and `tensor` 1",
      .check = [](const TrainingJob& job) -> std::optional<std::string> {
        const auto& p = job.spec.parallelism;
        if (!job.spec.trainer || job.spec.trainer->precision != "bf16" ||
            (p.pipeline == 1 && p.tensor == 1)) {
          return std::nullopt;
        }
        return "pipeline " + to_string(p.pipeline) + " x tensor " + to_string(p.tensor);
      },
  });
  rules.push_back({
      .id = "bf16-zero-stage-0",
      .cel = "!(" + bf16_cel + ") || self.parallelism.zeroStage == 0",
      .message = "zeroStage 1 is not available with precision bf16 (the GPU optimizer is not "
                 "sharded): set zeroStage to 0, or use precision fp32",
      .field_path = ".parallelism.zeroStage",
      .summary = "`trainer.precision: bf16` needs `parallelism.zeroStage` 0",
      .check = [](const TrainingJob& job) -> std::optional<std::string> {
        if (!job.spec.trainer || job.spec.trainer->precision != "bf16" ||
            job.spec.parallelism.zero_stage == 0) {
          return std::nullopt;
        }
        return "got " + to_string(job.spec.parallelism.zero_stage);
      },
  });

  rules.push_back({
      .id = "one-rank-per-gpu",
      .cel = "!has(self.trainer) || self.gpusPerWorker <= 0 || " + kProcsCel +
             " == self.gpusPerWorker",
      .message = "the built-in trainer runs one rank per GPU: procsPerWorker must equal "
                 "gpusPerWorker",
      .field_path = ".procsPerWorker",
      .summary = "with `trainer` and GPUs, `procsPerWorker` equals `gpusPerWorker`",
      .check = [](const TrainingJob& job) -> std::optional<std::string> {
        const auto& s = job.spec;
        const int64_t n = EffectiveProcsPerWorker(s);
        if (!s.trainer || s.gpus_per_worker <= 0 || n == s.gpus_per_worker)
          return std::nullopt;
        return to_string(n) + " processes, " + to_string(s.gpus_per_worker) + " GPUs";
      },
  });
  return rules;
}

std::vector<CrossFieldRule> TrainerRules() {
  std::vector<CrossFieldRule> rules;
  const std::string vocab = ModelFieldCel("self.model", "vocab", &ModelPreset::vocab, 256);
  rules.push_back({
      .id = "byte-vocab",
      .cel = "!has(self.model) || !has(self.data) || !has(self.data.tokenizer) || "
             "self.data.tokenizer != 'byte' || " +
             vocab + " >= 256",
      .message = "the byte tokenizer needs vocab >= 256",
      .field_path = ".model.vocab",
      .summary = "`data.tokenizer: byte` needs `model.vocab` ≥ 256",
      .check = [](const TrainingJob& job) -> std::optional<std::string> {
        const auto& t = *job.spec.trainer;
        const int64_t v = Get(t.model.vocab);
        if (t.data.tokenizer != "byte" || v >= 256)
          return std::nullopt;
        return "got " + to_string(v);
      },
  });
  rules.push_back({
      .id = "uint16-vocab",
      .cel = "!has(self.model) || !has(self.data) || !has(self.data.tokenizer) || "
             "self.data.tokenizer != 'uint16' || " +
             vocab + " <= 65536",
      .message = "uint16 token files hold ids below 65536: vocab must be <= 65536",
      .field_path = ".model.vocab",
      .summary = "`data.tokenizer: uint16` needs `model.vocab` ≤ 65536",
      .check = [](const TrainingJob& job) -> std::optional<std::string> {
        const auto& t = *job.spec.trainer;
        const int64_t v = Get(t.model.vocab);
        if (t.data.tokenizer != "uint16" || v <= 65536)
          return std::nullopt;
        return "got " + to_string(v);
      },
  });
  return rules;
}

std::vector<CrossFieldRule> ModelRules() {
  std::vector<CrossFieldRule> rules;
  std::string names;
  for (const auto& p : ModelPresets())
    names += (names.empty() ? "" : ", ") + p.name;
  rules.push_back({
      .id = "model-complete",
      .cel = "has(self.preset) || (has(self.layers) && has(self.dModel) && has(self.heads) && "
             "has(self.seqLen))",
      .message = "set a preset (" + names + ") or all of layers, dModel, heads and seqLen",
      .field_path = "",
      .summary = "`preset`, or all of `layers`, `dModel`, `heads`, `seqLen`",
      .check = [](const TrainingJob& job) -> std::optional<std::string> {
        const auto& m = job.spec.trainer->model;
        if (!m.preset.empty() || (m.layers && m.d_model && m.heads && m.seq_len)) {
          return std::nullopt;
        }
        return "";
      },
  });
  const std::string heads = ModelFieldCel("self", "heads", &ModelPreset::heads, 0);
  const std::string d_model = ModelFieldCel("self", "dModel", &ModelPreset::d_model, 0);
  rules.push_back({
      .id = "heads-divide-dmodel",
      .cel = heads + " < 1 || " + d_model + " < 1 || " + d_model + " % " + heads + " == 0",
      .message = "heads must divide dModel",
      .field_path = ".heads",
      .summary = "`heads` divides `dModel`",
      .check = [](const TrainingJob& job) -> std::optional<std::string> {
        const auto& m = job.spec.trainer->model;
        const int64_t h = Get(m.heads), d = Get(m.d_model);
        if (h < 1 || d < 1 || d % h == 0)
          return std::nullopt;
        return to_string(h) + " does not divide " + to_string(d);
      },
  });
  return rules;
}

std::vector<CrossFieldRule> LrScheduleRules() {
  std::vector<CrossFieldRule> rules;
  rules.push_back({
      .id = "warmup-within-steps",
      .cel = "!has(self.steps) || !has(self.warmupSteps) || self.warmupSteps <= self.steps",
      .message = "warmupSteps must not exceed steps",
      .field_path = ".warmupSteps",
      .summary = "`warmupSteps` ≤ `steps`",
      .check = [](const TrainingJob& job) -> std::optional<std::string> {
        const auto& s = job.spec.trainer->schedule;
        if (!s.steps || s.warmup_steps <= *s.steps)
          return std::nullopt;
        return to_string(s.warmup_steps) + " > " + to_string(*s.steps);
      },
  });
  return rules;
}

std::vector<CrossFieldRule> SchedulingRules() {
  std::vector<CrossFieldRule> rules;
  rules.push_back({
      .id = "queue-needs-volcano",
      .cel = "!has(self.queue) || self.queue == '' || (has(self.schedulerName) && "
             "self.schedulerName == 'volcano')",
      .message = "queue names a Volcano queue: set schedulerName: volcano",
      .field_path = ".queue",
      .summary = "`queue` is set only with `schedulerName: volcano`",
      .check = [](const TrainingJob& job) -> std::optional<std::string> {
        const auto& s = job.spec.scheduling;
        if (s.queue.empty() || s.scheduler_name == "volcano")
          return std::nullopt;
        return "";
      },
  });
  return rules;
}

std::vector<CrossFieldRule> MetricsRules() {
  std::vector<CrossFieldRule> rules;
  const std::string rdzv = to_string(kRendezvousPort), torch = to_string(kTorchMasterPort);
  rules.push_back({
      .id = "metrics-port-free",
      .cel = "!has(self.port) || (self.port != " + rdzv + " && self.port != " + torch + ")",
      .message =
          "must differ from the rendezvous port " + rdzv + " and the torch master port " + torch,
      .field_path = ".port",
      .summary = "`port` is neither " + rdzv + " (rendezvous) nor " + torch + " (MASTER_PORT)",
      .check = [](const TrainingJob& job) -> std::optional<std::string> {
        const int64_t p = job.spec.metrics.port;
        if (p != kRendezvousPort && p != kTorchMasterPort)
          return std::nullopt;
        return "";
      },
  });
  return rules;
}

// --- What an update may change. ---
//
// The trainer, the layout of the ranks and the objects made once per job (the Service's ports,
// the PodGroup) are fixed when the job is created: a running gang cannot follow a change to
// them, and a checkpoint resumes only with the same trainer and mesh. The pod template may
// change while the job is suspended (a queueing system choosing nodes, say), and in the update
// that resumes it: the next attempt's pods are made from it. `suspend`, `runPolicy` and
// `scheduling.startupTimeoutSeconds` may change at any time; the controller reads them on every
// decision.

namespace {

// `self.<field>` equals `oldSelf.<field>`, counting absent as a value of its own.
std::string UnchangedCel(const std::string& field) {
  return "has(self." + field + ") == has(oldSelf." + field + ") && (!has(self." + field +
         ") || self." + field + " == oldSelf." + field + ")";
}

CrossFieldRule FixedAtCreation(std::string id, const std::string& field, std::string cel) {
  return {
      .id = std::move(id),
      .cel = std::move(cel),
      .message = "cannot change once the job exists: delete the job and create it again",
      .field_path = "." + field,
      .summary = "`" + field + "` cannot change once the job exists",
      .check = nullptr,
      .transition = true,
  };
}

}  // namespace

std::vector<CrossFieldRule> UpdateRules() {
  std::string scheduling;
  for (const char* field : {"gang", "schedulerName", "queue", "priorityClassName"}) {
    scheduling += std::string(scheduling.empty() ? "" : " && ") + "self.scheduling." + field +
                  " == oldSelf.scheduling." + field;
  }
  CrossFieldRule scheduling_fixed = FixedAtCreation("scheduling-fixed", "scheduling", scheduling);
  scheduling_fixed.message =
      "only startupTimeoutSeconds can change once the job exists: delete the job and create it "
      "again";
  scheduling_fixed.summary =
      "`scheduling`, but for `startupTimeoutSeconds`, cannot change once the job exists";
  std::vector<CrossFieldRule> rules = {
      FixedAtCreation("workers-fixed", "workers", "self.workers == oldSelf.workers"),
      FixedAtCreation("gpus-fixed", "gpusPerWorker", "self.gpusPerWorker == oldSelf.gpusPerWorker"),
      FixedAtCreation("procs-fixed", "procsPerWorker", kProcsCel + " == " + ProcsCel("oldSelf")),
      FixedAtCreation("parallelism-fixed", "parallelism", UnchangedCel("parallelism")),
      FixedAtCreation("trainer-fixed", "trainer", UnchangedCel("trainer")),
      std::move(scheduling_fixed),
      FixedAtCreation("metrics-fixed", "metrics", UnchangedCel("metrics")),
  };
  rules.push_back({
      .id = "template-while-suspended",
      .cel = "oldSelf.suspend || (" + UnchangedCel("template") + ")",
      .message = "can change only while the job is suspended: set spec.suspend to true first "
                 "(the update that sets it back to false may carry the change)",
      .field_path = ".template",
      .summary = "`template` changes only while the job is suspended, or in the update that "
                 "resumes it",
      .check = nullptr,
      .transition = true,
  });
  return rules;
}

}  // namespace tessera::api
