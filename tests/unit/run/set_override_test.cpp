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
                "/spec/template/spec/containers/0/args", json::array({"x"})},
        // null (or nothing but a comment) unsets the field, so its default applies.
        SetCase{"spec.workers=null", "/spec/workers", nullptr},
        SetCase{"spec.workers=# none", "/spec/workers", nullptr},
        SetCase{"template.x[0][0]=1", "/spec/template/x", json::array({json::array({1})})}));

struct BadCase {
  std::string assignment;
  std::string message_part;
};

// template.a.a...a: a path of `steps` steps, the first of them `template`.
std::string DeepPath(int steps) {
  std::string path = "template";
  for (int i = 1; i < steps; ++i)
    path += ".a";
  return path;
}

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
                    BadCase{"spec.workers.count=1",
                            "--set spec.workers.count=1: spec.workers.count is inside a value "
                            "that is not an object"},
                    BadCase{"spec.template.spec.containers[2].name=a",
                            "--set spec.template.spec.containers[2].name=a: "
                            "spec.template.spec.containers[2] is past the end of a list of 1"},
                    BadCase{"spec.template.spec.containers[18446744073709551615].name=a",
                            "past the end of a list of 1"},
                    // Objects and lists created on the way are not left behind.
                    BadCase{"spec.trainer.extra.tags[1]=a", "past the end of a list of 0"},
                    // Path syntax the parser once read loosely: as containers[0].name, and as
                    // containers[0] (replacing the whole container).
                    BadCase{"spec.template.spec.containers[0]name=a",
                            "--set spec.template.spec.containers[0]name=a: expected '.' or '[' "
                            "after ']'"},
                    BadCase{"spec.template.spec.containers[0].=a", "path ends with '.'"},
                    // Once silently kept the first document and dropped the rest.
                    BadCase{"spec.workers=1\n---\n2", "the value holds 2 YAML documents"},
                    // Once nested the job so deeply that checking it overflowed the stack.
                    BadCase{DeepPath(101) + "=1", "the path has more than 100 steps"},
                    BadCase{"spec.trainer[0]=1", "not a list"},
                    BadCase{"spec.workers=[1, 2", "not valid YAML"},
                    // A key the schema does not check (the pod template) reached the job's JSON,
                    // which cannot hold it (found by fuzzing).
                    BadCase{"template.spec.x\xFFy=1",
                            "--set template.spec.x...: byte 16 (0xFF) is not UTF-8 text"},
                    BadCase{"spec.trainer.data.path=a\xC3", "byte 25 (0xC3) is not UTF-8 text"}));

TEST(SetOverride, APathOfAHundredStepsApplies) {
  json doc = Job();
  ASSERT_EQ(ApplySetOverride(DeepPath(100) + "=1", &doc), "");
  std::string pointer = "/spec/template";
  for (int i = 1; i < 100; ++i)
    pointer += "/a";
  EXPECT_EQ(doc.at(json::json_pointer(pointer)), 1);
}

}  // namespace
}  // namespace tessera::cli
