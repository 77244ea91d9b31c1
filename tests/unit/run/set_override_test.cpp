#include "cli/run/set_override.h"

#include <gtest/gtest.h>

namespace tessera::cli {
namespace {

using nlohmann::json;

json Job() {
  return json::parse(R"({"apiVersion": "tessera.dev/v1alpha1", "kind": "TrainingJob",
    "metadata": {"name": "j"}, "spec": {"workers": 2, "trainer": {"schedule": {"steps": 300}},
    "template": {"spec": {"containers": [{"name": "worker"}]}}}})");
}

struct SetCase {
  std::string assignment;
  std::string pointer;  // JSON pointer of the field that must hold `want`
  json want;
};

class SetOverrideTest : public testing::TestWithParam<SetCase> {};

TEST_P(SetOverrideTest, SetsTheTypedValue) {
  json doc = Job();
  ASSERT_EQ(ApplySetOverride(GetParam().assignment, &doc), "");
  EXPECT_EQ(doc.at(json::json_pointer(GetParam().pointer)), GetParam().want) << doc.dump();
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SetOverrideTest,
    testing::Values(
        SetCase{"spec.workers=1", "/spec/workers", 1},
        SetCase{"workers=3", "/spec/workers", 3},  // relative to spec
        SetCase{"spec.trainer.schedule.steps=50", "/spec/trainer/schedule/steps", 50},
        SetCase{"spec.trainer.optimizer.lr=1e-3", "/spec/trainer/optimizer/lr", 1e-3},
        SetCase{"spec.suspend=true", "/spec/suspend", true},
        SetCase{"metadata.name=other", "/metadata/name", "other"},
        SetCase{"metadata.name=\"42\"", "/metadata/name", "42"},
        SetCase{"spec.runPolicy.backoffLimit=0", "/spec/runPolicy/backoffLimit", 0},
        SetCase{"spec.template.spec.containers[0].command=[sh, -c, \"exit 2\"]",
                "/spec/template/spec/containers/0/command", json::array({"sh", "-c", "exit 2"})},
        SetCase{"spec.template.spec.containers[1].name=sidecar",
                "/spec/template/spec/containers/1/name", "sidecar"},
        SetCase{"spec.trainer.data.path=a=b.txt", "/spec/trainer/data/path", "a=b.txt"},
        SetCase{"metadata.name=", "/metadata/name", ""},  // an empty value is an empty string
        SetCase{"kind=Other", "/kind", "Other"}, SetCase{"apiVersion=v2", "/apiVersion", "v2"},
        SetCase{"spec.trainer.tags[0]=a", "/spec/trainer/tags", json::array({"a"})},  // a new list
        SetCase{"spec.template.spec.containers[0].args[0]=x",
                "/spec/template/spec/containers/0/args", json::array({"x"})}));

struct BadCase {
  std::string assignment;
  std::string message_part;
};

class SetOverrideErrorTest : public testing::TestWithParam<BadCase> {};

TEST_P(SetOverrideErrorTest, RefusesAndLeavesTheDocumentAlone) {
  json doc = Job();
  const json before = doc;
  const std::string error = ApplySetOverride(GetParam().assignment, &doc);
  EXPECT_NE(error.find(GetParam().message_part), std::string::npos) << error;
  EXPECT_EQ(error.rfind("--set ", 0), 0u) << error;
  EXPECT_EQ(doc, before);
}

INSTANTIATE_TEST_SUITE_P(
    Cases, SetOverrideErrorTest,
    testing::Values(BadCase{"spec.workers", "expected path=value"}, BadCase{"=3", "empty"},
                    BadCase{"spec..workers=1", "empty field name"},
                    BadCase{"spec.workers.=1", "ends with '.'"},
                    BadCase{"spec.template.spec.containers[x].name=a", "not a number"},
                    BadCase{"spec.template.spec.containers[5].name=a", "past the end"},
                    BadCase{"spec.template.spec.containers[].name=a", "unclosed or empty [index]"},
                    BadCase{"spec.template.spec.containers[0.name=a", "unclosed or empty [index]"},
                    // 2^64: once wrapped around to 0 and replaced the first container's name.
                    BadCase{"spec.template.spec.containers[18446744073709551616].name=a",
                            "index '18446744073709551616' is too large"},
                    BadCase{"[0]=1", "--set [0]=1: spec[0] indexes a value that is not a list"},
                    BadCase{"spec.workers.count=1", "not an object"},
                    BadCase{"spec.trainer[0]=1", "not a list"},
                    BadCase{"spec.workers=[1, 2", "not valid YAML"},
                    // A key the schema does not check (the pod template) reached the job's JSON,
                    // which cannot hold it (found by fuzzing).
                    BadCase{"template.spec.x\xFFy=1",
                            "--set template.spec.x...: byte 16 (0xFF) is not UTF-8 text"},
                    BadCase{"spec.trainer.data.path=a\xC3", "byte 25 (0xC3) is not UTF-8 text"}));

}  // namespace
}  // namespace tessera::cli
