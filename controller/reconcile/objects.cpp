#include "controller/reconcile/objects.h"

#include <openssl/rand.h>

#include <algorithm>
#include <cstdlib>
#include <set>

#include "api/codec.h"
#include "api/contract.h"
#include "api/crd.h"
#include "api/version.h"
#include "controller/k8s/object.h"
#include "controller/reconcile/observe.h"

namespace tessera::reconcile {
namespace {

constexpr char kGpuResource[] = "nvidia.com/gpu";
constexpr char kVolcano[] = "volcano";
constexpr char kSchedulerPlugins[] = "scheduler-plugins";
// How a pod names its PodGroup: Volcano reads this annotation, scheduler-plugins' coscheduling
// plugin this label.
constexpr char kVolcanoGroupAnnotation[] = "scheduling.k8s.io/group-name";
constexpr char kSchedulerPluginsGroupLabel[] = "scheduling.x-k8s.io/pod-group";
// The endpointslice.kubernetes.io/managed-by value of the slices this controller writes;
// kube-controller-manager's EndpointSlice controller leaves slices of other managers alone.
constexpr char kEndpointSliceManager[] = "tessera-controller.tessera.dev";

Json ObjectMeta(const api::TrainingJob& job, const std::string& name) {
  return Json{{"name", name},
              {"namespace", job.metadata.name_space},
              {"labels", JobObjectLabels(job.metadata.name)},
              {"ownerReferences", Json::array({OwnerReferenceTo(job)})}};
}

// Copies string-valued entries of `from` (a labels or annotations map) into `to`.
void CopyStringMap(const Json& from, Json& to) {
  if (!from.is_object())
    return;
  for (const auto& [key, value] : from.items()) {
    if (value.is_string())
      to[key] = value;
  }
}

// The container that runs the worker agent: the one named `worker`, else the first.
Json& WorkerContainer(Json& spec) {
  Json& containers = spec["containers"];
  if (!containers.is_array() || containers.empty()) {
    containers =
        Json::array({Json{{"name", api::kWorkerContainerName}, {"image", DefaultWorkerImage()}}});
  }
  for (Json& container : containers) {
    if (container.value("name", "") == api::kWorkerContainerName)
      return container;
  }
  return containers.front();
}

void SetEnvironment(Json& container, const api::TrainingJob& job, int64_t index, int64_t attempt) {
  const auto contract = api::WorkerEnvironment(
      job, attempt, index, api::RendezvousEndpoint(job.metadata.name, job.metadata.name_space),
      /*rdzv_token=*/"");
  std::set<std::string> ours;
  for (const auto& [name, value] : contract)
    ours.insert(name);
  Json env = Json::array();
  if (container.contains("env") && container["env"].is_array()) {
    for (const Json& var : container["env"]) {
      if (!ours.count(var.value("name", "")))
        env.push_back(var);
    }
  }
  for (const auto& [name, value] : contract) {
    if (name == "TESSERA_RDZV_TOKEN") {
      env.push_back({{"name", name},
                     {"valueFrom",
                      {{"secretKeyRef",
                        {{"name", api::RendezvousSecretName(job.metadata.name)},
                         {"key", api::kRendezvousTokenKey}}}}}});
    } else {
      env.push_back({{"name", name}, {"value", value}});
    }
  }
  container["env"] = std::move(env);
}

void SetGpus(Json& container, int64_t gpus) {
  if (gpus <= 0)
    return;
  Json& resources = container["resources"];
  if (!resources.is_object())
    resources = Json::object();
  for (const char* kind : {"limits", "requests"}) {
    if (!resources[kind].is_object())
      resources[kind] = Json::object();
    resources[kind][kGpuResource] = std::to_string(gpus);
  }
}

void AddPort(Json& container, const std::string& name, int64_t port) {
  Json& ports = container["ports"];
  if (!ports.is_array())
    ports = Json::array();
  for (const Json& p : ports) {
    if (p.value("name", "") == name || p.value("containerPort", int64_t{-1}) == port)
      return;
  }
  ports.push_back({{"name", name}, {"containerPort", port}, {"protocol", "TCP"}});
}

// Sets `entry` (matched by its "name", or by `key` == entry[key]) in the array `list`,
// replacing every element with the same name or the same `key` value.
void ReplaceEntry(Json& list, const Json& entry, const char* key) {
  if (!list.is_array())
    list = Json::array();
  Json kept = Json::array();
  for (const Json& e : list) {
    const bool same_name = e.value("name", "") == entry["name"];
    const bool same_key = key != nullptr && e.contains(key) && e[key] == entry[key];
    if (!same_name && !same_key)
      kept.push_back(e);
  }
  kept.push_back(entry);
  list = std::move(kept);
}

// The built-in trainer's entry point, and its configuration mounted from the attempt's
// ConfigMap.
void SetTrainerCommand(Json& spec, Json& container, const api::TrainingJob& job, int64_t attempt) {
  container["command"] = Json::array({"tessera-worker", "agent", "--config", kTrainerConfigPath});
  ReplaceEntry(
      container["volumeMounts"],
      Json{{"name", kTrainerConfigVolume}, {"mountPath", kTrainerConfigDir}, {"readOnly", true}},
      "mountPath");
  ReplaceEntry(spec["volumes"],
               Json{{"name", kTrainerConfigVolume},
                    {"configMap", {{"name", TrainerConfigMapName(job, attempt)}}}},
               nullptr);
}

}  // namespace

std::string DefaultWorkerImage() {
  return "tessera/worker:" + GetBuildInfo().version;
}

Json OwnerReferenceTo(const api::TrainingJob& job) {
  return Json{{"apiVersion", api::kApiVersion}, {"kind", api::kKind}, {"name", job.metadata.name},
              {"uid", job.metadata.uid},        {"controller", true}, {"blockOwnerDeletion", true}};
}

Json JobObjectLabels(const std::string& job_name) {
  return Json{{api::kLabelJobName, job_name},
              {"app.kubernetes.io/name", "tessera"},
              {"app.kubernetes.io/instance", job_name},
              {"app.kubernetes.io/managed-by", "tessera-controller"}};
}

std::optional<PodGroupApi> PodGroupApiOf(const api::TrainingJob& job) {
  const std::string& name = job.spec.scheduling.scheduler_name;
  if (name == kVolcano)
    return PodGroupApi{kVolcano, "scheduling.volcano.sh", "v1beta1", "podgroups", kVolcano};
  if (name == kSchedulerPlugins) {
    return PodGroupApi{kSchedulerPlugins, "scheduling.x-k8s.io", "v1alpha1", "podgroups",
                       "scheduler-plugins-scheduler"};
  }
  return std::nullopt;
}

Json DesiredPodGroup(const api::TrainingJob& job) {
  const std::optional<PodGroupApi> pg = PodGroupApiOf(job);
  if (!pg)
    std::abort();  // a caller's bug: no gang scheduler, no PodGroup
  const api::SchedulingSpec& scheduling = job.spec.scheduling;
  Json spec{{"minMember", scheduling.gang ? job.spec.workers : int64_t{1}}};
  if (pg->scheduler == kVolcano) {
    if (!scheduling.queue.empty())
      spec["queue"] = scheduling.queue;
    if (!scheduling.priority_class_name.empty())
      spec["priorityClassName"] = scheduling.priority_class_name;
  } else {
    spec["scheduleTimeoutSeconds"] = scheduling.startup_timeout_seconds;
  }
  return Json{{"apiVersion", pg->group + "/" + pg->version},
              {"kind", "PodGroup"},
              {"metadata", ObjectMeta(job, api::PodGroupName(job.metadata.name))},
              {"spec", spec}};
}

Json DesiredService(const api::TrainingJob& job) {
  return Json{{"apiVersion", "v1"},
              {"kind", "Service"},
              {"metadata", ObjectMeta(job, api::ServiceName(job.metadata.name))},
              {"spec",
               {{"clusterIP", "None"},
                {"publishNotReadyAddresses", true},
                {"ports", Json::array({{{"name", "rendezvous"},
                                        {"port", api::kRendezvousPort},
                                        {"targetPort", api::kRendezvousPort},
                                        {"protocol", "TCP"}},
                                       {{"name", "metrics"},
                                        {"port", job.spec.metrics.port},
                                        {"targetPort", job.spec.metrics.port},
                                        {"protocol", "TCP"}}})}}}};
}

Json DesiredEndpointSlice(const api::TrainingJob& job, const std::vector<const Json*>& pods) {
  std::vector<const Json*> sorted(pods);
  std::sort(sorted.begin(), sorted.end(), [](const Json* a, const Json* b) {
    return k8s::MetaString(*a, "name") < k8s::MetaString(*b, "name");
  });
  std::string family;
  Json endpoints = Json::array();
  for (const Json* pod : sorted) {
    const Json& meta = k8s::Metadata(*pod);
    const std::string ip = k8s::StringAt(k8s::ObjectAt(*pod, "status"), "podIP");
    if (ip.empty() || Deleting(*pod))
      continue;
    const std::string ip_family = ip.find(':') == std::string::npos ? "IPv4" : "IPv6";
    if (family.empty())
      family = ip_family;
    if (ip_family != family)
      continue;
    const std::string name = k8s::StringAt(meta, "name");
    Json endpoint = {{"addresses", Json::array({ip})},
                     {"conditions", {{"ready", true}, {"serving", true}, {"terminating", false}}},
                     {"hostname", name},
                     {"targetRef",
                      {{"kind", "Pod"},
                       {"namespace", job.metadata.name_space},
                       {"name", name},
                       {"uid", k8s::StringAt(meta, "uid")}}}};
    const std::string node = k8s::StringAt(k8s::ObjectAt(*pod, "spec"), "nodeName");
    if (!node.empty())
      endpoint["nodeName"] = node;
    endpoints.push_back(std::move(endpoint));
  }
  Json meta = ObjectMeta(job, api::ServiceName(job.metadata.name));
  meta["labels"]["kubernetes.io/service-name"] = api::ServiceName(job.metadata.name);
  meta["labels"]["endpointslice.kubernetes.io/managed-by"] = kEndpointSliceManager;
  return Json{
      {"apiVersion", "discovery.k8s.io/v1"},
      {"kind", "EndpointSlice"},
      {"metadata", meta},
      {"addressType", family.empty() ? "IPv4" : family},
      {"endpoints", endpoints},
      {"ports",
       Json::array({{{"name", "rendezvous"}, {"port", api::kRendezvousPort}, {"protocol", "TCP"}},
                    {{"name", "metrics"}, {"port", job.spec.metrics.port}, {"protocol", "TCP"}}})}};
}

Json DesiredSecret(const api::TrainingJob& job, const std::string& token) {
  return Json{{"apiVersion", "v1"},
              {"kind", "Secret"},
              {"metadata", ObjectMeta(job, api::RendezvousSecretName(job.metadata.name))},
              {"type", "Opaque"},
              {"stringData", {{api::kRendezvousTokenKey, token}}}};
}

std::string TrainerConfigMapName(const api::TrainingJob& job, int64_t attempt) {
  std::string name = job.metadata.name + "-config-" + std::to_string(attempt);
  if (!job.metadata.uid.empty())
    name += "-" + job.metadata.uid.substr(0, 8);
  return name;
}

bool RunsBuiltInTrainer(const api::TrainingJob& job) {
  return job.spec.trainer.has_value();
}

Json DesiredTrainerConfigMap(const api::TrainingJob& job, int64_t attempt) {
  const Json encoded = api::EncodeJson(job);
  Json spec = encoded.value("spec", Json::object());
  spec.erase("template");
  // ordered_json keeps apiVersion and kind first, as a person would write the file.
  nlohmann::ordered_json document;
  document["apiVersion"] = api::kApiVersion;
  document["kind"] = api::kKind;
  document["metadata"] = {{"name", job.metadata.name}, {"namespace", job.metadata.name_space}};
  document["spec"] = nlohmann::ordered_json::parse(spec.dump());
  Json meta = ObjectMeta(job, TrainerConfigMapName(job, attempt));
  meta["labels"][api::kLabelAttempt] = std::to_string(attempt);
  return Json{{"apiVersion", "v1"},
              {"kind", "ConfigMap"},
              {"metadata", meta},
              {"data", {{kTrainerConfigKey, api::ToYaml(document)}}}};
}

std::string NewRendezvousToken() {
  unsigned char bytes[32];
  if (RAND_bytes(bytes, sizeof(bytes)) != 1)
    std::abort();  // no CSPRNG: nothing safe to fall back to
  static const char* hex = "0123456789abcdef";
  std::string token;
  token.reserve(2 * sizeof(bytes));
  for (unsigned char b : bytes) {
    token.push_back(hex[b >> 4]);
    token.push_back(hex[b & 15]);
  }
  return token;
}

Json DesiredPod(const api::TrainingJob& job, int64_t index, int64_t attempt) {
  const std::string& job_name = job.metadata.name;
  const Json& tmpl = job.spec.pod_template.is_object() ? job.spec.pod_template : Json::object();
  const Json tmpl_meta = tmpl.value("metadata", Json::object());

  Json labels = Json::object();
  CopyStringMap(tmpl_meta.value("labels", Json::object()), labels);
  for (const auto& [key, value] : api::WorkerPodLabels(job_name, index, attempt))
    labels[key] = value;
  Json annotations = Json::object();
  CopyStringMap(tmpl_meta.value("annotations", Json::object()), annotations);
  const std::optional<PodGroupApi> pg = PodGroupApiOf(job);
  if (pg && pg->scheduler == kVolcano)
    annotations[kVolcanoGroupAnnotation] = api::PodGroupName(job_name);
  else if (pg)
    labels[kSchedulerPluginsGroupLabel] = api::PodGroupName(job_name);

  const std::string pod_name = api::WorkerPodName(job_name, index);
  Json meta{{"name", pod_name},
            {"namespace", job.metadata.name_space},
            {"labels", labels},
            {"ownerReferences", Json::array({OwnerReferenceTo(job)})}};
  if (!annotations.empty())
    meta["annotations"] = annotations;

  Json spec = tmpl.value("spec", Json::object());
  if (!spec.is_object())
    spec = Json::object();
  spec["hostname"] = pod_name;
  spec["subdomain"] = api::ServiceName(job_name);
  spec["restartPolicy"] = "Never";
  if (pg) {
    const bool own = spec.contains("schedulerName") && spec["schedulerName"].is_string() &&
                     !spec["schedulerName"].get_ref<const std::string&>().empty();
    if (pg->scheduler == kVolcano || !own)
      spec["schedulerName"] = pg->default_scheduler_name;
  } else if (!job.spec.scheduling.scheduler_name.empty()) {
    spec["schedulerName"] = job.spec.scheduling.scheduler_name;
  }
  if (!job.spec.scheduling.priority_class_name.empty())
    spec["priorityClassName"] = job.spec.scheduling.priority_class_name;

  Json& container = WorkerContainer(spec);
  SetEnvironment(container, job, index, attempt);
  SetGpus(container, job.spec.gpus_per_worker);
  AddPort(container, "rendezvous", api::kRendezvousPort);
  AddPort(container, "metrics", job.spec.metrics.port);
  if (RunsBuiltInTrainer(job))
    SetTrainerCommand(spec, container, job, attempt);

  return Json{{"apiVersion", "v1"}, {"kind", "Pod"}, {"metadata", meta}, {"spec", spec}};
}

}  // namespace tessera::reconcile
