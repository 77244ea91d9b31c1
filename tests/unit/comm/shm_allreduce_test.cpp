// The shared-memory all-reduce on its own: ranks as threads of this process (each with its own
// store client and mapping of the segment), an in-process store. The multi-process checks,
// through the Gloo group, are tests/e2e/comm (comm_collective_*).
#include "worker/comm/shm_allreduce.h"

#include <dirent.h>
#include <gtest/gtest.h>
#include <sched.h>
#include <sys/mount.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "tests/unit/comm/local_store.h"
#include "worker/comm/process_group.h"

namespace tessera::comm {
namespace {

using namespace std::chrono_literals;

class ShmAllReduceTest : public ::testing::Test {
 protected:
  void SetUp() override { server_ = test::StartLocalStore(); }
  std::unique_ptr<rendezvous::StoreClient> Client() const {
    return std::make_unique<rendezvous::StoreClient>(test::LocalStoreClient(*server_, 10s));
  }
  // Runs fn(rank) on `ranks` threads and joins them.
  static void OnThreads(int ranks, const std::function<void(int)>& fn) {
    std::vector<std::thread> threads;
    for (int r = 0; r < ranks; ++r)
      threads.emplace_back(fn, r);
    for (std::thread& t : threads)
      t.join();
  }
  std::unique_ptr<rendezvous::StoreServer> server_;
};

// Sizes around the slot (one piece, exactly one, one and a bit, several) and a rank count
// that does not divide them: every rank ends with the exact sum (small integers are exact in
// float) or average, the same on every rank.
TEST_F(ShmAllReduceTest, SumsAndAveragesExactlyAcrossPieces) {
  const int ranks = 3;
  const std::vector<size_t> counts = {1, 7, ShmAllReduce::kSlotFloats,
                                      ShmAllReduce::kSlotFloats + 5,
                                      3 * ShmAllReduce::kSlotFloats + 11};
  std::vector<std::string> failures(ranks);
  OnThreads(ranks, [&](int rank) {
    auto client = Client();
    std::string why;
    auto shm = ShmAllReduce::Create(*client, "t/", rank, ranks, 10s, &why);
    if (!shm) {
      failures[rank] = "not created: " + why;
      return;
    }
    for (size_t count : counts) {
      std::vector<float> x(count);
      for (size_t i = 0; i < count; ++i)
        x[i] = static_cast<float>((i % 100) * (rank + 1));
      shm->AllReduce(x.data(), count, false);
      for (size_t i = 0; i < count && failures[rank].empty(); ++i) {
        const float want = static_cast<float>((i % 100) * (1 + 2 + 3));
        if (x[i] != want) {
          failures[rank] = "sum of " + std::to_string(count) + ": element " + std::to_string(i) +
                           " is " + std::to_string(x[i]) + ", want " + std::to_string(want);
        }
      }
      std::vector<float> y(count, static_cast<float>(rank) * 3.0f);  // 0, 3, 6: average 3
      shm->AllReduce(y.data(), count, true);
      for (size_t i = 0; i < count && failures[rank].empty(); ++i) {
        if (y[i] != 3.0f)
          failures[rank] = "average of " + std::to_string(count) + " is " + std::to_string(y[i]);
      }
    }
  });
  for (int r = 0; r < ranks; ++r)
    EXPECT_EQ(failures[r], "") << "rank " << r;
}

// Ranks that report different machines get no segment, every one of them alike, and the
// reason names the ranks; whichever rank is elsewhere.
TEST_F(ShmAllReduceTest, RanksOnDifferentMachinesAllFallBack) {
  const int ranks = 3;
  for (int elsewhere : {1, 2}) {
    std::vector<std::string> why(ranks);
    std::vector<int> created(ranks, -1);
    const std::string prefix = "t" + std::to_string(elsewhere) + "/";
    OnThreads(ranks, [&](int rank) {
      auto client = Client();
      const std::string machine =
          rank == elsewhere ? "elsewhere/boot" : ShmAllReduce::ThisMachine();
      created[rank] =
          ShmAllReduce::Create(*client, prefix, rank, ranks, 10s, &why[rank], machine) ? 1 : 0;
    });
    const std::string want =
        "ranks 0 and " + std::to_string(elsewhere) + " are on different machines";
    for (int r = 0; r < ranks; ++r) {
      EXPECT_EQ(created[r], 0) << "rank " << r;
      EXPECT_EQ(why[r], want) << "rank " << r;
    }
  }
}

// Group sizes the segment does not serve are refused at once, before touching the store.
TEST_F(ShmAllReduceTest, GroupSizesOutsideTwoToMaxRanksAreRefused) {
  auto client = Client();
  for (int size : {1, ShmAllReduce::kMaxRanks + 1}) {
    std::string why;
    EXPECT_EQ(ShmAllReduce::Create(*client, "t/", 0, size, 100ms, &why), nullptr) << size;
    EXPECT_NE(why.find("2 to 64 ranks"), std::string::npos) << size << ": " << why;
  }
}

// Segments of this process in /dev/shm (rank 0 names them after its pid).
std::vector<std::string> SegmentsOfThisProcess() {
  std::vector<std::string> found;
  const std::string prefix = "tessera-" + std::to_string(::getpid()) + "-";
  if (DIR* dir = ::opendir("/dev/shm")) {
    while (const dirent* e = ::readdir(dir)) {
      if (std::string(e->d_name).rfind(prefix, 0) == 0)
        found.push_back(e->d_name);
    }
    ::closedir(dir);
  }
  return found;
}

// Once every rank has mapped the segment its name is gone from /dev/shm, so a rank that dies
// later leaves nothing behind.
TEST_F(ShmAllReduceTest, NoSegmentNameOutlivesTheSetup) {
  std::vector<std::unique_ptr<ShmAllReduce>> shm(2);
  OnThreads(2, [&](int rank) {
    auto client = Client();
    std::string why;
    shm[rank] = ShmAllReduce::Create(*client, "t/", rank, 2, 10s, &why);
  });
  ASSERT_NE(shm[0], nullptr);
  ASSERT_NE(shm[1], nullptr);
  EXPECT_EQ(SegmentsOfThisProcess(), std::vector<std::string>{});
}

// A rank that could not map the segment says so through the store, and every rank falls back
// naming it. Rank 1 here is played by the test through the store.
TEST_F(ShmAllReduceTest, ARankThatCannotMapTheSegmentMakesEveryRankFallBack) {
  std::string why = "not called";
  std::unique_ptr<ShmAllReduce> shm;
  std::thread rank0([&] {
    auto client = Client();
    shm = ShmAllReduce::Create(*client, "t/", 0, 2, 10s, &why);
  });
  auto rank1 = Client();
  rank1->Set("t/shm/machine/1", ShmAllReduce::ThisMachine());
  rank1->Get("t/shm/name", 10s);
  rank1->Set("t/shm/mapped/1", "cannot map the segment: injected");
  rank0.join();
  EXPECT_EQ(shm, nullptr);
  EXPECT_EQ(why, "rank 1: cannot map the segment: injected");
  EXPECT_EQ(SegmentsOfThisProcess(), std::vector<std::string>{});
}

// Whether this process may mount a tmpfs of its own (root, or CAP_SYS_ADMIN), tried in a
// child so that nothing here changes.
bool CanMountPrivately() {
  const pid_t pid = ::fork();
  if (pid == 0)
    ::_exit(::unshare(CLONE_NEWNS) == 0 ? 0 : 1);
  int status = 0;
  return pid > 0 && ::waitpid(pid, &status, 0) == pid && WIFEXITED(status) &&
         WEXITSTATUS(status) == 0;
}

// A /dev/shm too small for the segment (a pod's is 64 MiB by default, shared by every
// process of the pod): every rank falls back to Gloo at set-up, naming the reason, instead of
// mapping pages that do not exist and dying of SIGBUS at the first all-reduce. Here in a
// mount namespace of its own, over a 1 MiB tmpfs, and four ranks need 5 MiB.
TEST_F(ShmAllReduceTest, AFullDevShmMakesEveryRankFallBackInsteadOfDyingOfSigbus) {
  if (!CanMountPrivately())
    GTEST_SKIP() << "cannot make a mount namespace here (needs root or CAP_SYS_ADMIN)";
  GTEST_FLAG_SET(death_test_style, "threadsafe");
  EXPECT_EXIT(
      {
        if (::unshare(CLONE_NEWNS) != 0 ||
            ::mount("none", "/", nullptr, MS_REC | MS_PRIVATE, nullptr) != 0 ||
            ::mount("tmpfs", "/dev/shm", "tmpfs", 0, "size=1m") != 0) {
          std::fprintf(stderr, "cannot mount a small /dev/shm\n");
          std::exit(2);
        }
        const int ranks = 4;
        std::vector<std::string> why(ranks);
        std::vector<int> created(ranks, -1);
        OnThreads(ranks, [&](int rank) {
          auto client = Client();
          auto shm = ShmAllReduce::Create(*client, "t/", rank, ranks, 10s, &why[rank]);
          created[rank] = shm ? 1 : 0;
          if (shm) {  // touches every page of its slot and the result slot
            std::vector<float> x(ShmAllReduce::kSlotFloats, 1.0f);
            shm->AllReduce(x.data(), x.size(), false);
          }
        });
        for (int r = 0; r < ranks; ++r) {
          std::fprintf(stderr, "rank %d: created %d: %s\n", r, created[r], why[r].c_str());
          if (created[r] != 0 || why[r].find("No space left on device") == std::string::npos)
            std::exit(1);
        }
        std::exit(0);
      },
      ::testing::ExitedWithCode(0), "rank 3: created 0: rank 0: cannot create /tessera-");
}

// A rank that never arrives: the others fail at the timeout, naming it, instead of hanging.
TEST_F(ShmAllReduceTest, AMissingRankIsNamedAtTheTimeout) {
  std::string error;
  OnThreads(2, [&](int rank) {
    auto client = Client();
    std::string why;
    auto shm = ShmAllReduce::Create(*client, "t/", rank, 2, 300ms, &why);
    ASSERT_NE(shm, nullptr) << why;
    if (rank == 1)
      return;  // never calls AllReduce
    float x = 1.0f;
    try {
      shm->AllReduce(&x, 1, false);
    } catch (const CommError& e) {
      error = e.what();
    }
  });
  EXPECT_NE(error.find("rank 1 did not arrive within 300 ms"), std::string::npos) << error;
}

// Abort (the group broke: a lost rank) ends a wait at once with its reason, and every later
// call too.
TEST_F(ShmAllReduceTest, AbortEndsAWaitAtOnce) {
  std::vector<std::unique_ptr<ShmAllReduce>> shm(2);
  OnThreads(2, [&](int rank) {
    auto client = Client();
    std::string why;
    shm[rank] = ShmAllReduce::Create(*client, "t/", rank, 2, 60s, &why);
  });
  ASSERT_NE(shm[0], nullptr);
  std::string error;
  const auto start = std::chrono::steady_clock::now();
  std::thread waiter([&] {
    float x = 1.0f;
    try {
      shm[0]->AllReduce(&x, 1, false);  // rank 1 never comes
    } catch (const CommError& e) {
      error = e.what();
    }
  });
  std::this_thread::sleep_for(100ms);
  shm[0]->Abort("rank 1 lost: its process exited");
  waiter.join();
  EXPECT_EQ(error, "rank 1 lost: its process exited");
  EXPECT_LT(std::chrono::steady_clock::now() - start, 5s);  // not the 60 s timeout
  float y = 1.0f;
  EXPECT_THROW(shm[0]->AllReduce(&y, 1, false), CommError);
  EXPECT_THROW(shm[0]->AllReduce(&y, 0, false), CommError);  // whatever its size
  // The first reason stays.
  shm[0]->Abort("a later failure");
  try {
    shm[0]->AllReduce(&y, 1, false);
    ADD_FAILURE() << "all-reduce after Abort returned";
  } catch (const CommError& e) {
    EXPECT_STREQ(e.what(), "rank 1 lost: its process exited");
  }
}

}  // namespace
}  // namespace tessera::comm
