// The CRD, docs/api.md and the examples against the one definition in api/schema.cpp.
#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <regex>
#include <set>
#include <sstream>

#include "api/codec.h"
#include "api/crd.h"
#include "api/schema.h"
#include "api/validate.h"

namespace tessera::api {
namespace {

namespace fs = std::filesystem;

fs::path SourceDir() {
  const char* dir = std::getenv("TESSERA_SOURCE_DIR");
  return dir != nullptr ? fs::path(dir) : fs::path(".");
}

std::string ReadFile(const fs::path& path) {
  std::ifstream in(path, std::ios::binary);
  std::stringstream s;
  s << in.rdbuf();
  return s.str();
}

TEST(Crd, CommittedCopyMatchesTesseraCrd) {
  const fs::path file = SourceDir() / "manifests/crd/trainingjobs.tessera.dev.yaml";
  ASSERT_TRUE(fs::exists(file)) << file;
  EXPECT_TRUE(ReadFile(file) == CrdYaml())
      << file << " differs from `tessera crd`; regenerate it with\n"
      << "  tessera crd > manifests/crd/trainingjobs.tessera.dev.yaml";
}

// The YAML we print reads back (with our own YAML reader) as the object we built.
TEST(Crd, YamlReadsBackAsTheObject) {
  ParsedYaml p = ParseYaml(CrdYaml());
  ASSERT_TRUE(p.ok()) << p.error;
  ASSERT_EQ(p.documents.size(), 1u);
  EXPECT_EQ(p.documents[0], nlohmann::json::parse(CrdObject().dump()));
}

TEST(Crd, NamesColumnsAndSubresource) {
  const auto crd = CrdObject();
  EXPECT_EQ(crd["metadata"]["name"], "trainingjobs.tessera.dev");
  EXPECT_EQ(crd["spec"]["names"]["shortNames"], nlohmann::ordered_json::array({"tj"}));
  const auto& v = crd["spec"]["versions"][0];
  EXPECT_EQ(v["name"], "v1alpha1");
  EXPECT_TRUE(v["subresources"].contains("status"));
  std::vector<std::string> columns;
  for (const auto& c : v["additionalPrinterColumns"])
    columns.push_back(c["name"]);
  EXPECT_EQ(columns, (std::vector<std::string>{"Phase", "Ready", "Workers", "Step", "Loss",
                                               "Restarts", "Age"}));
}

// Structural schema: every node has a type and a description; lists and strings that CEL
// rules may touch are bounded.
void CheckNode(const nlohmann::ordered_json& node, const std::string& path) {
  EXPECT_TRUE(node.contains("type")) << path;
  if (node.contains("properties")) {
    for (const auto& [key, child] : node["properties"].items()) {
      if (path == "" && key == "metadata")
        continue;
      EXPECT_TRUE(child.contains("description")) << path + "." + key;
      CheckNode(child, path + "." + key);
    }
  }
  if (node["type"] == "array") {
    EXPECT_TRUE(node.contains("maxItems")) << path;
    CheckNode(node["items"], path + "[]");
  }
}

TEST(Crd, SchemaIsStructuralAndDescribed) {
  CheckNode(CrdObject()["spec"]["versions"][0]["schema"]["openAPIV3Schema"], "");
}

// Every `self.a.b` (and `oldSelf.a.b`) a CEL rule reads, and every fieldPath, exists in the
// schema at the rule's object: a typo would otherwise surface only on a cluster.
TEST(Crd, RulesReferenceExistingFields) {
  const std::regex self_path(R"(\b(?:self|oldSelf)((?:\.[A-Za-z]+)+))");
  int rules = 0;
  int transitions = 0;
  for (const auto& located : AllRules()) {
    ++rules;
    transitions += located.rule->transition ? 1 : 0;
    const std::string base = located.object_path;
    const std::string& cel = located.rule->cel;
    for (std::sregex_iterator it(cel.begin(), cel.end(), self_path), end; it != end; ++it) {
      std::string p = (*it)[1].str();
      for (const char* method : {".exists", ".all", ".size", ".matches"}) {
        if (p.ends_with(method))
          p.resize(p.size() - std::string(method).size());
      }
      const std::string full = base.empty() ? p.substr(1) : base + p;
      EXPECT_NE(FindField(full), nullptr) << located.rule->id << " reads " << full;
    }
    EXPECT_NE(FindField(located.ErrorPath()), nullptr)
        << located.rule->id << " points at " << located.ErrorPath();
    // Only a transition rule reads the stored object, and only it lacks an offline check.
    const bool reads_old = located.rule->cel.find("oldSelf") != std::string::npos;
    EXPECT_EQ(reads_old, located.rule->transition) << located.rule->id;
    EXPECT_EQ(static_cast<bool>(located.rule->check), !located.rule->transition)
        << located.rule->id;
    EXPECT_FALSE(located.rule->message.empty()) << located.rule->id;
  }
  EXPECT_GE(rules, 15);
  EXPECT_GE(transitions, 8);
}

// Every field of spec has an update policy: a transition rule at it, or it is one of those
// docs/api.md ("Changing a job") lets change at any time. A new field must choose; a new
// scheduling field is fixed unless it joins startupTimeoutSeconds.
TEST(Crd, EverySpecFieldHasAnUpdatePolicy) {
  std::set<std::string> ruled;
  std::string scheduling_cel;
  for (const auto& located : AllRules()) {
    if (!located.rule->transition)
      continue;
    ruled.insert(located.ErrorPath());
    if (located.rule->id == "scheduling-fixed")
      scheduling_cel = located.rule->cel;
  }
  const std::set<std::string> mutable_fields = {"suspend", "runPolicy"};
  for (const auto& field : FindField("spec")->properties) {
    EXPECT_TRUE(ruled.contains("spec." + field.name) || mutable_fields.contains(field.name))
        << "spec." << field.name << " has no update policy";
  }
  ASSERT_FALSE(scheduling_cel.empty());
  for (const auto& field : FindField("spec.scheduling")->properties) {
    const std::string compared =
        "self.scheduling." + field.name + " == oldSelf.scheduling." + field.name;
    EXPECT_EQ(scheduling_cel.find(compared) != std::string::npos,
              field.name != "startupTimeoutSeconds")
        << "spec.scheduling." << field.name;
  }
}

TEST(Examples, EveryExampleIsValid) {
  const fs::path dir = SourceDir() / "manifests/examples";
  std::set<std::string> seen;
  for (const auto& entry : fs::directory_iterator(dir)) {
    if (entry.path().extension() != ".yaml")
      continue;
    seen.insert(entry.path().filename().string());
    ParsedYaml p = ParseYaml(ReadFile(entry.path()));
    ASSERT_TRUE(p.ok()) << entry.path() << ": " << p.error;
    ASSERT_EQ(p.documents.size(), 1u) << entry.path();
    for (const auto& e : ValidateDocument(p.documents[0])) {
      ADD_FAILURE() << entry.path().filename() << ": " << FormatError(e);
    }
  }
  for (const char* name : {"cpu-tiny.yaml", "data-parallel.yaml", "pipeline.yaml", "tensor.yaml",
                           "hybrid-3d.yaml", "byo-torchrun.yaml"}) {
    EXPECT_TRUE(seen.contains(name)) << name;
  }
}

TEST(Examples, CpuTinyIsTheTinyDemo) {
  DecodeResult r = DecodeYaml(ReadFile(SourceDir() / "manifests/examples/cpu-tiny.yaml"));
  ASSERT_TRUE(r.job);
  const auto& t = *r.job->spec.trainer;
  EXPECT_EQ(r.job->spec.gpus_per_worker, 0);
  EXPECT_EQ(t.model.layers, 2);
  EXPECT_EQ(t.model.d_model, 64);
  EXPECT_EQ(t.data.path, "data/tinyshakespeare.txt");
  EXPECT_TRUE(fs::exists(SourceDir() / *t.data.path));
}

// docs/api.md holds the generated reference between its markers, and so lists exactly the
// fields of the definition.
TEST(Docs, ApiReferenceListsExactlyTheDefinition) {
  const std::string doc = ReadFile(SourceDir() / "docs/api.md");
  const std::string begin = "<!-- BEGIN GENERATED: tessera crd --reference -->\n";
  const std::string end = "<!-- END GENERATED -->";
  const size_t b = doc.find(begin);
  const size_t e = doc.find(end);
  ASSERT_NE(b, std::string::npos) << "docs/api.md lacks " << begin;
  ASSERT_NE(e, std::string::npos) << "docs/api.md lacks " << end;
  EXPECT_TRUE(doc.substr(b + begin.size(), e - b - begin.size()) == FieldReferenceMarkdown())
      << "docs/api.md is out of date; replace the text between the markers with the output of\n"
      << "  tessera crd --reference";
}

// The reference lists every field path of the schema once.
TEST(Docs, ReferenceHasOneRowPerField) {
  std::set<std::string> rows;
  std::istringstream in(FieldReferenceMarkdown());
  std::string line;
  const std::regex row(R"(^\| `([A-Za-z.\[\]]+)` \| )");
  std::smatch m;
  while (std::getline(in, line)) {
    if (std::regex_search(line, m, row) && FindField(m[1].str()) != nullptr) {
      EXPECT_TRUE(rows.insert(m[1].str()).second) << "twice: " << m[1];
    }
  }
  for (const char* path :
       {"spec.parallelism.tensor", "spec.trainer.model.preset", "spec.runPolicy.permanentExitCodes",
        "status.progress.loss", "spec.template.spec.containers[].command"}) {
    EXPECT_TRUE(rows.contains(path)) << path;
  }
}

}  // namespace
}  // namespace tessera::api
