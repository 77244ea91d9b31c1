// DeviceMesh layout arithmetic (tables), the groups it creates on a real Gloo world run as
// threads of this process, and the communication settings from the environment.
#include "worker/comm/device_mesh.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <numeric>
#include <set>

#include "worker/comm/local_gang.h"

namespace tessera::comm {
namespace {

TEST(MeshShape, CoordinatesTable) {
  const MeshShape shape{2, 3, 2};  // 12 ranks, tensor innermost
  struct Case {
    int rank;
    MeshCoords coords;
  };
  const std::vector<Case> cases = {
      {0, {0, 0, 0}}, {1, {0, 0, 1}}, {2, {0, 1, 0}},  {5, {0, 2, 1}},
      {6, {1, 0, 0}}, {7, {1, 0, 1}}, {10, {1, 2, 0}}, {11, {1, 2, 1}},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(shape.coords(c.rank), c.coords) << "rank " << c.rank;
    EXPECT_EQ(shape.rank_of(c.coords), c.rank) << "rank " << c.rank;
  }
}

TEST(MeshShape, GroupRanksTable) {
  const MeshShape shape{2, 3, 2};
  struct Case {
    int rank;
    MeshDim dim;
    std::vector<int> ranks;
  };
  const std::vector<Case> cases = {
      {0, MeshDim::kTensor, {0, 1}},      {5, MeshDim::kTensor, {4, 5}},
      {0, MeshDim::kPipeline, {0, 2, 4}}, {7, MeshDim::kPipeline, {7, 9, 11}},
      {0, MeshDim::kData, {0, 6}},        {9, MeshDim::kData, {3, 9}},
  };
  for (const auto& c : cases) {
    EXPECT_EQ(shape.group_ranks(c.rank, c.dim), c.ranks)
        << "rank " << c.rank << " dim " << ToString(c.dim);
  }
}

// For every shape and dimension: the groups partition the world, every member of a group
// has the same group index, and the indices are 0..world/extent-1.
TEST(MeshShape, GroupsPartitionTheWorld) {
  const std::vector<MeshShape> shapes = {{1, 1, 1}, {8, 1, 1}, {1, 8, 1}, {1, 1, 8},
                                         {2, 2, 2}, {3, 1, 2}, {5, 3, 1}, {2, 3, 4}};
  for (const auto& shape : shapes) {
    for (MeshDim dim : kMeshDims) {
      std::set<int> seen, indices;
      for (int r = 0; r < shape.world_size(); ++r) {
        const auto group = shape.group_ranks(r, dim);
        ASSERT_EQ(static_cast<int>(group.size()), shape.extent(dim));
        EXPECT_EQ(group[shape.coords(r)[dim]], r);
        for (int m : group)
          EXPECT_EQ(shape.group_index(m, dim), shape.group_index(r, dim));
        if (group.front() == r)
          seen.insert(group.begin(), group.end());
        indices.insert(shape.group_index(r, dim));
      }
      EXPECT_EQ(static_cast<int>(seen.size()), shape.world_size()) << shape.ToString();
      EXPECT_EQ(static_cast<int>(indices.size()), shape.world_size() / shape.extent(dim));
      EXPECT_EQ(*indices.rbegin(), shape.world_size() / shape.extent(dim) - 1);
    }
  }
}

TEST(MeshShape, ParseTable) {
  struct Case {
    const char* text;
    std::optional<MeshShape> shape;
    const char* error;
  };
  const std::vector<Case> cases = {
      {"data=2,pipeline=2,tensor=1", MeshShape{2, 2, 1}, ""},
      {"tensor=4", MeshShape{1, 1, 4}, ""},
      {"", MeshShape{1, 1, 1}, ""},
      {"pipeline=3,data=2", MeshShape{2, 3, 1}, ""},
      {"data=0", std::nullopt, "positive integer"},
      {"data=x", std::nullopt, "positive integer"},
      {"data=2,data=2", std::nullopt, "given twice"},
      {"expert=2", std::nullopt, "unknown dimension"},
      {"data", std::nullopt, "name=size"},
      {"data=2x", std::nullopt, "positive integer"},
      {"tensor=", std::nullopt, "positive integer"},
      {",data=2,,tensor=4", MeshShape{2, 1, 4}, ""},
      {"tensor=2,pipeline=3,data=4", MeshShape{4, 3, 2}, ""},
  };
  for (const auto& c : cases) {
    std::string error;
    auto got = MeshShape::Parse(c.text, &error);
    EXPECT_EQ(got.has_value(), c.shape.has_value()) << c.text;
    if (got && c.shape) {
      EXPECT_EQ(got->ToString(), c.shape->ToString()) << c.text;
    }
    EXPECT_NE(error.find(c.error), std::string::npos) << c.text << ": " << error;
    // Without a place for the error the outcome is the same.
    EXPECT_EQ(MeshShape::Parse(c.text, nullptr).has_value(), c.shape.has_value()) << c.text;
  }
}

TEST(MeshShape, NamesTable) {
  EXPECT_EQ((MeshShape{2, 3, 4}).ToString(), "data=2,pipeline=3,tensor=4");
  EXPECT_EQ((MeshShape{1, 1, 1}).ToString(), "data=1,pipeline=1,tensor=1");
  const MeshShape round = *MeshShape::Parse((MeshShape{5, 6, 7}).ToString(), nullptr);
  EXPECT_EQ((std::vector<int>{round.data, round.pipeline, round.tensor}),
            (std::vector<int>{5, 6, 7}));
  EXPECT_STREQ(ToString(MeshDim::kData), "data");
  EXPECT_STREQ(ToString(MeshDim::kPipeline), "pipeline");
  EXPECT_STREQ(ToString(MeshDim::kTensor), "tensor");
}

// On a world of 8 ranks as 2 x 2 x 2: every rank's coordinates, and along each dimension a
// group whose members are exactly MeshShape's (checked by summing their world ranks through
// the group), in coordinate order, named after the dimension and its group index.
TEST(DeviceMesh, CreatesTheGroupsOfTheShape) {
  for (const MeshShape& shape : {MeshShape{2, 2, 2}, MeshShape{1, 3, 2}}) {
    RunThreadGang(shape.world_size(), [&](int rank, std::shared_ptr<ProcessGroup> world) {
      const DeviceMesh mesh = DeviceMesh::Create(world, shape);
      const std::string what = shape.ToString() + " rank " + std::to_string(rank);
      EXPECT_EQ(mesh.coords(), shape.coords(rank)) << what;
      EXPECT_EQ(&mesh.world(), world.get()) << what;
      for (MeshDim dim : kMeshDims) {
        const std::shared_ptr<ProcessGroup>& group = mesh.group(dim);
        ASSERT_NE(group, nullptr) << what << " " << ToString(dim);
        const std::vector<int> members = shape.group_ranks(rank, dim);
        EXPECT_EQ(group->size(), shape.extent(dim)) << what << " " << ToString(dim);
        EXPECT_EQ(group->rank(), shape.coords(rank)[dim]) << what << " " << ToString(dim);
        EXPECT_EQ(group->world_ranks(), members) << what << " " << ToString(dim);
        EXPECT_EQ(group->name(), world->name() + "/" + ToString(dim) +
                                     std::to_string(shape.group_index(rank, dim)))
            << what;
        std::vector<int32_t> sum = {rank};
        group->all_reduce(std::span<int32_t>(sum), ReduceOp::kSum)->wait();
        EXPECT_EQ(sum[0], std::accumulate(members.begin(), members.end(), 0))
            << what << " " << ToString(dim);
      }
    });
  }
}

TEST(DeviceMesh, RefusesAShapeThatDoesNotFitTheWorld) {
  RunThreadGang(2, [&](int rank, std::shared_ptr<ProcessGroup> world) {
    for (const MeshShape& shape : {MeshShape{2, 2, 1}, MeshShape{1, 1, 1}}) {
      try {
        DeviceMesh::Create(world, shape);
        ADD_FAILURE() << shape.ToString() << " accepted by rank " << rank;
      } catch (const CommConfigError& e) {
        EXPECT_NE(std::string(e.what()).find(shape.ToString()), std::string::npos) << e.what();
        EXPECT_NE(std::string(e.what()).find("the world has 2"), std::string::npos) << e.what();
      }
    }
  });
}

TEST(CommOptions, TimeoutFromEnvironmentTable) {
  struct Case {
    const char* value;  // nullptr: unset
    std::optional<int64_t> ms;
  };
  const std::vector<Case> cases = {
      {nullptr, 60000},
      {"", 60000},
      {"5", 5000},
      {"0.25", 250},
      {"0", std::nullopt},
      {"-3", std::nullopt},
      {"abc", std::nullopt},
      {"10s", std::nullopt},
      {"nan", std::nullopt},
      // Rounded up, so never to 0 ms; at most 1e7 s.
      {"0.0001", 1},
      {"1e8", std::nullopt},
  };
  for (const auto& c : cases) {
    if (c.value) {
      ::setenv("TESSERA_COMM_TIMEOUT", c.value, 1);
    } else {
      ::unsetenv("TESSERA_COMM_TIMEOUT");
    }
    if (c.ms) {
      EXPECT_EQ(CommOptions::FromEnv().timeout.count(), *c.ms) << (c.value ? c.value : "unset");
    } else {
      try {
        CommOptions::FromEnv();
        ADD_FAILURE() << c.value << " was accepted";
      } catch (const CommConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("TESSERA_COMM_TIMEOUT"), std::string::npos);
      }
    }
  }
  ::unsetenv("TESSERA_COMM_TIMEOUT");
}

TEST(CommOptions, ComputeNiceFromEnvironmentTable) {
  struct Case {
    const char* value;  // nullptr: unset
    std::optional<int> nice;
  };
  const std::vector<Case> cases = {
      {nullptr, 10},
      {"", 10},
      {"0", 0},
      {"19", 19},
      {"20", std::nullopt},
      {"-1", std::nullopt},
      {"5x", std::nullopt},
      {"abc", std::nullopt},
  };
  for (const auto& c : cases) {
    if (c.value) {
      ::setenv("TESSERA_COMPUTE_NICE", c.value, 1);
    } else {
      ::unsetenv("TESSERA_COMPUTE_NICE");
    }
    if (c.nice) {
      EXPECT_EQ(ComputeNiceFromEnv(), *c.nice) << (c.value ? c.value : "unset");
    } else {
      try {
        ComputeNiceFromEnv();
        ADD_FAILURE() << c.value << " was accepted";
      } catch (const CommConfigError& e) {
        EXPECT_NE(std::string(e.what()).find("TESSERA_COMPUTE_NICE"), std::string::npos);
      }
    }
  }
  ::unsetenv("TESSERA_COMPUTE_NICE");
}

TEST(CommOptions, ElementSizesTable) {
  const std::vector<std::pair<DataType, size_t>> cases = {
      {DataType::kFloat32, 4}, {DataType::kFloat64, 8}, {DataType::kInt32, 4},
      {DataType::kInt64, 8},   {DataType::kUInt8, 1},   {DataType::kBFloat16, 2},
  };
  for (const auto& [type, bytes] : cases)
    EXPECT_EQ(ElementSize(type), bytes) << ToString(type);
}

}  // namespace
}  // namespace tessera::comm
