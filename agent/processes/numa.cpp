#include "agent/processes/numa.h"

#include <dirent.h>

#include <algorithm>
#include <cctype>
#include <fstream>
#include <set>
#include <sstream>
#include <stdexcept>

namespace ddprun {
namespace {

std::string read_line(const std::string& path) {
  std::ifstream in(path);
  std::string line;
  std::getline(in, line);
  return line;
}

std::vector<std::string> entries(const std::string& dir) {
  std::vector<std::string> out;
  if (DIR* d = opendir(dir.c_str())) {
    while (dirent* e = readdir(d)) {
      if (e->d_name[0] != '.') out.emplace_back(e->d_name);
    }
    closedir(d);
  }
  std::sort(out.begin(), out.end());
  return out;
}

// "node12" → 12; -1 otherwise.
int number_after(const std::string& name, const std::string& prefix) {
  if (name.rfind(prefix, 0) != 0 || name.size() == prefix.size()) return -1;
  for (size_t i = prefix.size(); i < name.size(); ++i) {
    if (!std::isdigit(static_cast<unsigned char>(name[i]))) return -1;
  }
  return std::stoi(name.substr(prefix.size()));
}

std::string lower(std::string s) {
  for (auto& c : s) c = static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  return s;
}

}  // namespace

std::vector<int> parse_cpu_list(const std::string& text) {
  std::vector<int> out;
  std::stringstream ss(text);
  std::string item;
  while (std::getline(ss, item, ',')) {
    int a = 0, b = 0;
    char dash = 0;
    std::stringstream is(item);
    if (!(is >> a)) break;
    if (is >> dash && dash == '-' && is >> b) {
      for (int c = a; c <= b; ++c) out.push_back(c);
    } else {
      out.push_back(a);
    }
  }
  return out;
}

NumaTopology read_numa_topology(const std::string& root, const char* cuda_visible_devices) {
  NumaTopology t;
  const std::string sys = root + "/sys/devices/system";
  for (const auto& name : entries(sys + "/node")) {
    const int node = number_after(name, "node");
    if (node < 0) continue;
    auto cpus = parse_cpu_list(read_line(sys + "/node/" + name + "/cpulist"));
    if (!cpus.empty()) t.node_cpus[node] = cpus;
  }
  if (t.node_cpus.empty()) {
    // No NUMA in the kernel: one node with every online CPU.
    auto cpus = parse_cpu_list(read_line(sys + "/cpu/online"));
    if (!cpus.empty()) t.node_cpus[0] = cpus;
  }
  for (const auto& [node, cpus] : t.node_cpus) {
    for (int c : cpus) {
      const std::string dir = sys + "/cpu/cpu" + std::to_string(c);
      const std::string pkg = read_line(dir + "/topology/physical_package_id");
      t.cpu_package[c] = pkg.empty() ? 0 : std::stoi(pkg);
      auto l3 = parse_cpu_list(read_line(dir + "/cache/index3/shared_cpu_list"));
      t.cpu_l3[c] = l3.empty() ? std::vector<int>{c} : l3;
    }
  }
  // GPUs in PCI bus order (CUDA_DEVICE_ORDER=PCI_BUS_ID), each on the node
  // its PCI device reports.
  std::vector<int> all;
  for (const auto& bus : entries(root + "/proc/driver/nvidia/gpus")) {
    const std::string n = read_line(root + "/sys/bus/pci/devices/" + lower(bus) + "/numa_node");
    all.push_back(n.empty() ? -1 : std::stoi(n));
  }
  if (cuda_visible_devices) {
    for (int i : parse_cpu_list(cuda_visible_devices)) {
      t.gpu_nodes.push_back(i >= 0 && i < static_cast<int>(all.size()) ? all[i] : -1);
    }
  } else {
    t.gpu_nodes = all;
  }
  return t;
}

std::vector<NumaPlacement> numa_placements(const std::string& mode, int nproc,
                                           const NumaTopology& topo) {
  if (topo.node_cpus.empty()) throw std::runtime_error("no NUMA node with CPUs found");
  std::vector<int> nodes;
  for (const auto& [n, cpus] : topo.node_cpus) nodes.push_back(n);
  // Each worker's node: its GPU's, else its share of the nodes.
  std::vector<int> node_of(nproc);
  for (int lr = 0; lr < nproc; ++lr) {
    const int gpu_node = lr < static_cast<int>(topo.gpu_nodes.size()) ? topo.gpu_nodes[lr] : -1;
    node_of[lr] = topo.node_cpus.count(gpu_node)
                      ? gpu_node
                      : nodes[static_cast<size_t>(lr) * nodes.size() / static_cast<size_t>(nproc)];
  }
  std::vector<NumaPlacement> out(nproc);
  std::map<int, int> seen_on_node;  // workers placed on each node so far
  for (int lr = 0; lr < nproc; ++lr) {
    const int node = node_of[lr];
    const auto& cpus = topo.node_cpus.at(node);
    const int k = seen_on_node[node]++;
    const int sharing = static_cast<int>(std::count(node_of.begin(), node_of.end(), node));
    NumaPlacement& p = out[lr];
    p.mem_nodes = {node};
    if (mode == "socket") {
      const int pkg = topo.cpu_package.count(cpus.front()) ? topo.cpu_package.at(cpus.front()) : 0;
      std::set<int> mems;
      for (const auto& [n, ncpus] : topo.node_cpus) {
        for (int c : ncpus) {
          const int cp = topo.cpu_package.count(c) ? topo.cpu_package.at(c) : 0;
          if (cp == pkg) {
            p.cpus.push_back(c);
            mems.insert(n);
          }
        }
      }
      p.mem_nodes.assign(mems.begin(), mems.end());
    } else if (mode == "exclusive") {
      const size_t c = cpus.size(), begin = c * k / sharing, end = c * (k + 1) / sharing;
      if (begin < end) {
        p.cpus.assign(cpus.begin() + static_cast<long>(begin), cpus.begin() + static_cast<long>(end));
      } else {
        p.cpus = {cpus[static_cast<size_t>(k) % c]};  // more workers than CPUs: they share
      }
    } else if (mode == "core-complex") {
      std::vector<std::vector<int>> complexes;  // distinct L3 groups within the node
      for (int c : cpus) {
        std::vector<int> group;
        for (int g : topo.cpu_l3.count(c) ? topo.cpu_l3.at(c) : std::vector<int>{c}) {
          if (std::find(cpus.begin(), cpus.end(), g) != cpus.end()) group.push_back(g);
        }
        if (std::find(complexes.begin(), complexes.end(), group) == complexes.end()) {
          complexes.push_back(group);
        }
      }
      p.cpus = complexes[static_cast<size_t>(k) % complexes.size()];
    } else {  // node
      p.cpus = cpus;
    }
  }
  return out;
}

}  // namespace ddprun
