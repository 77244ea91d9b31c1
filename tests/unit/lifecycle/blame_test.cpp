// The tie rule among failures seen at the same time, as the pod agent applies it to the exit
// codes of the ranks it reaped in one poll (listed by local rank).
#include <gtest/gtest.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "lifecycle/job_state.h"

namespace tessera::lifecycle {
namespace {

std::string Show(const std::vector<int64_t>& codes) {
  std::string s;
  for (int64_t c : codes)
    s += (s.empty() ? "" : ",") + std::to_string(c);
  return "[" + s + "]";
}

TEST(FailureToBlame, AnotherCodeBeforeALostPeerThenTheLowestIndex) {
  const int64_t kLost = kCommunicationFailedExitCode;
  struct {
    std::vector<int64_t> codes;
    std::optional<size_t> want;
  } cases[] = {
      {{}, std::nullopt},
      {{0}, std::nullopt},
      {{0, 0, 0}, std::nullopt},
      {{1}, 0},
      {{0, 137}, 1},
      {{kLost}, 0},       // a lost peer alone is still a failure to report
      {{kLost, 137}, 1},  // the rank killed by SIGKILL, not the one that lost it
      {{137, kLost}, 0},
      {{kLost, kLost, 1}, 2},
      {{kLost, 0, kLost}, 0},  // only lost peers: the lowest rank
      {{1, 2}, 0},             // two real failures: the lowest rank
      {{0, 2, 1}, 1},
      {{kLost, 3, 2}, 1},  // the lowest rank among the others
      {{kLost, 0, 0, 134}, 3},
  };
  for (const auto& c : cases)
    EXPECT_EQ(FailureToBlame(c.codes), c.want) << Show(c.codes);
}

TEST(BlamedFirstOnATie, OnlyALostPeerYields) {
  const int64_t kLost = kCommunicationFailedExitCode;
  EXPECT_TRUE(BlamedFirstOnATie(1, kLost));
  EXPECT_TRUE(BlamedFirstOnATie(137, kLost));
  EXPECT_FALSE(BlamedFirstOnATie(kLost, 1));
  EXPECT_FALSE(BlamedFirstOnATie(kLost, kLost));
  EXPECT_FALSE(BlamedFirstOnATie(1, 2));
  EXPECT_FALSE(BlamedFirstOnATie(2, 1));
}

}  // namespace
}  // namespace tessera::lifecycle
