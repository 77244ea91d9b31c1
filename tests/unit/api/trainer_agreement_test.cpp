// The job schema against the built-in trainer: whatever `tessera validate` and the CRD accept
// under spec.trainer (and the spec.parallelism fields the trainer reads), the trainer must run,
// or an accepted job fails at start with exit code 2. The trainer (worker/train/config.cpp) is
// the authority; the schema's bounds and cross-field rules must not be wider.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <string>
#include <vector>

#include "api/codec.h"
#include "api/job.h"
#include "api/rules.h"
#include "api/schema.h"
#include "api/validate.h"
#include "worker/model/gpt.h"
#include "worker/train/config.h"
#include "worker/train/from_api.h"

namespace tessera::api {
namespace {

using nlohmann::json;

// manifests/examples/cpu-tiny.yaml, inlined so that the test does not follow edits to the demo.
json CpuTiny() {
  return json::parse(R"({
    "apiVersion": "tessera.dev/v1alpha1", "kind": "TrainingJob", "metadata": {"name": "cpu-tiny"},
    "spec": {
      "workers": 2, "gpusPerWorker": 0, "procsPerWorker": 1, "parallelism": {"data": 2},
      "trainer": {
        "model": {"layers": 2, "dModel": 64, "heads": 4, "seqLen": 64, "vocab": 256},
        "data": {"path": "data/tinyshakespeare.txt", "tokenizer": "byte",
                 "validationFraction": 0.1},
        "batch": {"global": 16},
        "optimizer": {"lr": 1.0e-3, "weightDecay": 0.1, "gradClip": 1.0},
        "schedule": {"steps": 300, "warmupSteps": 30, "decay": "cosine"},
        "precision": "fp32", "seed": 1337,
        "checkpoint": {"dir": "checkpoints/cpu-tiny", "everySteps": 100, "keep": 2}},
      "runPolicy": {"backoffLimit": 2}}})");
}

// What the trainer says of a job the API accepts: empty when it would run it.
std::string TrainerVerdict(const json& document) {
  DecodeResult decoded = DecodeJson(document);
  if (!decoded.job)
    return "does not decode";
  ApplyDefaults(*decoded.job);
  train::TrainerConfig config;
  train::Status st = train::TrainerConfigFromJob(*decoded.job, &config);
  if (st.ok()) {
    const auto& p = decoded.job->spec.parallelism;
    st = train::ValidateTrainerConfig(config, static_cast<int>(WorldSize(decoded.job->spec)),
                                      static_cast<int>(p.pipeline), static_cast<int>(p.tensor));
  }
  return st.ok() ? "" : st.message();
}

struct Probe {
  std::string path;  // dotted, e.g. "spec.trainer.optimizer.lr"
  json value;
};

// The edge values of every numeric field below `object`: its minimum (or the next value above
// an exclusive one), its maximum, and each value of an enum.
void EdgeValues(const FieldSchema& f, const std::string& path, std::vector<Probe>* out) {
  if (f.type == FieldType::kObject) {
    for (const FieldSchema& child : f.properties)
      EdgeValues(child, path + "." + child.name, out);
    return;
  }
  if (f.type != FieldType::kInteger && f.type != FieldType::kNumber)
    return;
  const bool integer = f.type == FieldType::kInteger;
  auto value = [integer](double d) { return integer ? json(static_cast<int64_t>(d)) : json(d); };
  if (f.minimum) {
    double low = *f.minimum;
    if (f.exclusive_minimum) {
      low = integer ? low + 1 : std::nextafter(low, std::numeric_limits<double>::infinity());
    }
    out->push_back({path, value(low)});
  }
  if (f.maximum)
    out->push_back({path, value(*f.maximum)});
  for (const json& e : f.enum_values)
    out->push_back({path, e});
}

json With(json document, const std::string& dotted, const json& value) {
  std::string pointer = "/" + dotted;
  for (char& c : pointer) {
    if (c == '.')
      c = '/';
  }
  document[json::json_pointer(pointer)] = value;
  return document;
}

TEST(TrainerAgreement, TheBaseJobRuns) {
  ASSERT_TRUE(ValidateDocument(CpuTiny()).empty());
  EXPECT_EQ(TrainerVerdict(CpuTiny()), "");
}

// Each edge value is refused by a cross-field rule of the API, or run by the trainer. A failure
// names a bound of api/schema.cpp to narrow (or a rule of api/rules.cpp to add).
TEST(TrainerAgreement, EveryEdgeValueTheApiAcceptsRuns) {
  std::vector<Probe> probes;
  for (const char* object : {"spec.trainer", "spec.parallelism"})
    EdgeValues(*FindField(object), object, &probes);
  ASSERT_GT(probes.size(), 30u);
  for (const Probe& probe : probes) {
    const json document = With(CpuTiny(), probe.path, probe.value);
    json defaulted = document;
    ApplySchemaDefaults(defaulted);
    const std::vector<FieldError> schema_errors = CheckSchema(defaulted);
    ASSERT_TRUE(schema_errors.empty())
        << probe.path << " = " << probe.value.dump() << ": " << FormatError(schema_errors[0]);
    if (!ValidateDocument(document).empty())
      continue;  // a cross-field rule refuses it
    EXPECT_EQ(TrainerVerdict(document), "")
        << probe.path << " = " << probe.value.dump()
        << " passes the CRD and `tessera validate` but the trainer refuses it";
  }
}

// Every preset a job may name is one the trainer knows, with the same shape.
TEST(TrainerAgreement, PresetsAreTheTrainers) {
  for (const ModelPreset& p : ModelPresets()) {
    model::GptConfig c;
    ASSERT_TRUE(model::GptPreset(p.name, &c)) << p.name;
    EXPECT_EQ(c.layers, p.layers) << p.name;
    EXPECT_EQ(c.d_model, p.d_model) << p.name;
    EXPECT_EQ(c.heads, p.heads) << p.name;
    EXPECT_EQ(c.seq_len, p.seq_len) << p.name;
    EXPECT_EQ(c.vocab, p.vocab) << p.name;
  }
  for (const char* name : {"gpt2-124m", "gpt2-350m", "gpt2-774m", "gpt2-1558m"}) {
    EXPECT_NE(FindModelPreset(name), nullptr) << name << " is offered by the trainer";
    json document = CpuTiny();
    document["spec"]["trainer"]["model"] = {{"preset", name}};
    EXPECT_TRUE(ValidateDocument(document).empty()) << name;
    EXPECT_EQ(TrainerVerdict(document), "") << name;
  }
}

}  // namespace
}  // namespace tessera::api
