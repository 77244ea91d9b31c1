// Desired Service, Secret and Pods of a job (controller/reconcile/objects.h).
#include "controller/reconcile/objects.h"

#include <gtest/gtest.h>

#include <set>

#include "api/codec.h"
#include "api/contract.h"
#include "api/validate.h"

namespace tessera::reconcile {
namespace {

api::TrainingJob Job(const std::string& yaml) {
  api::DecodeResult r = api::DecodeYaml(yaml);
  EXPECT_TRUE(r.errors.empty()) << api::FormatError(r.errors.front());
  api::TrainingJob job = *r.job;
  api::ApplyDefaults(job);
  return job;
}

const char* kJob = R"(
apiVersion: tessera.dev/v1alpha1
kind: TrainingJob
metadata: {name: gpt, namespace: ml, uid: uid-1, generation: 3}
spec:
  workers: 4
  gpusPerWorker: 8
  parallelism: {data: 8, pipeline: 2, tensor: 2}
  metrics: {port: 9400}
  scheduling: {schedulerName: volcano, priorityClassName: high}
  template:
    metadata:
      labels: {team: nlp, tessera.dev/fail-exit-code: "3", tessera.dev/attempt: "99"}
      annotations: {tessera.dev/fail-after: 5s}
    spec:
      terminationGracePeriodSeconds: 5
      containers:
      - name: sidecar
        image: busybox
      - name: worker
        image: tessera/worker:test
        command: [python, train.py]
        env:
        - {name: MY_VAR, value: mine}
        - {name: WORLD_SIZE, value: "1"}
        ports:
        - {name: metrics, containerPort: 9400}
)";

std::map<std::string, Json> EnvByName(const Json& container) {
  std::map<std::string, Json> out;
  for (const Json& var : container["env"])
    out[var["name"]] = var;
  return out;
}

const Json& Container(const Json& pod, const std::string& name) {
  for (const Json& c : pod["spec"]["containers"]) {
    if (c["name"] == name)
      return c;
  }
  static const Json none;
  ADD_FAILURE() << "no container " << name;
  return none;
}

// A job of 4 workers with `scheduling_yaml` as its spec.scheduling's entries and
// `pod_spec_yaml` as its template's spec.
api::TrainingJob ScheduledJob(const std::string& scheduling_yaml,
                              const std::string& pod_spec_yaml = "{}") {
  return Job(
      "apiVersion: tessera.dev/v1alpha1\nkind: TrainingJob\n"
      "metadata: {name: gpt, namespace: ml, uid: uid-1}\n"
      "spec:\n  workers: 4\n  scheduling: {" +
      scheduling_yaml + "}\n  template:\n    spec: " + pod_spec_yaml + "\n");
}

TEST(DesiredPod, NamesHostnameOwnerAndPolicy) {
  const Json pod = DesiredPod(Job(kJob), 2, 1);
  EXPECT_EQ(pod["metadata"]["name"], "gpt-worker-2");
  EXPECT_EQ(pod["metadata"]["namespace"], "ml");
  EXPECT_EQ(pod["spec"]["hostname"], "gpt-worker-2");
  EXPECT_EQ(pod["spec"]["subdomain"], "gpt");
  EXPECT_EQ(pod["spec"]["restartPolicy"], "Never");
  EXPECT_EQ(pod["spec"]["schedulerName"], "volcano");
  EXPECT_EQ(pod["spec"]["priorityClassName"], "high");
  EXPECT_EQ(pod["spec"]["terminationGracePeriodSeconds"], 5);
  const Json& owners = pod["metadata"]["ownerReferences"];
  ASSERT_EQ(owners.size(), 1u);
  EXPECT_EQ(owners[0]["apiVersion"], "tessera.dev/v1alpha1");
  EXPECT_EQ(owners[0]["kind"], "TrainingJob");
  EXPECT_EQ(owners[0]["name"], "gpt");
  EXPECT_EQ(owners[0]["uid"], "uid-1");
  EXPECT_EQ(owners[0]["controller"], true);
  EXPECT_EQ(owners[0]["blockOwnerDeletion"], true);
}

TEST(DesiredPod, LabelsFromTemplateThenContract) {
  const Json labels = DesiredPod(Job(kJob), 2, 1)["metadata"]["labels"];
  // The contract wins over the template for its own keys.
  EXPECT_EQ(labels["tessera.dev/job-name"], "gpt");
  EXPECT_EQ(labels["tessera.dev/worker-index"], "2");
  EXPECT_EQ(labels["tessera.dev/attempt"], "1");
  EXPECT_EQ(labels["app.kubernetes.io/name"], "tessera");
  EXPECT_EQ(labels["app.kubernetes.io/instance"], "gpt");
  EXPECT_EQ(labels["app.kubernetes.io/component"], "worker");
  EXPECT_EQ(labels["app.kubernetes.io/managed-by"], "tessera-controller");
  // The template's own labels and annotations (kwok's failure label) are kept.
  EXPECT_EQ(labels["team"], "nlp");
  EXPECT_EQ(labels["tessera.dev/fail-exit-code"], "3");
  EXPECT_EQ(DesiredPod(Job(kJob), 2, 1)["metadata"]["annotations"]["tessera.dev/fail-after"], "5s");
}

TEST(DesiredPod, ContractEnvironmentOnTheWorkerContainerOnly) {
  const api::TrainingJob job = Job(kJob);
  const Json pod = DesiredPod(job, 2, 1);
  EXPECT_FALSE(Container(pod, "sidecar").contains("env"));
  const Json& worker = Container(pod, "worker");
  auto env = EnvByName(worker);
  const auto contract = api::WorkerEnvironment(job, 1, 2, "gpt-worker-0.gpt.ml.svc:29500", "");
  for (const auto& [name, value] : contract) {
    ASSERT_TRUE(env.count(name)) << name;
    if (name == "TESSERA_RDZV_TOKEN") {
      EXPECT_FALSE(env[name].contains("value"));
      EXPECT_EQ(env[name]["valueFrom"]["secretKeyRef"]["name"], "gpt-rendezvous");
      EXPECT_EQ(env[name]["valueFrom"]["secretKeyRef"]["key"], "token");
    } else {
      EXPECT_EQ(env[name]["value"], value) << name;
    }
  }
  // The template's variable stays; one the contract defines is replaced, not duplicated.
  EXPECT_EQ(env["MY_VAR"]["value"], "mine");
  EXPECT_EQ(env["WORLD_SIZE"]["value"], "32");
  EXPECT_EQ(worker["env"].size(), contract.size() + 1);
  EXPECT_EQ(env["TESSERA_NODE_RANK"]["value"], "2");
  EXPECT_EQ(env["TESSERA_ATTEMPT"]["value"], "1");
  EXPECT_EQ(env["TESSERA_RDZV_ENDPOINT"]["value"], "gpt-worker-0.gpt.ml.svc:29500");
  EXPECT_EQ(env["TESSERA_MESH"]["value"], "data=8,pipeline=2,tensor=2");
  EXPECT_EQ(worker["command"], Json::array({"python", "train.py"}));
}

TEST(DesiredPod, GpusAndPorts) {
  const Json worker = Container(DesiredPod(Job(kJob), 0, 0), "worker");
  EXPECT_EQ(worker["resources"]["limits"]["nvidia.com/gpu"], "8");
  EXPECT_EQ(worker["resources"]["requests"]["nvidia.com/gpu"], "8");
  std::set<std::string> names;
  for (const Json& p : worker["ports"])
    names.insert(p["name"]);
  EXPECT_EQ(names, (std::set<std::string>{"metrics", "rendezvous"}));
  EXPECT_EQ(worker["ports"].size(), 2u);  // the template's metrics port is not duplicated

  // A template port on the metrics port under another name is the metrics port too: a second
  // containerPort of the same number would be refused.
  const Json own =
      Container(DesiredPod(ScheduledJob("",
                                        "{containers: [{name: worker, image: w, ports: "
                                        "[{name: prom, containerPort: 9400}]}]}"),
                           0, 0),
                "worker");
  ASSERT_EQ(own["ports"].size(), 2u) << own["ports"].dump();
  EXPECT_EQ(own["ports"][0]["name"], "prom");
  EXPECT_EQ(own["ports"][1]["name"], "rendezvous");
}

TEST(DesiredPod, CpuJobWithoutTemplateGetsADefaultWorker) {
  const api::TrainingJob job = Job(R"(
apiVersion: tessera.dev/v1alpha1
kind: TrainingJob
metadata: {name: tiny, namespace: default, uid: u}
spec:
  workers: 2
  trainer:
    model: {layers: 2, dModel: 64, heads: 4, seqLen: 64}
    data: {path: /data/x.txt}
    batch: {global: 16}
    schedule: {steps: 10}
)");
  const Json pod = DesiredPod(job, 1, 0);
  ASSERT_EQ(pod["spec"]["containers"].size(), 1u);
  const Json& worker = pod["spec"]["containers"][0];
  EXPECT_EQ(worker["name"], "worker");
  EXPECT_EQ(worker["image"], DefaultWorkerImage());
  EXPECT_FALSE(worker.contains("resources"));  // gpusPerWorker 0: no GPU request
  EXPECT_FALSE(pod["spec"].contains("schedulerName"));
  EXPECT_EQ(EnvByName(worker)["TESSERA_NNODES"]["value"], "2");
}

const char* kTrainerJob = R"(
apiVersion: tessera.dev/v1alpha1
kind: TrainingJob
metadata: {name: tiny, namespace: ml, uid: u}
spec:
  workers: 2
  trainer:
    model: {layers: 2, dModel: 64, heads: 4, seqLen: 64}
    data: {path: /data/x.txt}
    batch: {global: 16}
    schedule: {steps: 10}
  template:
    spec:
      volumes:
      - {name: data, hostPath: {path: /data}}
      - {name: tessera-config, emptyDir: {}}
      containers:
      - name: worker
        image: tessera/worker:test
        args: [--threads, "2"]
        volumeMounts:
        - {name: data, mountPath: /data}
        - {name: old, mountPath: /etc/tessera}
)";

TEST(DesiredPod, BuiltInTrainerRunsTheAgentOnTheAttemptsConfig) {
  const Json pod = DesiredPod(Job(kTrainerJob), 1, 3);
  const Json& worker = Container(pod, "worker");
  EXPECT_EQ(worker["command"],
            Json::array({"tessera-worker", "agent", "--config", "/etc/tessera/job.yaml"}));
  EXPECT_EQ(worker["args"], Json::array({"--threads", "2"}));  // the template's args follow
  // The template's mount at /etc/tessera and its volume named tessera-config are replaced.
  EXPECT_EQ(worker["volumeMounts"], Json::parse(R"([{"name": "data", "mountPath": "/data"},
                            {"name": "tessera-config", "mountPath": "/etc/tessera",
                             "readOnly": true}])"));
  EXPECT_EQ(pod["spec"]["volumes"], Json::parse(R"([{"name": "data", "hostPath": {"path": "/data"}},
                            {"name": "tessera-config",
                             "configMap": {"name": "tiny-config-3-u"}}])"));
}

TEST(DesiredPod, OwnCommandGetsNoTrainerConfig) {
  const Json pod = DesiredPod(Job(kJob), 0, 0);
  const Json& worker = Container(pod, "worker");
  EXPECT_EQ(worker["command"], Json::array({"python", "train.py"}));
  EXPECT_FALSE(worker.contains("volumeMounts"));
  EXPECT_FALSE(pod["spec"].contains("volumes"));
  EXPECT_FALSE(RunsBuiltInTrainer(Job(kJob)));
}

// One ConfigMap per attempt and per job: the job's uid tells a job applied again under its
// name from the earlier one.
TEST(TrainerConfigMapName, IsPerAttemptAndPerJob) {
  api::TrainingJob job = Job(kTrainerJob);
  job.metadata.uid = "3f2a9c1b-77d0-4e61-9a52-0c1d2e3f4a5b";
  EXPECT_EQ(TrainerConfigMapName(job, 0), "tiny-config-0-3f2a9c1b");
  EXPECT_EQ(TrainerConfigMapName(job, 12), "tiny-config-12-3f2a9c1b");
  job.metadata.uid = "";
  EXPECT_EQ(TrainerConfigMapName(job, 1), "tiny-config-1");
}

TEST(DesiredTrainerConfigMap, HoldsTheJobAsATrainingJobFileWithoutTemplate) {
  const api::TrainingJob job = Job(kTrainerJob);
  const Json cm = DesiredTrainerConfigMap(job, 2);
  EXPECT_EQ(cm["kind"], "ConfigMap");
  EXPECT_EQ(cm["metadata"]["name"], "tiny-config-2-u");
  EXPECT_EQ(cm["metadata"]["namespace"], "ml");
  EXPECT_EQ(cm["metadata"]["labels"]["tessera.dev/job-name"], "tiny");
  EXPECT_EQ(cm["metadata"]["labels"]["tessera.dev/attempt"], "2");
  EXPECT_EQ(cm["metadata"]["ownerReferences"][0]["uid"], "u");
  EXPECT_EQ(cm["metadata"]["ownerReferences"][0]["controller"], true);
  // The file decodes back to the same spec (less the template) and validates.
  const std::string text = cm["data"]["job.yaml"];
  api::DecodeResult back = api::DecodeYaml(text);
  ASSERT_TRUE(back.errors.empty()) << api::FormatError(back.errors.front()) << "\n" << text;
  // What `tessera-worker --config` checks first (tessera validate's answers).
  const api::ParsedYaml parsed = api::ParseYaml(text);
  ASSERT_TRUE(parsed.ok()) << parsed.error;
  ASSERT_EQ(parsed.documents.size(), 1u);
  EXPECT_TRUE(api::ValidateDocument(parsed.documents[0]).empty()) << text;
  api::ApplyDefaults(*back.job);
  EXPECT_EQ(back.job->metadata.name, "tiny");
  EXPECT_EQ(back.job->metadata.name_space, "ml");
  Json want = api::EncodeJson(job)["spec"];
  want.erase("template");
  EXPECT_EQ(api::EncodeJson(*back.job)["spec"], want);
}

TEST(DesiredPodGroup, FollowsTheSchedulersApi) {
  struct Case {
    const char* name;
    std::string scheduling;
    std::string api_version;
    Json spec;
  };
  const Case cases[] = {
      {"volcano",
       "schedulerName: volcano, queue: research, priorityClassName: high",
       "scheduling.volcano.sh/v1beta1",
       {{"minMember", 4}, {"queue", "research"}, {"priorityClassName", "high"}}},
      {"volcano without queue or priority",
       "schedulerName: volcano",
       "scheduling.volcano.sh/v1beta1",
       {{"minMember", 4}}},
      {"volcano without gang",
       "schedulerName: volcano, gang: false",
       "scheduling.volcano.sh/v1beta1",
       {{"minMember", 1}}},
      {"scheduler-plugins",
       "schedulerName: scheduler-plugins, startupTimeoutSeconds: 120",
       "scheduling.x-k8s.io/v1alpha1",
       {{"minMember", 4}, {"scheduleTimeoutSeconds", 120}}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Json pg = DesiredPodGroup(ScheduledJob(c.scheduling));
    EXPECT_EQ(pg["apiVersion"], c.api_version);
    EXPECT_EQ(pg["kind"], "PodGroup");
    EXPECT_EQ(pg["metadata"]["name"], "gpt");
    EXPECT_EQ(pg["metadata"]["namespace"], "ml");
    EXPECT_EQ(pg["metadata"]["ownerReferences"][0]["uid"], "uid-1");
    EXPECT_EQ(pg["spec"], c.spec);
  }
  EXPECT_EQ(PodGroupApiOf(ScheduledJob("schedulerName: default-scheduler")), std::nullopt);
}

// How a pod joins its PodGroup, and which scheduler it asks for: Volcano's own always;
// scheduler-plugins' unless the template names its scheduler.
TEST(DesiredPod, JoinsThePodGroupOfItsScheduler) {
  struct Case {
    const char* name;
    std::string scheduling;
    std::string pod_spec;
    std::optional<std::string> group_annotation;  // scheduling.k8s.io/group-name
    std::optional<std::string> group_label;       // scheduling.x-k8s.io/pod-group
    std::optional<std::string> scheduler_name;
  };
  const Case cases[] = {
      {"volcano", "schedulerName: volcano", "{}", "gpt", std::nullopt, "volcano"},
      {"volcano overrides the template's scheduler", "schedulerName: volcano",
       "{schedulerName: mine}", "gpt", std::nullopt, "volcano"},
      {"scheduler-plugins", "schedulerName: scheduler-plugins", "{}", std::nullopt, "gpt",
       "scheduler-plugins-scheduler"},
      {"scheduler-plugins keeps the template's scheduler", "schedulerName: scheduler-plugins",
       "{schedulerName: mine}", std::nullopt, "gpt", "mine"},
      {"another scheduler: no PodGroup", "schedulerName: kueue-sched", "{}", std::nullopt,
       std::nullopt, "kueue-sched"},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    const Json pod = DesiredPod(ScheduledJob(c.scheduling, c.pod_spec), 1, 0);
    const Json& meta = pod["metadata"];
    auto at = [](const Json& map, const char* key) -> std::optional<std::string> {
      if (!map.is_object() || !map.contains(key))
        return std::nullopt;
      return map[key].get<std::string>();
    };
    EXPECT_EQ(at(meta.value("annotations", Json::object()), "scheduling.k8s.io/group-name"),
              c.group_annotation);
    EXPECT_EQ(at(meta["labels"], "scheduling.x-k8s.io/pod-group"), c.group_label);
    EXPECT_EQ(at(pod["spec"], "schedulerName"), c.scheduler_name);
  }
}

TEST(DesiredService, HeadlessPublishingNotReadyAddresses) {
  const Json svc = DesiredService(Job(kJob));
  EXPECT_EQ(svc["metadata"]["name"], "gpt");
  EXPECT_EQ(svc["spec"]["clusterIP"], "None");
  EXPECT_EQ(svc["spec"]["publishNotReadyAddresses"], true);
  EXPECT_FALSE(svc["spec"].contains("selector"));  // the controller writes its EndpointSlice
  EXPECT_EQ(svc["spec"]["ports"][0]["port"], 29500);
  EXPECT_EQ(svc["metadata"]["labels"]["tessera.dev/job-name"], "gpt");
  EXPECT_EQ(svc["metadata"]["ownerReferences"][0]["uid"], "uid-1");
}

Json CachedPod(const std::string& name, const std::string& ip, bool deleting = false) {
  Json pod = {{"metadata", {{"name", name}, {"uid", "u-" + name}}},
              {"spec", {{"nodeName", "node-1"}}},
              {"status", {{"phase", "Running"}}}};
  if (!ip.empty())
    pod["status"]["podIP"] = ip;
  if (deleting)
    pod["metadata"]["deletionTimestamp"] = "2026-12-05T00:00:00Z";
  return pod;
}

TEST(DesiredEndpointSlice, OneEndpointPerAddressedPodInNameOrder) {
  const Json w2 = CachedPod("gpt-worker-2", "10.0.0.12");
  const Json w0 = CachedPod("gpt-worker-0", "10.0.0.10");
  const Json w1 = CachedPod("gpt-worker-1", "");  // not started: no IP yet
  const Json w3 = CachedPod("gpt-worker-3", "10.0.0.13", /*deleting=*/true);
  const Json slice = DesiredEndpointSlice(Job(kJob), {&w2, &w0, &w1, &w3});
  EXPECT_EQ(slice["apiVersion"], "discovery.k8s.io/v1");
  EXPECT_EQ(slice["metadata"]["name"], "gpt");
  EXPECT_EQ(slice["metadata"]["labels"]["kubernetes.io/service-name"], "gpt");
  EXPECT_EQ(slice["metadata"]["labels"]["endpointslice.kubernetes.io/managed-by"],
            "tessera-controller.tessera.dev");
  EXPECT_EQ(slice["metadata"]["ownerReferences"][0]["uid"], "uid-1");
  EXPECT_EQ(slice["addressType"], "IPv4");
  ASSERT_EQ(slice["endpoints"].size(), 2u);
  const Json& first = slice["endpoints"][0];
  EXPECT_EQ(first["addresses"], Json::array({"10.0.0.10"}));
  EXPECT_EQ(first["hostname"], "gpt-worker-0");
  EXPECT_EQ(first["nodeName"], "node-1");
  EXPECT_EQ(first["conditions"]["ready"], true);
  EXPECT_EQ(first["targetRef"]["uid"], "u-gpt-worker-0");
  EXPECT_EQ(slice["endpoints"][1]["hostname"], "gpt-worker-2");
  EXPECT_EQ(slice["ports"][0]["port"], 29500);
}

TEST(DesiredEndpointSlice, AddressTypeFollowsThePodsAndLeavesOutTheOtherFamily) {
  const Json v6 = CachedPod("gpt-worker-0", "fd00::10");
  const Json v4 = CachedPod("gpt-worker-1", "10.0.0.11");
  const Json slice = DesiredEndpointSlice(Job(kJob), {&v6, &v4});
  EXPECT_EQ(slice["addressType"], "IPv6");
  ASSERT_EQ(slice["endpoints"].size(), 1u);
  EXPECT_EQ(slice["endpoints"][0]["addresses"][0], "fd00::10");
  EXPECT_TRUE(DesiredEndpointSlice(Job(kJob), {})["endpoints"].empty());
}

TEST(DesiredSecret, HoldsTheTokenUnderItsKey) {
  const Json secret = DesiredSecret(Job(kJob), "abc");
  EXPECT_EQ(secret["metadata"]["name"], "gpt-rendezvous");
  EXPECT_EQ(secret["stringData"]["token"], "abc");
  EXPECT_EQ(secret["metadata"]["ownerReferences"][0]["controller"], true);
}

TEST(NewRendezvousToken, RandomHex) {
  const std::string a = NewRendezvousToken();
  const std::string b = NewRendezvousToken();
  EXPECT_EQ(a.size(), 64u);
  EXPECT_EQ(a.find_first_not_of("0123456789abcdef"), std::string::npos);
  EXPECT_NE(a, b);
}

}  // namespace
}  // namespace tessera::reconcile
