// Pods and nodes -> lifecycle workers (controller/reconcile/observe.h).
#include "controller/reconcile/observe.h"

#include <gtest/gtest.h>

#include "controller/reconcile/rfc3339.h"

namespace tessera::reconcile {
namespace {

using lifecycle::WorkerPhase;
using namespace std::chrono_literals;

const lifecycle::TimePoint kNow = *ParseTime("2026-03-01T12:00:00Z");

Json Pod(int index, int attempt, const std::string& phase, Json status_extra = Json::object(),
         Json spec_extra = Json::object()) {
  Json pod = {{"metadata",
               {{"name", "j-worker-" + std::to_string(index)},
                {"uid", "u" + std::to_string(index)},
                {"labels",
                 {{"tessera.dev/worker-index", std::to_string(index)},
                  {"tessera.dev/attempt", std::to_string(attempt)}}}}},
              {"spec", {{"nodeName", "n1"}}},
              {"status", {{"phase", phase}}}};
  if (status_extra.is_object())
    pod["status"].update(status_extra);
  if (spec_extra.is_object())
    pod["spec"].update(spec_extra);
  return pod;
}

Json Terminated(const std::string& container, int code, const std::string& reason = "Error") {
  return {{"name", container},
          {"state",
           {{"terminated",
             {{"exitCode", code}, {"reason", reason}, {"finishedAt", "2026-03-01T11:59:00Z"}}}}}};
}

Json Node(const std::string& ready, const std::string& since) {
  return {
      {"metadata", {{"name", "n1"}}},
      {"status",
       {{"conditions",
         Json::array({{{"type", "Ready"}, {"status", ready}, {"lastTransitionTime", since}}})}}}};
}

lifecycle::Worker One(const Json& pod, const Json* node = nullptr) {
  Json n = node ? *node : Node("True", "2026-03-01T10:00:00Z");
  ObservedWorkers o = ObserveWorkers(
      {&pod}, [&](const std::string&) -> const Json* { return &n; }, kNow);
  EXPECT_EQ(o.workers.size(), 1u);
  return o.workers.empty() ? lifecycle::Worker{} : o.workers[0];
}

TEST(ObserveWorkers, PhaseReadinessAndIdentity) {
  struct Case {
    const char* name;
    Json pod;
    WorkerPhase phase;
    bool ready;
  };
  const Json ready_cond = {{"conditions", Json::array({{{"type", "Ready"}, {"status", "True"}}})}};
  const Case cases[] = {
      {"pending", Pod(1, 2, "Pending"), WorkerPhase::kPending, false},
      {"running not ready", Pod(1, 2, "Running"), WorkerPhase::kRunning, false},
      {"running ready", Pod(1, 2, "Running", ready_cond), WorkerPhase::kRunning, true},
      {"succeeded", Pod(1, 2, "Succeeded"), WorkerPhase::kSucceeded, false},
      {"no status", Json{{"metadata", Pod(1, 2, "x")["metadata"]}}, WorkerPhase::kPending, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    lifecycle::Worker w = One(c.pod);
    EXPECT_EQ(w.phase, c.phase);
    EXPECT_EQ(w.ready, c.ready);
    EXPECT_EQ(w.index, 1);
    EXPECT_EQ(w.attempt, 2);
    EXPECT_EQ(w.name, "j-worker-1");
    EXPECT_FALSE(w.node_lost);
  }
}

TEST(ObserveWorkers, ExitCodeFromTheWorkerContainer) {
  struct Case {
    const char* name;
    Json statuses;
    int64_t code;
    std::string reason;
  };
  const Case cases[] = {
      {"worker container", Json::array({Terminated("sidecar", 9), Terminated("worker", 3)}), 3,
       "Error"},
      {"first non-zero without a worker container",
       Json::array({Terminated("a", 0, "Completed"), Terminated("b", 137, "OOMKilled")}), 137,
       "OOMKilled"},
      {"only zero", Json::array({Terminated("a", 0, "Completed")}), 0, "Completed"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    lifecycle::Worker w = One(Pod(0, 0, "Failed", {{"containerStatuses", c.statuses}}));
    ASSERT_TRUE(w.exit_code.has_value());
    EXPECT_EQ(*w.exit_code, c.code);
    EXPECT_EQ(w.reason, c.reason);
    ASSERT_TRUE(w.finished_at.has_value());
    EXPECT_EQ(*w.finished_at, *ParseTime("2026-03-01T11:59:00Z"));
  }
}

// Rank 0's final progress ends worker 0's terminated message: it is taken apart from the
// message (which lastFailure and events quote) and kept with the pod's attempt; another
// worker's line is only taken out of its message.
TEST(ObserveWorkers, WorkerZerosFinalProgressComesOutOfItsMessage) {
  auto with_message = [](int index, const std::string& message) {
    Json container = Terminated("worker", 5);
    container["state"]["terminated"]["message"] = message;
    return Pod(index, 3, "Failed", {{"containerStatuses", Json::array({container})}});
  };
  const Json zero =
      with_message(0, "loss is NaN at step 41\nfinal progress: {\"step\":41,\"loss\":7.5}");
  const Json one = with_message(1, "final progress: {\"step\":9}");
  const Json node = Node("True", "2026-03-01T10:00:00Z");
  const ObservedWorkers o = ObserveWorkers(
      {&zero, &one}, [&](const std::string&) -> const Json* { return &node; }, kNow);
  ASSERT_EQ(o.workers.size(), 2u);
  EXPECT_EQ(o.workers[0].message, "loss is NaN at step 41");
  EXPECT_EQ(o.workers[1].message, "");
  ASSERT_TRUE(o.final_progress.has_value());
  EXPECT_EQ(o.final_progress->attempt, 3);
  EXPECT_EQ(o.final_progress->progress.step, 41);
  EXPECT_EQ(o.final_progress->progress.loss, 7.5);

  const ObservedWorkers without = ObserveWorkers(
      {&one}, [&](const std::string&) -> const Json* { return &node; }, kNow);
  EXPECT_FALSE(without.final_progress.has_value());
}

TEST(ObserveWorkers, FailedPodWithoutContainersTakesThePodReason) {
  lifecycle::Worker w =
      One(Pod(0, 0, "Failed", {{"reason", "Evicted"}, {"message", "low on memory"}}));
  EXPECT_FALSE(w.exit_code.has_value());
  EXPECT_EQ(w.reason, "Evicted");
  EXPECT_EQ(w.message, "low on memory");
}

TEST(ObserveWorkers, Deleting) {
  Json pod = Pod(0, 0, "Running");
  pod["metadata"]["deletionTimestamp"] = "2026-03-01T11:00:00Z";
  EXPECT_TRUE(One(pod).deleting);
  EXPECT_FALSE(One(Pod(0, 0, "Running")).deleting);
  pod["metadata"]["deletionTimestamp"] = nullptr;  // a patch that cleared it
  EXPECT_FALSE(One(pod).deleting);
}

TEST(ObserveWorkers, NodeLostAfterTheGracePeriod) {
  struct Case {
    const char* name;
    Json pod;
    std::optional<Json> node;  // nullopt: the node does not exist
    bool lost;
    std::optional<lifecycle::Duration> recheck;
  };
  const Json grace10 = {{"terminationGracePeriodSeconds", 10}};
  const Case cases[] = {
      {"ready node", Pod(0, 0, "Running"), Node("True", "2026-03-01T11:00:00Z"), false, {}},
      {"not ready past default grace",
       Pod(0, 0, "Running"),
       Node("False", "2026-03-01T11:59:29Z"),
       true,
       {}},
      {"not ready within default grace", Pod(0, 0, "Running"),
       Node("Unknown", "2026-03-01T11:59:50Z"), false, lifecycle::Duration(20s)},
      {"not ready past the pod's own grace",
       Pod(0, 0, "Running", {}, grace10),
       Node("False", "2026-03-01T11:59:50Z"),
       true,
       {}},
      {"not ready exactly for the default grace",
       Pod(0, 0, "Running"),
       Node("False", "2026-03-01T11:59:30Z"),
       true,
       {}},
      // A node whose Ready condition carries no time: the grace period runs from now.
      {"not ready since an unknown time", Pod(0, 0, "Running"), Node("False", ""), false,
       lifecycle::Duration(30s)},
      {"node gone", Pod(0, 0, "Running"), std::nullopt, true, {}},
      {"finished pod is not lost", Pod(0, 0, "Succeeded"), std::nullopt, false, {}},
      {"phase Unknown", Pod(0, 0, "Unknown"), Node("True", "2026-03-01T11:00:00Z"), true, {}},
      {"reason NodeLost",
       Pod(0, 0, "Running", {{"reason", "NodeLost"}}),
       Node("True", "2026-03-01T11:00:00Z"),
       true,
       {}},
      {"unscheduled pod", Pod(0, 0, "Pending", {}, {{"nodeName", ""}}), std::nullopt, false, {}},
      // int64's largest grace period: adding it to the clock overflowed, and the worker was
      // lost at once. Bounded to a year, it is not lost yet and the recheck comes then.
      {"a grace period past the clock's range",
       Pod(0, 0, "Running", {}, {{"terminationGracePeriodSeconds", INT64_MAX}}),
       Node("False", "2026-03-01T11:59:50Z"), false,
       lifecycle::Duration(std::chrono::seconds(int64_t{366} * 24 * 3600 - 10))},
      {"a grace period that is not an integer counts as the default",
       Pod(0, 0, "Running", {}, {{"terminationGracePeriodSeconds", "10"}}),
       Node("False", "2026-03-01T11:59:50Z"), false, lifecycle::Duration(20s)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    ObservedWorkers o = ObserveWorkers(
        {&c.pod}, [&](const std::string&) -> const Json* { return c.node ? &*c.node : nullptr; },
        kNow);
    ASSERT_EQ(o.workers.size(), 1u);
    EXPECT_EQ(o.workers[0].node_lost, c.lost);
    EXPECT_EQ(o.recheck_after, c.recheck);
  }
}

// Several workers wait on NotReady nodes: the controller looks again when the first of them is
// due, whatever the order of the pods.
TEST(ObserveWorkers, RechecksWhenTheFirstWaitingWorkerIsDue) {
  Json early = Pod(0, 0, "Running", {}, {{"nodeName", "early"}});
  Json late = Pod(1, 0, "Running", {}, {{"nodeName", "late"}});
  Json ready = Pod(2, 0, "Running", {}, {{"nodeName", "ready"}});
  const std::map<std::string, Json> nodes = {
      {"early", Node("False", "2026-03-01T11:59:40Z")},  // lost at 12:00:10
      {"late", Node("False", "2026-03-01T11:59:55Z")},   // lost at 12:00:25
      {"ready", Node("True", "2026-03-01T11:00:00Z")}};
  const NodeLookup lookup = [&](const std::string& name) -> const Json* {
    auto it = nodes.find(name);
    return it == nodes.end() ? nullptr : &it->second;
  };
  for (const std::vector<const Json*>& pods :
       std::vector<std::vector<const Json*>>{{&early, &late, &ready}, {&ready, &late, &early}}) {
    const ObservedWorkers o = ObserveWorkers(pods, lookup, kNow);
    EXPECT_EQ(o.recheck_after, lifecycle::Duration(10s));
  }
}

TEST(ControlledBy, OnlyAControllerReferenceToTheUid) {
  struct Case {
    const char* name;
    Json owners;
    bool controlled;
  };
  const Case cases[] = {
      {"controller", Json::array({{{"uid", "u1"}, {"controller", true}}}), true},
      {"among others",
       Json::array({{{"uid", "u0"}, {"controller", true}}, {{"uid", "u1"}, {"controller", true}}}),
       true},
      {"not the controller", Json::array({{{"uid", "u1"}, {"controller", false}}}), false},
      {"controller unset", Json::array({{{"uid", "u1"}}}), false},
      {"controller not a boolean", Json::array({{{"uid", "u1"}, {"controller", "true"}}}), false},
      {"another uid", Json::array({{{"uid", "u2"}, {"controller", true}}}), false},
      {"not a list", Json{{"uid", "u1"}, {"controller", true}}, false},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Json object = {{"metadata", {{"ownerReferences", c.owners}}}};
    EXPECT_EQ(ControlledBy(object, "u1"), c.controlled);
  }
  EXPECT_FALSE(ControlledBy(Json{{"metadata", Json::object()}}, "u1"));
}

// The controlling reference is named, whatever others sit beside it; a reference that does not
// control, or none, is "no controller".
TEST(DescribeController, NamesTheControllingReference) {
  const Json job = {{"kind", "TrainingJob"}, {"name", "gpt"}, {"uid", "u1"}, {"controller", true}};
  const Json other = {{"kind", "ReplicaSet"}, {"name", "rs"}, {"uid", "u2"}};
  const auto with = [](Json owners) { return Json{{"metadata", {{"ownerReferences", owners}}}}; };
  EXPECT_EQ(DescribeController(with(Json::array({other, job}))), "TrainingJob gpt (uid u1)");
  EXPECT_EQ(DescribeController(with(Json::array({other}))), "no controller");
  EXPECT_EQ(DescribeController(with(job)), "no controller");  // not a list
  EXPECT_EQ(DescribeController(Json{{"metadata", Json::object()}}), "no controller");
}

// Fields of other types than the API's read as absent rather than throwing (found by fuzzing
// the objects the controller reads, apiserver_object_fuzz).
TEST(ObserveWorkers, MistypedFieldsReadAsAbsent) {
  Json pod = Pod(0, 0, "Failed");
  pod["metadata"]["name"] = 12;
  pod["status"]["reason"] = Json::array();
  pod["status"]["conditions"] = {{{"type", nullptr}}, 3};
  pod["status"]["containerStatuses"] = {
      {{"name", "worker"}, {"state", {{"terminated", {{"exitCode", 1e30}, {"reason", 5}}}}}}};
  pod["spec"]["nodeName"] = false;
  ObservedWorkers o = ObserveWorkers({&pod}, nullptr, kNow);
  ASSERT_EQ(o.workers.size(), 1u);
  EXPECT_EQ(o.workers[0].name, "");
  EXPECT_EQ(o.workers[0].exit_code, 0);
  EXPECT_EQ(o.workers[0].reason, "");
  EXPECT_FALSE(o.workers[0].ready);
  EXPECT_EQ(NodeNameOf(pod), "");
  pod["metadata"]["namespace"] = "default";
  pod["metadata"]["labels"]["tessera.dev/job-name"] = "demo";
  EXPECT_EQ(JobKeyOf(pod), "default/demo");
  pod["metadata"]["labels"]["tessera.dev/job-name"] = 1;
  EXPECT_EQ(JobKeyOf(pod), "");
}

TEST(ObserveWorkers, SkipsPodsWithoutLabelsAndDuplicateIndices) {
  Json a = Pod(0, 1, "Running");
  Json b = Pod(0, 0, "Running");
  b["metadata"]["name"] = "z-duplicate";
  Json c = Pod(1, 0, "Running");
  c["metadata"]["labels"].erase("tessera.dev/attempt");
  Json d = Pod(2, 0, "Running");
  d["metadata"]["labels"]["tessera.dev/worker-index"] = "two";
  Json e = Pod(3, 0, "Running");
  e["metadata"]["labels"]["tessera.dev/worker-index"] = "-3";
  Json f = Pod(4, 0, "Running");
  f["metadata"]["labels"]["tessera.dev/attempt"] = "0x";
  Json g = Pod(5, 0, "Running");
  g["metadata"]["labels"]["tessera.dev/worker-index"] = 5;  // not a string
  ObservedWorkers o = ObserveWorkers({&b, &c, &a, &d, &e, &f, &g}, nullptr, kNow);
  ASSERT_EQ(o.workers.size(), 1u);
  EXPECT_EQ(o.workers[0].attempt, 1);
  EXPECT_EQ(o.pods.at(0), &a);
}

}  // namespace
}  // namespace tessera::reconcile
