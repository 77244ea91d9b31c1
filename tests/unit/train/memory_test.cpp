#include "worker/train/memory.h"

#include <gtest/gtest.h>

namespace tessera::train {
namespace {

TEST(Memory, MeminfoAvailableCountsFreeSwap) {
  const char* meminfo =
      "MemTotal:       24576000 kB\n"
      "MemFree:         1000000 kB\n"
      "MemAvailable:   20000000 kB\n"
      "SwapCached:            0 kB\n"
      "SwapTotal:       2000000 kB\n"
      "SwapFree:        1500000 kB\n";
  EXPECT_EQ(ParseMeminfoAvailable(meminfo), (20000000 + 1500000) * int64_t{1024});
  // No swap line: the memory alone. No MemAvailable (kernels before 3.14): unknown.
  EXPECT_EQ(ParseMeminfoAvailable("MemAvailable: 4 kB\n"), 4096);
  EXPECT_EQ(ParseMeminfoAvailable("MemFree: 4 kB\nSwapFree: 8 kB\n"), std::nullopt);
  EXPECT_EQ(ParseMeminfoAvailable(""), std::nullopt);
}

TEST(Memory, CgroupRoomIsTheLimitLessTheUse) {
  struct Case {
    const char* max;
    const char* current;
    std::optional<int64_t> want;
  } cases[] = {
      {"1073741824\n", "73741824\n", 1000000000},
      {"1000\n", "5000\n", 0},  // over the limit already
      {"max\n", "5000\n", std::nullopt},
      {"", "", std::nullopt},            // no cgroup v2 files
      {"1000x\n", "5\n", std::nullopt},  // a number followed by more is not a number
      {"1000\n", "5 6\n", std::nullopt},
  };
  for (const Case& c : cases)
    EXPECT_EQ(CgroupRoom(c.max, c.current), c.want) << c.max << " / " << c.current;
}

TEST(Memory, ThisMachineHasSome) {
  const std::optional<int64_t> available = AvailableMemoryBytes();
  ASSERT_TRUE(available.has_value()) << "/proc/meminfo has no MemAvailable";
  EXPECT_GT(*available, 0);
}

}  // namespace
}  // namespace tessera::train
