#include "worker/comm/device_mesh.h"

#include <charconv>
#include <sstream>

namespace tessera::comm {

const char* ToString(MeshDim dim) {
  switch (dim) {
    case MeshDim::kData:
      return "data";
    case MeshDim::kPipeline:
      return "pipeline";
    case MeshDim::kTensor:
      return "tensor";
  }
  return "unknown";
}

int MeshCoords::operator[](MeshDim d) const {
  return d == MeshDim::kData ? data : d == MeshDim::kPipeline ? pipeline : tensor;
}

int MeshShape::extent(MeshDim d) const {
  return d == MeshDim::kData ? data : d == MeshDim::kPipeline ? pipeline : tensor;
}

MeshCoords MeshShape::coords(int rank) const {
  return {rank / (pipeline * tensor), (rank / tensor) % pipeline, rank % tensor};
}

int MeshShape::rank_of(const MeshCoords& c) const {
  return (c.data * pipeline + c.pipeline) * tensor + c.tensor;
}

std::vector<int> MeshShape::group_ranks(int rank, MeshDim dim) const {
  std::vector<int> ranks;
  MeshCoords c = coords(rank);
  for (int i = 0; i < extent(dim); ++i) {
    (dim == MeshDim::kData ? c.data : dim == MeshDim::kPipeline ? c.pipeline : c.tensor) = i;
    ranks.push_back(rank_of(c));
  }
  return ranks;
}

int MeshShape::group_index(int rank, MeshDim dim) const {
  // The group is identified by the coordinates along the other two dimensions.
  const MeshCoords c = coords(rank);
  switch (dim) {
    case MeshDim::kData:
      return c.pipeline * tensor + c.tensor;
    case MeshDim::kPipeline:
      return c.data * tensor + c.tensor;
    case MeshDim::kTensor:
      return c.data * pipeline + c.pipeline;
  }
  return 0;
}

std::optional<MeshShape> MeshShape::Parse(const std::string& text, std::string* error) {
  MeshShape shape;
  bool seen[3] = {false, false, false};
  std::stringstream in(text);
  std::string item;
  auto fail = [&](const std::string& why) -> std::optional<MeshShape> {
    if (error)
      *error = "mesh \"" + text + "\": " + why;
    return std::nullopt;
  };
  while (std::getline(in, item, ',')) {
    if (item.empty())
      continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos)
      return fail("expected name=size in \"" + item + "\"");
    const std::string key = item.substr(0, eq), value = item.substr(eq + 1);
    int n = 0;
    auto [end, ec] = std::from_chars(value.data(), value.data() + value.size(), n);
    if (ec != std::errc() || end != value.data() + value.size() || n < 1) {
      return fail("size of " + key + " must be a positive integer, got \"" + value + "\"");
    }
    int idx = key == "data" ? 0 : key == "pipeline" ? 1 : key == "tensor" ? 2 : -1;
    if (idx < 0)
      return fail("unknown dimension \"" + key + "\" (data, pipeline, tensor)");
    if (seen[idx])
      return fail("dimension " + key + " given twice");
    seen[idx] = true;
    (idx == 0 ? shape.data : idx == 1 ? shape.pipeline : shape.tensor) = n;
  }
  return shape;
}

std::string MeshShape::ToString() const {
  return "data=" + std::to_string(data) + ",pipeline=" + std::to_string(pipeline) +
         ",tensor=" + std::to_string(tensor);
}

DeviceMesh DeviceMesh::Create(std::shared_ptr<ProcessGroup> world, const MeshShape& shape) {
  if (shape.world_size() != world->size()) {
    throw CommConfigError("mesh " + shape.ToString() + " needs " +
                          std::to_string(shape.world_size()) + " ranks but the world has " +
                          std::to_string(world->size()));
  }
  DeviceMesh mesh;
  mesh.shape_ = shape;
  mesh.coords_ = shape.coords(world->rank());
  mesh.world_ = world;
  for (MeshDim dim : kMeshDims) {
    const int color = shape.group_index(world->rank(), dim);
    mesh.groups_[static_cast<int>(dim)] =
        world->split(color, world->rank(), std::string(ToString(dim)) + std::to_string(color));
  }
  return mesh;
}

}  // namespace tessera::comm
