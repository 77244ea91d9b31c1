// RunLocalGang, the fork-based gang of the multi-process tests and benchmarks: what it reports
// of each rank (exit code, signal, output, a kill at the deadline) and what each rank is given.
#include "worker/comm/local_gang.h"

#include <gtest/gtest.h>
#include <signal.h>
#include <unistd.h>

#include <string>

namespace tessera::comm {
namespace {

using namespace std::chrono_literals;

// Writes `text` with write(2): a forked child of a threaded process must not take stdio locks.
void Say(const std::string& text) {
  [[maybe_unused]] auto ignored = ::write(STDOUT_FILENO, text.data(), text.size());
}

TEST(LocalGang, ReportsEachRanksExitOutputAndTheDeadline) {
  const auto results = RunLocalGang(
      3,
      [](int rank, int listen_fd, int port) -> int {
        Say("rank " + std::to_string(rank) + (listen_fd >= 0 ? " listens" : " connects") +
            (port > 0 ? " on a port\n" : " nowhere\n"));
        if (rank == 2)
          ::pause();  // until killed at the deadline
        return rank == 1 ? 3 : 0;
      },
      3s);
  ASSERT_EQ(results.size(), 3u);
  EXPECT_EQ(results[0].exit_code, 0);
  EXPECT_EQ(results[0].output, "rank 0 listens on a port\n");
  EXPECT_FALSE(results[0].killed_at_deadline);
  EXPECT_EQ(results[1].rank, 1);
  EXPECT_EQ(results[1].exit_code, 3);
  EXPECT_FALSE(results[1].signaled);
  EXPECT_EQ(results[1].output, "rank 1 connects on a port\n");
  EXPECT_TRUE(results[2].killed_at_deadline);
  EXPECT_TRUE(results[2].signaled);
  EXPECT_EQ(results[2].signal, SIGKILL);
  EXPECT_EQ(results[2].output, "rank 2 connects on a port\n");
}

}  // namespace
}  // namespace tessera::comm
