// An N-dimensional mesh of the ranks with named dimensions (e.g. dp x tp),
// laid out row-major over the global ranks, with a communicator for this
// rank's slice along each dimension.
//
//   ddp::DeviceMesh mesh(*world, {2, 2}, {"dp", "tp"});
//   mesh.communicator("dp").all_reduce(grad);   // with the rank that shares my tp index
//
// Rank r has coordinates (r / 2, r % 2) on a 2x2 mesh; its "dp" slice is the
// ranks with its tp coordinate, its "tp" slice those with its dp coordinate.
#pragma once

#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ddp/world.h"

namespace ddp {

class DeviceMesh {
 public:
  // shape: the size of each dimension (their product must be the world
  // size); names: one unique, non-empty name per dimension. Collective: every
  // rank must build the same meshes in the same order. Throws
  // std::invalid_argument saying what was expected.
  DeviceMesh(World& world, std::vector<int> shape, std::vector<std::string> names,
             Device device = Device::kCPU);
  ~DeviceMesh();

  World& world() const { return world_; }
  int ndim() const { return static_cast<int>(shape_.size()); }
  const std::vector<int>& shape() const { return shape_; }
  const std::vector<std::string>& names() const { return names_; }

  // The number of ranks in the mesh, and along one dimension.
  int size() const { return world_.size(); }
  int size(std::string_view dim) const { return shape_[index_of(dim)]; }
  // This rank's coordinate along a dimension (its rank in that slice).
  int coordinate(std::string_view dim) const { return coords_[index_of(dim)]; }
  const std::vector<int>& coordinates() const { return coords_; }
  // Global ranks of this rank's slice along dim, in slice-rank order.
  std::vector<int> slice(std::string_view dim) const;

  Communicator& communicator(std::string_view dim) const;

  // The index of a dimension; unknown names throw, listing the valid ones.
  int index_of(std::string_view dim) const;

 private:
  World& world_;
  std::vector<int> shape_;
  std::vector<std::string> names_;
  std::vector<int> coords_;
  std::vector<std::unique_ptr<Communicator>> comms_;  // one per dimension
};

}  // namespace ddp
