// The Kubernetes objects a TrainingJob owns (DESIGN.md §3), as pure functions of the job: the
// headless Service, the rendezvous Secret, the built-in trainer's ConfigMap and the worker Pods.
// Nothing here talks to a server, reads a clock or keeps state; reconcile.h decides when to create
// or delete them.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "api/job.h"

namespace tessera::reconcile {

using Json = nlohmann::json;

// The image of the worker container when the job has no template (built-in trainer only).
std::string DefaultWorkerImage();

// An ownerReference to `job` with controller=true and blockOwnerDeletion=true, so the garbage
// collector deletes the object with its job and no other controller adopts it.
Json OwnerReferenceTo(const api::TrainingJob& job);

// The labels of the job's Service and Secret: tessera.dev/job-name and app.kubernetes.io/*.
Json JobObjectLabels(const std::string& job_name);

// The PodGroup API of a gang scheduler (DESIGN.md §3): the CRD the scheduler reads, and what
// the pods carry to name their group.
struct PodGroupApi {
  std::string scheduler;  // spec.scheduling.schedulerName: "volcano" or "scheduler-plugins"
  std::string group;      // scheduling.volcano.sh | scheduling.x-k8s.io
  std::string version;    // v1beta1 | v1alpha1
  std::string resource;   // "podgroups"
  // The pods' schedulerName unless the template sets one: "volcano" |
  // "scheduler-plugins-scheduler" (the name scheduler-plugins' second-scheduler chart uses).
  std::string default_scheduler_name;
};

// The PodGroup API for the job's spec.scheduling.schedulerName; nullopt for any other
// scheduler (no PodGroup).
std::optional<PodGroupApi> PodGroupApiOf(const api::TrainingJob& job);

// The PodGroup `J` (PodGroupApiOf(job) must be set), owned by the job, labelled like the
// Service: spec.minMember = workers (1 when scheduling.gang is false); for Volcano also
// spec.queue and spec.priorityClassName when set; for scheduler-plugins
// spec.scheduleTimeoutSeconds = scheduling.startupTimeoutSeconds.
Json DesiredPodGroup(const api::TrainingJob& job);

// The headless Service `J` (clusterIP None, publishNotReadyAddresses) that gives every worker
// the DNS name J-worker-<i>.J.N.svc before it is ready; ports: rendezvous and metrics. It has
// no selector: its one EndpointSlice (below) is written by the controller, not by
// kube-controller-manager, whose endpoint controllers match every pod event of a namespace
// against every Service in it that has a selector (at 1000 jobs x 8 workers in one namespace
// that took more CPU than the rest of the control plane's extra work; docs/controller.md).
Json DesiredService(const api::TrainingJob& job);

// The EndpointSlice `J` of the Service `J` (label kubernetes.io/service-name, managed by
// tessera): one endpoint per pod of the job that has an IP and is not being deleted, in pod
// name order, with its hostname (so cluster DNS answers J-worker-<i>.J.N.svc), node and a
// reference to the pod; ready whether or not the pod is (the Service publishes not-ready
// addresses). `pods` are the job's cached pods. The address type follows the first pod's IP
// (IPv6 when it holds a ':'); a pod of the other family is left out.
Json DesiredEndpointSlice(const api::TrainingJob& job, const std::vector<const Json*>& pods);

// The Secret `J-rendezvous` holding `token` under the key `token` (api/contract.h).
Json DesiredSecret(const api::TrainingJob& job, const std::string& token);

// Where a worker pod of a job with spec.trainer finds its configuration: the ConfigMap
// TrainerConfigMapName(J, attempt), key kTrainerConfigKey, mounted read-only at
// kTrainerConfigDir; the container runs `tessera-worker agent --config kTrainerConfigPath`.
inline constexpr char kTrainerConfigKey[] = "job.yaml";
inline constexpr char kTrainerConfigDir[] = "/etc/tessera";
inline constexpr char kTrainerConfigPath[] = "/etc/tessera/job.yaml";
inline constexpr char kTrainerConfigVolume[] = "tessera-config";

// `J-config-<attempt>-<the first 8 characters of the job's uid>`: one per attempt, so an
// attempt's pods read the spec the attempt was started with, even if the job is edited while it
// runs; and one per job, so a job deleted and applied again under its name (how its trainer is
// changed) never finds the earlier job's, not yet garbage-collected, and takes it for its own.
std::string TrainerConfigMapName(const api::TrainingJob& job, int64_t attempt);

// Whether worker pods of `job` run the built-in trainer: spec.trainer is set (validation
// refuses it together with a command in the worker container).
bool RunsBuiltInTrainer(const api::TrainingJob& job);

// The ConfigMap TrainerConfigMapName(J, attempt) of a job with spec.trainer (ApplyDefaults
// already applied), owned by the job, labelled like the Service plus tessera.dev/attempt. Key
// kTrainerConfigKey holds the job as a TrainingJob YAML document (apiVersion, kind,
// metadata.name and namespace, and spec without spec.template), the file `tessera-worker
// --config` reads and checks like `tessera validate`.
Json DesiredTrainerConfigMap(const api::TrainingJob& job, int64_t attempt);

// A fresh random rendezvous token: 32 bytes from the system's CSPRNG, hex encoded (64
// characters). Never empty: aborts if no random bytes can be had (an internal invariant).
std::string NewRendezvousToken();

// Worker pod `index` of `attempt` for `job` (ApplyDefaults already applied), built from
// spec.template:
//  - metadata: the template's labels and annotations (e.g. kwok's failure label), then the
//    contract's labels (api::WorkerPodLabels) on top; owner = the job;
//  - spec: the template's spec with hostname J-worker-<i>, subdomain J, restartPolicy Never,
//    scheduling.schedulerName and priorityClassName when set;
//  - with a gang scheduler (PodGroupApiOf): its schedulerName (the template's, when it sets
//    one, for scheduler-plugins; always "volcano" for Volcano) and the PodGroup's name, as the
//    annotation scheduling.k8s.io/group-name (Volcano) or the label
//    scheduling.x-k8s.io/pod-group (scheduler-plugins);
//  - the container named `worker` (created with DefaultWorkerImage() when the template has no
//    containers; the first container when none is so named) gets the contract environment
//    (api::WorkerEnvironment) after its own variables, replacing any of the same name, with
//    TESSERA_RDZV_TOKEN read from the Secret (valueFrom.secretKeyRef), nvidia.com/gpu
//    requests and limits = gpusPerWorker (when > 0), and named ports rendezvous and metrics
//    unless the template already declares those ports;
//  - with the built-in trainer (RunsBuiltInTrainer): that container's command is
//    `tessera-worker agent --config /etc/tessera/job.yaml` (its `args`, if any, follow, e.g.
//    `--threads 2`), and the ConfigMap TrainerConfigMapName(J, attempt) is mounted read-only at
//    /etc/tessera as the volume `tessera-config` (replacing a volume or mount of that name or
//    path in the template).
Json DesiredPod(const api::TrainingJob& job, int64_t index, int64_t attempt);

}  // namespace tessera::reconcile
