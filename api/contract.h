// The contract between the controller (or the local runner) and the worker pods of a job
// (DESIGN.md §3): object names, labels and the environment of every worker container. Pure
// functions of the job; nothing here creates objects or reads the environment.
#pragma once

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "api/job.h"

namespace tessera::api {

// The TCP port of the rendezvous store that rank 0 serves.
inline constexpr int kRendezvousPort = 29500;
// MASTER_PORT for torchrun-compatible scripts: one above the store, so a script's own TCPStore
// never collides with Tessera's.
inline constexpr int kTorchMasterPort = 29501;
// The container of the pod template that runs the worker (and whose `command`, if any, replaces
// the built-in trainer).
inline constexpr char kWorkerContainerName[] = "worker";

inline constexpr char kLabelJobName[] = "tessera.dev/job-name";
inline constexpr char kLabelWorkerIndex[] = "tessera.dev/worker-index";
inline constexpr char kLabelAttempt[] = "tessera.dev/attempt";
// The key in the `J-rendezvous` Secret that holds the token.
inline constexpr char kRendezvousTokenKey[] = "token";

// Headless Service (and PodGroup) name: the job's name.
std::string ServiceName(const std::string& job_name);
std::string PodGroupName(const std::string& job_name);
// `J-rendezvous`.
std::string RendezvousSecretName(const std::string& job_name);
// `J-worker-<index>`; also the pod's hostname.
std::string WorkerPodName(const std::string& job_name, int64_t index);
// `J-worker-0.J.N.svc:29500`: rank 0's address through the headless Service.
std::string RendezvousEndpoint(const std::string& job_name, const std::string& name_space);
// `data=2,pipeline=2,tensor=1`, after ApplyDefaults.
std::string MeshString(const TrainingJob& job);

// Labels of worker pod `index` in `attempt`: the three tessera.dev/ keys plus
// app.kubernetes.io/{name,instance,component,managed-by}.
std::map<std::string, std::string> WorkerPodLabels(const std::string& job_name, int64_t index,
                                                   int64_t attempt);
// The labels that select every pod of a job (any attempt), for the Service and for listing.
std::map<std::string, std::string> JobSelector(const std::string& job_name);

// The environment of worker `node_rank` (0-based pod index) of `job` (after ApplyDefaults), in a
// fixed order: TESSERA_* identity, mesh, rendezvous, metrics and checkpoint variables, then the
// torchrun-compatible MASTER_ADDR, MASTER_PORT, WORLD_SIZE, NODE_RANK and PET_* variables.
// MASTER_ADDR is the host part of `rdzv_endpoint`. RANK and LOCAL_RANK are added per process by
// the worker agent, not here. TESSERA_CHECKPOINT_DIR is empty when the job keeps no checkpoints.
std::vector<std::pair<std::string, std::string>> WorkerEnvironment(const TrainingJob& job,
                                                                   int64_t attempt,
                                                                   int64_t node_rank,
                                                                   const std::string& rdzv_endpoint,
                                                                   const std::string& rdzv_token);

}  // namespace tessera::api
