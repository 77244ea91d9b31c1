// The data-parallel pieces: bucket plans and ZeRO-1 layouts (pure), the reducer's timing
// against a recording group, and the reducer and the shards on real Gloo groups of 2 and 3
// ranks run as threads of this process.
#include <gtest/gtest.h>
#include <sys/mman.h>
#include <unistd.h>

#include <mutex>
#include <numeric>
#include <stdexcept>
#include <string>
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
  EXPECT_EQ(PlanBuckets(9, 4), (std::vector<BufferRange>{{5, 9}, {1, 5}, {0, 1}}));
  EXPECT_EQ(PlanBuckets(1, 1), (std::vector<BufferRange>{{0, 1}}));
  EXPECT_TRUE(PlanBuckets(0, 4).empty());
}

// Decisions at the edges of the ready-offset plan, one row each.
TEST(PlanBuckets, ReadyOffsetsTable) {
  struct Case {
    const char* what;
    int64_t count;
    int64_t bucket_elements;
    std::vector<int64_t> ready;
    std::vector<BufferRange> want;
  };
  const std::vector<Case> cases = {
      {"a report exactly the limit is one bucket", 8, 4, {0}, {{4, 8}, {0, 4}}},
      {"a report of twice the limit: two buckets",
       12,
       3,
       {6, 0},
       {{9, 12}, {6, 9}, {3, 6}, {0, 3}}},
      {"reports that fit exactly merge",
       100,
       30,
       {80, 70, 0},
       {{70, 100}, {47, 70}, {24, 47}, {0, 24}}},
      {"no report at 0: the rest is final at the end",
       100,
       30,
       {80, 50},
       {{80, 100}, {50, 80}, {25, 50}, {0, 25}}},
      {"no report at 0, one bucket before it", 10, 4, {8}, {{8, 10}, {4, 8}, {0, 4}}},
      {"repeated offsets change nothing", 10, 4, {6, 6, 0, 0}, {{6, 10}, {3, 6}, {0, 3}}},
      {"offsets outside the buffer are clamped to it",
       10,
       4,
       {12, 6, -3},
       {{6, 10}, {3, 6}, {0, 3}}},
      {"one report at the end only", 5, 10, {5}, {{0, 5}}},
  };
  for (const Case& c : cases)
    EXPECT_EQ(PlanBuckets(c.count, c.bucket_elements, c.ready), c.want) << c.what;
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

// ZeroShards' own memory: one shard, and a staging copy of every padded shard only when the
// shards do not tile the buffer.
TEST(ZeroLayout, BufferBytesAreAShardAndAStagingCopyWhenPadded) {
  EXPECT_EQ((ZeroLayout{12, 4}).buffer_bytes(), 4 * 3);
  EXPECT_EQ((ZeroLayout{10, 4}).buffer_bytes(), 4 * (3 + 12));
  EXPECT_EQ((ZeroLayout{1, 1}).buffer_bytes(), 4);
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

// A group of one rank that performs nothing: it records, in issue order, each all-reduce (as
// the range of `base` it covers) and each wait_event, and hands out works the test completes.
class RecordingGroup : public comm::ProcessGroup {
 public:
  struct Work : comm::Work {
    bool done = false;
    int waits = 0;
    void wait() override {
      ++waits;
      done = true;
    }
    bool completed() override { return done; }
  };

  explicit RecordingGroup(const float* base) : base_(base) {}

  std::vector<std::string> log;  // "reduce [b,e)" or "event N"
  std::vector<std::shared_ptr<Work>> works;

  int rank() const override { return 0; }
  int size() const override { return 1; }
  std::string backend() const override { return "recording"; }
  const std::string& name() const override { return name_; }
  const std::vector<int>& world_ranks() const override { return world_ranks_; }
  std::shared_ptr<comm::Work> all_reduce(void* data, size_t count, comm::DataType,
                                         comm::ReduceOp) override {
    const int64_t begin = static_cast<const float*>(data) - base_;
    log.push_back("reduce [" + std::to_string(begin) + "," +
                  std::to_string(begin + static_cast<int64_t>(count)) + ")");
    works.push_back(std::make_shared<Work>());
    return works.back();
  }
  std::shared_ptr<comm::Work> reduce_scatter(const void*, void*, size_t, comm::DataType,
                                             comm::ReduceOp) override {
    return Unexpected();
  }
  std::shared_ptr<comm::Work> all_gather(const void*, void*, size_t, comm::DataType) override {
    return Unexpected();
  }
  std::shared_ptr<comm::Work> broadcast(void*, size_t, comm::DataType, int) override {
    return Unexpected();
  }
  std::shared_ptr<comm::Work> send(const void*, size_t, comm::DataType, int, uint32_t) override {
    return Unexpected();
  }
  std::shared_ptr<comm::Work> recv(void*, size_t, comm::DataType, int, uint32_t) override {
    return Unexpected();
  }
  std::shared_ptr<comm::Work> barrier() override { return Unexpected(); }
  void wait_event(void* event) override {
    log.push_back("event " + std::to_string(reinterpret_cast<intptr_t>(event)));
  }
  std::shared_ptr<comm::ProcessGroup> split(int, int, const std::string&) override {
    throw comm::CommError("RecordingGroup: split");
  }

 private:
  static std::shared_ptr<comm::Work> Unexpected() {
    throw comm::CommError("RecordingGroup: only all_reduce is expected");
  }
  const float* base_;
  std::string name_ = "recording";
  std::vector<int> world_ranks_ = {0};
};

// Buckets of 2 over 10 values: [8,10) [6,8) [4,6) [2,4) [0,2). Each report starts exactly
// the buckets it completes, from the end of the buffer toward its start.
TEST(BucketReducer, StartsEveryBucketTheReportCompletesAndNoOther) {
  struct Step {
    int64_t first;
    std::vector<std::string> started;
  };
  const std::vector<Step> steps = {
      {10, {}},                               // nothing final yet
      {9, {}},                                // [8,10) not whole yet
      {8, {"reduce [8,10)"}},                 // the report ends exactly at a bucket
      {8, {}},                                // a repeated report starts nothing more
      {3, {"reduce [6,8)", "reduce [4,6)"}},  // two buckets at once
      {0, {"reduce [2,4)", "reduce [0,2)"}},  // the rest
  };
  std::vector<float> grads(10);
  auto group = std::make_shared<RecordingGroup>(grads.data());
  BucketReducer reducer(group, grads, 2 * sizeof(float));
  ASSERT_EQ(reducer.buckets().size(), 5u);
  std::vector<std::string> want;
  for (const Step& step : steps) {
    reducer.GradientsReady(step.first);
    want.insert(want.end(), step.started.begin(), step.started.end());
    EXPECT_EQ(group->log, want) << "after the report at " << step.first;
  }
  const ReductionStats stats = reducer.Finish();
  EXPECT_EQ(stats.buckets, 5);
  EXPECT_EQ(group->log, want);  // nothing left to start
}

// Finish() counts what lagged (not started, or started and not complete), starts the rest,
// waits for every bucket, and leaves the reducer ready for the next step.
TEST(BucketReducer, FinishCountsLaggingBucketsWaitsForAllAndResets) {
  std::vector<float> grads(10);
  auto group = std::make_shared<RecordingGroup>(grads.data());
  BucketReducer reducer(group, grads, 2 * sizeof(float));
  for (int step = 0; step < 2; ++step) {
    group->log.clear();
    group->works.clear();
    reducer.GradientsReady(4);  // starts [8,10) [6,8) [4,6)
    ASSERT_EQ(group->works.size(), 3u) << "step " << step;
    group->works[1]->done = true;  // [6,8) completed while backward ran
    const ReductionStats stats = reducer.Finish();
    EXPECT_EQ(stats.pending_at_finish, 4) << "step " << step;  // 2 unstarted + 2 incomplete
    EXPECT_EQ(stats.buckets, 5) << "step " << step;
    EXPECT_EQ(stats.bytes, 40) << "step " << step;
    EXPECT_EQ(group->log, (std::vector<std::string>{"reduce [8,10)", "reduce [6,8)", "reduce [4,6)",
                                                    "reduce [2,4)", "reduce [0,2)"}))
        << "step " << step;
    for (size_t i = 0; i < group->works.size(); ++i)
      EXPECT_GE(group->works[i]->waits, 1) << "bucket " << i << " of step " << step;
  }
}

// Smaller than a float: buckets of one value rather than none.
TEST(BucketReducer, BucketBytesBelowOneValueMeanOneValuePerBucket) {
  std::vector<float> grads(3);
  auto group = std::make_shared<RecordingGroup>(grads.data());
  BucketReducer reducer(group, grads, 1);
  EXPECT_EQ(reducer.buckets(), (std::vector<BufferRange>{{2, 3}, {1, 2}, {0, 1}}));
}

// The device variant orders a bucket after the report's event exactly when the report starts
// one, and before that bucket's all-reduce.
TEST(BucketReducer, DeviceReportWaitsForItsEventOnlyWhenItStartsBuckets) {
  std::vector<float> grads(10);
  auto group = std::make_shared<RecordingGroup>(grads.data());
  BucketReducer reducer(group, grads, 2 * sizeof(float));
  const auto event = [](intptr_t n) { return reinterpret_cast<void*>(n); };
  reducer.GradientsReady(9, event(1));  // completes no bucket: no wait
  reducer.GradientsReady(6, event(2));
  reducer.GradientsReady(5, event(3));  // nothing new
  reducer.GradientsReady(0, event(4));
  EXPECT_EQ(group->log,
            (std::vector<std::string>{"event 2", "reduce [8,10)", "reduce [6,8)", "event 4",
                                      "reduce [4,6)", "reduce [2,4)", "reduce [0,2)"}));
  reducer.Finish();
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

// `n` floats that end where an inaccessible page begins: reading past them faults at once.
class FloatsBeforeAGuardPage {
 public:
  explicit FloatsBeforeAGuardPage(size_t n) {
    const size_t page = static_cast<size_t>(::sysconf(_SC_PAGESIZE));
    const size_t data_pages = (n * sizeof(float) + page - 1) / page;
    length_ = (data_pages + 1) * page;
    void* base =
        ::mmap(nullptr, length_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (base == MAP_FAILED)
      throw std::runtime_error("mmap failed");
    base_ = static_cast<char*>(base);
    if (::mprotect(base_ + data_pages * page, page, PROT_NONE) != 0)
      throw std::runtime_error("mprotect failed");
    floats_ = std::span<float>(reinterpret_cast<float*>(base_ + data_pages * page) - n, n);
  }
  ~FloatsBeforeAGuardPage() { ::munmap(base_, length_); }
  FloatsBeforeAGuardPage(const FloatsBeforeAGuardPage&) = delete;
  FloatsBeforeAGuardPage& operator=(const FloatsBeforeAGuardPage&) = delete;
  std::span<float> floats() const { return floats_; }

 private:
  char* base_ = nullptr;
  size_t length_ = 0;
  std::span<float> floats_;
};

// Uneven counts, and more ranks than values: every value is owned by exactly one rank, the
// collectives touch only the `count` values given (nothing past the gradients is read, the
// guard values after the parameters survive), and the buffers round-trip.
TEST(ZeroShards, UnevenCountsOwnEveryValueOnceAndTouchNothingPastTheBuffer) {
  struct Case {
    int64_t count;
    int ranks;
  };
  constexpr float kGuard = -7.0f;
  constexpr size_t kGuards = 8;
  for (const Case& c : std::vector<Case>{{13, 2}, {7, 3}, {9, 4}, {2, 3}, {12, 3}}) {
    std::vector<int> owners(static_cast<size_t>(c.count), 0);  // per value, how many ranks own it
    std::mutex owners_mu;
    OnGroup(c.ranks, [&](int rank, comm::ProcessGroup& group) {
      std::shared_ptr<comm::ProcessGroup> g(&group, [](comm::ProcessGroup*) {});
      ZeroShards zero(g, c.count);
      const BufferRange own = zero.own();
      EXPECT_EQ(own, zero.layout().shard(rank));
      {
        std::lock_guard<std::mutex> lock(owners_mu);
        for (int64_t i = own.begin; i < own.end; ++i)
          ++owners[static_cast<size_t>(i)];
      }
      const std::string what =
          std::to_string(c.count) + "/" + std::to_string(c.ranks) + " rank " + std::to_string(rank);
      // The gradients end at an inaccessible page: the padded collective must not read past.
      const FloatsBeforeAGuardPage grads(static_cast<size_t>(c.count));
      for (int64_t i = 0; i < c.count; ++i)
        grads.floats()[static_cast<size_t>(i)] = static_cast<float>(i * (rank + 1));
      const std::span<float> mine = zero.ReduceScatter(grads.floats());
      ASSERT_EQ(static_cast<int64_t>(mine.size()), own.size()) << what;
      const float mean_factor = static_cast<float>(c.ranks + 1) / 2.0f;  // mean of 1..ranks
      for (int64_t i = 0; i < own.size(); ++i) {
        EXPECT_FLOAT_EQ(mine[static_cast<size_t>(i)],
                        static_cast<float>(own.begin + i) * mean_factor)
            << what << " value " << own.begin + i;
      }
      std::vector<float> params(static_cast<size_t>(c.count) + kGuards, kGuard);
      std::fill_n(params.begin(), c.count, -1.0f);
      for (int64_t i = own.begin; i < own.end; ++i)
        params[static_cast<size_t>(i)] = static_cast<float>(i * 10 + rank);
      zero.AllGather(std::span<float>(params).first(static_cast<size_t>(c.count)));
      for (int64_t i = 0; i < c.count; ++i) {
        const int owner = static_cast<int>(i / zero.layout().shard_size());
        EXPECT_EQ(params[static_cast<size_t>(i)], static_cast<float>(i * 10 + owner))
            << what << " value " << i;
      }
      for (size_t i = static_cast<size_t>(c.count); i < params.size(); ++i)
        EXPECT_EQ(params[i], kGuard) << what << ": AllGather wrote past the buffer at " << i;
    });
    for (int64_t i = 0; i < c.count; ++i)
      EXPECT_EQ(owners[static_cast<size_t>(i)], 1) << c.count << "/" << c.ranks << " value " << i;
  }
}

}  // namespace
}  // namespace tessera::parallel
