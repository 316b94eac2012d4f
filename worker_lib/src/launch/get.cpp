#include "ddp/get.h"

#include <stdexcept>

namespace ddp {
namespace {

// This thread's defaults, held weakly.
thread_local std::weak_ptr<World> registered_world;
thread_local std::weak_ptr<DeviceMesh> registered_mesh;

struct Group {
  int ws;
  int rank;
};

const char* kValidKeys = "valid keys: ws, rank, grank, lrank, lws, pg";

int lookup(std::string_view key, Group group, const LaunchInfo& info) {
  if (key == "ws") return group.ws;
  if (key == "rank") return group.rank;
  if (key == "grank") return info.rank;
  if (key == "lrank") return info.local_rank;
  if (key == "lws") return info.local_world_size;
  if (key == "pg") {
    throw std::invalid_argument(
        "ddp::get: 'pg' is a communicator, not a number; use ddp::get<ddp::Communicator>(\"pg\")");
  }
  throw std::invalid_argument("ddp::get: unknown key '" + std::string(key) + "'; " + kValidKeys);
}

void check_pg_key(std::string_view key) {
  if (key == "pg") return;
  throw std::invalid_argument("ddp::get<Communicator>: unknown key '" + std::string(key) +
                              "'; the communicator is \"pg\"");
}

// A 1-D mesh means its dimension; an N-D one all of its ranks.
Group mesh_group(const DeviceMesh& m) {
  if (m.ndim() == 1) return Group{m.shape()[0], m.coordinates()[0]};
  return Group{m.size(), m.world().rank()};
}

std::shared_ptr<DeviceMesh> mesh_or_throw(std::string_view dim) {
  auto m = registered_mesh.lock();
  if (!m) {
    throw std::invalid_argument("ddp::get: dimension '" + std::string(dim) +
                                "' asked for, but no mesh is registered (ddp::register_mesh)");
  }
  return m;
}

}  // namespace

void register_world(const std::shared_ptr<World>& w) { registered_world = w; }
void register_mesh(const std::shared_ptr<DeviceMesh>& mesh) { registered_mesh = mesh; }

int get(std::string_view key, const World& w) {
  return lookup(key, Group{w.size(), w.rank()}, w.info());
}

int get(std::string_view key, const DeviceMesh& m) {
  return lookup(key, mesh_group(m), m.world().info());
}

int get(std::string_view key, std::string_view dim) {
  auto m = mesh_or_throw(dim);
  return lookup(key, Group{m->size(dim), m->coordinate(dim)}, m->world().info());
}

int get(std::string_view key) {
  if (auto m = registered_mesh.lock()) return get(key, *m);
  if (auto w = registered_world.lock()) return get(key, *w);
  // Nothing registered on this thread: what the launcher said, as torch's env:// would.
  LaunchInfo info = read_launch_info();
  return lookup(key, Group{info.world_size, info.rank}, info);
}

Communicator& get_communicator(std::string_view key, const DeviceMesh& m) {
  check_pg_key(key);
  if (m.ndim() == 1) return m.communicator(m.names()[0]);
  return m.world().cpu();
}

template <>
Communicator& get<Communicator>(std::string_view key) {
  check_pg_key(key);
  if (auto m = registered_mesh.lock()) return get_communicator(key, *m);
  if (auto w = registered_world.lock()) return w->cpu();
  throw std::invalid_argument("ddp::get<Communicator>: no World or mesh is registered on this "
                              "thread (call ddp::init() first)");
}

template <>
Communicator& get<Communicator>(std::string_view key, std::string_view dim) {
  check_pg_key(key);
  return mesh_or_throw(dim)->communicator(dim);
}

}  // namespace ddp
