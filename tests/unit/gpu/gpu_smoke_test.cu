// A kernel launch and NCCL calls: built always where a CUDA toolkit exists, run on a GPU.
#include <cuda_runtime.h>
#include <gtest/gtest.h>
#include <nccl.h>

#include <vector>

namespace {

__global__ void AddOne(float* x, int n) {
  int i = blockIdx.x * blockDim.x + threadIdx.x;
  if (i < n)
    x[i] += 1.0f;
}

bool HaveGpu() {
  int count = 0;
  return cudaGetDeviceCount(&count) == cudaSuccess && count > 0;
}

// The NCCL loaded at run time may be the machine's rather than the one compiled against (the GPU
// bundle of bench/gpu carries none: an H200 image had 2.28.3 under our 2.32.3 headers). It must be
// the same major version and at least 2.18, the first with every call worker/comm makes
// (ncclCommSplit the newest; non-blocking ncclCommInitRankConfig since 2.14).
TEST(GpuSmoke, NcclRuntimeHasTheCallsWeUse) {
  int version = 0;
  ASSERT_EQ(ncclGetVersion(&version), ncclSuccess);
  EXPECT_EQ(version / 10000, NCCL_VERSION_CODE / 10000) << "runtime " << version;
  EXPECT_GE(version, NCCL_VERSION(2, 18, 0)) << "runtime " << version;
}

TEST(GpuSmoke, KernelAddsOne) {
  if (!HaveGpu())
    GTEST_SKIP() << "no CUDA device: GPU tests run on a machine with one";
  const int n = 1000;
  std::vector<float> host(n, 41.0f);
  float* device = nullptr;
  ASSERT_EQ(cudaMalloc(&device, n * sizeof(float)), cudaSuccess);
  cudaMemcpy(device, host.data(), n * sizeof(float), cudaMemcpyHostToDevice);
  AddOne<<<(n + 255) / 256, 256>>>(device, n);
  ASSERT_EQ(cudaGetLastError(), cudaSuccess);
  cudaMemcpy(host.data(), device, n * sizeof(float), cudaMemcpyDeviceToHost);
  cudaFree(device);
  for (float v : host)
    ASSERT_EQ(v, 42.0f);
}

TEST(GpuSmoke, SingleRankAllReduce) {
  if (!HaveGpu())
    GTEST_SKIP() << "no CUDA device: GPU tests run on a machine with one";
  ncclComm_t comm;
  int device = 0;
  ASSERT_EQ(ncclCommInitAll(&comm, 1, &device), ncclSuccess);
  float* buf = nullptr;
  ASSERT_EQ(cudaMalloc(&buf, 4 * sizeof(float)), cudaSuccess);
  std::vector<float> host = {1, 2, 3, 4};
  cudaMemcpy(buf, host.data(), sizeof(float) * 4, cudaMemcpyHostToDevice);
  ASSERT_EQ(ncclAllReduce(buf, buf, 4, ncclFloat, ncclSum, comm, nullptr), ncclSuccess);
  cudaDeviceSynchronize();
  cudaMemcpy(host.data(), buf, sizeof(float) * 4, cudaMemcpyDeviceToHost);
  EXPECT_EQ(host, (std::vector<float>{1, 2, 3, 4}));
  cudaFree(buf);
  ncclCommDestroy(comm);
}

}  // namespace
