// The NCCL backend on one GPU: a world of one rank and a sub-group split from it. Built
// wherever NCCL exists; skipped with a message where no CUDA device is visible.
#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <thread>

#include "tests/unit/comm/local_store.h"
#include "worker/comm/nccl_process_group.h"
#include "worker/parallel/data/bucket_reducer.h"

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

// A one-rank world on device 0 with its own in-process store.
class NcclWorld : public ::testing::Test {
 protected:
  void SetUp() override {
    if (!HaveGpu())
      GTEST_SKIP() << "no CUDA device: the NCCL test runs on a machine with a GPU";
    server_ = test::StartLocalStore();
    client_ = std::make_unique<rendezvous::StoreClient>(test::LocalStoreClient(*server_, 30s));
    NcclOptions options;
    options.comm.timeout = 60s;
    world_ = CreateNcclProcessGroup(*client_, 0, 1, 0, options);
  }
  std::unique_ptr<rendezvous::StoreServer> server_;
  std::unique_ptr<rendezvous::StoreClient> client_;
  std::shared_ptr<ProcessGroup> world_;
};

TEST_F(NcclWorld, OneRankAndASplitSubGroup) {
  auto& world = world_;
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

// wait_event orders the group's next operation after a producer stream's work: the producer
// is held back on the host for 200 ms before it writes x, and the all-gather issued right
// away (after wait_event) still copies the new values, not the old ones.
TEST_F(NcclWorld, WaitEventOrdersTheNextOperationAfterTheProducer) {
  float* x = ToDevice(std::vector<float>{1, 2, 3, 4});
  float* y = ToDevice(std::vector<float>(4, 0));
  float* pinned = nullptr;
  ASSERT_EQ(cudaMallocHost(&pinned, 4 * sizeof(float)), cudaSuccess);
  for (int i = 0; i < 4; ++i)
    pinned[i] = 5.0f + static_cast<float>(i);
  cudaStream_t producer;
  cudaEvent_t done;
  ASSERT_EQ(cudaStreamCreateWithFlags(&producer, cudaStreamNonBlocking), cudaSuccess);
  ASSERT_EQ(cudaEventCreateWithFlags(&done, cudaEventDisableTiming), cudaSuccess);
  ASSERT_EQ(cudaLaunchHostFunc(
                producer, [](void*) { std::this_thread::sleep_for(200ms); }, nullptr),
            cudaSuccess);
  ASSERT_EQ(cudaMemcpyAsync(x, pinned, 4 * sizeof(float), cudaMemcpyHostToDevice, producer),
            cudaSuccess);
  ASSERT_EQ(cudaEventRecord(done, producer), cudaSuccess);
  world_->wait_event(done);
  world_->all_gather(x, y, 4, DataType::kFloat32)->wait();
  EXPECT_EQ(ToHost(y, 4), (std::vector<float>{5, 6, 7, 8}));

  // The bucket reducer on device memory: every bucket started by one ready report with the
  // event, the average over one rank leaves the values as they are.
  const std::vector<float> grads = {1, 2, 3, 4, 5, 6, 7, 8, 9, 10};
  float* g = ToDevice(grads);
  parallel::BucketReducer reducer(world_, std::span<float>(g, grads.size()), 3 * sizeof(float));
  ASSERT_EQ(cudaEventRecord(done, producer), cudaSuccess);
  reducer.GradientsReady(0, done);
  const parallel::ReductionStats stats = reducer.Finish();
  EXPECT_EQ(stats.buckets, 4);
  EXPECT_EQ(ToHost(g, grads.size()), grads);
  cudaFree(g);
  cudaEventDestroy(done);
  cudaStreamDestroy(producer);
  cudaFreeHost(pinned);
  cudaFree(x);
  cudaFree(y);
}

}  // namespace
}  // namespace tessera::comm
