// The NCCL backend on one GPU: a world of one rank and a sub-group split from it. Built
// wherever NCCL exists; skipped with a message where no CUDA device is visible.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include "worker/comm/nccl_process_group.h"
#include "worker/rendezvous/store_server.h"

namespace tessera::comm {
namespace {

using namespace std::chrono_literals;

bool HaveGpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

template <typename T>
T* ToDevice(const std::vector<T>& host) {
  T* d = nullptr;
  EXPECT_EQ(cudaMalloc(&d, host.size() * sizeof(T)), cudaSuccess);
  cudaMemcpy(d, host.data(), host.size() * sizeof(T), cudaMemcpyHostToDevice);
  return d;
}

template <typename T>
std::vector<T> ToHost(const T* d, size_t n) {
  std::vector<T> host(n);
  cudaMemcpy(host.data(), d, n * sizeof(T), cudaMemcpyDeviceToHost);
  return host;
}

TEST(NcclGroup, OneRankAndASplitSubGroup) {
  if (!HaveGpu())
    GTEST_SKIP() << "no CUDA device: the NCCL test runs on a machine with a GPU";
  rendezvous::StoreServerOptions so;
  so.host = "127.0.0.1";
  so.port = 0;
  auto server = rendezvous::StoreServer::Start(so);
  rendezvous::StoreClientOptions co;
  co.port = server->port();
  co.connect_timeout = co.timeout = 30s;
  rendezvous::StoreClient client(co);
  NcclOptions options;
  options.comm.timeout = 60s;
  auto world = CreateNcclProcessGroup(client, 0, 1, 0, options);
  ASSERT_EQ(world->size(), 1);
  EXPECT_EQ(world->backend(), "nccl");

  const std::vector<float> values = {1, 2, 3, 4};
  float* x = ToDevice(values);
  world->all_reduce(x, 4, DataType::kFloat32, ReduceOp::kSum)->wait();
  EXPECT_EQ(ToHost(x, 4), values);
  world->all_reduce(x, 4, DataType::kFloat32, ReduceOp::kAvg)->wait();
  EXPECT_EQ(ToHost(x, 4), values);
  float* y = ToDevice(std::vector<float>(4, 0));
  world->all_gather(x, y, 4, DataType::kFloat32)->wait();
  EXPECT_EQ(ToHost(y, 4), values);
  world->reduce_scatter(x, y, 4, DataType::kFloat32, ReduceOp::kMax)->wait();
  EXPECT_EQ(ToHost(y, 4), values);
  world->broadcast(x, 4, DataType::kFloat32, 0)->wait();
  world->barrier()->wait();

  auto sub = world->split(0, 0, "sub");
  ASSERT_NE(sub, nullptr);
  EXPECT_EQ(sub->size(), 1);
  EXPECT_EQ(sub->name(), "world/sub");
  auto work = sub->all_reduce(x, 4, DataType::kFloat32, ReduceOp::kSum);
  work->wait();
  EXPECT_TRUE(work->completed());
  EXPECT_EQ(ToHost(x, 4), values);
  EXPECT_EQ(world->split(-1, 0, "none"), nullptr);
  cudaFree(x);
  cudaFree(y);
}

}  // namespace
}  // namespace tessera::comm
