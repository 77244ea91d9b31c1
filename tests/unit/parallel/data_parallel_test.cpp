// The data-parallel pieces: bucket plans and ZeRO-1 layouts (pure), and the reducer and the
// shards on real Gloo groups of 2 and 3 ranks run as threads of this process.
#include <gtest/gtest.h>

#include <numeric>
#include <thread>

#include "worker/comm/local_gang.h"
#include "worker/parallel/data/bucket_reducer.h"
#include "worker/parallel/data/zero.h"

namespace tessera::parallel {
namespace {

using namespace std::chrono_literals;

TEST(PlanBuckets, CoversTheBufferFromItsEnd) {
  EXPECT_EQ(PlanBuckets(10, 4), (std::vector<BufferRange>{{6, 10}, {2, 6}, {0, 2}}));
  EXPECT_EQ(PlanBuckets(8, 4), (std::vector<BufferRange>{{4, 8}, {0, 4}}));
  EXPECT_EQ(PlanBuckets(3, 100), (std::vector<BufferRange>{{0, 3}}));
  EXPECT_TRUE(PlanBuckets(0, 4).empty());
}

// Cut where backward reports: reports merge while they fit, a large one splits evenly, and no
// bucket spans a report boundary unless it merged whole reports.
TEST(PlanBuckets, AlignsToTheReadyOffsets) {
  EXPECT_EQ(PlanBuckets(100, 30, {80, 70, 20, 0}),
            (std::vector<BufferRange>{{70, 100}, {45, 70}, {20, 45}, {0, 20}}));
  // Without offsets the fixed plan; one report of everything splits into equal buckets.
  EXPECT_EQ(PlanBuckets(10, 4, {}), PlanBuckets(10, 4));
  EXPECT_EQ(PlanBuckets(10, 4, {0}), (std::vector<BufferRange>{{7, 10}, {4, 7}, {0, 4}}));
  // Every bucket fits, they tile the buffer from its end, and each lies inside one report or
  // is a union of whole reports.
  const std::vector<int64_t> ready = {9000, 8100, 5000, 4990, 1200, 300, 0};
  const std::vector<BufferRange> plan = PlanBuckets(10000, 1000, ready);
  int64_t end = 10000;
  for (const BufferRange& b : plan) {
    EXPECT_EQ(b.end, end);
    EXPECT_LE(b.size(), 1000);
    EXPECT_GT(b.size(), 0);
    end = b.begin;
  }
  EXPECT_EQ(end, 0);
  const auto report_of = [&](int64_t offset) {  // index of the report that completes `offset`
    size_t i = 0;
    while (i < ready.size() && offset < ready[i])
      ++i;
    return i;
  };
  for (const BufferRange& b : plan) {
    const size_t first = report_of(b.end - 1), last = report_of(b.begin);
    if (first != last) {  // merged reports: whole ones only
      EXPECT_EQ(b.begin, ready[last]) << b.begin << ".." << b.end;
      EXPECT_TRUE(b.end == 10000 || b.end == ready[first - 1]) << b.begin << ".." << b.end;
    }
  }
}

TEST(ZeroLayout, ShardsTileTheBufferInRankOrder) {
  for (const auto& [count, ranks] :
       std::vector<std::pair<int64_t, int>>{{12, 4}, {13, 4}, {3, 4}, {1, 3}, {1000003, 7}}) {
    const ZeroLayout layout{count, ranks};
    int64_t next = 0;
    for (int r = 0; r < ranks; ++r) {
      const BufferRange s = layout.shard(r);
      EXPECT_EQ(s.begin, next) << count << "/" << ranks << " rank " << r;
      EXPECT_LE(s.size(), layout.shard_size());
      next = s.end;
    }
    EXPECT_EQ(next, count) << count << "/" << ranks;
  }
  EXPECT_EQ((ZeroLayout{3, 4}).shard(3).size(), 0);  // more ranks than values: empty shards
}

// Runs fn(rank, group) on `ranks` threads, each with its own Gloo group.
void OnGroup(int ranks, const std::function<void(int, comm::ProcessGroup&)>& fn) {
  comm::RunThreadGang(ranks, [&](int r, std::shared_ptr<comm::ProcessGroup> g) { fn(r, *g); });
}

TEST(BucketReducer, AveragesEveryBucketWhateverTheReportOrder) {
  constexpr int kRanks = 3;
  constexpr int64_t kCount = 1001;
  OnGroup(kRanks, [&](int rank, comm::ProcessGroup& group) {
    std::shared_ptr<comm::ProcessGroup> g(&group, [](comm::ProcessGroup*) {});
    std::vector<float> grads(kCount);
    for (int step = 0; step < 2; ++step) {
      for (int64_t i = 0; i < kCount; ++i)
        grads[static_cast<size_t>(i)] = static_cast<float>((rank + 1) * (i + step));
      BucketReducer reducer(g, grads, 100 * sizeof(float));
      ASSERT_EQ(reducer.buckets().size(), 11u);
      // Reports as backward makes them: suffixes, some not on bucket boundaries.
      for (int64_t first : {950, 901, 500, 120})
        reducer.GradientsReady(first);
      const ReductionStats stats = reducer.Finish();
      EXPECT_EQ(stats.buckets, 11);
      EXPECT_EQ(stats.bytes, kCount * 4);
      // The 3 buckets below offset 120 had not started when Finish() was called; the 8 above
      // may or may not have completed.
      EXPECT_GE(stats.pending_at_finish, 3);
      EXPECT_LE(stats.pending_at_finish, 11);
      // mean over ranks of (r + 1) * (i + step) = 2 * (i + step) for 3 ranks.
      for (int64_t i = 0; i < kCount; ++i)
        ASSERT_FLOAT_EQ(grads[static_cast<size_t>(i)], 2.0f * static_cast<float>(i + step)) << i;
    }
  });
}

TEST(ZeroShards, ReduceScatterThenAllGatherRebuildsTheUpdatedBuffer) {
  for (const int64_t count : {int64_t{12}, int64_t{13}}) {  // tiling and padded
    OnGroup(2, [&](int rank, comm::ProcessGroup& group) {
      std::shared_ptr<comm::ProcessGroup> g(&group, [](comm::ProcessGroup*) {});
      ZeroShards zero(g, count);
      std::vector<float> grads(static_cast<size_t>(count));
      std::iota(grads.begin(), grads.end(), static_cast<float>(rank * 100));
      const std::span<float> mine = zero.ReduceScatter(grads);
      const BufferRange own = zero.own();
      ASSERT_EQ(static_cast<int64_t>(mine.size()), own.size());
      for (int64_t i = 0; i < own.size(); ++i)  // mean of i and i + 100
        EXPECT_FLOAT_EQ(mine[static_cast<size_t>(i)], static_cast<float>(own.begin + i) + 50.0f);
      // Each rank "updates" only its shard; afterwards all hold every update.
      std::vector<float> params(static_cast<size_t>(count), -1.0f);
      for (int64_t i = own.begin; i < own.end; ++i)
        params[static_cast<size_t>(i)] = static_cast<float>(i * 10 + rank);
      zero.AllGather(params);
      for (int64_t i = 0; i < count; ++i) {
        const int owner = i < zero.layout().shard_size() ? 0 : 1;
        EXPECT_EQ(params[static_cast<size_t>(i)], static_cast<float>(i * 10 + owner)) << i;
      }
    });
  }
}

}  // namespace
}  // namespace tessera::parallel
