// The seeds' cached `get`: ask for the world size or a rank without passing
// the group around. The default is registered per thread (init() registers
// its World; register_mesh() a mesh), and an explicit mesh, World or mesh
// dimension overrides it.
//
//   int ws = ddp::get("ws");              // registered mesh, else World, else environment
//   int tp_rank = ddp::get("rank", "tp"); // along a dimension of the registered mesh
//   ddp::Communicator& pg = ddp::get<ddp::Communicator>("pg");
//
// Keys: "ws" (size of the group), "rank" (rank in the group), "grank"
// (global rank), "lrank" (rank on this node, LOCAL_RANK), "lws" (ranks on
// this node). The group is the whole world, a 1-D mesh's only dimension, or
// the named dimension; an N-D mesh without a dimension means all its ranks.
#pragma once

#include <memory>
#include <string_view>

#include "ddp/communicator.h"
#include "ddp/mesh.h"
#include "ddp/world.h"

namespace ddp {

// Makes w (or mesh) this thread's default. Held weakly: a default that has
// been destroyed no longer counts.
void register_world(const std::shared_ptr<World>& w);
void register_mesh(const std::shared_ptr<DeviceMesh>& mesh);

int get(std::string_view key);
int get(std::string_view key, const World& world);
int get(std::string_view key, const DeviceMesh& mesh);
int get(std::string_view key, std::string_view dim);  // of the registered mesh

// "pg": the communicator of the same group as get()'s ints.
template <typename T>
T& get(std::string_view key);
template <typename T>
T& get(std::string_view key, std::string_view dim);
template <>
Communicator& get<Communicator>(std::string_view key);
template <>
Communicator& get<Communicator>(std::string_view key, std::string_view dim);
Communicator& get_communicator(std::string_view key, const DeviceMesh& mesh);

}  // namespace ddp
