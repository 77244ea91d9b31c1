// In-process checks of the Gloo group: one rank (the degenerate group every mesh dimension
// of extent 1 gets) with an in-process store; contract errors raised before any transfer; and
// gangs of ranks as threads of this process: every collective against its serial reference,
// split, and the failure paths (a timeout, a rank the store reports lost).
#include <gtest/gtest.h>
#include <stdlib.h>
#include <unistd.h>

#include <functional>
#include <future>
#include <stdexcept>
#include <thread>

#include "tests/unit/comm/local_store.h"
#include "worker/comm/device_mesh.h"
#include "worker/comm/gloo_process_group.h"
#include "worker/comm/local_gang.h"

namespace tessera::comm {
namespace {

using namespace std::chrono_literals;

class SingleRankGloo : public ::testing::Test {
 protected:
  void SetUp() override {
    server_ = test::StartLocalStore();
    client_ = std::make_unique<rendezvous::StoreClient>(test::LocalStoreClient(*server_, 10s));
    GlooOptions go;
    go.comm.timeout = 10s;
    world_ = CreateGlooProcessGroup(*client_, 0, 1, go);
  }
  std::unique_ptr<rendezvous::StoreServer> server_;
  std::unique_ptr<rendezvous::StoreClient> client_;
  std::shared_ptr<ProcessGroup> world_;
};

TEST_F(SingleRankGloo, CollectivesOfOneRankAreIdentities) {
  std::vector<float> x = {1, 2, 3};
  world_->all_reduce(std::span<float>(x), ReduceOp::kSum)->wait();
  world_->all_reduce(std::span<float>(x), ReduceOp::kAvg)->wait();
  EXPECT_EQ(x, (std::vector<float>{1, 2, 3}));
  std::vector<float> shard(3);
  world_->reduce_scatter(x.data(), shard.data(), 3, DataType::kFloat32, ReduceOp::kMax)->wait();
  EXPECT_EQ(shard, x);
  std::vector<int64_t> in = {7, 8}, out(2);
  world_->all_gather(in.data(), out.data(), 2, DataType::kInt64)->wait();
  EXPECT_EQ(out, in);
  world_->broadcast(std::span<float>(x), 0)->wait();
  world_->barrier()->wait();
  EXPECT_EQ(world_->backend(), "gloo");
  EXPECT_EQ(world_->world_ranks(), std::vector<int>{0});
}

TEST_F(SingleRankGloo, ContractErrorsAreClearAndImmediate) {
  float x = 0;
  EXPECT_THROW(world_->broadcast(&x, 1, DataType::kFloat32, 3), CommError);
  EXPECT_THROW(world_->broadcast(&x, 1, DataType::kFloat32, 1), CommError);  // == size()
  EXPECT_THROW(world_->broadcast(&x, 1, DataType::kFloat32, -1), CommError);
  EXPECT_THROW(world_->send(&x, 1, DataType::kFloat32, 1), CommError);
  EXPECT_THROW(world_->send(&x, 1, DataType::kFloat32, 0), CommError);  // to itself
  EXPECT_THROW(world_->recv(&x, 1, DataType::kFloat32, 0), CommError);
  EXPECT_THROW(world_->all_reduce(&x, 1, DataType::kBFloat16, ReduceOp::kSum), CommError);
  // A host backend has no stream to order after a device event.
  int not_an_event = 0;
  try {
    world_->wait_event(&not_an_event);
    ADD_FAILURE() << "wait_event on a Gloo group did not throw";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("cannot wait for a device event"), std::string::npos)
        << e.what();
  }
}

TEST_F(SingleRankGloo, MeshOfOneHasGroupsOfOne) {
  auto mesh = DeviceMesh::Create(world_, MeshShape{1, 1, 1});
  for (MeshDim dim : kMeshDims) {
    ASSERT_NE(mesh.group(dim), nullptr);
    EXPECT_EQ(mesh.group(dim)->size(), 1);
    int64_t v = 5;
    mesh.group(dim)->all_reduce(&v, 1, DataType::kInt64, ReduceOp::kSum)->wait();
    EXPECT_EQ(v, 5);
  }
  EXPECT_THROW(DeviceMesh::Create(world_, MeshShape{2, 1, 1}), CommConfigError);
}

TEST_F(SingleRankGloo, ARankOutsideTheWorldIsAConfigError) {
  GlooOptions go;
  go.comm.timeout = 10s;
  for (auto [rank, size] : {std::pair{1, 1}, std::pair{-1, 1}, std::pair{0, 0}}) {
    EXPECT_THROW(CreateGlooProcessGroup(*client_, rank, size, go), CommConfigError)
        << "rank " << rank << " of " << size;
  }
}

TEST_F(SingleRankGloo, AWorldThatNeverFillsFailsSayingNotEveryRankArrived) {
  GlooOptions go;
  go.comm.timeout = 500ms;
  go.prefix = "alone/";
  try {
    CreateGlooProcessGroup(*client_, 0, 2, go);  // rank 1 never comes
    ADD_FAILURE() << "a world of 2 connected with one rank";
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find("not every rank arrived within 0.5s"), std::string::npos)
        << e.what();
  }
}

TEST(GlooOptions, FromEnvironmentTable) {
  char hostname[256] = {0};
  ASSERT_EQ(::gethostname(hostname, sizeof(hostname) - 1), 0);
  struct Case {
    const char* host;  // TESSERA_COMM_HOST; nullptr: unset
    const char* shm;   // TESSERA_SHM_ALLREDUCE; nullptr: unset
    std::string want_host;
    bool want_shm;
  };
  const std::vector<Case> cases = {
      {nullptr, nullptr, hostname, true},
      {"10.1.2.3", "0", "10.1.2.3", false},
      {"", "1", hostname, true},
  };
  auto set = [](const char* name, const char* value) {
    if (value) {
      ::setenv(name, value, 1);
    } else {
      ::unsetenv(name);
    }
  };
  for (const auto& c : cases) {
    set("TESSERA_COMM_HOST", c.host);
    set("TESSERA_SHM_ALLREDUCE", c.shm);
    const GlooOptions o = GlooOptions::FromEnv();
    EXPECT_EQ(o.host, c.want_host) << (c.host ? c.host : "unset");
    EXPECT_EQ(o.shared_memory_allreduce, c.want_shm) << (c.shm ? c.shm : "unset");
  }
  ::unsetenv("TESSERA_COMM_HOST");
  ::unsetenv("TESSERA_SHM_ALLREDUCE");
}

// Ranks of one world as threads of this process, with the store in reach of the test (to report
// a loss as the store does when a rank's connection drops without a goodbye).
class GlooGang : public ::testing::Test {
 protected:
  void Start(int ranks, std::chrono::milliseconds timeout, bool shared_memory = true) {
    server_ = test::StartLocalStore();
    store_ = std::make_unique<rendezvous::StoreClient>(test::LocalStoreClient(*server_, 10s));
    GlooOptions go;
    go.comm.timeout = timeout;
    go.shared_memory_allreduce = shared_memory;
    // Every client first: a rank's thread must not read clients_ while it grows.
    for (int r = 0; r < ranks; ++r) {
      clients_.push_back(
          std::make_unique<rendezvous::StoreClient>(test::LocalStoreClient(*server_, 10s)));
    }
    std::vector<std::future<std::shared_ptr<ProcessGroup>>> pending;
    for (int r = 0; r < ranks; ++r) {
      pending.push_back(std::async(std::launch::async, [client = clients_[r].get(), r, ranks, go] {
        return CreateGlooProcessGroup(*client, r, ranks, go);
      }));
    }
    for (auto& p : pending)
      groups_.push_back(p.get());
  }
  // Runs fn(rank) on a thread per rank and joins them.
  void OnEveryRank(const std::function<void(int rank)>& fn) {
    std::vector<std::thread> threads;
    for (size_t r = 0; r < groups_.size(); ++r)
      threads.emplace_back(fn, static_cast<int>(r));
    for (auto& t : threads)
      t.join();
  }
  void ReportLost(int world_rank) { store_->Set("tessera/lost", std::to_string(world_rank)); }

  std::unique_ptr<rendezvous::StoreServer> server_;
  std::unique_ptr<rendezvous::StoreClient> store_;
  std::vector<std::unique_ptr<rendezvous::StoreClient>> clients_;
  std::vector<std::shared_ptr<ProcessGroup>> groups_;
};

// Runs fn and expects a CommError whose message contains `part`.
void ExpectCommError(const std::function<void()>& fn, const std::string& part) {
  try {
    fn();
    ADD_FAILURE() << "no CommError; expected one saying: " << part;
  } catch (const CommError& e) {
    EXPECT_NE(std::string(e.what()).find(part), std::string::npos) << e.what();
  }
}

// Every collective on 3 ranks, with the float32 sums and averages through shared memory and
// through Gloo, against values computed by hand (rank r contributes values derived from r).
TEST_F(GlooGang, CollectivesOfThreeRanksMatchTheirSerialReference) {
  for (bool shared_memory : {true, false}) {
    SCOPED_TRACE(shared_memory ? "shared memory" : "gloo only");
    Start(3, 20s, shared_memory);
    // Whether the world set up its shared-memory segment (ShmAllReduce::Create's keys).
    EXPECT_EQ(store_->TryGet("tessera/world/shm/mapped/0"),
              shared_memory ? std::optional<std::string>("") : std::nullopt);
    OnEveryRank([&](int r) {
      ProcessGroup& g = *groups_[r];
      const std::string at = "rank " + std::to_string(r);
      struct Int64Case {
        ReduceOp op;
        std::vector<int64_t> want;
      };
      for (const auto& c : std::vector<Int64Case>{{ReduceOp::kSum, {6, 60, -3}},
                                                  {ReduceOp::kAvg, {2, 20, -1}},
                                                  {ReduceOp::kMax, {3, 30, 0}}}) {
        std::vector<int64_t> x = {r + 1, 10 * (r + 1), -r};
        g.all_reduce(std::span<int64_t>(x), c.op)->wait();
        EXPECT_EQ(x, c.want) << at << " int64 " << ToString(c.op);
      }
      struct FloatCase {
        ReduceOp op;
        std::vector<float> want;
      };
      for (const auto& c : std::vector<FloatCase>{
               {ReduceOp::kSum, {6, 6}}, {ReduceOp::kAvg, {2, 2}}, {ReduceOp::kMax, {3, 4}}}) {
        std::vector<float> x = {static_cast<float>(r + 1), static_cast<float>(2 * r)};
        g.all_reduce(std::span<float>(x), c.op)->wait();
        EXPECT_EQ(x, c.want) << at << " float32 " << ToString(c.op);
      }
      std::vector<double> d = {3.0 * r};
      g.all_reduce(std::span<double>(d), ReduceOp::kAvg)->wait();
      EXPECT_EQ(d, std::vector<double>{3.0}) << at << " float64 avg";

      // Block b of rank r is {100 b + r, r (b + 1)}; rank r receives block r reduced.
      std::vector<int32_t> blocks;
      for (int b = 0; b < 3; ++b)
        blocks.insert(blocks.end(), {100 * b + r, r * (b + 1)});
      struct ScatterCase {
        ReduceOp op;
        std::vector<int32_t> want;
      };
      for (const auto& c : std::vector<ScatterCase>{{ReduceOp::kSum, {300 * r + 3, 3 * (r + 1)}},
                                                    {ReduceOp::kMax, {100 * r + 2, 2 * (r + 1)}},
                                                    {ReduceOp::kAvg, {100 * r + 1, r + 1}}}) {
        std::vector<int32_t> out(2);
        g.reduce_scatter(blocks.data(), out.data(), 2, DataType::kInt32, c.op)->wait();
        EXPECT_EQ(out, c.want) << at << " reduce_scatter " << ToString(c.op);
      }

      const std::vector<int32_t> mine = {r, -r};
      std::vector<int32_t> all(6);
      g.all_gather(mine.data(), all.data(), 2, DataType::kInt32)->wait();
      EXPECT_EQ(all, (std::vector<int32_t>{0, 0, 1, -1, 2, -2})) << at;

      std::vector<double> root = {1.0 * r, 2.0 * r};
      g.broadcast(std::span<double>(root), 1)->wait();
      EXPECT_EQ(root, (std::vector<double>{1, 2})) << at;

      // A ring of point-to-point transfers with a tag: rank r sends 7 r to its right.
      int32_t out = 7 * r, in = -1;
      auto recv = g.recv(&in, 1, DataType::kInt32, (r + 2) % 3, 3);
      auto send = g.send(&out, 1, DataType::kInt32, (r + 1) % 3, 3);
      send->wait();
      recv->wait();
      EXPECT_EQ(in, 7 * ((r + 2) % 3)) << at;
      g.barrier()->wait();
    });
    groups_.clear();
    clients_.clear();
    store_.reset();
    server_.reset();
  }
}

// split: ranks are ordered by key (here the reverse of theirs), a negative color joins no
// group, and a group split from a split group knows its members' world ranks. A split group
// of two or more reduces float32 through shared memory as the world does.
TEST_F(GlooGang, SplitOrdersByKeyAndLeavesOutNegativeColors) {
  Start(4, 20s);
  OnEveryRank([&](int r) {
    const std::string at = "rank " + std::to_string(r);
    auto trio = groups_[r]->split(r == 3 ? -1 : 0, -r, "trio");
    if (r == 3) {
      EXPECT_EQ(trio, nullptr) << at;
      return;
    }
    ASSERT_NE(trio, nullptr) << at;
    EXPECT_EQ(trio->world_ranks(), (std::vector<int>{2, 1, 0})) << at;
    EXPECT_EQ(trio->rank(), 2 - r) << at;
    auto pair = trio->split(trio->rank() < 2 ? 0 : 1, 0, "pair");
    ASSERT_NE(pair, nullptr) << at;
    EXPECT_EQ(pair->name(), "world/trio/pair") << at;
    const std::vector<int> want = r == 0 ? std::vector<int>{0} : std::vector<int>{2, 1};
    EXPECT_EQ(pair->world_ranks(), want) << at;
    int32_t sum = r;
    pair->all_reduce(&sum, 1, DataType::kInt32, ReduceOp::kSum)->wait();
    EXPECT_EQ(sum, r == 0 ? 0 : 3) << at;
    std::vector<float> x = {static_cast<float>(r + 1), static_cast<float>(2 * r)};
    trio->all_reduce(std::span<float>(x), ReduceOp::kAvg)->wait();
    EXPECT_EQ(x, (std::vector<float>{2, 2})) << at;
    x = {static_cast<float>(r)};
    pair->all_reduce(std::span<float>(x), ReduceOp::kSum)->wait();
    EXPECT_EQ(x, std::vector<float>{r == 0 ? 0.0f : 3.0f}) << at;
  });
  // The trio (the world's first split, color 0) and the pair of ranks 2 and 1 (the trio's
  // first split, color 0) have segments; the pair of rank 0 alone has none.
  EXPECT_EQ(store_->TryGet("tessera/world/split0/0/shm/mapped/0"), std::optional<std::string>(""));
  EXPECT_EQ(store_->TryGet("tessera/world/split0/0/split0/0/shm/mapped/1"),
            std::optional<std::string>(""));
  EXPECT_EQ(store_->TryGet("tessera/world/split0/0/split0/1/shm/machine/0"), std::nullopt);
}

// An operation that runs out of time fails saying so and that no rank was reported lost (a
// hung or slow peer), and the group is broken: the next operation fails at once, saying why.
TEST_F(GlooGang, AnOperationThatTimesOutBreaksTheGroup) {
  Start(2, 2s);
  int64_t x = 1;
  // Rank 1 does not take part.
  ExpectCommError([&] { groups_[0]->all_reduce(&x, 1, DataType::kInt64, ReduceOp::kSum)->wait(); },
                  "no rank was reported lost");
  ExpectCommError([&] { groups_[0]->all_reduce(&x, 1, DataType::kInt64, ReduceOp::kSum)->wait(); },
                  "group is broken");
}

// A receive that runs out of time breaks the group too (process_group.h: after any operation
// fails, every later one fails at once), saying why.
TEST_F(GlooGang, AReceiveThatTimesOutBreaksTheGroup) {
  Start(2, 1s);
  int64_t x = 0;
  auto recv = groups_[0]->recv(&x, 1, DataType::kInt64, 1);  // rank 1 never sends
  ExpectCommError([&] { recv->wait(); }, "recv from rank 1");
  ExpectCommError([&] { groups_[0]->all_reduce(&x, 1, DataType::kInt64, ReduceOp::kSum)->wait(); },
                  "group is broken");
  ExpectCommError([&] { groups_[0]->send(&x, 1, DataType::kInt64, 1); }, "group is broken");
}

// The store reports rank 1 lost: a receive waiting for it ends well before the communication
// timeout (60 s here) with an error naming it, and every later operation fails at once.
TEST_F(GlooGang, ALostRankEndsAPendingReceiveAndBreaksTheGroup) {
  Start(2, 60s);
  int64_t x = 0;
  auto recv = groups_[0]->recv(&x, 1, DataType::kInt64, 1);  // rank 1 never sends
  ReportLost(1);
  auto waited = std::async(std::launch::async, [&] { recv->wait(); });
  ASSERT_EQ(waited.wait_for(30s), std::future_status::ready);
  ExpectCommError([&] { waited.get(); }, "rank 1 lost");
  ExpectCommError([&] { groups_[0]->all_reduce(&x, 1, DataType::kInt64, ReduceOp::kSum)->wait(); },
                  "group is broken: rank 1 lost");
  ExpectCommError([&] { groups_[0]->send(&x, 1, DataType::kInt64, 1); },
                  "group is broken: rank 1 lost");
}

// Operations queued behind a running one fail as soon as the loss is known; the running one
// keeps its buffer until Gloo gives up on the peer (here when rank 1's sockets close).
TEST_F(GlooGang, ALostRankFailsQueuedOperationsAtOnce) {
  Start(2, 60s);
  int64_t a = 1, b = 2;
  auto running = groups_[0]->all_reduce(&a, 1, DataType::kInt64, ReduceOp::kSum);  // alone
  auto queued = groups_[0]->all_reduce(&b, 1, DataType::kInt64, ReduceOp::kSum);
  ReportLost(1);
  auto queued_wait = std::async(std::launch::async, [&] { queued->wait(); });
  ASSERT_EQ(queued_wait.wait_for(30s), std::future_status::ready);
  ExpectCommError([&] { queued_wait.get(); }, "rank 1 lost");
  groups_[1].reset();
  auto running_wait = std::async(std::launch::async, [&] { running->wait(); });
  ASSERT_EQ(running_wait.wait_for(30s), std::future_status::ready);
  ExpectCommError([&] { running_wait.get(); }, "rank 1 lost");
}

TEST(ThreadGang, RethrowsWhatARankThrew) {
  EXPECT_THROW(RunThreadGang(2,
                             [](int rank, std::shared_ptr<ProcessGroup>) {
                               if (rank == 1)
                                 throw std::runtime_error("rank 1 failed");
                             }),
               std::runtime_error);
}

}  // namespace
}  // namespace tessera::comm
