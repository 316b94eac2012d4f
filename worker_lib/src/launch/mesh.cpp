#include "ddp/mesh.h"

#include <set>
#include <stdexcept>

namespace ddp {
namespace {

std::string join(const std::vector<std::string>& v) {
  std::string out;
  for (const auto& s : v) out += (out.empty() ? "" : ", ") + s;
  return out;
}

std::string join(const std::vector<int>& v) {
  std::string out;
  for (int x : v) out += (out.empty() ? "" : "x") + std::to_string(x);
  return out;
}

}  // namespace

DeviceMesh::DeviceMesh(World& world, std::vector<int> shape, std::vector<std::string> names,
                       Device device)
    : world_(world), shape_(std::move(shape)), names_(std::move(names)) {
  if (shape_.empty()) throw std::invalid_argument("ddp::DeviceMesh: shape is empty");
  if (names_.size() != shape_.size()) {
    throw std::invalid_argument("ddp::DeviceMesh: " + std::to_string(shape_.size()) +
                                " dimensions (" + join(shape_) + ") but " +
                                std::to_string(names_.size()) + " names (" + join(names_) + ")");
  }
  int64_t product = 1;
  for (int s : shape_) {
    if (s < 1) throw std::invalid_argument("ddp::DeviceMesh: shape " + join(shape_) + " has a dimension < 1");
    product *= s;
  }
  if (product != world.size()) {
    throw std::invalid_argument("ddp::DeviceMesh: shape " + join(shape_) + " holds " +
                                std::to_string(product) + " ranks but the world has " +
                                std::to_string(world.size()));
  }
  std::set<std::string> seen;
  for (const auto& n : names_) {
    if (n.empty()) throw std::invalid_argument("ddp::DeviceMesh: a dimension name is empty");
    if (!seen.insert(n).second) {
      throw std::invalid_argument("ddp::DeviceMesh: dimension name '" + n + "' appears twice");
    }
  }
  // Row-major coordinates of this rank.
  coords_.resize(shape_.size());
  int rest = world.rank();
  for (int d = ndim() - 1; d >= 0; --d) {
    coords_[d] = rest % shape_[d];
    rest /= shape_[d];
  }
  // One communicator per dimension, connected in dimension order on every
  // rank so that no two ranks wait on each other's different groups.
  const int id = world.next_mesh_id();
  for (int d = 0; d < ndim(); ++d) {
    std::vector<int> members = slice(names_[d]);
    std::string name = "mesh" + std::to_string(id) + "/" + names_[d] + "/";
    for (int r : members) name += std::to_string(r) + ",";
    comms_.push_back(world.connect_group(name, members, device));
  }
}

DeviceMesh::~DeviceMesh() = default;

int DeviceMesh::index_of(std::string_view dim) const {
  for (int d = 0; d < ndim(); ++d) {
    if (names_[d] == dim) return d;
  }
  throw std::invalid_argument("ddp::DeviceMesh: no dimension '" + std::string(dim) +
                              "'; this mesh has: " + join(names_));
}

std::vector<int> DeviceMesh::slice(std::string_view dim) const {
  const int d = index_of(dim);
  // Strides of the row-major layout.
  int stride = 1;
  for (int k = ndim() - 1; k > d; --k) stride *= shape_[k];
  const int base = world_.rank() - coords_[d] * stride;
  std::vector<int> ranks;
  for (int i = 0; i < shape_[d]; ++i) ranks.push_back(base + i * stride);
  return ranks;
}

Communicator& DeviceMesh::communicator(std::string_view dim) const { return *comms_[index_of(dim)]; }

}  // namespace ddp
