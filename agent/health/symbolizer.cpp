#include "agent/health/symbolizer.h"

#include <cxxabi.h>

#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <memory>
#include <sstream>

#if DDPRUN_HAVE_LIBDW
#include <elfutils/libdwfl.h>
#endif

namespace ddprun {
namespace {

#if DDPRUN_HAVE_LIBDW
std::string demangle(const char* name) {
  int status = 0;
  std::unique_ptr<char, void (*)(void*)> out(abi::__cxa_demangle(name, nullptr, nullptr, &status), std::free);
  return status == 0 && out ? std::string(out.get()) : std::string(name);
}
#endif

std::string base_name(const std::string& path) {
  const auto slash = path.rfind('/');
  return slash == std::string::npos ? path : path.substr(slash + 1);
}

// Without libdw: the module and offset from /proc/PID/maps.
void from_maps(pid_t pid, std::vector<Frame>& frames) {
  std::ifstream maps("/proc/" + std::to_string(pid) + "/maps");
  std::string line;
  while (std::getline(maps, line)) {
    std::istringstream in(line);
    std::string range, perms, offset_hex, dev, inode, path;
    in >> range >> perms >> offset_hex >> dev >> inode >> path;
    if (path.empty() || path[0] != '/') continue;
    const auto dash = range.find('-');
    const uint64_t lo = std::stoull(range.substr(0, dash), nullptr, 16);
    const uint64_t hi = std::stoull(range.substr(dash + 1), nullptr, 16);
    const uint64_t file_off = std::stoull(offset_hex, nullptr, 16);
    for (Frame& f : frames) {
      if (f.module.empty() && f.address >= lo && f.address < hi) {
        f.module = path;
        f.offset = f.address - lo + file_off;
      }
    }
  }
}

}  // namespace

std::vector<Frame> symbolize(pid_t pid, const std::vector<uint64_t>& addresses) {
  std::vector<Frame> frames;
  for (uint64_t a : addresses) frames.push_back(Frame{a, "", "", "", 0});
  from_maps(pid, frames);
#if DDPRUN_HAVE_LIBDW
  static char* debuginfo_path = nullptr;
  static const Dwfl_Callbacks callbacks = {dwfl_linux_proc_find_elf, dwfl_standard_find_debuginfo, nullptr,
                                           &debuginfo_path};
  Dwfl* dwfl = dwfl_begin(&callbacks);
  if (!dwfl) return frames;
  if (dwfl_linux_proc_report(dwfl, pid) == 0 && dwfl_report_end(dwfl, nullptr, nullptr) == 0) {
    for (size_t i = 0; i < frames.size(); ++i) {
      // A return address points after its call: look one byte back.
      const Dwarf_Addr at = frames[i].address - (i == 0 ? 0 : 1);
      Dwfl_Module* mod = dwfl_addrmodule(dwfl, at);
      if (!mod) continue;
      if (const char* name = dwfl_module_addrname(mod, at)) frames[i].function = demangle(name);
      if (Dwfl_Line* line = dwfl_module_getsrc(mod, at)) {
        int lineno = 0;
        if (const char* file = dwfl_lineinfo(line, nullptr, &lineno, nullptr, nullptr, nullptr)) {
          frames[i].source = std::string(file) + ":" + std::to_string(lineno);
        }
      }
    }
  }
  dwfl_end(dwfl);
#endif
  return frames;
}

std::string describe(const Frame& f) {
  char hex[32];
  std::snprintf(hex, sizeof(hex), "0x%llx", static_cast<unsigned long long>(f.address));
  if (!f.function.empty()) {
    return f.function + (f.source.empty() ? "" : " (" + f.source + ")") +
           (f.module.empty() ? "" : " [" + base_name(f.module) + "]");
  }
  if (!f.module.empty()) {
    char off[32];
    std::snprintf(off, sizeof(off), "+0x%llx", static_cast<unsigned long long>(f.offset));
    return base_name(f.module) + off;
  }
  return hex;
}

}  // namespace ddprun
