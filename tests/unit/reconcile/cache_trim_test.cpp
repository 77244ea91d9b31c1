// The informer transforms (controller/reconcile/cache_trim.h): what reconcile observes of a
// trimmed object is what it observes of the whole one, and the trimmed object is small.
#include "controller/reconcile/cache_trim.h"

#include <gtest/gtest.h>

#include "controller/reconcile/observe.h"
#include "controller/reconcile/rfc3339.h"

namespace tessera::reconcile {
namespace {

using Json = nlohmann::json;

// A worker pod as the API server returns it (the fields of a real kwok pod, abridged values).
Json FullPod(int index, const std::string& phase, Json container_state, bool deleting) {
  Json env = Json::array();
  for (const char* name : {"TESSERA_JOB", "TESSERA_NAMESPACE", "TESSERA_ATTEMPT", "RANK",
                           "WORLD_SIZE", "TESSERA_RDZV_ENDPOINT", "TESSERA_MESH", "MASTER_ADDR"})
    env.push_back({{"name", name}, {"value", "a value of some length for " + std::string(name)}});
  Json pod = {
      {"apiVersion", "v1"},
      {"kind", "Pod"},
      {"metadata",
       {{"name", "j-worker-" + std::to_string(index)},
        {"namespace", "default"},
        {"uid", "uid-" + std::to_string(index)},
        {"resourceVersion", "1234"},
        {"creationTimestamp", "2026-03-01T11:00:00Z"},
        {"generateName", "j-"},
        {"labels",
         {{"tessera.dev/job-name", "j"},
          {"tessera.dev/worker-index", std::to_string(index)},
          {"tessera.dev/attempt", "2"}}},
        {"annotations", {{"tessera.dev/note", std::string(200, 'x')}}},
        {"ownerReferences", Json::array({{{"apiVersion", "tessera.dev/v1alpha1"},
                                          {"kind", "TrainingJob"},
                                          {"name", "j"},
                                          {"uid", "job-uid"},
                                          {"controller", true},
                                          {"blockOwnerDeletion", true}}})},
        {"managedFields", Json::array({{{"manager", "tessera-controller"},
                                        {"fieldsV1", {{"f:spec", std::string(800, 'f')}}}}})}}},
      {"spec",
       {{"nodeName", "n1"},
        {"terminationGracePeriodSeconds", 45},
        {"hostname", "j-worker-" + std::to_string(index)},
        {"subdomain", "j"},
        {"containers", Json::array({{{"name", "worker"},
                                     {"image", "tessera/worker:0.1.0"},
                                     {"command", Json::array({"tessera-worker", "agent", "--config",
                                                              "/etc/tessera/job.yaml"})},
                                     {"env", env},
                                     {"resources", {{"limits", {{"nvidia.com/gpu", "8"}}}}}}})},
        {"volumes", Json::array({{{"name", "config"}, {"configMap", {{"name", "j-config-2"}}}}})},
        {"tolerations", Json::array({{{"key", "kwok.x-k8s.io/node"}, {"effect", "NoSchedule"}}})}}},
      {"status",
       {{"phase", phase},
        {"podIP", "10.0.0." + std::to_string(index)},
        {"hostIP", "10.1.0.1"},
        {"startTime", "2026-03-01T11:00:01Z"},
        {"conditions", Json::array({{{"type", "Initialized"}, {"status", "True"}},
                                    {{"type", "Ready"},
                                     {"status", phase == "Running" ? "True" : "False"},
                                     {"lastTransitionTime", "2026-03-01T11:00:05Z"}},
                                    {{"type", "PodScheduled"}, {"status", "True"}}})},
        {"containerStatuses", Json::array({{{"name", "worker"},
                                            {"image", "tessera/worker:0.1.0"},
                                            {"imageID", "sha256:" + std::string(64, 'a')},
                                            {"containerID", "containerd://" + std::string(64, 'b')},
                                            {"ready", phase == "Running"},
                                            {"restartCount", 0},
                                            {"state", container_state}}})}}}};
  if (deleting)
    pod["metadata"]["deletionTimestamp"] = "2026-03-01T11:59:30Z";
  return pod;
}

Json NodeObject(const std::string& ready) {
  return {{"metadata",
           {{"name", "n1"},
            {"uid", "node-uid"},
            {"labels", {{"kubernetes.io/hostname", "n1"}, {"type", "kwok"}}},
            {"annotations", {{"kwok.x-k8s.io/node", "fake"}}}}},
          {"spec", {{"taints", Json::array()}}},
          {"status",
           {{"capacity", {{"cpu", "64"}, {"nvidia.com/gpu", "8"}}},
            {"images", Json::array({{{"names", Json::array({std::string(100, 'i')})}}})},
            {"conditions", Json::array({{{"type", "Ready"},
                                         {"status", ready},
                                         {"reason", "KubeletReady"},
                                         {"lastHeartbeatTime", "2026-03-01T11:59:50Z"},
                                         {"lastTransitionTime", "2026-03-01T10:00:00Z"}}})}}}};
}

bool SameWorker(const lifecycle::Worker& a, const lifecycle::Worker& b) {
  return a.index == b.index && a.attempt == b.attempt && a.phase == b.phase && a.ready == b.ready &&
         a.exit_code == b.exit_code && a.finished_at == b.finished_at && a.reason == b.reason &&
         a.message == b.message && a.node_lost == b.node_lost && a.deleting == b.deleting &&
         a.name == b.name;
}

TEST(CacheTrim, ReconcileObservesTheSameOfATrimmedPodAndNode) {
  const lifecycle::TimePoint now = *ParseTime("2026-03-01T12:00:00Z");
  const Json terminated = {{"terminated",
                            {{"exitCode", 137},
                             {"reason", "OOMKilled"},
                             {"message", "out of memory"},
                             {"startedAt", "2026-03-01T11:00:02Z"},
                             {"finishedAt", "2026-03-01T11:59:00Z"},
                             {"containerID", "containerd://x"}}}};
  const Json running = {{"running", {{"startedAt", "2026-03-01T11:00:02Z"}}}};
  for (const std::string ready : {"True", "False"}) {
    std::vector<Json> full = {FullPod(0, "Running", running, false),
                              FullPod(1, "Failed", terminated, false),
                              FullPod(2, "Running", running, true)};
    std::vector<Json> trimmed = full;
    for (Json& pod : trimmed)
      TrimPod(pod);
    Json node = NodeObject(ready), trimmed_node = node;
    TrimNode(trimmed_node);
    const auto observe = [&](const std::vector<Json>& pods, const Json& n) {
      std::vector<const Json*> ptrs;
      for (const Json& p : pods)
        ptrs.push_back(&p);
      return ObserveWorkers(
          ptrs, [&](const std::string&) -> const Json* { return &n; }, now);
    };
    const ObservedWorkers a = observe(full, node), b = observe(trimmed, trimmed_node);
    ASSERT_EQ(a.workers.size(), 3u);
    ASSERT_EQ(b.workers.size(), a.workers.size());
    for (size_t i = 0; i < a.workers.size(); ++i)
      EXPECT_TRUE(SameWorker(a.workers[i], b.workers[i])) << "worker " << i << " node " << ready;
    EXPECT_EQ(a.recheck_after, b.recheck_after);
    EXPECT_EQ(a.workers[1].exit_code, 137);  // the fixture exercises what it should
    EXPECT_TRUE(a.workers[2].deleting);
  }
}

TEST(CacheTrim, KeepsIdentityOwnerAndProgressAddressAndDropsTheRest) {
  Json pod = FullPod(3, "Running", {{"running", Json::object()}}, false);
  // An owner that is not the controller (another operator's bookkeeping) is dropped.
  pod["metadata"]["ownerReferences"].insert(
      pod["metadata"]["ownerReferences"].begin(),
      {{"apiVersion", "v1"}, {"kind", "ConfigMap"}, {"name", "lease"}, {"uid", "cm-uid"}});
  const size_t before = pod.dump().size();
  TrimPod(pod);
  EXPECT_EQ(pod["metadata"]["uid"], "uid-3");
  EXPECT_EQ(pod["metadata"]["namespace"], "default");
  EXPECT_EQ(pod["metadata"]["creationTimestamp"], "2026-03-01T11:00:00Z");
  EXPECT_EQ(pod["metadata"]["labels"]["tessera.dev/job-name"], "j");
  ASSERT_EQ(pod["metadata"]["ownerReferences"].size(), 1u);
  EXPECT_EQ(pod["metadata"]["ownerReferences"][0]["uid"], "job-uid");
  EXPECT_EQ(pod["metadata"]["ownerReferences"][0]["controller"], true);
  EXPECT_EQ(pod["status"]["podIP"], "10.0.0.3");
  EXPECT_EQ(pod["spec"]["terminationGracePeriodSeconds"], 45);
  EXPECT_FALSE(pod["metadata"].contains("managedFields"));
  EXPECT_FALSE(pod["spec"].contains("containers"));
  EXPECT_EQ(pod["status"]["conditions"].size(), 1u);  // Ready only
  const size_t after = pod.dump().size();
  EXPECT_LT(after * 5, before) << before << " -> " << after << " bytes";
}

TEST(CacheTrim, TrainingJobLosesOnlyBookkeeping) {
  Json job = {{"metadata",
               {{"name", "j"},
                {"annotations",
                 {{"kubectl.kubernetes.io/last-applied-configuration", "{...}"}, {"team", "a"}}},
                {"managedFields", Json::array({Json::object()})}}},
              {"spec", {{"workers", 2}}}};
  Json expected = job;
  expected["metadata"].erase("managedFields");
  expected["metadata"]["annotations"].erase("kubectl.kubernetes.io/last-applied-configuration");
  TrimTrainingJob(job);
  EXPECT_EQ(job, expected);

  // Annotations that held only kubectl's copy go altogether.
  Json applied = {
      {"metadata",
       {{"name", "j"},
        {"annotations", {{"kubectl.kubernetes.io/last-applied-configuration", "{}"}}}}}};
  TrimTrainingJob(applied);
  EXPECT_EQ(applied, (Json{{"metadata", {{"name", "j"}}}}));
}

}  // namespace
}  // namespace tessera::reconcile
