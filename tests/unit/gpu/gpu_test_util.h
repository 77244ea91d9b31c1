// Helpers of the GPU tests: bf16 on the host, device buffers, random inputs and a relative
// error that NaN never passes. Every GPU test starts with TESSERA_SKIP_WITHOUT_GPU().
#pragma once

#include <cuda_runtime.h>
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <cstring>
#include <random>
#include <sstream>
#include <string>
#include <vector>

namespace tessera::gpu_test {

inline bool HaveGpu() {
  int count = 0;
  if (cudaGetDeviceCount(&count) != cudaSuccess) {
    cudaGetLastError();
    return false;
  }
  return count > 0;
}

#define TESSERA_SKIP_WITHOUT_GPU()                                                     \
  do {                                                                                 \
    if (!::tessera::gpu_test::HaveGpu())                                               \
      GTEST_SKIP() << "no CUDA device (cudaGetDeviceCount failed or found none): GPU " \
                      "tests run on a machine with one, see bench/gpu/run.sh";         \
  } while (0)

#define TESSERA_CUDA_OK(call) ASSERT_EQ((call), cudaSuccess) << #call

// bf16 as its 16 bits: round to nearest even, NaN stays NaN.
inline uint16_t FloatToBf16Bits(float f) {
  uint32_t u;
  std::memcpy(&u, &f, sizeof(u));
  if (std::isnan(f))
    return 0x7fc0;
  u += 0x7fff + ((u >> 16) & 1);
  return static_cast<uint16_t>(u >> 16);
}
inline float Bf16BitsToFloat(uint16_t b) {
  const uint32_t u = static_cast<uint32_t>(b) << 16;
  float f;
  std::memcpy(&f, &u, sizeof(f));
  return f;
}
inline float RoundToBf16(float f) {
  return Bf16BitsToFloat(FloatToBf16Bits(f));
}

// normal(0, stddev) values, rounded to bf16 so that host and device see identical inputs.
inline std::vector<float> RandomBf16(size_t n, float stddev, uint64_t seed) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> dist(0.0f, stddev);
  std::vector<float> v(n);
  for (float& x : v)
    x = RoundToBf16(dist(rng));
  return v;
}

// A device array of T (float, int32_t, or uint16_t for bf16), freed on destruction.
template <typename T>
class DeviceArray {
 public:
  explicit DeviceArray(size_t n) : n_(n) {
    if (cudaMalloc(&ptr_, n * sizeof(T)) != cudaSuccess)
      ptr_ = nullptr;
  }
  explicit DeviceArray(const std::vector<T>& host) : DeviceArray(host.size()) {
    cudaMemcpy(ptr_, host.data(), n_ * sizeof(T), cudaMemcpyHostToDevice);
  }
  ~DeviceArray() { cudaFree(ptr_); }
  DeviceArray(const DeviceArray&) = delete;
  DeviceArray& operator=(const DeviceArray&) = delete;
  T* get() const { return ptr_; }
  std::vector<T> ToHost() const {
    std::vector<T> host(n_);
    cudaDeviceSynchronize();
    cudaMemcpy(host.data(), ptr_, n_ * sizeof(T), cudaMemcpyDeviceToHost);
    return host;
  }

 private:
  T* ptr_ = nullptr;
  size_t n_;
};

// bf16 device array from floats (already bf16-representable, or rounded here).
class DeviceBf16 {
 public:
  explicit DeviceBf16(const std::vector<float>& host) : bits_(Encode(host)) {}
  explicit DeviceBf16(size_t n) : bits_(std::vector<uint16_t>(n, 0)) {}
  template <typename Bf16>
  Bf16* as() const {
    return reinterpret_cast<Bf16*>(bits_.get());
  }
  std::vector<float> ToHost() const {
    std::vector<float> out;
    for (uint16_t b : bits_.ToHost())
      out.push_back(Bf16BitsToFloat(b));
    return out;
  }

 private:
  static std::vector<uint16_t> Encode(const std::vector<float>& host) {
    std::vector<uint16_t> bits(host.size());
    for (size_t i = 0; i < host.size(); i++)
      bits[i] = FloatToBf16Bits(host[i]);
    return bits;
  }
  DeviceArray<uint16_t> bits_;
};

// ||got - want||_2 / ||want||_2 <= tolerance, every value of got finite. The comparison is
// written so that a NaN anywhere fails it.
inline ::testing::AssertionResult RelativeErrorWithin(const std::vector<float>& got,
                                                      const std::vector<float>& want,
                                                      double tolerance) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure() << "sizes differ: " << got.size() << " vs " << want.size();
  }
  double diff2 = 0, ref2 = 0, max_abs = 0;
  size_t worst = 0;
  for (size_t i = 0; i < got.size(); i++) {
    if (!std::isfinite(got[i]) || !std::isfinite(want[i])) {
      return ::testing::AssertionFailure()
             << "non-finite value at " << i << ": got " << got[i] << ", want " << want[i];
    }
    const double d = static_cast<double>(got[i]) - want[i];
    diff2 += d * d;
    ref2 += static_cast<double>(want[i]) * want[i];
    if (std::abs(d) > max_abs) {
      max_abs = std::abs(d);
      worst = i;
    }
  }
  const double rel = std::sqrt(diff2) / std::max(std::sqrt(ref2), 1e-30);
  std::ostringstream detail;
  detail << "relative error " << rel << " (tolerance " << tolerance << "), largest difference "
         << max_abs << " at " << worst << " (got " << got[worst] << ", want " << want[worst] << ")";
  if (!(rel <= tolerance))
    return ::testing::AssertionFailure() << detail.str();
  return ::testing::AssertionSuccess() << detail.str();
}

// Tolerances of the issue: paths through bf16 values, and fp32 paths.
constexpr double kBf16Tolerance = 1e-2;
constexpr double kFp32Tolerance = 1e-4;

}  // namespace tessera::gpu_test
