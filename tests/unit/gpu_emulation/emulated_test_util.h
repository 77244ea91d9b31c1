// What the tests of kernels run on the SIMT emulator share: random bf16 inputs, conversion
// between bf16 bits and floats, and a comparison against a CPU reference.
#pragma once

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdint>
#include <random>
#include <vector>

#include "worker/model/cuda/warp_mma.cuh"

namespace tessera::warp_emu::test {

using model::cuda::warp::Bf16Bits;

// n normal values times scale, each already a bf16 value (so the kernel and the reference see
// the same inputs).
inline std::vector<float> RandomBf16Values(size_t n, uint64_t seed, float scale = 1.0f) {
  std::mt19937_64 rng(seed);
  std::normal_distribution<float> normal(0.0f, scale);
  std::vector<float> values(n);
  for (float& v : values)
    v = model::cuda::warp::Bf16ToFloat(model::cuda::warp::FloatToBf16(normal(rng)));
  return values;
}

inline std::vector<Bf16Bits> ToBits(const std::vector<float>& values) {
  std::vector<Bf16Bits> bits(values.size());
  for (size_t i = 0; i < values.size(); i++)
    bits[i] = model::cuda::warp::FloatToBf16(values[i]);
  return bits;
}

inline std::vector<float> ToFloats(const std::vector<Bf16Bits>& bits) {
  std::vector<float> values(bits.size());
  for (size_t i = 0; i < bits.size(); i++)
    values[i] = model::cuda::warp::Bf16ToFloat(bits[i]);
  return values;
}

// Relative L2 error within `tolerance`, and every element within `tolerance` times the largest
// reference magnitude (so one wrong row or column cannot hide in the norm). NaN never passes.
inline ::testing::AssertionResult Close(const char* what, const std::vector<float>& got,
                                        const std::vector<float>& want, double tolerance) {
  if (got.size() != want.size()) {
    return ::testing::AssertionFailure()
           << what << ": " << got.size() << " values, want " << want.size();
  }
  double diff2 = 0, ref2 = 0, max_ref = 0;
  for (float w : want)
    max_ref = std::max(max_ref, static_cast<double>(std::abs(w)));
  for (size_t i = 0; i < got.size(); i++) {
    const double d = static_cast<double>(got[i]) - want[i];
    if (!std::isfinite(got[i]) || !(std::abs(d) <= tolerance * max_ref)) {
      return ::testing::AssertionFailure() << what << "[" << i << "] = " << got[i] << ", want "
                                           << want[i] << " (largest |want| " << max_ref << ")";
    }
    diff2 += d * d;
    ref2 += static_cast<double>(want[i]) * want[i];
  }
  const double rel = std::sqrt(diff2) / std::max(std::sqrt(ref2), 1e-30);
  if (!(rel <= tolerance)) {
    return ::testing::AssertionFailure()
           << what << ": relative error " << rel << " > " << tolerance;
  }
  return ::testing::AssertionSuccess();
}

}  // namespace tessera::warp_emu::test
