// A table of valid and invalid TrainingJobs with the field paths each must be refused at.
#include <gtest/gtest.h>

#include <algorithm>
#include <limits>
#include <string>
#include <utility>
#include <vector>

#include "api/codec.h"
#include "api/rules.h"
#include "api/validate.h"

namespace tessera::api {
namespace {

using nlohmann::json;

// A small valid job: 2 CPU workers, data parallel, a tiny GPT.
json Base() {
  return json::parse(R"({
    "apiVersion": "tessera.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "t"},
    "spec": {"workers": 2, "trainer": {
      "model": {"layers": 2, "dModel": 64, "heads": 4, "seqLen": 64},
      "data": {"path": "d.txt"}, "batch": {"global": 16}, "schedule": {"steps": 10}}}})");
}

// JSON Patch operations.
json Set(const std::string& path, json value) {
  return {{"op", "add"}, {"path", path}, {"value", std::move(value)}};
}
json Del(const std::string& path) {
  return {{"op", "remove"}, {"path", path}};
}

const json kNoModelFields =
    json::array({Del("/spec/trainer/model/layers"), Del("/spec/trainer/model/dModel"),
                 Del("/spec/trainer/model/heads"), Del("/spec/trainer/model/seqLen")});

json Ops(std::initializer_list<json> ops) {
  return json(ops);
}
json Concat(json a, const json& b) {
  for (const auto& op : b)
    a.push_back(op);
  return a;
}

const json kWorkerCommand = json::parse(
    R"({"spec": {"containers": [{"name": "worker", "image": "i", "command": ["python3", "a.py"]}]}})");

struct Case {
  std::string name;
  json ops;                        // applied to Base()
  std::vector<std::string> paths;  // expected error paths (any order); empty = valid
};

const std::string kName54(54, 'a');

std::vector<Case> Cases() {
  return {
      // --- valid ---
      {"null label and annotation values (read as \"\", as kubectl reads them)",
       Ops({Set("/metadata/labels", {{"a", nullptr}}),
            Set("/metadata/annotations", {{"b", nullptr}})}),
       {}},
      {"Kubernetes-style labels, annotations, finalizers and generateName",
       Ops({Set("/metadata/labels",
                {{"app.kubernetes.io/name", "tessera"}, {"team", ""}, {"v", "1.2_rc-3"}}),
            Set("/metadata/annotations", {{"Example.com/Note", "any text at all"}}),
            Set("/metadata/finalizers", {"example.com/cleanup", "kubernetes"}),
            Set("/metadata/generateName", "t-")}),
       {}},
      {"bucketMiB just above 0", Ops({Set("/spec/parallelism", {{"bucketMiB", 0.0001}})}), {}},
      {"an owner reference",
       Ops({Set("/metadata/ownerReferences", json::parse(R"([{
         "apiVersion": "v1", "kind": "K", "name": "n", "uid": "u", "controller": true}])"))}),
       {}},
      {"base", Ops({}), {}},
      {"data derived from pipeline",
       Ops({Set("/spec/workers", 4), Set("/spec/parallelism", {{"pipeline", 2}})}),
       {}},
      {"preset alone",
       Concat(Ops({Set("/spec/trainer/model/preset", "gpt2-124m")}), kNoModelFields),
       {}},
      {"preset with override",
       Ops({Set("/spec/trainer/model", {{"preset", "gpt2-124m"}, {"seqLen", 256}})}),
       {}},
      {"tensor 4 of 12 heads on GPUs in fp32",
       Ops({Set("/spec/workers", 1), Set("/spec/gpusPerWorker", 4),
            Set("/spec/parallelism", {{"tensor", 4}}),
            Set("/spec/trainer/model", {{"preset", "gpt2-124m"}})}),
       {}},
      {"bf16 data parallel on GPUs",
       Ops({Set("/spec/gpusPerWorker", 1), Set("/spec/trainer/precision", "bf16")}),
       {}},
      {"largest preset",
       Concat(Ops({Set("/spec/trainer/model/preset", "gpt2-1558m")}), kNoModelFields),
       {}},
      {"smallest positive lr and validation fraction",
       Ops({Set("/spec/trainer/optimizer", {{"lr", 1e-12}}),
            Set("/spec/trainer/data/validationFraction", 1e-9)}),
       {}},
      {"ObjectMeta fields kubectl accepts",
       Ops({Set("/metadata/finalizers", json::array({"x.dev/f"})),
            Set("/metadata/ownerReferences", json::array()),
            Set("/metadata/creationTimestamp", nullptr)}),
       {}},
      {"status is ignored as on create",
       Ops({Set("/status", {{"phase", "Weird"}, {"restarts", -5}, {"workers", "many"}})}),
       {}},
      {"bring your own command",
       Ops({Del("/spec/trainer"), Set("/spec/template", kWorkerCommand)}),
       {}},
      {"null deadline", Ops({Set("/spec/runPolicy", {{"activeDeadlineSeconds", nullptr}})}), {}},
      {"explicit 3D layout",
       Ops({Set("/spec/procsPerWorker", 2),
            Set("/spec/parallelism", {{"data", 2}, {"tensor", 2}})}),
       {}},
      {"longest name for 10 workers",
       Ops({Set("/metadata/name", kName54), Set("/spec/workers", 10),
            Set("/spec/trainer/batch/global", 20)}),
       {}},
      {"uint16 tokens with gpt2 vocab",
       Ops({Set("/spec/trainer/data/tokenizer", "uint16"),
            Set("/spec/trainer/model/vocab", 50257)}),
       {}},
      {"no permanent exit codes",
       Ops({Set("/spec/runPolicy", {{"permanentExitCodes", json::array()}})}),
       {}},
      {"volcano queue",
       Ops({Set("/spec/scheduling", {{"schedulerName", "volcano"}, {"queue", "q"}})}),
       {}},
      {"status written by the controller",
       Ops({Set("/status", {{"phase", "Running"}, {"workers", {{"ready", 2}}}})}),
       {}},
      {"template without command next to trainer",
       Ops({Set(
           "/spec/template",
           json::parse(
               R"({"metadata": {"labels": {"a": "b"}}, "spec": {"nodeSelector": {"x": "y"}, "containers": [{"name": "worker", "image": "i", "resources": {}}]}})"))}),
       {}},
      {"null optional object is absent", Ops({Set("/spec/scheduling", nullptr)}), {}},
      // Boundaries the rules (and their CEL) take as allowed.
      {"as many stages as layers", Ops({Set("/spec/parallelism", {{"pipeline", 2}})}), {}},
      {"warm-up as long as training", Ops({Set("/spec/trainer/schedule/warmupSteps", 10)}), {}},
      {"byte tokens with vocab 256", Ops({Set("/spec/trainer/model/vocab", 256)}), {}},
      {"uint16 tokens with vocab 65536",
       Ops({Set("/spec/trainer/data/tokenizer", "uint16"),
            Set("/spec/trainer/model/vocab", 65536)}),
       {}},

      // --- invalid: shape ---
      {"unknown spec field", Ops({Set("/spec/replicas", 3)}), {"spec.replicas"}},
      {"unknown model field",
       Ops({Set("/spec/trainer/model/depth", 3)}),
       {"spec.trainer.model.depth"}},
      {"workers is a string", Ops({Set("/spec/workers", "two")}), {"spec.workers"}},
      {"lr is a string",
       Ops({Set("/spec/trainer/optimizer", {{"lr", "fast"}})}),
       {"spec.trainer.optimizer.lr"}},
      {"suspend is a string", Ops({Set("/spec/suspend", "yes")}), {"spec.suspend"}},
      {"template is a string", Ops({Set("/spec/template", "x")}), {"spec.template"}},
      {"command is a string",
       Ops({Del("/spec/trainer"),
            Set("/spec/template",
                json::parse(
                    R"({"spec": {"containers": [{"name": "worker", "command": "python3"}]}})"))}),
       {"spec.template.spec.containers[0].command"}},
      {"label value not a string",
       Ops({Set("/metadata/labels", {{"a", 1}})}),
       {"metadata.labels.a"}},
      {"wrong apiVersion", Ops({Set("/apiVersion", "tessera.dev/v1")}), {"apiVersion"}},
      {"wrong kind", Ops({Set("/kind", "Job")}), {"kind"}},
      {"no spec", Ops({Del("/spec")}), {"spec"}},
      {"no name", Ops({Del("/metadata/name")}), {"metadata.name"}},
      {"a null exit code",
       Ops({Set("/spec/runPolicy", {{"permanentExitCodes", {nullptr}}})}),
       {"spec.runPolicy.permanentExitCodes[0]"}},
      {"bucketMiB 0 (the apiserver truncated a minimum of 0.001 to 0)",
       Ops({Set("/spec/parallelism", {{"bucketMiB", 0}})}),
       {"spec.parallelism.bucketMiB"}},
      {"unknown field of an owner reference",
       Ops({Set("/metadata/ownerReferences",
                json::parse(R"([{"apiVersion": "v1", "kind": "K", "name": "n", "uid": "u",
                                 "bogus": 1}])"))}),
       {"metadata.ownerReferences[0].bogus"}},
      {"owner reference without kind, name and uid",
       Ops({Set("/metadata/ownerReferences", json::parse(R"([{"apiVersion": "v1", "uid": ""}])"))}),
       {"metadata.ownerReferences[0].kind", "metadata.ownerReferences[0].name",
        "metadata.ownerReferences[0].uid"}},
      {"label key with a space",
       Ops({Set("/metadata/labels", {{"my label", "x"}})}),
       {"metadata.labels"}},
      {"label key with two slashes",
       Ops({Set("/metadata/labels", {{"a/b/c", "x"}})}),
       {"metadata.labels"}},
      {"label key with an uppercase prefix",
       Ops({Set("/metadata/labels", {{"Example.com/app", "x"}})}),
       {"metadata.labels"}},
      {"label value of 64 characters",
       Ops({Set("/metadata/labels", {{"app", std::string(64, 'x')}})}),
       {"metadata.labels"}},
      {"label value ending with '-'",
       Ops({Set("/metadata/labels", {{"app", "x-"}})}),
       {"metadata.labels"}},
      {"annotation key with a space",
       Ops({Set("/metadata/annotations", {{"a b", "x"}})}),
       {"metadata.annotations"}},
      {"annotations over 256 KiB",
       Ops({Set("/metadata/annotations", {{"a", std::string(256 * 1024, 'x')}})}),
       {"metadata.annotations"}},
      {"finalizer with a space",
       Ops({Set("/metadata/finalizers", {"my finalizer"})}),
       {"metadata.finalizers[0]"}},
      {"generateName with uppercase",
       Ops({Set("/metadata/generateName", "Job-")}),
       {"metadata.generateName"}},
      {"unknown field of a managed-fields entry",
       Ops({Set("/metadata/managedFields", json::parse(R"([{"manager": "m", "bogus": 1}])"))}),
       {"metadata.managedFields[0].bogus"}},

      // --- invalid: single fields ---
      {"zero workers", Ops({Set("/spec/workers", 0)}), {"spec.workers"}},
      {"too many workers",
       Ops({Set("/spec/workers", 5000)}),
       {"spec.workers", "spec.trainer.batch.global"}},
      {"negative GPUs", Ops({Set("/spec/gpusPerWorker", -1)}), {"spec.gpusPerWorker"}},
      {"unknown pipeline schedule",
       Ops({Set("/spec/parallelism", {{"schedule", "Interleaved"}})}),
       {"spec.parallelism.schedule"}},
      {"zero stage 2",
       Ops({Set("/spec/parallelism", {{"zeroStage", 2}})}),
       {"spec.parallelism.zeroStage"}},
      {"unknown preset",
       Ops({Set("/spec/trainer/model/preset", "gpt5")}),
       {"spec.trainer.model.preset"}},
      {"unknown tokenizer",
       Ops({Set("/spec/trainer/data/tokenizer", "bpe")}),
       {"spec.trainer.data.tokenizer"}},
      {"validation fraction too big",
       Ops({Set("/spec/trainer/data/validationFraction", 0.9)}),
       {"spec.trainer.data.validationFraction"}},
      {"negative lr",
       Ops({Set("/spec/trainer/optimizer", {{"lr", -1}})}),
       {"spec.trainer.optimizer.lr"}},
      {"unknown clean pod policy",
       Ops({Set("/spec/runPolicy", {{"cleanPodPolicy", "Some"}})}),
       {"spec.runPolicy.cleanPodPolicy"}},
      {"exit code 0",
       Ops({Set("/spec/runPolicy", {{"permanentExitCodes", {0}}})}),
       {"spec.runPolicy.permanentExitCodes[0]"}},
      {"exit code 256",
       Ops({Set("/spec/runPolicy", {{"permanentExitCodes", {1, 256}}})}),
       {"spec.runPolicy.permanentExitCodes[1]"}},
      {"duplicate exit code",
       Ops({Set("/spec/runPolicy", {{"permanentExitCodes", {2, 2}}})}),
       {"spec.runPolicy.permanentExitCodes[1]"}},
      {"metrics port out of range",
       Ops({Set("/spec/metrics", {{"port", 70000}})}),
       {"spec.metrics.port"}},
      {"no data path", Ops({Del("/spec/trainer/data/path")}), {"spec.trainer.data.path"}},
      {"empty data path", Ops({Set("/spec/trainer/data/path", "")}), {"spec.trainer.data.path"}},
      {"no global batch", Ops({Del("/spec/trainer/batch/global")}), {"spec.trainer.batch.global"}},
      {"no steps", Ops({Del("/spec/trainer/schedule/steps")}), {"spec.trainer.schedule.steps"}},
      {"checkpoint without dir",
       Ops({Set("/spec/trainer/checkpoint", {{"keep", 2}})}),
       {"spec.trainer.checkpoint.dir"}},
      {"keep no checkpoint",
       Ops({Set("/spec/trainer/checkpoint", {{"dir", "/c"}, {"keep", 0}})}),
       {"spec.trainer.checkpoint.keep"}},
      {"zero startup timeout",
       Ops({Set("/spec/scheduling", {{"startupTimeoutSeconds", 0}})}),
       {"spec.scheduling.startupTimeoutSeconds"}},
      {"name with a dot", Ops({Set("/metadata/name", "a.b")}), {"metadata.name"}},
      {"name starting with a digit", Ops({Set("/metadata/name", "1job")}), {"metadata.name"}},
      // A value below its minimum is that field's error alone: the rules that divide by it or
      // compare with it pass it by (CEL: `pipeline < 1 || ...`), as the apiserver's do.
      {"zero pipeline",
       Ops({Set("/spec/parallelism", {{"pipeline", 0}})}),
       {"spec.parallelism.pipeline"}},
      {"zero tensor",
       Ops({Set("/spec/parallelism", {{"tensor", 0}})}),
       {"spec.parallelism.tensor"}},
      // The apiserver gave a second error here ("modulus by zero evaluating rule") until the
      // CEL of batch-divides passed microBatches < 1 by.
      {"zero micro-batches",
       Ops({Set("/spec/parallelism", {{"microBatches", 0}})}),
       {"spec.parallelism.microBatches"}},
      {"zero layers", Ops({Set("/spec/trainer/model/layers", 0)}), {"spec.trainer.model.layers"}},
      {"zero workers with a long name",
       Ops({Set("/metadata/name", std::string(60, 'a')), Set("/spec/workers", 0)}),
       {"metadata.name", "spec.workers"}},
      {"no steps but a warm-up",
       Ops({Del("/spec/trainer/schedule/steps"), Set("/spec/trainer/schedule/warmupSteps", 5)}),
       {"spec.trainer.schedule.steps"}},

      // --- invalid: cross-field rules ---
      {"product mismatch",
       Ops({Set("/spec/parallelism", {{"data", 3}})}),
       {"spec.parallelism", "spec.trainer.batch.global"}},
      {"product below the world size",
       Ops({Set("/spec/workers", 4), Set("/spec/parallelism", {{"data", 2}})}),
       {"spec.parallelism"}},
      {"data not derivable",
       Ops({Set("/spec/workers", 3), Set("/spec/parallelism", {{"pipeline", 2}})}),
       {"spec.parallelism"}},
      {"data not derivable: tensor does not divide",
       Ops({Set("/spec/workers", 3), Set("/spec/parallelism", {{"tensor", 2}})}),
       {"spec.parallelism"}},
      {"tensor does not divide heads",
       Ops({Set("/spec/workers", 3), Set("/spec/parallelism", {{"tensor", 3}})}),
       {"spec.parallelism.tensor"}},
      {"tensor does not divide preset heads",
       Concat(Ops({Set("/spec/workers", 8), Set("/spec/parallelism", {{"tensor", 8}}),
                   Set("/spec/trainer/model/preset", "gpt2-124m")}),
              kNoModelFields),
       {"spec.parallelism.tensor"}},
      {"heads do not divide dModel",
       Ops({Set("/spec/trainer/model/heads", 5)}),
       {"spec.trainer.model.heads"}},
      {"more stages than layers",
       Ops({Set("/spec/workers", 4), Set("/spec/parallelism", {{"pipeline", 4}})}),
       {"spec.parallelism.pipeline"}},
      {"batch not divisible by data",
       Ops({Set("/spec/trainer/batch/global", 15)}),
       {"spec.trainer.batch.global"}},
      {"batch not divisible by micro-batches",
       Ops({Set("/spec/parallelism", {{"microBatches", 3}})}),
       {"spec.trainer.batch.global"}},
      {"batch not divisible by micro-batches on one worker",
       Ops({Set("/spec/workers", 1), Set("/spec/parallelism", {{"microBatches", 3}})}),
       {"spec.trainer.batch.global"}},
      {"hostname too long for 11 workers",
       Ops({Set("/metadata/name", kName54), Set("/spec/workers", 11),
            Set("/spec/trainer/batch/global", 22)}),
       {"metadata.name"}},
      {"name over 54",
       Ops({Set("/metadata/name", std::string(55, 'a'))}),
       {"metadata.name", "metadata.name"}},
      {"neither trainer nor command", Ops({Del("/spec/trainer")}), {"spec.trainer"}},
      {"both trainer and command", Ops({Set("/spec/template", kWorkerCommand)}), {"spec.trainer"}},
      {"command in a container not named worker",
       Ops({Del("/spec/trainer"),
            Set("/spec/template",
                json::parse(R"({"spec": {"containers": [{"name": "main", "command": ["x"]}]}})"))}),
       {"spec.trainer"}},
      {"empty command",
       Ops({Del("/spec/trainer"),
            Set("/spec/template",
                json::parse(R"({"spec": {"containers": [{"name": "worker", "command": []}]}})"))}),
       {"spec.trainer"}},
      {"byte tokenizer with small vocab",
       Ops({Set("/spec/trainer/model/vocab", 100)}),
       {"spec.trainer.model.vocab"}},
      {"byte tokenizer with vocab 255",
       Ops({Set("/spec/trainer/model/vocab", 255)}),
       {"spec.trainer.model.vocab"}},
      {"uint16 tokens with huge vocab",
       Ops({Set("/spec/trainer/data/tokenizer", "uint16"),
            Set("/spec/trainer/model/vocab", 70000)}),
       {"spec.trainer.model.vocab"}},
      {"uint16 tokens with vocab 65537",
       Ops({Set("/spec/trainer/data/tokenizer", "uint16"),
            Set("/spec/trainer/model/vocab", 65537)}),
       {"spec.trainer.model.vocab"}},
      {"bf16 on CPU", Ops({Set("/spec/trainer/precision", "bf16")}), {"spec.trainer.precision"}},
      {"bf16 with pipeline stages",
       Ops({Set("/spec/gpusPerWorker", 1), Set("/spec/trainer/precision", "bf16"),
            Set("/spec/parallelism", {{"pipeline", 2}})}),
       {"spec.trainer.precision"}},
      {"bf16 with tensor parallelism",
       Ops({Set("/spec/gpusPerWorker", 1), Set("/spec/trainer/precision", "bf16"),
            Set("/spec/parallelism", {{"tensor", 2}})}),
       {"spec.trainer.precision"}},
      {"bf16 with ZeRO-1",
       Ops({Set("/spec/gpusPerWorker", 1), Set("/spec/trainer/precision", "bf16"),
            Set("/spec/parallelism", {{"zeroStage", 1}})}),
       {"spec.parallelism.zeroStage"}},
      {"lr 0", Ops({Set("/spec/trainer/optimizer", {{"lr", 0}})}), {"spec.trainer.optimizer.lr"}},
      {"validation fraction 0",
       Ops({Set("/spec/trainer/data/validationFraction", 0)}),
       {"spec.trainer.data.validationFraction"}},
      {"unknown metadata field", Ops({Set("/metadata/foo", 3)}), {"metadata.foo"}},
      {"unknown status fields",
       Ops({Set("/status",
                {{"foo", 1}, {"workers", {{"bar", 2}}}, {"conditions", {{{"baz", 3}}}}})}),
       {"status.foo", "status.workers.bar", "status.conditions[0].baz"}},
      {"metadata labels not strings",
       Ops({Set("/metadata/labels", {{"a", 1}})}),
       {"metadata.labels.a"}},
      {"two ranks on eight GPUs",
       Ops({Set("/spec/gpusPerWorker", 8), Set("/spec/procsPerWorker", 2)}),
       {"spec.procsPerWorker"}},
      {"two ranks on one GPU",
       Ops({Set("/spec/gpusPerWorker", 1), Set("/spec/procsPerWorker", 2)}),
       {"spec.procsPerWorker"}},
      {"warm-up longer than training",
       Ops({Set("/spec/trainer/schedule/warmupSteps", 20)}),
       {"spec.trainer.schedule.warmupSteps"}},
      {"warm-up one step longer than training",
       Ops({Set("/spec/trainer/schedule/warmupSteps", 11)}),
       {"spec.trainer.schedule.warmupSteps"}},
      {"incomplete model", Ops({Del("/spec/trainer/model/heads")}), {"spec.trainer.model"}},
      {"model without layers", Ops({Del("/spec/trainer/model/layers")}), {"spec.trainer.model"}},
      {"model without dModel", Ops({Del("/spec/trainer/model/dModel")}), {"spec.trainer.model"}},
      {"model without seqLen", Ops({Del("/spec/trainer/model/seqLen")}), {"spec.trainer.model"}},
      {"queue without volcano",
       Ops({Set("/spec/scheduling", {{"queue", "q"}})}),
       {"spec.scheduling.queue"}},
      {"metrics on the rendezvous port",
       Ops({Set("/spec/metrics", {{"port", 29500}})}),
       {"spec.metrics.port"}},
      {"metrics on the torch master port",
       Ops({Set("/spec/metrics", {{"port", 29501}})}),
       {"spec.metrics.port"}},
      {"every error at once",
       Ops({Set("/spec/workers", 0), Set("/spec/trainer/model/heads", 5),
            Set("/spec/trainer/optimizer", {{"lr", -1}}), Set("/spec/metrics", {{"port", 29500}})}),
       {"spec.workers", "spec.trainer.model.heads", "spec.trainer.optimizer.lr",
        "spec.metrics.port"}},
  };
}

class ValidateTable : public ::testing::TestWithParam<Case> {};

TEST_P(ValidateTable, ReportsExactlyTheExpectedPaths) {
  const Case& c = GetParam();
  const json doc = Base().patch(c.ops);
  std::vector<std::string> got;
  std::string listing;
  for (const auto& e : ValidateDocument(doc)) {
    got.push_back(e.path);
    listing += "\n  " + FormatError(e);
  }
  std::vector<std::string> want = c.paths;
  std::sort(got.begin(), got.end());
  std::sort(want.begin(), want.end());
  EXPECT_EQ(want, got) << c.name << ": got" << listing;
}

std::string CaseName(const ::testing::TestParamInfo<Case>& info) {
  std::string name;
  for (char ch : info.param.name)
    name += std::isalnum(static_cast<unsigned char>(ch)) ? ch : '_';
  return name;
}

INSTANTIATE_TEST_SUITE_P(Specs, ValidateTable, ::testing::ValuesIn(Cases()), CaseName);

TEST(ValidateTableSize, HasAtLeastFortyCasesOfBothKinds) {
  int valid = 0, invalid = 0;
  for (const auto& c : Cases())
    (c.paths.empty() ? valid : invalid)++;
  EXPECT_GE(valid + invalid, 40);
  EXPECT_GE(valid, 10);
  EXPECT_GE(invalid, 30);
}

// Validate() on a struct built in C++ agrees with ValidateDocument() on its JSON.
TEST(Validate, StructAndDocumentAgree) {
  for (const auto& c : Cases()) {
    const json doc = Base().patch(c.ops);
    DecodeResult decoded = DecodeJson(doc);
    if (!decoded.job || !decoded.errors.empty())
      continue;  // shape errors: nothing to compare
    std::vector<std::string> from_struct, from_doc;
    for (const auto& e : Validate(*decoded.job))
      from_struct.push_back(FormatError(e));
    for (const auto& e : ValidateDocument(doc))
      from_doc.push_back(FormatError(e));
    std::sort(from_struct.begin(), from_struct.end());
    std::sort(from_doc.begin(), from_doc.end());
    EXPECT_EQ(from_doc, from_struct) << c.name;
  }
}

TEST(Validate, MessagesCarryTheValues) {
  json doc = Base();
  doc["spec"]["workers"] = 3;
  doc["spec"]["parallelism"] = {{"tensor", 3}};
  doc["spec"]["trainer"]["model"]["heads"] = 4;
  const auto errors = ValidateDocument(doc);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(FormatError(errors[0]),
            "spec.parallelism.tensor: tensor must divide spec.trainer.model.heads (3 does not "
            "divide 4)");
}

// Products of values near int64's limits (refused by their bounds too) fail their rule, as
// CEL's overflowing arithmetic does, instead of wrapping (undefined in C++: once "= -2").
TEST(Validate, AProductThatOverflowsFailsItsRule) {
  const int64_t huge = std::numeric_limits<int64_t>::max() / 2 + 1;
  json doc = Base();
  doc["spec"]["workers"] = 2;
  doc["spec"]["parallelism"] = {{"data", huge}, {"pipeline", 2}, {"tensor", 1}};
  doc["spec"]["trainer"]["batch"]["global"] = 16;
  std::vector<std::string> lines;
  for (const auto& e : ValidateDocument(doc))
    lines.push_back(FormatError(e));
  EXPECT_NE(std::find(lines.begin(), lines.end(),
                      "spec.parallelism: data x pipeline x tensor must equal workers x "
                      "procsPerWorker (the product overflows a 64-bit integer)"),
            lines.end())
      << testing::PrintToString(lines);
  for (const std::string& line : lines)
    EXPECT_EQ(line.find("= -"), std::string::npos) << line;

  TrainingJobSpec spec;
  spec.workers = huge;
  spec.procs_per_worker = 4;
  EXPECT_EQ(WorldSize(spec), std::numeric_limits<int64_t>::max());
}

TEST(Validate, ExclusiveMinimumSaysAboveAndTheValue) {
  json doc = Base();
  doc["spec"]["trainer"]["optimizer"] = {{"lr", 0}};
  doc["spec"]["trainer"]["data"]["validationFraction"] = -0.5;
  std::vector<std::string> lines;
  for (const auto& e : ValidateDocument(doc))
    lines.push_back(FormatError(e));
  EXPECT_EQ(lines, (std::vector<std::string>{
                       "spec.trainer.data.validationFraction: must be > 0 (got -0.5)",
                       "spec.trainer.optimizer.lr: must be > 0 (got 0)",
                   }));
}

TEST(Validate, Bf16LayoutMessagesSayWhatToDo) {
  json doc = Base();
  doc["spec"]["workers"] = 4;
  doc["spec"]["gpusPerWorker"] = 1;
  doc["spec"]["parallelism"] = {{"pipeline", 2}, {"zeroStage", 1}};
  doc["spec"]["trainer"]["precision"] = "bf16";
  std::vector<std::string> lines;
  for (const auto& e : ValidateDocument(doc))
    lines.push_back(FormatError(e));
  EXPECT_EQ(lines, (std::vector<std::string>{
                       "spec.trainer.precision: bf16 (the GPU model) runs data parallelism only: "
                       "set spec.parallelism.pipeline and tensor to 1, or use precision fp32 "
                       "(pipeline 2 x tensor 1)",
                       "spec.parallelism.zeroStage: zeroStage 1 is not available with precision "
                       "bf16 (the GPU optimizer is not sharded): set zeroStage to 0, or use "
                       "precision fp32 (got 1)",
                   }));
}

// The apiserver drops a status on create (status subresource) before validating, so `tessera
// validate` checks none of its values (kube-apiserver 1.35 took each of these).
TEST(Validate, StatusOfAFileIsNotValidated) {
  for (const json& status : {json{{"phase", "Weird"}}, json{{"phase", 3}}, json("x"), json(3),
                             json{{"restarts", 1.5}}, json{{"conditions", {{{"type", "A"}}}}}}) {
    json doc = Base();
    doc["status"] = status;
    EXPECT_TRUE(ValidateDocument(doc).empty()) << status.dump();
    DecodeResult decoded = DecodeJson(doc);
    EXPECT_TRUE(decoded.job) << status.dump();
  }
}

// metadata.creationTimestamp and deletionTimestamp are read as kubectl reads them (Go's time.Parse
// with the RFC 3339 layout, as metav1.Time decodes): each value below was given to
// `kubectl create --dry-run=server` against kube-apiserver 1.35 and taken or refused as listed
// (tests/cluster/api/metadata_times.sh repeats a sample of them against the real one).
TEST(Validate, MetadataTimesAreReadAsKubectlReadsThem) {
  const char* taken[] = {
      "2026-12-07T10:00:00Z",      "2026-12-07T10:00:00.123+01:00",
      "2026-12-07T1:00:00Z",       "2026-12-07T10:00:00,5Z",
      "2026-12-07T10:00:00+24:00", "2026-12-07T10:00:00+01:60",
      "2024-02-29T10:00:00Z",      "2000-02-29T10:00:00Z",
      "0000-01-01T00:00:00Z",      "9999-12-31T23:59:59Z",
      "2026-12-07T10:00:00-00:00", "2026-12-07T10:00:00.123456789123Z",
  };
  const std::pair<const char*, const char*> refused[] = {
      {"", ""},
      {"yesterday", ""},
      {"2026-12-07 10:00:00Z", ""},
      {"2026-12-07T10:00:00z", ""},
      {"2026-12-07t10:00:00Z", ""},
      {"2026-12-07T10:00:00", ""},
      {"2026-12-07", ""},
      {"2026-12-07T10:00:00.Z", ""},
      {"2026-12-07T10:00:00,Z", ""},
      {"2026-12-07T10:00:00+0100", ""},
      {"2026-12-07T10:00:00+1:00", ""},
      {"2026-12-07T10:00:00+01:0", ""},
      {"2026-12-07T10:00:00+01:00:00", ""},
      {"2026-12-07T10:00:00*01:00", ""},
      {"2026-12-07T10:00:00ZZ", ""},
      {"2026-12-07T10:00:00Z ", ""},
      {" 2026-12-07T10:00:00Z", ""},
      {"2026-12-07T10:0:00Z", ""},
      {"2026-1-07T10:00:00Z", ""},
      {"2026-12-7T10:00:00Z", ""},
      {"-026-12-07T10:00:00Z", ""},
      {"20261-12-07T10:00:00Z", ""},
      {"2026-00-07T10:00:00Z", ": month out of range"},
      {"2026-13-07T10:00:00Z", ": month out of range"},
      {"2026-12-00T10:00:00Z", ": day out of range"},
      {"2026-12-32T10:00:00Z", ": day out of range"},
      {"2026-02-30T10:00:00Z", ": day out of range"},
      {"2026-04-31T00:00:00Z", ": day out of range"},
      {"2023-02-29T10:00:00Z", ": day out of range"},
      {"1900-02-29T10:00:00Z", ": day out of range"},
      {"2026-12-07T24:00:00Z", ": hour out of range"},
      {"2026-12-07T10:60:00Z", ": minute out of range"},
      {"2026-12-07T10:00:60Z", ": second out of range"},
      {"2026-12-07T10:00:00+25:00", ": time zone offset hour out of range"},
      {"2026-12-07T10:00:00+01:61", ": time zone offset minute out of range"},
  };
  for (const char* field : {"creationTimestamp", "deletionTimestamp"}) {
    for (const char* time : taken) {
      json doc = Base();
      doc["metadata"][field] = time;
      EXPECT_TRUE(ValidateDocument(doc).empty()) << field << ": " << time;
    }
    for (const auto& [time, problem] : refused) {
      json doc = Base();
      doc["metadata"][field] = time;
      std::vector<std::string> lines;
      for (const auto& e : ValidateDocument(doc))
        lines.push_back(FormatError(e));
      EXPECT_EQ(lines, (std::vector<std::string>{"metadata." + std::string(field) +
                                                 ": must be an RFC 3339 time such as "
                                                 "2026-12-07T10:00:00Z (got \"" +
                                                 time + "\"" + problem + ")"}))
          << field << ": " << time;
    }
  }
  json doc = Base();
  doc["metadata"]["creationTimestamp"] = std::string(100000, '9');
  const auto errors = ValidateDocument(doc);
  ASSERT_EQ(errors.size(), 1u);
  EXPECT_EQ(FormatError(errors[0]),
            "metadata.creationTimestamp: must be an RFC 3339 time such as "
            "2026-12-07T10:00:00Z (got \"" +
                std::string(64, '9') + "...\")");
}

// The hostname rule counts characters, as CEL's size() does (a name that is not ASCII also
// fails the name's pattern): 60 two-byte characters make a 69-character hostname, not 129.
TEST(Validate, HostnameLengthCountsCharacters) {
  json doc = Base();
  std::string name;
  for (int i = 0; i < 60; ++i)
    name += "\u00e9";
  doc["metadata"]["name"] = name;
  std::vector<std::string> lines;
  for (const auto& e : ValidateDocument(doc))
    lines.push_back(FormatError(e));
  ASSERT_EQ(lines.size(), 2u) << ::testing::PrintToString(lines);
  EXPECT_NE(lines[1].find("-worker-1 has 69 characters)"), std::string::npos) << lines[1];
  // Longer than 100 characters: shown by its first and last 40 characters, cut between them.
  doc["metadata"]["name"] = name + name.substr(0, 80);  // 100 characters, 200 bytes
  lines.clear();
  for (const auto& e : ValidateDocument(doc))
    lines.push_back(FormatError(e));
  ASSERT_EQ(lines.size(), 2u) << ::testing::PrintToString(lines);  // longer than 54 (no pattern)
  EXPECT_NE(lines[1].find("(" + name.substr(0, 80) + "..." + name.substr(0, 62) +
                          "-worker-1 has 109 characters)"),
            std::string::npos)
      << lines[1];
}

// A name of 300,000 characters is reported in a line, not echoed whole.
TEST(Validate, MessagesShowALongNameByItsEnds) {
  json doc = Base();
  doc["metadata"]["name"] = std::string(300000, 'a');
  std::vector<std::string> lines;
  for (const auto& e : ValidateDocument(doc))
    lines.push_back(FormatError(e));
  EXPECT_EQ(lines, (std::vector<std::string>{
                       "metadata.name: must have at most 54 characters (has 300000)",
                       "metadata.name: too long: every pod hostname <name>-worker-<i> must fit a "
                       "63-character DNS label (" +
                           std::string(40, 'a') + "..." + std::string(31, 'a') +
                           "-worker-1 has 300009 characters)",
                   }));
}

// A hostname of up to 100 characters is shown whole; a longer one by its ends.
TEST(Validate, MessagesShowAHostnameOfUpTo100CharactersWhole) {
  struct {
    size_t name_length;
    std::string shown;
  } cases[] = {
      {91, std::string(91, 'a') + "-worker-0"},
      {92, std::string(40, 'a') + "..." + std::string(31, 'a') + "-worker-0"},
  };
  for (const auto& c : cases) {
    json doc = Base();
    doc["metadata"]["name"] = std::string(c.name_length, 'a');
    doc["spec"]["workers"] = 1;
    std::vector<std::string> lines;
    for (const auto& e : ValidateDocument(doc))
      lines.push_back(FormatError(e));
    const std::string length = std::to_string(c.name_length);
    EXPECT_EQ(lines, (std::vector<std::string>{
                         "metadata.name: must have at most 54 characters (has " + length + ")",
                         "metadata.name: too long: every pod hostname <name>-worker-<i> must fit "
                         "a 63-character DNS label (" +
                             c.shown + " has " + std::to_string(c.name_length + 9) + " characters)",
                     }))
        << "name of " << length;
  }
}

// Validate() on a struct ignores its status as ValidateDocument() ignores a file's.
TEST(Validate, StatusOfAStructIsNotValidated) {
  DecodeResult decoded = DecodeJson(Base());
  ASSERT_TRUE(decoded.job);
  TrainingJob job = *decoded.job;
  job.status.phase = "Weird";
  job.status.restarts = -5;
  job.status.conditions = {{"A", "Maybe", "", "", "yesterday", 0}};
  std::vector<std::string> lines;
  for (const auto& e : Validate(job))
    lines.push_back(FormatError(e));
  EXPECT_EQ(lines, std::vector<std::string>{});
}

TEST(ApplyDefaults, ProcsPerWorkerFollowsGpusAtLeastOne) {
  struct {
    int64_t gpus;
    std::optional<int64_t> procs;
    int64_t want;
  } cases[] = {{0, std::nullopt, 1}, {4, std::nullopt, 4}, {8, std::nullopt, 8}, {8, 2, 2}};
  for (const auto& c : cases) {
    TrainingJob job;
    job.spec.gpus_per_worker = c.gpus;
    job.spec.procs_per_worker = c.procs;
    ApplyDefaults(job);
    EXPECT_EQ(job.spec.procs_per_worker, c.want) << "gpus " << c.gpus;
  }
}

TEST(ApplyDefaults, PresetExpandsAndExplicitFieldsWin) {
  TrainingJob job;
  job.spec.trainer.emplace();
  job.spec.trainer->model.preset = "gpt2-124m";
  job.spec.trainer->model.seq_len = 256;
  ApplyDefaults(job);
  const auto& m = job.spec.trainer->model;
  EXPECT_EQ(m.layers, 12);
  EXPECT_EQ(m.d_model, 768);
  EXPECT_EQ(m.heads, 12);
  EXPECT_EQ(m.seq_len, 256);
  EXPECT_EQ(m.vocab, 50257);
}

TEST(ApplyDefaults, PresetFillsEveryAbsentField) {
  TrainingJob job;
  job.spec.trainer.emplace();
  job.spec.trainer->model.preset = "gpt2-124m";
  ApplyDefaults(job);
  const auto& m = job.spec.trainer->model;
  EXPECT_EQ(m.layers, 12);
  EXPECT_EQ(m.d_model, 768);
  EXPECT_EQ(m.heads, 12);
  EXPECT_EQ(m.seq_len, 1024);
  EXPECT_EQ(m.vocab, 50257);
}

TEST(ApplyDefaults, VocabAndDataDerived) {
  TrainingJob job;
  job.spec.workers = 4;
  job.spec.parallelism.pipeline = 2;
  job.spec.trainer.emplace();
  ApplyDefaults(job);
  EXPECT_EQ(job.spec.trainer->model.vocab, 256);
  EXPECT_EQ(job.spec.parallelism.data, 2);

  TrainingJob odd;
  odd.spec.workers = 3;
  odd.spec.parallelism.pipeline = 2;
  ApplyDefaults(odd);
  EXPECT_FALSE(odd.spec.parallelism.data.has_value()) << "3 ranks cannot split into 2 stages";
}

TEST(ApplyDefaults, Idempotent) {
  DecodeResult decoded = DecodeJson(Base());
  ASSERT_TRUE(decoded.job);
  TrainingJob once = *decoded.job;
  ApplyDefaults(once);
  TrainingJob twice = once;
  ApplyDefaults(twice);
  EXPECT_EQ(EncodeJson(once), EncodeJson(twice));
}

}  // namespace
}  // namespace tessera::api
