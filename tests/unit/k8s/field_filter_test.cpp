// ParseFiltered (controller/k8s/field_filter.h): keeps what the filter names, equals the whole
// parse cut by the same filter, and fails exactly where nlohmann::json::parse does.
#include "controller/k8s/field_filter.h"

#include <gtest/gtest.h>

#include <memory>
#include <string>
#include <vector>

#include "controller/k8s/rest.h"

namespace tessera::k8s {
namespace {

using Json = nlohmann::json;

const char* const kPod = R"({
  "kind": "Pod",
  "metadata": {"name": "j-worker-0", "namespace": "default", "resourceVersion": "17",
               "labels": {"tessera.dev/job-name": "j"},
               "managedFields": [{"manager": "kwok", "fieldsV1": {"f:status": {"f:phase": {}}}}]},
  "spec": {"nodeName": "node-1", "containers": [{"name": "worker", "env": [{"name": "RANK"}]}]},
  "status": {"phase": "Running", "hostIP": "10.0.0.1",
             "conditions": [{"type": "Ready", "status": "True", "lastProbeTime": null},
                            {"type": "PodScheduled", "status": "True"}],
             "containerStatuses": [{"name": "worker", "image": "w",
                                    "state": {"terminated": {"exitCode": 3}}}]}
})";

std::shared_ptr<const FieldFilter> PodFilters() {
  static const auto filter = std::make_shared<const FieldFilter>(FieldFilter::Keep({
      "metadata.name",
      "metadata.resourceVersion",
      "metadata.labels",
      "spec.nodeName",
      "status.phase",
      "status.conditions.type",
      "status.conditions.status",
      "status.containerStatuses.state",
  }));
  return filter;
}
const FieldFilter& PodFilter() {
  return *PodFilters();
}

TEST(FieldFilter, KeepsTheNamedPathsAndWholeValuesBelowThem) {
  const Json kept = ParseFiltered(kPod, PodFilter());
  const Json expected = Json::parse(R"({
    "metadata": {"name": "j-worker-0", "resourceVersion": "17",
                 "labels": {"tessera.dev/job-name": "j"}},
    "spec": {"nodeName": "node-1"},
    "status": {"phase": "Running",
               "conditions": [{"type": "Ready", "status": "True"},
                              {"type": "PodScheduled", "status": "True"}],
               "containerStatuses": [{"state": {"terminated": {"exitCode": 3}}}]}
  })");
  EXPECT_EQ(kept, expected) << kept.dump(2);
}

TEST(FieldFilter, EqualsTheWholeParseCutByTheSameFilter) {
  // Mistyped and odd values: kept as they are where the filter expects an object, duplicates
  // resolved as nlohmann does (the last one), nesting inside skipped values, escapes, numbers.
  const std::vector<std::string> texts = {
      kPod,
      R"({"metadata": "not an object", "status": 5, "spec": null})",
      R"({"metadata": {"name": "a", "name": "b", "labels": {"x": "1"}, "labels": 7}})",
      R"({"status": {"conditions": [1, "two", [{"type": "Ready", "reason": "r"}], null]}})",
      R"({"skipped": [[[{"a": [{}, []]}]]], "metadata": {"name": "\u00e9\n\"q\""}})",
      R"({"spec": {"nodeName": 1e300, "x": -0.5}, "status": {"phase": 18446744073709551615}})",
      R"([{"metadata": {"name": "in an array"}, "kind": "dropped"}])",
      R"("just a string")",
      R"({})",
  };
  for (const std::string& text : texts) {
    EXPECT_EQ(ParseFiltered(text, PodFilter()), PodFilter().Apply(Json::parse(text))) << text;
    EXPECT_EQ(ParseFiltered(text, FieldFilter()), Json::parse(text)) << text;
  }
}

TEST(FieldFilter, RefusesWhatTheParserRefuses) {
  for (const char* text : {"", "{", R"({"metadata": {"name": "a"})", R"({"a": 1} trailing)",
                           R"({"skipped": [1, 2,]})", R"({"skipped": nul})", "1e999", "\xff"}) {
    EXPECT_TRUE(ParseFiltered(text, PodFilter()).is_discarded()) << text;
    EXPECT_TRUE(Json::parse(text, nullptr, false).is_discarded()) << text;
  }
}

TEST(FieldFilter, APathThatIsAPrefixOfAnotherKeepsTheWholeValue) {
  const Json object = {{"status", {{"phase", "Running"}, {"podIP", "10.0.0.2"}}}};
  for (const auto& filter : {FieldFilter::Keep({"status", "status.phase"}),
                             FieldFilter::Keep({"status.phase", "status"})}) {
    EXPECT_EQ(filter.Apply(object), object);
    EXPECT_EQ(ParseFiltered(object.dump(), filter), object);
  }
  EXPECT_EQ(FieldFilter::Keep({}).Apply(object), Json::object());
}

TEST(FieldFilter, WatchEventsKeepTheirTypeAndErrorsTheirStatus) {
  const std::string added = std::string(R"({"type": "ADDED", "object": )") + kPod + "}";
  Result<WatchEvent> event = DecodeWatchEvent(added, PodFilters());
  ASSERT_TRUE(event.ok());
  EXPECT_EQ(event->type, "ADDED");
  EXPECT_EQ(event->object, ParseFiltered(kPod, PodFilter()));

  // An ERROR's Status has none of the pod's fields: it is read whole.
  const char* gone = R"({"type": "ERROR", "object": {"kind": "Status", "code": 410,
                        "reason": "Expired", "message": "too old resource version"}})";
  Result<WatchEvent> error = DecodeWatchEvent(gone, PodFilters());
  ASSERT_FALSE(error.ok());
  EXPECT_EQ(error.error().code, 410);
  EXPECT_EQ(error.error().reason, "Expired");
  EXPECT_EQ(error.error().message, "too old resource version");

  EXPECT_FALSE(DecodeWatchEvent(R"({"type": "ADDED", "object": 3})", PodFilters()).ok());
}

}  // namespace
}  // namespace tessera::k8s
