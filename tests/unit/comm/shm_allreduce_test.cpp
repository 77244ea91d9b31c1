// The shared-memory all-reduce on its own: ranks as threads of this process (each with its own
// store client and mapping of the segment), an in-process store. The multi-process checks,
// through the Gloo group, are tests/e2e/comm (comm_collective_*).
#include "worker/comm/shm_allreduce.h"

#include <gtest/gtest.h>

#include <functional>
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
// reason names the ranks.
TEST_F(ShmAllReduceTest, RanksOnDifferentMachinesAllFallBack) {
  const int ranks = 3;
  std::vector<std::string> why(ranks);
  std::vector<int> created(ranks, -1);
  OnThreads(ranks, [&](int rank) {
    auto client = Client();
    const std::string machine = rank == 2 ? "elsewhere/boot" : ShmAllReduce::ThisMachine();
    created[rank] =
        ShmAllReduce::Create(*client, "t/", rank, ranks, 10s, &why[rank], machine) ? 1 : 0;
  });
  for (int r = 0; r < ranks; ++r) {
    EXPECT_EQ(created[r], 0) << "rank " << r;
    EXPECT_EQ(why[r], "ranks 0 and 2 are on different machines") << "rank " << r;
  }
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
}

}  // namespace
}  // namespace tessera::comm
