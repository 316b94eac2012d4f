// --numa-binding: which CPUs and memory nodes each worker is bound to, from
// the machine's topology (/sys/devices/system/node, .../cpu). Modes as
// torchrun 2.x: node (the CPUs of the worker's NUMA node), socket (of its
// socket), exclusive (a slice of its node's CPUs of its own), core-complex
// (the CPUs sharing one L3 cache in its node). A worker's node is its GPU's
// (local rank i uses GPU i) or, without GPUs, its share of the nodes.
#pragma once

#include <map>
#include <string>
#include <vector>

namespace ddprun {

struct NumaTopology {
  std::map<int, std::vector<int>> node_cpus;  // node → CPUs, ascending
  std::map<int, int> cpu_package;             // CPU → socket
  std::map<int, std::vector<int>> cpu_l3;     // CPU → the CPUs sharing its L3 cache
  std::vector<int> gpu_nodes;                 // GPU i (visible order) → node; -1 unknown
};

// Reads the topology under `root` (normally "/" ; tests pass a fake tree).
// cuda_visible_devices limits and orders the GPUs (null: all).
NumaTopology read_numa_topology(const std::string& root, const char* cuda_visible_devices);

struct NumaPlacement {
  std::vector<int> cpus;       // sched_setaffinity
  std::vector<int> mem_nodes;  // set_mempolicy(MPOL_BIND)
};

// One placement per local rank. Throws std::runtime_error when the
// topology has no node with CPUs.
std::vector<NumaPlacement> numa_placements(const std::string& mode, int nproc,
                                           const NumaTopology& topo);

// "0-3,8" → {0,1,2,3,8}; bad text gives what parsed before it.
std::vector<int> parse_cpu_list(const std::string& text);

}  // namespace ddprun
