// In-process checks of the Gloo group: one rank (the degenerate group every mesh dimension
// of extent 1 gets) with an in-process store; contract errors raised before any transfer.
#include <gtest/gtest.h>

#include "tests/unit/comm/local_store.h"
#include "worker/comm/device_mesh.h"
#include "worker/comm/gloo_process_group.h"

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
  EXPECT_THROW(world_->send(&x, 1, DataType::kFloat32, 0), CommError);  // to itself
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

}  // namespace
}  // namespace tessera::comm
