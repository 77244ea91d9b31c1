// DeviceMesh layout arithmetic (tables) and the communication settings from the environment.
#include "worker/comm/device_mesh.h"

#include <gtest/gtest.h>
#include <stdlib.h>

#include <set>

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
  };
  for (const auto& c : cases) {
    std::string error;
    auto got = MeshShape::Parse(c.text, &error);
    EXPECT_EQ(got.has_value(), c.shape.has_value()) << c.text;
    if (got && c.shape) {
      EXPECT_EQ(got->ToString(), c.shape->ToString()) << c.text;
    }
    EXPECT_NE(error.find(c.error), std::string::npos) << c.text << ": " << error;
  }
}

TEST(CommOptions, TimeoutFromEnvironmentTable) {
  struct Case {
    const char* value;  // nullptr: unset
    std::optional<int64_t> ms;
  };
  const std::vector<Case> cases = {
      {nullptr, 60000},      {"", 60000},           {"5", 5000},
      {"0.25", 250},         {"0", std::nullopt},   {"-3", std::nullopt},
      {"abc", std::nullopt}, {"10s", std::nullopt}, {"nan", std::nullopt},
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

}  // namespace
}  // namespace tessera::comm
