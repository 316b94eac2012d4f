#include "agent/health/cpu_busy.h"

#include <unistd.h>

#include <cstdio>
#include <fstream>
#include <sstream>

namespace ddprun {

namespace {

// The number after `key` on the first line that starts with `line_start`
// (cpu.stat: "usage_usec 123"; cpu.pressure: "some avg10=... total=123").
std::optional<int64_t> value_after(const std::string& path, const std::string& line_start, const std::string& key) {
  std::ifstream in(path);
  if (!in) return std::nullopt;
  std::string line;
  while (std::getline(in, line)) {
    if (line.rfind(line_start, 0) != 0) continue;
    const size_t at = line.find(key);
    if (at == std::string::npos) continue;
    try {
      return std::stoll(line.substr(at + key.size()));
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  return std::nullopt;
}

// The fields of /proc/PID/stat after the command name (which may hold
// spaces and parentheses: they start after the last ')'), from field 3, the
// state; nullopt when it cannot be read.
std::optional<std::string> stat_fields(pid_t pid) {
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/stat", static_cast<int>(pid));
  std::ifstream stat(path);
  std::string text;
  if (!stat || !std::getline(stat, text)) return std::nullopt;
  const size_t close = text.rfind(')');
  if (close == std::string::npos || close + 2 >= text.size()) return std::nullopt;
  return text.substr(close + 2);
}

}  // namespace

std::optional<CpuTimes> cgroup_cpu_times(const std::string& cgroup) {
  if (cgroup.empty()) return std::nullopt;
  const auto used = value_after(cgroup + "/cpu.stat", "usage_usec", "usage_usec ");
  if (!used) return std::nullopt;
  const auto waited = value_after(cgroup + "/cpu.pressure", "some", "total=");
  return CpuTimes{std::chrono::microseconds(*used), std::chrono::microseconds(waited.value_or(0))};
}

std::optional<CpuTimes> proc_cpu_times(pid_t pid) {
  const auto text = stat_fields(pid);
  if (!text) return std::nullopt;
  std::istringstream fields(*text);
  std::string f;
  // Fields 3.. here; utime, stime, cutime, cstime are fields 14-17.
  long long ticks = 0;
  for (int field = 3; field <= 17 && fields >> f; ++field) {
    if (field < 14) continue;
    try {
      ticks += std::stoll(f);
    } catch (const std::exception&) {
      return std::nullopt;
    }
  }
  const long hz = sysconf(_SC_CLK_TCK);
  CpuTimes t;
  t.used = std::chrono::microseconds(hz > 0 ? ticks * 1000000 / hz : 0);
  char path[64];
  std::snprintf(path, sizeof(path), "/proc/%d/schedstat", static_cast<int>(pid));
  std::ifstream sched(path);
  long long on_cpu_ns = 0, waited_ns = 0;
  if (sched >> on_cpu_ns >> waited_ns) t.waited = std::chrono::microseconds(waited_ns / 1000);
  return t;
}

bool process_stopped(pid_t pid) {
  const auto text = stat_fields(pid);
  return text && stopped_state((*text)[0]);
}

std::optional<CpuTimes> cpu_times(const std::string& cgroup, pid_t pid) {
  if (auto t = cgroup_cpu_times(cgroup)) return t;
  if (pid > 0) return proc_cpu_times(pid);
  return std::nullopt;
}

}  // namespace ddprun
