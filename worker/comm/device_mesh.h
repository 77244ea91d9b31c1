// Arranges the world's ranks as data x pipeline x tensor (tensor innermost, so a tensor-
// parallel group stays inside a pod) and hands out each dimension's process group.
// The layout arithmetic is pure (MeshShape); DeviceMesh adds the groups.
#pragma once

#include <array>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "worker/comm/process_group.h"

namespace tessera::comm {

enum class MeshDim { kData = 0, kPipeline = 1, kTensor = 2 };
inline constexpr std::array<MeshDim, 3> kMeshDims = {MeshDim::kData, MeshDim::kPipeline,
                                                     MeshDim::kTensor};
const char* ToString(MeshDim dim);

struct MeshCoords {
  int data = 0;
  int pipeline = 0;
  int tensor = 0;
  int operator[](MeshDim d) const;
  bool operator==(const MeshCoords&) const = default;
};

// Pure layout: rank = (data * pipeline_size + pipeline) * tensor_size + tensor.
struct MeshShape {
  int data = 1;
  int pipeline = 1;
  int tensor = 1;

  int world_size() const { return data * pipeline * tensor; }
  int extent(MeshDim d) const;
  MeshCoords coords(int rank) const;
  int rank_of(const MeshCoords& c) const;
  // World ranks of the group along `dim` that contains `rank`, in coordinate order.
  std::vector<int> group_ranks(int rank, MeshDim dim) const;
  // Which group along `dim` `rank` belongs to: equal for exactly the members of one group,
  // 0 .. world_size()/extent(dim)-1.
  int group_index(int rank, MeshDim dim) const;

  // Parses "data=2,pipeline=2,tensor=1" (TESSERA_MESH; missing dims default to 1). nullopt
  // with `error` set when malformed: unknown or repeated names, non-positive sizes.
  static std::optional<MeshShape> Parse(const std::string& text, std::string* error);
  std::string ToString() const;
};

// The process groups of one rank: one per dimension (a dimension of extent 1 still gets a
// group of one, so callers need no special case). Not thread-safe to create.
class DeviceMesh {
 public:
  // Collective over `world`: every rank calls it with the same shape. Throws
  // CommConfigError when shape.world_size() != world->size().
  static DeviceMesh Create(std::shared_ptr<ProcessGroup> world, const MeshShape& shape);

  const MeshShape& shape() const { return shape_; }
  const MeshCoords& coords() const { return coords_; }
  ProcessGroup& world() const { return *world_; }
  const std::shared_ptr<ProcessGroup>& group(MeshDim dim) const {
    return groups_[static_cast<int>(dim)];
  }

 private:
  MeshShape shape_;
  MeshCoords coords_;
  std::shared_ptr<ProcessGroup> world_;
  std::array<std::shared_ptr<ProcessGroup>, 3> groups_;
};

}  // namespace tessera::comm
