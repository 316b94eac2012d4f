#include "comm/cpu_comm.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <vector>

#include "comm/gloo_communicator.h"
#include "comm/rank_ordered_reduce.h"
#include "comm/shm_communicator.h"
#include "comm/two_level_communicator.h"

namespace ddp {
namespace {

std::unique_ptr<Communicator> gloo(ddprun::Store& store, int me, int size, const CpuCommSetup& s) {
  GlooOptions o;
  o.rank = me;
  o.size = size;
  o.local_addr = s.info->local_addr;
  o.timeout = s.timeout;
  o.heartbeat = s.heartbeat;
  return std::make_unique<GlooCommunicator>(store, o);
}

// Shared memory for members of one node. Where it cannot be set up (no room
// in /dev/shm, a member that cannot open the segment) every member learns
// it in the setup's last step and all fall back to Gloo together, with a
// warning; under DDPRUN_CPU_COMM=shm that is an error instead. The fallback
// sums in shared memory's order (RankOrderedReduce): a group that loses
// /dev/shm in a heal goes on bit for bit as it began.
std::unique_ptr<Communicator> shm_or_gloo(ddprun::Store& store, int me, int size, const std::string& what,
                                          const CpuCommSetup& s) {
  ShmGroupOptions o;
  o.rank = me;
  o.size = size;
  o.timeout = s.timeout;
  o.heartbeat = s.heartbeat;
  if (s.info->shm_slot_bytes) o.slot_bytes = s.info->shm_slot_bytes;
  ddprun::PrefixStore shm_store("shm", store);
  try {
    return std::make_unique<ShmCommunicator>(shm_store, o);
  } catch (const CollectiveError& e) {
    if (s.info->cpu_comm == CpuComm::kShm) {
      throw CollectiveError(std::string(e.what()) + " (DDPRUN_CPU_COMM=shm; auto would fall back to Gloo)");
    }
    if (me == 0) {
      std::fprintf(stderr,
                   "ddp: warning: shared memory for %s failed, CPU tensors go through Gloo (summed rank by rank, "
                   "as shared memory sums): %s\n",
                   what.c_str(), e.what());
    }
    return std::make_unique<RankOrderedReduce>(gloo(store, me, size, s));
  }
}

// Which node each member is on, numbered in order of first appearance. A
// node is this machine's boot id (two machines never share one) and the
// launcher's node rank (two agents on one machine are two nodes, as in
// tests that give each its own network).
std::vector<int> member_nodes(ddprun::Store& store, int me, int size, const CpuCommSetup& s) {
  std::string boot;
  std::ifstream("/proc/sys/kernel/random/boot_id") >> boot;
  store.set("node/" + std::to_string(me), boot + "/" + std::to_string(s.info->group_rank));
  std::vector<std::string> ids;
  std::vector<int> nodes;
  for (int r = 0; r < size; ++r) {
    std::string id;
    try {
      id = store.get("node/" + std::to_string(r), s.timeout);
    } catch (const ddprun::StoreTimeout&) {
      throw CollectiveError("ddp: rank " + std::to_string(me) + " of " + std::to_string(size) +
                            " could not connect to its peers within " + std::to_string(s.timeout.count()) +
                            " ms (rank " + std::to_string(r) + " never came; set DDPRUN_TIMEOUT_S)");
    }
    size_t k = 0;
    while (k < ids.size() && ids[k] != id) ++k;
    if (k == ids.size()) ids.push_back(id);
    nodes.push_back(static_cast<int>(k));
  }
  return nodes;
}

}  // namespace

std::unique_ptr<Communicator> connect_cpu_communicator(ddprun::Store& store, int me, int size,
                                                       const std::string& what, const CpuCommSetup& s) {
  const CpuComm mode = s.info->cpu_comm;
  if (mode == CpuComm::kGloo) return gloo(store, me, size, s);
  const std::vector<int> nodes = member_nodes(store, me, size, s);
  const int node_count = *std::max_element(nodes.begin(), nodes.end()) + 1;
  if (node_count == 1) return shm_or_gloo(store, me, size, what, s);
  if (mode == CpuComm::kShm) {
    throw ConfigError("ddp: DDPRUN_CPU_COMM=shm, but the ranks of " + what + " are on " +
                      std::to_string(node_count) +
                      " nodes; shared memory only joins ranks of one node (use auto or gloo)");
  }
  if (node_count == size) return gloo(store, me, size, s);  // a rank per node: nothing to share
  // Several nodes with several ranks each: shared memory inside each node,
  // Gloo between its first ranks (the leaders), and Gloo over all for the
  // collectives that are not all_reduce.
  std::vector<int> local, leaders;
  std::vector<bool> seen(static_cast<size_t>(node_count), false);
  for (int r = 0; r < size; ++r) {
    if (nodes[size_t(r)] == nodes[size_t(me)]) local.push_back(r);
    if (!seen[size_t(nodes[size_t(r)])]) {
      seen[size_t(nodes[size_t(r)])] = true;
      leaders.push_back(r);
    }
  }
  const int local_me = static_cast<int>(std::find(local.begin(), local.end(), me) - local.begin());
  auto flat = gloo(store, me, size, s);
  ddprun::PrefixStore local_store("node" + std::to_string(nodes[size_t(me)]), store);
  auto in_node = shm_or_gloo(local_store, local_me, static_cast<int>(local.size()),
                             what + " on node " + std::to_string(nodes[size_t(me)]), s);
  std::unique_ptr<Communicator> across;
  if (local_me == 0) {
    ddprun::PrefixStore leader_store("leaders", store);
    const int leader_me = static_cast<int>(std::find(leaders.begin(), leaders.end(), me) - leaders.begin());
    across = gloo(leader_store, leader_me, static_cast<int>(leaders.size()), s);
  }
  return std::make_unique<TwoLevelCommunicator>(std::move(in_node), std::move(across), std::move(flat));
}

}  // namespace ddp
