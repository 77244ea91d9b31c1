// Object names, labels and worker environment of DESIGN.md §3.
#include "api/contract.h"

#include "api/rules.h"

namespace tessera::api {

std::string ServiceName(const std::string& job_name) {
  return job_name;
}

std::string PodGroupName(const std::string& job_name) {
  return job_name;
}

std::string RendezvousSecretName(const std::string& job_name) {
  return job_name + "-rendezvous";
}

std::string WorkerPodName(const std::string& job_name, int64_t index) {
  return job_name + "-worker-" + std::to_string(index);
}

std::string RendezvousEndpoint(const std::string& job_name, const std::string& name_space) {
  return WorkerPodName(job_name, 0) + "." + ServiceName(job_name) + "." + name_space +
         ".svc:" + std::to_string(kRendezvousPort);
}

std::string MeshString(const TrainingJob& job) {
  const auto& p = job.spec.parallelism;
  return "data=" + std::to_string(EffectiveData(job.spec)) +
         ",pipeline=" + std::to_string(p.pipeline) + ",tensor=" + std::to_string(p.tensor);
}

std::map<std::string, std::string> JobSelector(const std::string& job_name) {
  return {{kLabelJobName, job_name}};
}

std::map<std::string, std::string> WorkerPodLabels(const std::string& job_name, int64_t index,
                                                   int64_t attempt) {
  return {
      {kLabelJobName, job_name},
      {kLabelWorkerIndex, std::to_string(index)},
      {kLabelAttempt, std::to_string(attempt)},
      {"app.kubernetes.io/name", "tessera"},
      {"app.kubernetes.io/instance", job_name},
      {"app.kubernetes.io/component", "worker"},
      {"app.kubernetes.io/managed-by", "tessera-controller"},
  };
}

std::vector<std::pair<std::string, std::string>> WorkerEnvironment(const TrainingJob& job,
                                                                   int64_t attempt,
                                                                   int64_t node_rank,
                                                                   const std::string& rdzv_endpoint,
                                                                   const std::string& rdzv_token) {
  const auto& spec = job.spec;
  const std::string nnodes = std::to_string(spec.workers);
  const std::string nproc = std::to_string(EffectiveProcsPerWorker(spec));
  const std::string rank = std::to_string(node_rank);
  const std::string master_addr = rdzv_endpoint.substr(0, rdzv_endpoint.rfind(':'));
  const std::string master_port = std::to_string(kTorchMasterPort);
  std::string checkpoint_dir;
  if (spec.trainer && spec.trainer->checkpoint && spec.trainer->checkpoint->dir) {
    checkpoint_dir = *spec.trainer->checkpoint->dir;
  }
  return {
      {"TESSERA_JOB", job.metadata.name},
      {"TESSERA_NAMESPACE", job.metadata.name_space},
      {"TESSERA_ATTEMPT", std::to_string(attempt)},
      {"TESSERA_NODE_RANK", rank},
      {"TESSERA_NNODES", nnodes},
      {"TESSERA_PROCS_PER_NODE", nproc},
      {"TESSERA_RDZV_ENDPOINT", rdzv_endpoint},
      {"TESSERA_RDZV_TOKEN", rdzv_token},
      {"TESSERA_MESH", MeshString(job)},
      {"TESSERA_METRICS_PORT", std::to_string(spec.metrics.port)},
      {"TESSERA_CHECKPOINT_DIR", checkpoint_dir},
      {"MASTER_ADDR", master_addr},
      {"MASTER_PORT", master_port},
      {"WORLD_SIZE", std::to_string(WorldSize(spec))},
      {"NODE_RANK", rank},
      {"PET_NNODES", nnodes},
      {"PET_NPROC_PER_NODE", nproc},
      {"PET_NODE_RANK", rank},
      {"PET_MASTER_ADDR", master_addr},
      {"PET_MASTER_PORT", master_port},
  };
}

}  // namespace tessera::api
