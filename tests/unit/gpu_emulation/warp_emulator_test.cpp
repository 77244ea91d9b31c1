// Tests of the SIMT emulator (warp_emulator.h): its warp operations give the fragment layouts
// documented in worker/model/cuda/warp_mma.cuh, and misuse of warps and barriers is reported
// with a message rather than a hang.
#include "tests/unit/gpu_emulation/warp_emulator.h"

#include <gtest/gtest.h>

#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <functional>
#include <random>
#include <stdexcept>
#include <string>
#include <utility>
#include <vector>

#include "worker/model/cuda/warp_mma.cuh"

namespace tessera::warp_emu {
namespace {

namespace warp = tessera::model::cuda::warp;
using warp::Bf16Bits;

constexpr unsigned kLd = 72;  // row stride (bf16) of a shared tile, padded as the kernels do

LaunchConfig Threads(unsigned threads, size_t shared_bytes = 0) {
  LaunchConfig config;
  config.threads = threads;
  config.shared_bytes = shared_bytes;
  return config;
}

// The message Launch throws, or "" when it returns.
std::string LaunchError(const LaunchConfig& config, const std::function<void()>& body) {
  try {
    Launch(config, body);
  } catch (const std::runtime_error& e) {
    return e.what();
  }
  return "";
}

bool Contains(const std::string& text, const std::string& part) {
  return text.find(part) != std::string::npos;
}

// count random bf16 values (bits), from a standard normal distribution.
std::vector<Bf16Bits> RandomBf16(size_t count, unsigned seed) {
  std::mt19937 rng(seed);
  std::normal_distribution<float> normal(0.0f, 1.0f);
  std::vector<Bf16Bits> values(count);
  for (Bf16Bits& value : values)
    value = warp::FloatToBf16(normal(rng));
  return values;
}

uint32_t Pack(Bf16Bits lo, Bf16Bits hi) {
  return static_cast<uint32_t>(lo) | (static_cast<uint32_t>(hi) << 16);
}

// C (m x n) = A (m x k) * B (k x n), all row-major, in double; magnitude = sum |a| |b|, the
// scale of the rounding error of a float sum.
struct Product {
  std::vector<double> value, magnitude;
};
Product MatMul(const std::vector<Bf16Bits>& a, const std::vector<Bf16Bits>& b, int m, int k,
               int n) {
  Product c{std::vector<double>(m * n), std::vector<double>(m * n)};
  for (int i = 0; i < m; ++i)
    for (int j = 0; j < n; ++j)
      for (int p = 0; p < k; ++p) {
        const double term =
            double{warp::Bf16ToFloat(a[i * k + p])} * warp::Bf16ToFloat(b[p * n + j]);
        c.value[i * n + j] += term;
        c.magnitude[i * n + j] += std::fabs(term);
      }
  return c;
}

// Element i of a lane's C/D fragment is D[row][col] of the 16x8 tile.
std::pair<unsigned, unsigned> DElement(unsigned lane, unsigned i) {
  return {lane / 4 + 8 * (i / 2), 2 * (lane % 4) + i % 2};
}

TEST(WarpEmulatorTest, Mma16816MatchesMatmulAndAccumulates) {
  const std::vector<Bf16Bits> a = RandomBf16(16 * 16, 1);  // 16x16, row-major
  const std::vector<Bf16Bits> b = RandomBf16(16 * 8, 2);   // 16x8 (k x n), row-major
  std::array<std::array<float, 4>, 32> once{}, twice{};
  Launch(Threads(32), [&] {
    const unsigned lane = warp::ThreadIdx(), g = lane / 4, t = lane % 4;
    auto A = [&](unsigned row, unsigned col) { return a[row * 16 + col]; };
    auto B = [&](unsigned k, unsigned n) { return b[k * 8 + n]; };
    const uint32_t af[4] = {
        Pack(A(g, 2 * t), A(g, 2 * t + 1)), Pack(A(g + 8, 2 * t), A(g + 8, 2 * t + 1)),
        Pack(A(g, 2 * t + 8), A(g, 2 * t + 9)), Pack(A(g + 8, 2 * t + 8), A(g + 8, 2 * t + 9))};
    const uint32_t bf[2] = {Pack(B(2 * t, g), B(2 * t + 1, g)),
                            Pack(B(2 * t + 8, g), B(2 * t + 9, g))};
    float d[4] = {0, 0, 0, 0};
    warp::Mma16816(d, af, bf);
    std::memcpy(once[lane].data(), d, sizeof(d));
    warp::Mma16816(d, af, bf);
    std::memcpy(twice[lane].data(), d, sizeof(d));
  });
  const Product c = MatMul(a, b, 16, 16, 8);
  for (unsigned lane = 0; lane < 32; ++lane) {
    for (unsigned i = 0; i < 4; ++i) {
      const auto [row, col] = DElement(lane, i);
      EXPECT_NEAR(once[lane][i], c.value[row * 8 + col], 1e-5 * c.magnitude[row * 8 + col])
          << "lane " << lane << " d[" << i << "] = D[" << row << "][" << col << "]";
      EXPECT_EQ(twice[lane][i], 2 * once[lane][i]) << "lane " << lane << " d[" << i << "]";
    }
  }
}

TEST(WarpEmulatorTest, LdMatrixX4GivesTheDocumentedElementsPlainAndTransposed) {
  constexpr unsigned kRows = 32;
  // Top-left corner (row, column) of matrix i in the tile; columns are multiples of 8, so every
  // row address is 16-byte aligned (the row stride, 144 bytes, is too).
  constexpr unsigned kOrigin[4][2] = {{0, 0}, {8, 16}, {16, 8}, {24, 64}};
  auto tile_value = [](unsigned row, unsigned col) { return Bf16Bits(row * kLd + col + 1); };
  std::array<std::array<uint32_t, 4>, 32> plain{}, trans{};
  Launch(Threads(32, kRows * kLd * sizeof(Bf16Bits)), [&] {
    auto* tile = reinterpret_cast<Bf16Bits*>(warp::SharedMemory());
    const unsigned lane = warp::ThreadIdx();
    for (unsigned e = lane; e < kRows * kLd; e += 32)
      tile[e] = tile_value(e / kLd, e % kLd);
    warp::SyncThreads();
    const unsigned i = lane / 8;
    const Bf16Bits* row = tile + (kOrigin[i][0] + lane % 8) * kLd + kOrigin[i][1];
    warp::LdMatrixX4(plain[lane].data(), row);
    warp::LdMatrixX4Trans(trans[lane].data(), row);
  });
  for (unsigned lane = 0; lane < 32; ++lane) {
    const unsigned g = lane / 4, t = lane % 4;
    for (unsigned i = 0; i < 4; ++i) {
      auto M = [&](unsigned row, unsigned col) {
        return tile_value(kOrigin[i][0] + row, kOrigin[i][1] + col);
      };
      EXPECT_EQ(plain[lane][i], Pack(M(g, 2 * t), M(g, 2 * t + 1))) << "lane " << lane << " r" << i;
      EXPECT_EQ(trans[lane][i], Pack(M(2 * t, g), M(2 * t + 1, g))) << "lane " << lane << " r" << i;
    }
  }
}

// The kernels' way (flash_mma_kernels.cuh): A of a row-major 16x16 tile by LdMatrixX4, B of a
// row-major (k = 16, n = 16) tile by LdMatrixX4Trans, then one Mma16816 per 8 columns.
TEST(WarpEmulatorTest, FragmentsLoadedLikeTheKernelsMultiplyTiles) {
  const std::vector<Bf16Bits> a = RandomBf16(16 * 16, 3);  // 16x16 (m x k)
  const std::vector<Bf16Bits> b = RandomBf16(16 * 16, 4);  // 16x16 (k x n)
  std::vector<float> c(16 * 16, NAN);
  Launch(Threads(32, 2 * 16 * kLd * sizeof(Bf16Bits)), [&] {
    auto* sa = reinterpret_cast<Bf16Bits*>(warp::SharedMemory());
    Bf16Bits* sb = sa + 16 * kLd;
    const unsigned lane = warp::ThreadIdx();
    // The padding columns 16..71 stay 0xFFFF (NaN): reading them would show in the result.
    for (unsigned e = lane; e < 16 * 16; e += 32) {
      sa[e / 16 * kLd + e % 16] = a[e];
      sb[e / 16 * kLd + e % 16] = b[e];
    }
    warp::SyncThreads();
    const unsigned row = lane % 8 + 8 * ((lane / 8) % 2), col = 8 * (lane / 16);
    uint32_t af[4], bf[4];
    warp::LdMatrixX4(af, sa + row * kLd + col);
    warp::LdMatrixX4Trans(bf, sb + row * kLd + col);  // row = k, col = n
    float d0[4] = {0, 0, 0, 0}, d1[4] = {0, 0, 0, 0};
    warp::Mma16816(d0, af, bf);      // columns 0..7
    warp::Mma16816(d1, af, bf + 2);  // columns 8..15
    for (unsigned i = 0; i < 4; ++i) {
      const auto [r, n] = DElement(lane, i);
      c[r * 16 + n] = d0[i];
      c[r * 16 + 8 + n] = d1[i];
    }
  });
  const Product expected = MatMul(a, b, 16, 16, 16);
  for (unsigned e = 0; e < 16 * 16; ++e)
    EXPECT_NEAR(c[e], expected.value[e], 1e-5 * expected.magnitude[e])
        << "C[" << e / 16 << "][" << e % 16 << "]";
}

TEST(WarpEmulatorTest, ShflXorReadsTheLaneAtXorDistanceWithinItsWarp) {
  constexpr int kMasks[] = {0, 1, 2, 4, 8, 16, 31};
  constexpr int kCount = sizeof(kMasks) / sizeof(kMasks[0]);
  std::array<std::array<float, kCount>, 64> got{};
  std::array<float, 64> sums{};
  Launch(Threads(64), [&] {
    const unsigned thread = warp::ThreadIdx();
    const float value = 100.0f * thread + 0.5f;
    for (int m = 0; m < kCount; ++m)
      got[thread][m] = warp::ShflXor(value, kMasks[m]);
    float sum = value;  // butterfly reduction, as the kernels' row sums
    for (int mask = 16; mask > 0; mask /= 2)
      sum += warp::ShflXor(sum, mask);
    sums[thread] = sum;
  });
  for (unsigned thread = 0; thread < 64; ++thread) {
    const unsigned first = thread / 32 * 32;
    for (int m = 0; m < kCount; ++m)
      EXPECT_EQ(got[thread][m], 100.0f * (first + ((thread % 32) ^ kMasks[m])) + 0.5f)
          << "thread " << thread << " mask " << kMasks[m];
    float expected = 0;
    for (unsigned lane = 0; lane < 32; ++lane)
      expected += 100.0f * (first + lane) + 0.5f;
    EXPECT_FLOAT_EQ(sums[thread], expected) << "thread " << thread;
  }
}

TEST(WarpEmulatorTest, SyncThreadsPublishesOneWarpsSharedWritesToTheOthers) {
  constexpr int kRounds = 8;
  std::atomic<int> checked{0}, wrong{0};
  Launch(Threads(128, 128 * sizeof(float)), [&] {
    auto* shared = reinterpret_cast<float*>(warp::SharedMemory());
    const unsigned thread = warp::ThreadIdx(), warp_id = thread / 32;
    for (int round = 0; round < kRounds; ++round) {
      const unsigned writer = round % 4;
      if (warp_id == writer)
        for (unsigned e = thread % 32; e < 128; e += 32)
          shared[e] = 1000.0f * round + e;
      warp::SyncThreads();
      if (warp_id != writer) {
        for (unsigned e = 0; e < 128; ++e)
          if (shared[e] != 1000.0f * round + e)
            ++wrong;
        checked += 128;
      }
      warp::SyncThreads();  // read before the next round overwrites
    }
  });
  EXPECT_EQ(wrong.load(), 0);
  EXPECT_EQ(checked.load(), kRounds * 96 * 128);
}

TEST(WarpEmulatorTest, AtomicAddFromFourBlocksSumsExactly) {
  float total = 0;
  float pair[2] = {0, 0};
  LaunchConfig config = Threads(64);
  config.grid_x = 2;
  config.grid_y = 2;
  Launch(config, [&] {
    const float value = static_cast<float>(warp::ThreadIdx() + 1);
    warp::AtomicAdd(&total, value);
    warp::AtomicAdd2(pair, 1.0f, value);
  });
  EXPECT_EQ(total, 4 * (64 * 65 / 2));
  EXPECT_EQ(pair[0], 4 * 64);
  EXPECT_EQ(pair[1], 4 * (64 * 65 / 2));
}

// cp.async copies land no earlier than the wait that must complete their group: before it the
// destination keeps what was there (so a kernel reading a tile it has not waited for fails its
// tests), after CpAsyncWait<1> all but the newest committed group have landed, after
// CpAsyncWait<0> all of them.
TEST(WarpEmulatorTest, CpAsyncCopiesLandAtTheWaitForTheirGroup) {
  alignas(16) static const uint32_t kFirst[4] = {1, 2, 3, 4};
  alignas(16) static const uint32_t kSecond[4] = {5, 6, 7, 8};
  std::array<uint32_t, 5> seen{};
  Launch(Threads(32, 32), [&] {
    auto* shared = reinterpret_cast<uint32_t*>(warp::SharedMemory());
    if (warp::ThreadIdx() != 0)
      return;
    warp::CpAsync16(shared, kFirst);
    warp::CpAsyncCommit();
    warp::CpAsync16(shared + 4, kSecond);
    seen[0] = shared[0];  // committed, not waited for
    warp::CpAsyncCommit();
    warp::CpAsyncWait<2>();
    seen[1] = shared[0];  // two groups may still be in flight
    warp::CpAsyncWait<1>();
    seen[2] = shared[0];  // the first group has landed
    seen[3] = shared[4];  // the second may not have
    warp::CpAsyncWait<0>();
    seen[4] = shared[4];
  });
  EXPECT_EQ(seen, (std::array<uint32_t, 5>{0xFFFFFFFFu, 0xFFFFFFFFu, 1, 0xFFFFFFFFu, 5}));
  EXPECT_NE(LaunchError(Threads(32, 32),
                        [&] {
                          warp::CpAsync16(warp::SharedMemory() + 32, kFirst);  // past the end
                        }),
            "");
}

// Between two SyncThreads a warp may not read (ldmatrix) shared memory another warp wrote
// (Store32, Zero16, cp.async), nor write what another warp read or wrote: the race is reported,
// naming the barrier that is missing; with the barrier the same accesses pass.
TEST(WarpEmulatorTest, SharedMemoryRacesBetweenWarpsAreReported) {
  alignas(16) static const uint32_t kRow[4] = {1, 2, 3, 4};
  // Warp 0 writes a 16x16 tile (rows of 16 bf16) with `write`, warp 1 then reads it by ldmatrix.
  auto write_then_read = [](bool barrier, int how) {
    return LaunchError(Threads(64, 16 * 32), [barrier, how] {
      unsigned char* shared = warp::SharedMemory();
      const unsigned thread = warp::ThreadIdx(), lane = thread % 32;
      if (thread < 32 && lane < 16) {
        unsigned char* row = shared + 32 * lane;
        if (how == 0) {
          warp::Store32(row, 7);
        } else if (how == 1) {
          warp::Zero16(row);
        } else {
          warp::CpAsync16(row, kRow);
          warp::CpAsyncCommit();
          warp::CpAsyncWait<0>();
        }
      }
      if (barrier)
        warp::SyncThreads();
      if (thread >= 32) {
        uint32_t r[4];
        warp::LdMatrixX4(r, shared + 32 * (lane % 16));
      }
    });
  };
  for (int how = 0; how < 3; ++how) {
    EXPECT_NE(write_then_read(false, how).find("(a missing barrier)"), std::string::npos) << how;
    EXPECT_EQ(write_then_read(true, how), "") << how;
  }
  // Warp 1 reads, warp 0 overwrites.
  auto read_then_write = [](bool barrier) {
    return LaunchError(Threads(64, 512), [barrier] {
      unsigned char* shared = warp::SharedMemory();
      const unsigned thread = warp::ThreadIdx();
      if (thread >= 32) {
        uint32_t r[4];
        warp::LdMatrixX4(r, shared + 32 * (thread % 16));
      }
      if (barrier)
        warp::SyncThreads();
      if (thread < 32)
        warp::Store32(shared + 32 * (thread % 16), 0);
    });
  };
  // (Which of the two comes first is the host threads' order: either way a race is reported.)
  EXPECT_NE(read_then_write(false).find("(a missing barrier)"), std::string::npos);
  EXPECT_EQ(read_then_write(true), "");
}

TEST(WarpEmulatorTest, EveryThreadOfTheGridRunsOnceWithItsIndices) {
  constexpr unsigned kGridX = 3, kGridY = 2, kThreads = 64;
  std::vector<std::atomic<int>> runs(kGridX * kGridY * kThreads);
  std::vector<unsigned> grid_dim_x(runs.size());
  std::vector<std::pair<unsigned, unsigned>> block_order;  // appended by thread 0 of each block
  LaunchConfig config = Threads(kThreads);
  config.grid_x = kGridX;
  config.grid_y = kGridY;
  Launch(config, [&] {
    const unsigned x = warp::BlockIdxX(), y = warp::BlockIdxY(), t = warp::ThreadIdx();
    ASSERT_LT(x, kGridX);
    ASSERT_LT(y, kGridY);
    ASSERT_LT(t, kThreads);
    const unsigned index = (y * kGridX + x) * kThreads + t;
    ++runs[index];
    grid_dim_x[index] = warp::GridDimX();
    if (t == 0)
      block_order.emplace_back(x, y);
  });
  for (size_t i = 0; i < runs.size(); ++i) {
    EXPECT_EQ(runs[i].load(), 1) << "thread " << i % kThreads << " of block " << i / kThreads;
    EXPECT_EQ(grid_dim_x[i], kGridX);
  }
  const std::vector<std::pair<unsigned, unsigned>> y_major = {{0, 0}, {1, 0}, {2, 0},
                                                              {0, 1}, {1, 1}, {2, 1}};
  EXPECT_EQ(block_order, y_major);
}

TEST(WarpEmulatorTest, SharedMemoryStartsAsNaNBytesInEveryBlock) {
  constexpr size_t kBytes = 1000;
  std::array<size_t, 3> not_ff{}, misaligned{};
  std::array<bool, 3> reads_as_nan{};
  LaunchConfig config = Threads(32, kBytes);
  config.grid_x = 3;
  Launch(config, [&] {
    unsigned char* shared = warp::SharedMemory();
    const unsigned x = warp::BlockIdxX(), lane = warp::ThreadIdx();
    if (lane == 0) {
      for (size_t i = 0; i < kBytes; ++i)
        not_ff[x] += shared[i] != 0xFF;
      misaligned[x] = reinterpret_cast<uintptr_t>(shared) % 128;
      float f;
      std::memcpy(&f, shared, sizeof(f));
      Bf16Bits h;
      std::memcpy(&h, shared + 4, sizeof(h));
      reads_as_nan[x] = std::isnan(f) && std::isnan(warp::Bf16ToFloat(h));
    }
    warp::SyncThreads();
    for (size_t i = lane; i < kBytes; i += 32)  // the next block must not see these
      shared[i] = 0;
  });
  for (unsigned x = 0; x < 3; ++x) {
    EXPECT_EQ(not_ff[x], 0u) << "block " << x;
    EXPECT_EQ(misaligned[x], 0u) << "block " << x;
    EXPECT_TRUE(reads_as_nan[x]) << "block " << x;
  }
}

TEST(WarpEmulatorTest, ThreadThatReturnedEarlyLeavesSyncThreadsToTheRest) {
  std::atomic<int> sums_right{0};
  LaunchConfig config = Threads(64, 64 * sizeof(float));
  config.barrier_timeout = std::chrono::seconds(5);  // fail fast if the barrier waited for 5
  const std::string error = LaunchError(config, [&] {
    const unsigned thread = warp::ThreadIdx();
    if (thread == 5 || thread >= 32)  // one lane of warp 0 and all of warp 1
      return;
    auto* shared = reinterpret_cast<float*>(warp::SharedMemory());
    for (int round = 1; round <= 3; ++round) {
      shared[thread] = static_cast<float>(round);
      warp::SyncThreads();
      if (thread == 0) {
        float sum = 0;
        for (unsigned t = 0; t < 32; ++t)
          if (t != 5)
            sum += shared[t];
        sums_right += sum == 31.0f * round;
      }
      warp::SyncThreads();
    }
  });
  EXPECT_EQ(error, "");
  EXPECT_EQ(sums_right.load(), 3);
}

// One warp-wide operation or barrier, called the same way by every lane.
struct NamedOp {
  const char* name;
  void (*call)();
};
const NamedOp kOps[] = {
    {"SyncThreads", [] { warp::SyncThreads(); }},
    {"SyncWarp", [] { warp::SyncWarp(); }},
    {"ShflXor", [] { warp::ShflXor(1.0f, 1); }},
    {"Mma16816",
     [] {
       float d[4] = {0, 0, 0, 0};
       const uint32_t a[4] = {0, 0, 0, 0}, b[2] = {0, 0};
       warp::Mma16816(d, a, b);
     }},
    {"LdMatrixX4",
     [] {
       uint32_t r[4];
       warp::LdMatrixX4(r, warp::SharedMemory() + 16 * warp::ThreadIdx());
     }},
    {"LdMatrixX4Trans",
     [] {
       uint32_t r[4];
       warp::LdMatrixX4Trans(r, warp::SharedMemory() + 16 * warp::ThreadIdx());
     }},
};

TEST(WarpEmulatorTest, EachOperationWorksWhenTheWholeWarpCallsIt) {
  for (const NamedOp& op : kOps)
    EXPECT_EQ(LaunchError(Threads(32, 32 * 16), op.call), "") << op.name;
}

TEST(WarpEmulatorTest, DivergedLanesAreReportedNamingBothOperations) {
  for (const NamedOp& first : kOps) {
    for (const NamedOp& second : kOps) {
      if (&first == &second)
        continue;
      const std::string error = LaunchError(
          Threads(32, 32 * 16), [&] { (warp::ThreadIdx() < 16 ? first : second).call(); });
      // "calls X while lane L of its warp waits in Y (...": X and Y are the two, in either order.
      const bool named = (Contains(error, std::string("calls ") + first.name + " ") &&
                          Contains(error, std::string("waits in ") + second.name + " ")) ||
                         (Contains(error, std::string("calls ") + second.name + " ") &&
                          Contains(error, std::string("waits in ") + first.name + " "));
      EXPECT_TRUE(named) << first.name << " / " << second.name << ": " << error;
      EXPECT_TRUE(Contains(error, "block (0, 0)")) << error;
    }
  }
}

struct MisuseCase {
  const char* name;
  LaunchConfig config;
  std::function<void()> body;
  std::vector<std::string> message_parts;
};

TEST(WarpEmulatorTest, MisuseIsReportedNotHung) {
  LaunchConfig short_timeout = Threads(64);
  short_timeout.barrier_timeout = std::chrono::milliseconds(100);
  const MisuseCase cases[] = {
      {"unaligned ldmatrix row",
       Threads(32, 512),
       [] {
         const unsigned lane = warp::ThreadIdx();
         uint32_t r[4];
         warp::LdMatrixX4(r, warp::SharedMemory() + 16 * lane + (lane == 5 ? 2 : 0));
       },
       {"LdMatrixX4: lane 5's row address", "offset 82"}},
      {"ldmatrix row past the shared memory",
       Threads(32, 512),
       [] {
         const unsigned lane = warp::ThreadIdx();
         uint32_t r[4];
         warp::LdMatrixX4Trans(r, warp::SharedMemory() + (lane == 9 ? 512 : 16 * lane));
       },
       {"LdMatrixX4Trans: lane 9's row address", "offset 512", "512 bytes"}},
      {"shuffle mask past the warp",
       Threads(32),
       [] { warp::ShflXor(1.0f, warp::ThreadIdx() == 3 ? 32 : 1); },
       {"thread 3", "lane mask 32"}},
      {"kernel throws",
       Threads(64),
       [] {
         if (warp::ThreadIdx() == 37)
           throw std::runtime_error("tile index 7 out of range");
         warp::SyncThreads();
         warp::SyncThreads();
       },
       {"block (0, 0) thread 37 (warp 1, lane 5)", "tile index 7 out of range"}},
      {"warp operation after a lane returned",
       Threads(32),
       [] {
         if (warp::ThreadIdx() == 7)
           return;
         warp::ShflXor(1.0f, 1);
       },
       {"ShflXor", "lane 7", "returned from the kernel"}},
      {"a warp that never reaches SyncThreads",
       short_timeout,
       [] {
         if (warp::ThreadIdx() < 32)
           warp::SyncThreads();
         else
           for (;;)
             warp::SyncWarp();
       },
       {"SyncThreads: only 32 of the 64 threads", "within 100 ms"}},
  };
  for (const MisuseCase& c : cases) {
    const std::string error = LaunchError(c.config, c.body);
    for (const std::string& part : c.message_parts)
      EXPECT_TRUE(Contains(error, part)) << c.name << ": \"" << part << "\" not in: " << error;
  }
}

TEST(WarpEmulatorTest, PrimitivesOutsideLaunchAndBadConfigsAreRejected) {
  EXPECT_THROW(warp::ThreadIdx(), std::logic_error);
  EXPECT_THROW(warp::SyncThreads(), std::logic_error);
  EXPECT_THROW(Launch(Threads(48), [] {}), std::invalid_argument);
  EXPECT_THROW(Launch(Threads(2048), [] {}), std::invalid_argument);
  LaunchConfig empty = Threads(32);
  empty.grid_y = 0;
  EXPECT_THROW(Launch(empty, [] {}), std::invalid_argument);
}

// __float2bfloat16_rn's contract, which the kernels' outputs inherit: round to nearest even, a
// NaN stays a NaN (even one whose payload lies only in the 16 bits dropped), infinities and
// overflow go to infinity.
TEST(WarpEmulatorTest, FloatToBf16KeepsNaNsAndRoundsToNearestEven) {
  auto from_bits = [](uint32_t bits) {
    float value;
    std::memcpy(&value, &bits, 4);
    return value;
  };
  const struct {
    uint32_t input;
    Bf16Bits want;
  } cases[] = {
      {0x3f808000u, 0x3f80},  // 1 + 2^-8, halfway: to the even 1
      {0x3f818000u, 0x3f82},  // 1 + 3 * 2^-8, halfway: to the even 1 + 2^-6
      {0x3f808001u, 0x3f81},  // just past halfway: up
      {0xbf808001u, 0xbf81},  // the same, negative
      {0x7f800000u, 0x7f80},  // +inf
      {0xff800000u, 0xff80},  // -inf
      {0x7f7fffffu, 0x7f80},  // the largest float rounds to +inf
      {0x00000001u, 0x0000},  // the smallest denormal rounds to +0
  };
  for (const auto& c : cases) {
    EXPECT_EQ(warp::FloatToBf16(from_bits(c.input)), c.want) << std::hex << c.input;
  }
  for (const uint32_t nan : {0x7fc00000u, 0x7f800001u, 0xff800001u, 0x7fffffffu}) {
    const float back = warp::Bf16ToFloat(warp::FloatToBf16(from_bits(nan)));
    EXPECT_TRUE(std::isnan(back)) << std::hex << nan << " became " << back;
  }
}

// A misaligned 16-, 8- or 4-byte access faults on a device; the emulator must say so rather
// than perform it, or a kernel bug found only on the GPU would pass here.
TEST(WarpEmulatorTest, MisalignedVectorAccessesAreReported) {
  const struct {
    const char* name;
    std::function<void(unsigned char*)> access;  // given a 16-byte aligned shared address
    const char* message;
  } cases[] = {
      {"Copy16 from 8 bytes in", [](unsigned char* p) { warp::Copy16(p, p + 24); },
       "Copy16 source: address not 16-byte aligned"},
      {"Copy16 to 8 bytes in", [](unsigned char* p) { warp::Copy16(p + 8, p + 32); },
       "Copy16 destination: address not 16-byte aligned"},
      {"Zero16 8 bytes in", [](unsigned char* p) { warp::Zero16(p + 8); },
       "Zero16: address not 16-byte aligned"},
      {"CpAsync16 to 8 bytes in",
       [](unsigned char* p) {
         alignas(16) static const uint32_t kRow[4] = {1, 2, 3, 4};
         warp::CpAsync16(p + 8, kRow);
       },
       "CpAsync16 destination: address not 16-byte aligned"},
      {"AtomicAdd2 4 bytes in",
       [](unsigned char* p) { warp::AtomicAdd2(reinterpret_cast<float*>(p + 4), 1.0f, 2.0f); },
       "AtomicAdd2: address not 8-byte aligned"},
      {"Store32 2 bytes in", [](unsigned char* p) { warp::Store32(p + 2, 7); },
       "Store32: address not 4-byte aligned"},
  };
  for (const auto& c : cases) {
    const std::string error = LaunchError(Threads(32, 64), [&] {
      if (warp::ThreadIdx() == 0)
        c.access(warp::SharedMemory());
    });
    EXPECT_TRUE(Contains(error, c.message)) << c.name << ": " << error;
  }
}

}  // namespace
}  // namespace tessera::warp_emu
