#include "verify/hardware_kind.h"

#include <fstream>

#if DDPRUN_TORCH_CUDA
#include <ATen/cuda/CUDAContext.h>
#endif

namespace ddp {
namespace {

// The first "model name" of /proc/cpuinfo (x86), else its "CPU part" line
// (arm64), else "unknown CPU".
std::string cpu_model() {
  std::ifstream in("/proc/cpuinfo");
  std::string line, part;
  while (std::getline(in, line)) {
    const auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string key = line.substr(0, colon);
    while (!key.empty() && (key.back() == ' ' || key.back() == '\t')) key.pop_back();
    std::string value = line.substr(colon + 1);
    while (!value.empty() && value.front() == ' ') value.erase(0, 1);
    if (key == "model name") return value;
    if (key == "CPU part" && part.empty()) part = "CPU part " + value;
  }
  return part.empty() ? "unknown CPU" : part;
}

}  // namespace

std::string hardware_kind(const LaunchInfo& info, const at::Device& device) {
  if (!info.hardware_kind.empty()) return info.hardware_kind;
  std::string kind = cpu_model();
#if DDPRUN_TORCH_CUDA
  if (device.is_cuda()) kind += ", " + std::string(at::cuda::getDeviceProperties(device.index() < 0 ? 0 : device.index())->name);
#else
  (void)device;
#endif
  return kind;
}

}  // namespace ddp
