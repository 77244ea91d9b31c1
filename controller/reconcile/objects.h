// The Kubernetes objects a TrainingJob owns (DESIGN.md §3), as pure functions of the job: the
// headless Service, the rendezvous Secret and the worker Pods. Nothing here talks to a server,
// reads a clock or keeps state; reconcile.h decides when to create or delete them.
#pragma once

#include <nlohmann/json.hpp>

#include <cstdint>
#include <string>

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

// The headless Service `J` (clusterIP None, publishNotReadyAddresses) that gives every worker
// the DNS name J-worker-<i>.J.N.svc before it is ready; ports: rendezvous and metrics.
Json DesiredService(const api::TrainingJob& job);

// The Secret `J-rendezvous` holding `token` under the key `token` (api/contract.h).
Json DesiredSecret(const api::TrainingJob& job, const std::string& token);

// A fresh random rendezvous token: 32 bytes from the system's CSPRNG, hex encoded (64
// characters). Never empty: aborts if no random bytes can be had (an internal invariant).
std::string NewRendezvousToken();

// Worker pod `index` of `attempt` for `job` (ApplyDefaults already applied), built from
// spec.template:
//  - metadata: the template's labels and annotations (e.g. kwok's failure label), then the
//    contract's labels (api::WorkerPodLabels) on top; owner = the job;
//  - spec: the template's spec with hostname J-worker-<i>, subdomain J, restartPolicy Never,
//    scheduling.schedulerName and priorityClassName when set;
//  - the container named `worker` (created with DefaultWorkerImage() when the template has no
//    containers; the first container when none is so named) gets the contract environment
//    (api::WorkerEnvironment) after its own variables, replacing any of the same name, with
//    TESSERA_RDZV_TOKEN read from the Secret (valueFrom.secretKeyRef), nvidia.com/gpu
//    requests and limits = gpusPerWorker (when > 0), and named ports rendezvous and metrics
//    unless the template already declares those ports.
Json DesiredPod(const api::TrainingJob& job, int64_t index, int64_t attempt);

}  // namespace tessera::reconcile
