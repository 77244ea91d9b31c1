// The TrainingJob field tree (written once, here) and the generic walkers over it: structural
// and value checks, and schema defaulting, with the apiserver's semantics.
#include "api/schema.h"

#include <algorithm>
#include <cctype>
#include <cmath>
#include <optional>
#include <regex>
#include <set>
#include <sstream>
#include <stdexcept>
#include <string_view>

#include "api/rules.h"
#include "api/utf8.h"

namespace tessera::api {
namespace {

using nlohmann::json;

// A small builder so the tree below reads as a table.
class Def {
 public:
  Def(std::string name, FieldType type, std::string description) {
    f_.name = std::move(name);
    f_.type = type;
    f_.description = std::move(description);
  }
  Def& Default(json v) {
    f_.default_value = std::move(v);
    return *this;
  }
  Def& Computed(std::string doc) {
    f_.computed_default = std::move(doc);
    return *this;
  }
  Def& Enum(std::vector<json> values) {
    f_.enum_values = std::move(values);
    return *this;
  }
  // A whole number only: the apiserver (kube-openapi's MinimumInt) compares an integer value
  // with the minimum truncated to an integer, so `minimum: 0.001` let 0 through. Use
  // ExclusiveMin for "above a bound".
  Def& Min(double v) {
    if (v != std::floor(v))
      throw std::logic_error("schema: " + f_.name + ": a minimum must be a whole number");
    f_.minimum = v;
    return *this;
  }
  // Values above `v` only (OpenAPI `exclusiveMinimum: true` next to `minimum`).
  Def& ExclusiveMin(double v) {
    f_.minimum = v;
    f_.exclusive_minimum = true;
    return *this;
  }
  Def& Max(double v) {
    f_.maximum = v;
    return *this;
  }
  // Not empty, with no maximum (a Kubernetes field the apiserver checks with "must not be
  // empty").
  Def& NotEmpty() {
    f_.min_length = 1;
    return *this;
  }
  Def& Length(std::optional<int64_t> min, int64_t max) {
    f_.min_length = min;
    f_.max_length = max;
    return *this;
  }
  Def& MaxItems(int64_t n) {
    f_.max_items = n;
    return *this;
  }
  Def& MaxProperties(int64_t n) {
    f_.max_properties = n;
    return *this;
  }
  Def& Format(std::string v) {
    f_.format = std::move(v);
    return *this;
  }
  // Only after Length: the pattern is matched only on strings within max_length (libstdc++'s
  // std::regex recurses once per character, so an unbounded string could overflow the stack).
  Def& Pattern(std::string v) {
    if (!f_.max_length)
      throw std::logic_error("schema: " + f_.name + ": a pattern needs a Length first");
    f_.pattern = std::move(v);
    f_.pattern_regex = std::make_shared<const std::regex>(f_.pattern);
    return *this;
  }
  Def& Required() {
    f_.required = true;
    return *this;
  }
  Def& Nullable() {
    f_.nullable = true;
    return *this;
  }
  Def& PreserveUnknown() {
    f_.preserve_unknown = true;
    return *this;
  }
  Def& ServerOpen() {
    f_.server_schema_open = true;
    return *this;
  }
  Def& ListType(std::string type, std::vector<std::string> keys = {}) {
    f_.list_type = std::move(type);
    f_.list_map_keys = std::move(keys);
    return *this;
  }
  Def& Props(std::vector<FieldSchema> props) {
    f_.properties = std::move(props);
    return *this;
  }
  Def& Items(FieldSchema item) {
    f_.items = {std::move(item)};
    return *this;
  }
  Def& Rules(std::vector<CrossFieldRule> rules) {
    f_.rules = std::move(rules);
    return *this;
  }
  operator FieldSchema() const { return f_; }

 private:
  FieldSchema f_;
};

using T = FieldType;

constexpr int64_t kMaxString = 253;  // names, queues, classes: a DNS subdomain at most
constexpr int64_t kMaxPath = 4096;
constexpr int64_t kMaxMessage = 32768;

FieldSchema ModelDef() {
  std::vector<json> presets;
  std::string shapes;  // "gpt2-124m (12 layers, ...), ... or gpt2-1558m (...)"
  const auto& all = ModelPresets();
  for (size_t i = 0; i < all.size(); ++i) {
    const ModelPreset& p = all[i];
    presets.push_back(p.name);
    shapes += std::string(i == 0                ? ""
                          : i + 1 == all.size() ? " or "
                                                : ", ") +
              p.name + " (" + std::to_string(p.layers) + " layers, dModel " +
              std::to_string(p.d_model) + ", " + std::to_string(p.heads) + " heads, seqLen " +
              std::to_string(p.seq_len) + ", vocab " + std::to_string(p.vocab) + ")";
  }
  return Def("model", T::kObject,
             "The GPT model shape: a preset, or layers, dModel, heads and seqLen. Fields given "
             "next to a preset override it.")
      .Required()
      .Props({
          Def("preset", T::kString,
              "A named shape that fills the fields not given: " + shapes + ".")
              .Enum(presets),
          Def("layers", T::kInteger, "Transformer blocks.")
              .Min(1)
              .Max(ModelSpec::kMaxLayers)
              .Computed("preset"),
          Def("dModel", T::kInteger, "Width of the residual stream (embedding size).")
              .Min(1)
              .Max(ModelSpec::kMaxDModel)
              .Computed("preset"),
          Def("heads", T::kInteger, "Attention heads per block; divides dModel.")
              .Min(1)
              .Max(ModelSpec::kMaxHeads)
              .Computed("preset"),
          Def("seqLen", T::kInteger, "Context length in tokens (sequence length of a sample).")
              .Min(1)
              .Max(ModelSpec::kMaxSeqLen)
              .Computed("preset"),
          Def("vocab", T::kInteger, "Vocabulary size (rows of the token embedding).")
              .Min(2)
              .Max(ModelSpec::kMaxVocab)
              .Computed("the preset's, else 256"),
      })
      .Rules(ModelRules());
}

FieldSchema TrainerDef() {
  return Def("trainer", T::kObject,
             "The built-in GPT trainer. Omit it to run your own command from the pod template "
             "instead (exactly one of the two).")
      .Props({
          ModelDef(),
          Def("data", T::kObject, "The training text and how it is tokenized.")
              .Required()
              .Props({
                  Def("path", T::kString,
                      "File of training data as seen by the worker (a mounted volume in a "
                      "cluster; relative to the working directory in local mode).")
                      .Required()
                      .Length(1, kMaxPath),
                  Def("tokenizer", T::kString,
                      "byte: every byte is a token (vocab >= 256); uint16: a pre-tokenized file "
                      "of little-endian 16-bit token ids.")
                      .Default("byte")
                      .Enum({"byte", "uint16"}),
                  Def("validationFraction", T::kNumber,
                      "Fraction of the file, taken from its end, held out for validation loss.")
                      .Default(0.1)
                      .ExclusiveMin(0)
                      .Max(0.5),
              }),
          Def("batch", T::kObject, "Batch size.")
              .Required()
              .Props({
                  Def("global", T::kInteger,
                      "Sequences per optimizer step over all data-parallel ranks; divisible by "
                      "data × microBatches.")
                      .Required()
                      .Min(1)
                      .Max(1048576),
              }),
          Def("optimizer", T::kObject, "AdamW hyperparameters.")
              .Default(json::object())
              .Props({
                  Def("lr", T::kNumber, "Peak learning rate.")
                      .Default(3.0e-4)
                      .ExclusiveMin(0)
                      .Max(10),
                  Def("weightDecay", T::kNumber, "Decoupled weight decay (AdamW).")
                      .Default(0.1)
                      .Min(0)
                      .Max(1),
                  Def("beta1", T::kNumber, "First-moment decay.").Default(0.9).Min(0).Max(0.9999),
                  Def("beta2", T::kNumber, "Second-moment decay.")
                      .Default(0.95)
                      .Min(0)
                      .Max(0.99999),
                  Def("gradClip", T::kNumber,
                      "Clip the global gradient norm to this value; 0 disables clipping.")
                      .Default(1.0)
                      .Min(0)
                      .Max(1000),
              }),
          Def("schedule", T::kObject, "Training length and learning-rate schedule.")
              .Required()
              .Props({
                  Def("steps", T::kInteger, "Optimizer steps to train.").Required().Min(1).Max(1e9),
                  Def("warmupSteps", T::kInteger,
                      "Steps of linear warm-up: step s (from 0) uses lr × (s+1) / warmupSteps, "
                      "so the first step already trains; at most steps.")
                      .Default(0)
                      .Min(0)
                      .Max(1e9),
                  Def("decay", T::kString,
                      "Learning-rate decay after warm-up: cosine, linear (both to 10% of lr at "
                      "the last step) or constant.")
                      .Default("cosine")
                      .Enum({"cosine", "linear", "constant"}),
              })
              .Rules(LrScheduleRules()),
          Def("precision", T::kString,
              "Arithmetic of forward and backward: fp32, or bf16 with fp32 master weights "
              "(GPU only).")
              .Default("fp32")
              .Enum({"fp32", "bf16"}),
          Def("seed", T::kInteger, "Seed of parameter initialization and data order.")
              .Default(1337)
              .Min(0)
              .Max(4294967295.0),
          Def("checkpoint", T::kObject,
              "Periodic checkpoints; a restarted gang resumes from the newest complete one. "
              "Omit to keep none.")
              .Props({
                  Def("dir", T::kString,
                      "Directory for step-<N>/ checkpoints, shared by all workers (a volume in "
                      "a cluster).")
                      .Required()
                      .Length(1, kMaxPath),
                  Def("everySteps", T::kInteger, "Write a checkpoint every this many steps.")
                      .Default(200)
                      .Min(1)
                      .Max(1e9),
                  Def("keep", T::kInteger, "Newest complete checkpoints kept.")
                      .Default(3)
                      .Min(1)
                      .Max(1000),
              }),
      })
      .Rules(TrainerRules());
}

FieldSchema TemplateDef() {
  // Only what Tessera reads is declared; everything else of a PodTemplateSpec is kept as given
  // and validated by the apiserver when the controller creates the pods.
  return Def("template", T::kObject,
             "A PodTemplateSpec for the worker pods: image, resources, volumes, nodeSelector, "
             "tolerations, env. A command in the container named worker runs your own trainer "
             "instead of the built-in one.")
      .PreserveUnknown()
      .Props({
          Def("spec", T::kObject, "The PodSpec of every worker pod.")
              .PreserveUnknown()
              .Props({
                  Def("containers", T::kArray,
                      "Containers; the one named worker runs the worker agent.")
                      .MaxItems(32)
                      .Items(Def("", T::kObject, "A container.")
                                 .PreserveUnknown()
                                 .Props({
                                     Def("name", T::kString, "Container name.")
                                         .Length(std::nullopt, 63),
                                     Def("command", T::kArray,
                                         "Entrypoint; in the worker container it replaces the "
                                         "built-in trainer.")
                                         .MaxItems(256)
                                         .Items(Def("", T::kString, "An argument.")),
                                 })),
              }),
      });
}

FieldSchema RunPolicyDef() {
  return Def("runPolicy", T::kObject, "How failures, deadlines and cleanup are handled.")
      .Default(json::object())
      .Props({
          Def("backoffLimit", T::kInteger, "Gang restarts before the job fails.")
              .Default(3)
              .Min(0)
              .Max(1000),
          Def("permanentExitCodes", T::kArray,
              "Worker exit codes that fail the job at once, without restarts (2 = bad "
              "configuration).")
              .Default(json::array({2}))
              .MaxItems(255)
              .ListType("set")
              .Items(Def("", T::kInteger, "An exit code.").Min(1).Max(255)),
          Def("activeDeadlineSeconds", T::kInteger,
              "Fail the job (DeadlineExceeded) when it has run this long; null: no deadline.")
              .Nullable()
              .Min(1),
          Def("progressDeadlineSeconds", T::kInteger,
              "Restart the gang when no training step completes for this long (a hung "
              "collective); 0 disables.")
              .Default(600)
              .Min(0),
          Def("ttlSecondsAfterFinished", T::kInteger,
              "Delete the job this long after it finished; null: keep it.")
              .Nullable()
              .Min(0),
          Def("cleanPodPolicy", T::kString,
              "Which pods are deleted when the job finishes: Running (still running ones), All, "
              "None.")
              .Default("Running")
              .Enum({"Running", "All", "None"}),
      });
}

FieldSchema SchedulingDef() {
  return Def("scheduling", T::kObject, "How the gang of worker pods is placed.")
      .Default(json::object())
      .Props({
          Def("gang", T::kBoolean,
              "All workers start together or not at all (released and retried after "
              "startupTimeoutSeconds).")
              .Default(true),
          Def("schedulerName", T::kString,
              "Scheduler of the pods; volcano or scheduler-plugins also creates a PodGroup. "
              "Empty: the default scheduler.")
              .Default("")
              .Length(std::nullopt, kMaxString),
          Def("queue", T::kString, "Volcano queue of the PodGroup (needs schedulerName volcano).")
              .Default("")
              .Length(std::nullopt, kMaxString),
          Def("priorityClassName", T::kString, "PriorityClass of the worker pods.")
              .Default("")
              .Length(std::nullopt, kMaxString),
          Def("startupTimeoutSeconds", T::kInteger,
              "Every worker must be Running within this time, or all are released and the "
              "attempt retried (GangStartupTimeout).")
              .Default(300)
              .Min(1)
              .Max(86400),
      })
      .Rules(SchedulingRules());
}

FieldSchema SpecDef() {
  return Def("spec", T::kObject, "The desired training job.")
      .Required()
      .Props({
          Def("workers", T::kInteger, "Worker pods in the gang.").Default(1).Min(1).Max(4096),
          Def("gpusPerWorker", T::kInteger, "nvidia.com/gpu per pod; 0 runs on CPU.")
              .Default(0)
              .Min(0)
              .Max(16),
          Def("procsPerWorker", T::kInteger,
              "Rank processes per pod; with the built-in trainer on GPUs, one per GPU.")
              .Min(1)
              .Max(256)
              .Computed("gpusPerWorker, at least 1"),
          Def("parallelism", T::kObject,
              "How the ranks are arranged: data × pipeline × tensor equals workers × "
              "procsPerWorker (tensor innermost).")
              .Default(json::object())
              .Props({
                  Def("data", T::kInteger, "Data-parallel replicas.")
                      .Min(1)
                      .Max(1048576)
                      .Computed("workers × procsPerWorker / (pipeline × tensor)"),
                  Def("pipeline", T::kInteger, "Pipeline stages; at most the model's layers.")
                      .Default(1)
                      .Min(1)
                      .Max(1024),
                  Def("tensor", T::kInteger,
                      "Tensor-parallel ranks (Megatron-style); divides the model's heads.")
                      .Default(1)
                      .Min(1)
                      .Max(256),
                  Def("zeroStage", T::kInteger,
                      "0: every data-parallel rank keeps the whole optimizer state; 1: it is "
                      "sharded across them (ZeRO-1).")
                      .Default(0)
                      .Enum({0, 1}),
                  Def("microBatches", T::kInteger,
                      "Micro-batches per optimizer step per data-parallel rank (gradient "
                      "accumulation, and the pipeline's micro-batches).")
                      .Default(1)
                      .Min(1)
                      .Max(65536),
                  Def("bucketMiB", T::kNumber,
                      "Gradient all-reduce bucket size in MiB: each bucket's reduction starts "
                      "as soon as backward has finished its gradients.")
                      .Default(25)
                      .ExclusiveMin(0)
                      .Max(4096),
                  Def("schedule", T::kString, "Pipeline schedule: GPipe or 1F1B.")
                      .Default("1F1B")
                      .Enum({"GPipe", "1F1B"}),
              }),
          TrainerDef(),
          TemplateDef(),
          Def("suspend", T::kBoolean,
              "true deletes running workers and keeps the job; false again starts a fresh "
              "attempt.")
              .Default(false),
          RunPolicyDef(),
          SchedulingDef(),
          Def("metrics", T::kObject, "Prometheus metrics of the workers.")
              .Default(json::object())
              .Props({
                  Def("port", T::kInteger, "Port of /metrics and /progress on every worker.")
                      .Default(9400)
                      .Min(1)
                      .Max(65535),
              })
              .Rules(MetricsRules()),
      })
      .Rules([] {
        std::vector<CrossFieldRule> rules = SpecRules();
        for (CrossFieldRule& rule : UpdateRules())
          rules.push_back(std::move(rule));
        return rules;
      }());
}

FieldSchema StatusDef() {
  auto time = [](std::string name, std::string description) {
    return Def(std::move(name), T::kString, std::move(description)).Format("date-time");
  };
  auto count = [](std::string name, std::string description) {
    return Def(std::move(name), T::kInteger, std::move(description)).Min(0);
  };
  return Def("status", T::kObject, "What the controller observed; written by it only.")
      .Props({
          Def("phase", T::kString, "Where the job is in its lifecycle.")
              .Enum({"Pending", "Starting", "Running", "Restarting", "Succeeded", "Failed",
                     "Suspended"}),
          Def("conditions", T::kArray,
              "Created, PodsReady, Running, Restarting, Succeeded, Failed, Suspended.")
              .MaxItems(16)
              .ListType("map", {"type"})
              .Items(Def("", T::kObject, "A condition (Kubernetes API conventions).")
                         .Props({
                             Def("type", T::kString, "Condition type.").Required().Length(1, 64),
                             Def("status", T::kString, "True, False or Unknown.")
                                 .Required()
                                 .Enum({"True", "False", "Unknown"}),
                             Def("reason", T::kString,
                                 "CamelCase reason, e.g. BackoffLimitExceeded, DeadlineExceeded, "
                                 "PermanentExitCode, ProgressDeadlineExceeded, GangStartupTimeout, "
                                 "NodeLost.")
                                 .Length(std::nullopt, 1024),
                             Def("message", T::kString, "Human-readable detail.")
                                 .Length(std::nullopt, kMaxMessage),
                             time("lastTransitionTime", "When status last changed."),
                             count("observedGeneration", "spec generation the condition is for."),
                         })),
          Def("workers", T::kObject, "Worker pods of the current attempt by state.")
              .Props({
                  count("active", "Pods created and not finished."),
                  count("ready", "Pods Running and ready."),
                  count("succeeded", "Pods that exited 0."),
                  count("failed", "Pods that failed."),
              }),
          count("restarts", "Gang restarts so far."),
          count("attempt",
                "The current attempt: 0 on first start, +1 per gang restart and per resume "
                "(the pods' tessera.dev/attempt label)."),
          time("attemptStartTime", "When the current attempt's pods were created."),
          Def("lastFailure", T::kObject, "The failure that caused the latest restart or the end.")
              .Props({
                  Def("reason", T::kString, "Why, as a condition reason.")
                      .Length(std::nullopt, 1024),
                  Def("message", T::kString, "Detail.").Length(std::nullopt, kMaxMessage),
                  Def("worker", T::kString, "The pod that failed first.")
                      .Length(std::nullopt, kMaxString),
                  Def("exitCode", T::kInteger, "Its exit code.").Min(-255).Max(255),
              }),
          Def("progress", T::kObject, "Training progress reported by rank 0.")
              .Props({
                  count("step", "Last completed optimizer step."),
                  count("totalSteps", "Steps the job trains."),
                  Def("loss", T::kNumber, "Training loss at that step."),
                  Def("valLoss", T::kNumber,
                      "Latest validation loss; absent before the first validation."),
                  Def("tokensPerSecond", T::kNumber, "Throughput over all ranks.").Min(0),
                  time("updatedAt", "When the step last changed."),
                  count("attempt", "The attempt whose rank 0 reported the step."),
              }),
          time("startTime", "When the first attempt started."),
          time("completionTime", "When the job finished."),
          count("observedGeneration", "The spec generation the status reflects."),
      });
}

FieldSchema BuildSchema() {
  auto time = [](std::string name, std::string description) {
    return Def(std::move(name), T::kString, std::move(description)).Format("date-time");
  };
  return Def("", T::kObject, "TrainingJob runs a gang of worker pods that train a model.")
      .Props({
          Def("apiVersion", T::kString, "tessera.dev/v1alpha1.").Required().Enum({kApiVersion}),
          Def("kind", T::kString, "TrainingJob.").Required().Enum({kKind}),
          // The CRD shows only metadata.name (the apiserver allows no other constraint on root
          // metadata); the fields below it, after name, are ObjectMeta's, so that the offline
          // check refuses an unknown field of metadata as the apiserver's strict decoding does.
          Def("metadata", T::kObject, "Standard object metadata.")
              .Required()
              .ServerOpen()
              .Props({
                  Def("name", T::kString,
                      "Job name: a DNS label starting with a letter, short enough that every "
                      "pod hostname <name>-worker-<i> fits 63 characters. kubectl create also "
                      "takes generateName instead; tessera validate and run need a name.")
                      .Required()
                      .Length(1, 54)
                      .Pattern("^[a-z]([-a-z0-9]*[a-z0-9])?$"),
                  Def("namespace", T::kString, "Namespace of the job.").Length(std::nullopt, 63),
                  Def("uid", T::kString, "Set by the apiserver."),
                  Def("generation", T::kInteger, "Set by the apiserver."),
                  Def("labels", T::kStringMap, "Labels.").Format("labels"),
                  Def("annotations", T::kStringMap, "Annotations.").Format("annotations"),
                  Def("generateName", T::kString,
                      "Prefix of a name the apiserver generates (kubectl create); tessera "
                      "validate and run need a name.")
                      .Format("name-prefix"),
                  Def("resourceVersion", T::kString, "Set by the apiserver."),
                  Def("selfLink", T::kString, "Set by the apiserver (deprecated)."),
                  time("creationTimestamp", "Set by the apiserver."),
                  time("deletionTimestamp", "Set by the apiserver."),
                  Def("deletionGracePeriodSeconds", T::kInteger, "Set by the apiserver."),
                  Def("finalizers", T::kArray, "Finalizers.")
                      .Items(Def("", T::kString, "A finalizer name.").Format("qualified-name")),
                  Def("ownerReferences", T::kArray, "Owners of the job.")
                      .Items(
                          Def("", T::kObject, "An owner reference.")
                              .Props({
                                  Def("apiVersion", T::kString, "API version of the owner.")
                                      .Required()
                                      .NotEmpty(),
                                  Def("kind", T::kString, "Kind of the owner.")
                                      .Required()
                                      .NotEmpty(),
                                  Def("name", T::kString, "Name of the owner.")
                                      .Required()
                                      .NotEmpty(),
                                  Def("uid", T::kString, "UID of the owner.").Required().NotEmpty(),
                                  Def("controller", T::kBoolean,
                                      "Whether the owner is the managing controller."),
                                  Def("blockOwnerDeletion", T::kBoolean,
                                      "Whether the owner waits for this job's deletion."),
                              })),
                  Def("managedFields", T::kArray, "Set by the apiserver (server-side apply).")
                      .Items(Def("", T::kObject, "A managed-fields entry.")
                                 .Props({
                                     Def("manager", T::kString, "Who manages the fields."),
                                     Def("operation", T::kString, "Apply or Update."),
                                     Def("apiVersion", T::kString, "Version of the fields."),
                                     time("time", "When the entry was last changed."),
                                     Def("fieldsType", T::kString, "Format of fieldsV1."),
                                     Def("fieldsV1", T::kObject, "The managed fields.")
                                         .PreserveUnknown(),
                                     Def("subresource", T::kString, "Subresource, if any."),
                                 })),
              }),
          SpecDef(),
          StatusDef(),
      })
      .Rules(RootRules());
}

// --- Checking. ---

std::string JsonTypeName(const json& v) {
  switch (v.type()) {
    case json::value_t::object:
      return "object";
    case json::value_t::array:
      return "array";
    case json::value_t::string:
      return "string";
    case json::value_t::boolean:
      return "boolean";
    case json::value_t::number_integer:
    case json::value_t::number_unsigned:
      return "integer";
    case json::value_t::number_float:
      return "number";
    default:
      return "null";
  }
}

bool TypeMatches(const FieldSchema& f, const json& v) {
  switch (f.type) {
    case T::kObject:
      return v.is_object();
    case T::kStringMap:
      return v.is_object();
    case T::kString:
      return v.is_string();
    case T::kInteger:
      return v.is_number_integer();
    case T::kNumber:
      return v.is_number();
    case T::kBoolean:
      return v.is_boolean();
    case T::kArray:
      return v.is_array();
  }
  return false;
}

std::string FormatNumber(double d) {
  if (std::floor(d) == d && std::fabs(d) < 1e15)
    return std::to_string(static_cast<int64_t>(d));
  std::ostringstream s;
  s << d;
  return s.str();
}

std::string Join(const std::string& path, const std::string& key) {
  return path.empty() ? key : path + "." + key;
}

// Whether kubectl and the apiserver read `s` as a time: Go's time.Parse with the RFC 3339 layout
// (metav1.Time's decoding), including its leniencies (a one-digit hour, a comma before the
// fraction, zone offsets up to +24:00 and minutes up to 60). nullopt when it is one; otherwise
// which field is out of range as Go's message says, or "" when it is malformed.
std::optional<std::string> GoRfc3339Problem(std::string_view s) {
  size_t at = 0;
  auto digit = [&](size_t i) { return i < s.size() && s[i] >= '0' && s[i] <= '9'; };
  // Go's getnum: two digits, or one where the layout's field is not zero-padded.
  auto number = [&](bool padded, int* out) {
    if (!digit(at))
      return false;
    if (!digit(at + 1)) {
      if (padded)
        return false;
      *out = s[at++] - '0';
      return true;
    }
    *out = (s[at] - '0') * 10 + (s[at + 1] - '0');
    at += 2;
    return true;
  };
  auto literal = [&](char c) { return at < s.size() && s[at++] == c; };
  const std::string kBad;
  int year = 0, month = 0, day = 0, hour = 0, minute = 0, second = 0;
  if (s.size() < 4 || !digit(0) || !digit(1) || !digit(2) || !digit(3))
    return kBad;
  year = std::stoi(std::string(s.substr(0, 4)));
  at = 4;
  if (!literal('-') || !number(true, &month))
    return kBad;
  if (month < 1 || month > 12)
    return "month out of range";
  if (!literal('-') || !number(true, &day) || !literal('T') || !number(false, &hour))
    return kBad;
  if (hour > 23)
    return "hour out of range";
  if (!literal(':') || !number(true, &minute))
    return kBad;
  if (minute > 59)
    return "minute out of range";
  if (!literal(':') || !number(true, &second))
    return kBad;
  if (second > 59)
    return "second out of range";
  if (at + 1 < s.size() && (s[at] == '.' || s[at] == ',') && digit(at + 1)) {
    for (at += 1; digit(at); ++at) {
    }
  }
  if (at < s.size() && s[at] == 'Z') {
    ++at;
  } else {
    if (s.size() - at < 6 || (s[at] != '+' && s[at] != '-') || s[at + 3] != ':')
      return kBad;
    ++at;  // the sign
    int zone_hour = 0, zone_minute = 0;
    if (!number(true, &zone_hour) || !literal(':') || !number(true, &zone_minute))
      return kBad;
    if (zone_hour > 24)
      return "time zone offset hour out of range";
    if (zone_minute > 60)
      return "time zone offset minute out of range";
  }
  if (at != s.size())
    return kBad;
  const bool leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
  static constexpr int kDays[] = {31, 28, 31, 30, 31, 30, 31, 31, 30, 31, 30, 31};
  if (day < 1 || day > kDays[month - 1] + (month == 2 && leap))
    return "day out of range";
  return std::nullopt;
}

// Kubernetes' checks of names in metadata (k8s.io/apimachinery/pkg/util/validation), which the
// apiserver applies to every object it creates, a TrainingJob included. Character loops, not
// std::regex (see Def::Pattern).
bool IsAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= 'A' && c <= 'Z') || (c >= '0' && c <= '9');
}
bool IsLowerAlnum(char c) {
  return (c >= 'a' && c <= 'z') || (c >= '0' && c <= '9');
}

// IsDNS1123Subdomain: at most 253 characters; dot-separated parts of [a-z0-9-], each starting and
// ending with [a-z0-9].
bool IsDns1123Subdomain(std::string_view s) {
  if (s.empty() || s.size() > 253)
    return false;
  size_t start = 0;
  while (true) {
    const size_t dot = std::min(s.find('.', start), s.size());
    const std::string_view part = s.substr(start, dot - start);
    if (part.empty() || !IsLowerAlnum(part.front()) || !IsLowerAlnum(part.back()))
      return false;
    for (char c : part) {
      if (!IsLowerAlnum(c) && c != '-')
        return false;
    }
    if (dot == s.size())
      return true;
    start = dot + 1;
  }
}

// The name part of a qualified name, and a label value when not empty: at most 63 characters of
// [A-Za-z0-9-_.], starting and ending with a letter or digit.
bool IsNamePart(std::string_view s) {
  if (s.empty() || s.size() > 63 || !IsAlnum(s.front()) || !IsAlnum(s.back()))
    return false;
  return std::all_of(s.begin(), s.end(),
                     [](char c) { return IsAlnum(c) || c == '-' || c == '_' || c == '.'; });
}

// IsQualifiedName: `name` or `prefix/name`, the prefix a DNS subdomain (label, annotation and
// finalizer names).
bool IsQualifiedName(std::string_view s) {
  const size_t slash = s.find('/');
  if (slash == std::string_view::npos)
    return IsNamePart(s);
  return s.find('/', slash + 1) == std::string_view::npos &&
         IsDns1123Subdomain(s.substr(0, slash)) && IsNamePart(s.substr(slash + 1));
}

constexpr const char* kQualifiedName =
    "must be a qualified name: an optional DNS-subdomain prefix and '/', then at most 63 "
    "letters, digits, '-', '_' or '.', starting and ending with a letter or digit";
constexpr int64_t kMaxAnnotationBytes = 256 * 1024;  // keys and values together

// A string quoted for a message, long ones by their first 64 characters.
std::string Quoted(const std::string& s) {
  const size_t shown = Utf8Offset(s, 64);
  return "\"" + s.substr(0, shown) + (shown < s.size() ? "...\"" : "\"");
}

struct Checker {
  std::vector<FieldError> errors;
  bool structural_ok = true;

  void Add(const std::string& path, std::string message) {
    errors.push_back({path, std::move(message)});
  }

  void Walk(const json& v, const FieldSchema& f, const std::string& path) {
    if (v.is_null()) {
      // Non-nullable nulls were dropped by ApplySchemaDefaults, as the apiserver prunes them.
      // The ones left are array items, which the decoder cannot read either.
      if (!f.nullable) {
        Add(path, "must not be null");
        structural_ok = false;
      }
      return;
    }
    if (!TypeMatches(f, v)) {
      Add(path, "must be " + TypeName(f) + ", not " + JsonTypeName(v));
      structural_ok = false;
      return;
    }
    if (!f.enum_values.empty() &&
        std::find(f.enum_values.begin(), f.enum_values.end(), v) == f.enum_values.end()) {
      std::string allowed;
      for (const auto& e : f.enum_values) {
        allowed +=
            (allowed.empty() ? "" : ", ") + (e.is_string() ? e.get<std::string>() : e.dump());
      }
      Add(path, "must be one of " + allowed + " (got " +
                    (v.is_string() ? v.get<std::string>() : v.dump()) + ")");
    }
    if (v.is_number()) {
      const double d = v.get<double>();
      if (f.minimum && f.exclusive_minimum && d <= *f.minimum) {
        Add(path, "must be > " + FormatNumber(*f.minimum) + " (got " + v.dump() + ")");
      } else if (f.minimum && d < *f.minimum) {
        Add(path, "must be >= " + FormatNumber(*f.minimum) + " (got " + v.dump() + ")");
      }
      if (f.maximum && d > *f.maximum) {
        Add(path, "must be <= " + FormatNumber(*f.maximum) + " (got " + v.dump() + ")");
      }
    }
    if (v.is_string()) {
      const std::string& s = v.get_ref<const std::string&>();
      const int64_t len = Utf8Length(s);
      if (f.min_length && len < *f.min_length) {
        Add(path, *f.min_length == 1
                      ? "must not be empty"
                      : "must have at least " + std::to_string(*f.min_length) + " characters");
      }
      if (f.max_length && len > *f.max_length) {
        Add(path, "must have at most " + std::to_string(*f.max_length) + " characters (has " +
                      std::to_string(len) + ")");
      }
      if (f.pattern_regex && len <= *f.max_length && !std::regex_search(s, *f.pattern_regex)) {
        Add(path, "must match " + f.pattern +
                      " (lowercase letters, digits and '-', starting "
                      "with a letter)");
      }
      if (f.format == "qualified-name" && !IsQualifiedName(s))
        Add(path, std::string(kQualifiedName) + " (got " + Quoted(s) + ")");
      // metadata.generateName: the prefix of a name, so it may end with '-' (the apiserver
      // checks it with its last '-' taken for a letter).
      if (f.format == "name-prefix" && !s.empty()) {
        std::string masked = s;
        if (masked.size() > 1 && masked.back() == '-')
          masked.back() = 'a';
        if (!IsDns1123Subdomain(masked)) {
          Add(path,
              "must be a DNS subdomain prefix: lowercase letters, digits, '-' and '.', starting "
              "with a letter or digit (got " +
                  Quoted(s) + ")");
        }
      }
      if (f.format == "date-time") {
        if (const std::optional<std::string> problem = GoRfc3339Problem(s)) {
          // A time is short; anything long is shown by its first 64 characters.
          const size_t shown = Utf8Offset(s, 64);
          Add(path, "must be an RFC 3339 time such as 2026-12-07T10:00:00Z (got \"" +
                        s.substr(0, shown) + (shown < s.size() ? "...\"" : "\"") +
                        (problem->empty() ? "" : ": " + *problem) + ")");
        }
      }
    }
    if (f.type == T::kStringMap) {
      // A null value is read as "" (Go's decoding into map[string]string), as kubectl does.
      int64_t bytes = 0;
      for (const auto& [key, value] : v.items()) {
        if (!value.is_string() && !value.is_null()) {
          Add(Join(path, key), "must be string, not " + JsonTypeName(value));
          structural_ok = false;
          continue;
        }
        const std::string text = value.is_string() ? value.get<std::string>() : "";
        bytes += static_cast<int64_t>(key.size() + text.size());
        // The apiserver names the map, with the key or value in its message.
        if (f.format == "labels") {
          if (!IsQualifiedName(key))
            Add(path, "key " + Quoted(key) + " " + kQualifiedName);
          if (!text.empty() && !IsNamePart(text)) {
            Add(path, "value " + Quoted(text) + " of " + Quoted(key) +
                          " must be empty or at most 63 letters, digits, '-', '_' or '.', "
                          "starting and ending with a letter or digit");
          }
        }
        if (f.format == "annotations") {
          std::string lower = key;
          std::transform(lower.begin(), lower.end(), lower.begin(),
                         [](unsigned char c) { return static_cast<char>(std::tolower(c)); });
          if (!IsQualifiedName(lower))
            Add(path, "key " + Quoted(key) + " " + kQualifiedName);
        }
      }
      if (f.format == "annotations" && bytes > kMaxAnnotationBytes) {
        Add(path, "must have at most " + std::to_string(kMaxAnnotationBytes) +
                      " bytes of keys and values in all (has " + std::to_string(bytes) + ")");
      }
    }
    if (f.type == T::kArray) {
      if (f.max_items && static_cast<int64_t>(v.size()) > *f.max_items) {
        Add(path, "must have at most " + std::to_string(*f.max_items) + " items (has " +
                      std::to_string(v.size()) + ")");
      }
      std::set<std::string> seen;
      for (size_t i = 0; i < v.size(); ++i) {
        const std::string item_path = path + "[" + std::to_string(i) + "]";
        Walk(v[i], f.items.front(), item_path);
        std::string key;
        if (f.list_type == "set") {
          key = v[i].dump();
        } else if (f.list_type == "map" && v[i].is_object()) {
          for (const auto& k : f.list_map_keys)
            key += v[i].value(k, json()).dump() + "/";
        }
        if (!key.empty() && !seen.insert(key).second) {
          Add(item_path, "duplicate entry " + (f.list_type == "set" ? v[i].dump() : key));
        }
      }
    }
    if (f.type == T::kObject) {
      for (const auto& [key, value] : v.items()) {
        const FieldSchema* child = f.Property(key);
        if (child != nullptr) {
          Walk(value, *child, Join(path, key));
        } else if (!f.preserve_unknown) {
          Add(Join(path, key), "unknown field");
          structural_ok = false;
        }
      }
      for (const auto& child : f.properties) {
        if (child.required && !v.contains(child.name))
          Add(Join(path, child.name), "required");
      }
      if (f.max_properties && static_cast<int64_t>(v.size()) > *f.max_properties) {
        Add(path, "must have at most " + std::to_string(*f.max_properties) + " fields");
      }
    }
  }
};

void Defaults(json& v, const FieldSchema& f) {
  if (f.type == T::kArray && v.is_array()) {
    for (auto& item : v)
      Defaults(item, f.items.front());
    return;
  }
  if (f.type != T::kObject || !v.is_object())
    return;
  for (const auto& child : f.properties) {
    auto it = v.find(child.name);
    if (it != v.end() && it->is_null() && !child.nullable) {
      v.erase(it);
      it = v.end();
    }
    if (it == v.end() && !child.default_value.is_null()) {
      v[child.name] = child.default_value;
    }
    if (v.contains(child.name))
      Defaults(v[child.name], child);
  }
}

void CollectRules(const FieldSchema& f, const std::string& path, std::vector<LocatedRule>& out) {
  for (const auto& r : f.rules)
    out.push_back({path, &r});
  for (const auto& child : f.properties)
    CollectRules(child, Join(path, child.name), out);
}

}  // namespace

const FieldSchema* FieldSchema::Property(const std::string& key) const {
  for (const auto& p : properties) {
    if (p.name == key)
      return &p;
  }
  return nullptr;
}

const FieldSchema& TrainingJobSchema() {
  static const FieldSchema* schema = new FieldSchema(BuildSchema());
  return *schema;
}

const FieldSchema* FindField(const std::string& dotted_path) {
  const FieldSchema* f = &TrainingJobSchema();
  std::stringstream in(dotted_path);
  std::string part;
  while (f != nullptr && std::getline(in, part, '.')) {
    bool item = part.size() > 2 && part.ends_with("[]");
    if (item)
      part.resize(part.size() - 2);
    f = f->Property(part);
    if (f != nullptr && item)
      f = f->items.empty() ? nullptr : &f->items.front();
  }
  return f;
}

std::string LocatedRule::ErrorPath() const {
  std::string p = object_path + rule->field_path;
  if (!p.empty() && p.front() == '.')
    p.erase(0, 1);
  return p;
}

std::string LocatedRule::Message(const std::string& detail) const {
  return detail.empty() ? rule->message : rule->message + " (" + detail + ")";
}

std::vector<LocatedRule> AllRules() {
  std::vector<LocatedRule> out;
  CollectRules(TrainingJobSchema(), "", out);
  return out;
}

std::vector<FieldError> CheckSchema(const nlohmann::json& value, bool* structurally_sound) {
  Checker c;
  c.Walk(value, TrainingJobSchema(), "");
  if (structurally_sound != nullptr)
    *structurally_sound = c.structural_ok;
  return c.errors;
}

void ApplySchemaDefaults(nlohmann::json& value) {
  Defaults(value, TrainingJobSchema());
}

std::string TypeName(const FieldSchema& field) {
  switch (field.type) {
    case T::kObject:
      return "object";
    case T::kString:
      return "string";
    case T::kInteger:
      return "integer";
    case T::kNumber:
      return "number";
    case T::kBoolean:
      return "boolean";
    case T::kStringMap:
      return "map of string";
    case T::kArray:
      return "array of " + TypeName(field.items.front());
  }
  return "";
}

}  // namespace tessera::api
