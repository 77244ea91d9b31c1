// The worker contract of DESIGN.md §3: names, labels and the environment.
#include <gtest/gtest.h>

#include <map>

#include "api/contract.h"
#include "api/validate.h"

namespace tessera::api {
namespace {

TrainingJob Job(int64_t workers, int64_t gpus, int64_t pipeline, int64_t tensor) {
  TrainingJob job;
  job.metadata.name = "gpt";
  job.metadata.name_space = "research";
  job.spec.workers = workers;
  job.spec.gpus_per_worker = gpus;
  job.spec.parallelism.pipeline = pipeline;
  job.spec.parallelism.tensor = tensor;
  ApplyDefaults(job);
  return job;
}

TEST(Contract, ObjectNames) {
  EXPECT_EQ(ServiceName("gpt"), "gpt");
  EXPECT_EQ(PodGroupName("gpt"), "gpt");
  EXPECT_EQ(RendezvousSecretName("gpt"), "gpt-rendezvous");
  EXPECT_EQ(WorkerPodName("gpt", 0), "gpt-worker-0");
  EXPECT_EQ(WorkerPodName("gpt", 12), "gpt-worker-12");
  EXPECT_EQ(RendezvousEndpoint("gpt", "research"), "gpt-worker-0.gpt.research.svc:29500");
}

TEST(Contract, Labels) {
  const auto labels = WorkerPodLabels("gpt", 3, 2);
  EXPECT_EQ(labels, (std::map<std::string, std::string>{
                        {"tessera.dev/job-name", "gpt"},
                        {"tessera.dev/worker-index", "3"},
                        {"tessera.dev/attempt", "2"},
                        {"app.kubernetes.io/name", "tessera"},
                        {"app.kubernetes.io/instance", "gpt"},
                        {"app.kubernetes.io/component", "worker"},
                        {"app.kubernetes.io/managed-by", "tessera-controller"},
                    }));
  // The selector matches every attempt's pods: it is a subset of the labels.
  for (const auto& [k, v] : JobSelector("gpt"))
    EXPECT_EQ(labels.at(k), v);
}

TEST(Contract, MeshString) {
  struct {
    int64_t workers, gpus, pipeline, tensor;
    const char* want;
  } cases[] = {
      {4, 0, 2, 1, "data=2,pipeline=2,tensor=1"},
      {2, 8, 2, 4, "data=2,pipeline=2,tensor=4"},
      {1, 0, 1, 1, "data=1,pipeline=1,tensor=1"},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(MeshString(Job(c.workers, c.gpus, c.pipeline, c.tensor)), c.want);
  }
}

TEST(Contract, WorkerEnvironment) {
  TrainingJob job = Job(2, 4, 2, 2);
  job.spec.metrics.port = 9500;
  job.spec.trainer.emplace();
  job.spec.trainer->checkpoint.emplace();
  job.spec.trainer->checkpoint->dir = "/ckpt";
  const std::string endpoint = RendezvousEndpoint("gpt", "research");
  const auto env = WorkerEnvironment(job, 1, 1, endpoint, "s3cret");
  const std::map<std::string, std::string> got(env.begin(), env.end());
  EXPECT_EQ(got.size(), env.size()) << "a variable is set twice";
  const std::map<std::string, std::string> want = {
      {"TESSERA_JOB", "gpt"},
      {"TESSERA_NAMESPACE", "research"},
      {"TESSERA_ATTEMPT", "1"},
      {"TESSERA_NODE_RANK", "1"},
      {"TESSERA_NNODES", "2"},
      {"TESSERA_PROCS_PER_NODE", "4"},
      {"TESSERA_RDZV_ENDPOINT", "gpt-worker-0.gpt.research.svc:29500"},
      {"TESSERA_RDZV_TOKEN", "s3cret"},
      {"TESSERA_MESH", "data=2,pipeline=2,tensor=2"},
      {"TESSERA_METRICS_PORT", "9500"},
      {"TESSERA_CHECKPOINT_DIR", "/ckpt"},
      {"MASTER_ADDR", "gpt-worker-0.gpt.research.svc"},
      {"MASTER_PORT", "29501"},
      {"WORLD_SIZE", "8"},
      {"NODE_RANK", "1"},
      {"PET_NNODES", "2"},
      {"PET_NPROC_PER_NODE", "4"},
      {"PET_NODE_RANK", "1"},
      {"PET_MASTER_ADDR", "gpt-worker-0.gpt.research.svc"},
      {"PET_MASTER_PORT", "29501"},
  };
  EXPECT_EQ(got, want);
  EXPECT_EQ(env.front().first, "TESSERA_JOB");
}

TEST(Contract, LocalEndpointAndNoCheckpoints) {
  TrainingJob job = Job(1, 0, 1, 1);
  const auto env = WorkerEnvironment(job, 0, 0, "127.0.0.1:29500", "t");
  const std::map<std::string, std::string> got(env.begin(), env.end());
  EXPECT_EQ(got.at("MASTER_ADDR"), "127.0.0.1");
  EXPECT_EQ(got.at("WORLD_SIZE"), "1");
  EXPECT_EQ(got.at("TESSERA_CHECKPOINT_DIR"), "");
  EXPECT_EQ(got.at("TESSERA_PROCS_PER_NODE"), "1");
}

}  // namespace
}  // namespace tessera::api
