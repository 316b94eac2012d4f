// --numa-binding: placements from a topology (no sysfs needed), and the
// reading of a fake sysfs tree.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>

#include <unistd.h>

#include "agent/processes/numa.h"

namespace ddprun {
namespace {

// Two sockets, one node each, 8 CPUs per node in two L3 complexes of 4.
NumaTopology two_nodes() {
  NumaTopology t;
  t.node_cpus[0] = {0, 1, 2, 3, 4, 5, 6, 7};
  t.node_cpus[1] = {8, 9, 10, 11, 12, 13, 14, 15};
  for (int c = 0; c < 16; ++c) {
    t.cpu_package[c] = c / 8;
    const int base = c / 4 * 4;
    t.cpu_l3[c] = {base, base + 1, base + 2, base + 3};
  }
  return t;
}

TEST(Numa, CpuListsParse) {
  EXPECT_EQ(parse_cpu_list("0-3,8,10-11\n"), (std::vector<int>{0, 1, 2, 3, 8, 10, 11}));
  EXPECT_TRUE(parse_cpu_list("").empty());
}

TEST(Numa, WithoutGpusWorkersShareTheNodesInOrder) {
  auto p = numa_placements("node", 4, two_nodes());
  EXPECT_EQ(p[0].cpus, two_nodes().node_cpus[0]);
  EXPECT_EQ(p[1].cpus, two_nodes().node_cpus[0]);
  EXPECT_EQ(p[2].cpus, two_nodes().node_cpus[1]);
  EXPECT_EQ(p[3].mem_nodes, std::vector<int>{1});
}

TEST(Numa, AWorkerFollowsItsGpusNode) {
  NumaTopology t = two_nodes();
  t.gpu_nodes = {1, 0};
  auto p = numa_placements("node", 2, t);
  EXPECT_EQ(p[0].mem_nodes, std::vector<int>{1});
  EXPECT_EQ(p[1].mem_nodes, std::vector<int>{0});
}

TEST(Numa, ExclusiveSlicesSocketAndCoreComplex) {
  auto ex = numa_placements("exclusive", 4, two_nodes());
  EXPECT_EQ(ex[0].cpus, (std::vector<int>{0, 1, 2, 3}));
  EXPECT_EQ(ex[1].cpus, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(ex[2].cpus, (std::vector<int>{8, 9, 10, 11}));
  auto cc = numa_placements("core-complex", 4, two_nodes());
  EXPECT_EQ(cc[1].cpus, (std::vector<int>{4, 5, 6, 7}));
  EXPECT_EQ(cc[3].cpus, (std::vector<int>{12, 13, 14, 15}));
  auto so = numa_placements("socket", 2, two_nodes());
  EXPECT_EQ(so[1].cpus, two_nodes().node_cpus[1]);
  // More workers than CPUs: they share, none is left without.
  NumaTopology tiny;
  tiny.node_cpus[0] = {0, 1};
  auto many = numa_placements("exclusive", 3, tiny);
  for (const auto& p : many) EXPECT_EQ(p.cpus.size(), 1u);
}

TEST(Numa, TopologyIsReadFromSysfs) {
  namespace fs = std::filesystem;
  const fs::path root = fs::temp_directory_path() / ("ddprun-numa-" + std::to_string(getpid()));
  fs::remove_all(root);
  auto put = [&](const std::string& rel, const std::string& text) {
    fs::create_directories((root / rel).parent_path());
    std::ofstream(root / rel) << text << "\n";
  };
  put("sys/devices/system/node/node0/cpulist", "0-1");
  put("sys/devices/system/node/node1/cpulist", "2-3");
  put("sys/devices/system/cpu/cpu2/topology/physical_package_id", "1");
  put("sys/devices/system/cpu/cpu2/cache/index3/shared_cpu_list", "2-3");
  put("proc/driver/nvidia/gpus/0000:3B:00.0/information", "Device Minor: 0");
  put("proc/driver/nvidia/gpus/0000:AF:00.0/information", "Device Minor: 1");
  put("sys/bus/pci/devices/0000:3b:00.0/numa_node", "0");
  put("sys/bus/pci/devices/0000:af:00.0/numa_node", "1");
  NumaTopology t = read_numa_topology(root.string(), nullptr);
  EXPECT_EQ(t.node_cpus.size(), 2u);
  EXPECT_EQ(t.cpu_package[2], 1);
  EXPECT_EQ(t.cpu_l3[2], (std::vector<int>{2, 3}));
  EXPECT_EQ(t.gpu_nodes, (std::vector<int>{0, 1}));
  EXPECT_EQ(read_numa_topology(root.string(), "1").gpu_nodes, std::vector<int>{1});
  fs::remove_all(root);
}

}  // namespace
}  // namespace ddprun
