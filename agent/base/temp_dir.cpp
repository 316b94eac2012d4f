#include "agent/base/temp_dir.h"

#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <stdexcept>

namespace ddprun {
namespace {

namespace fs = std::filesystem;

constexpr const char* kOwnerFile = "owner";

// This process's pid namespace, as /proc names it ("pid:[4026531836]").
std::string pid_namespace() {
  std::error_code ec;
  const fs::path ns = fs::read_symlink("/proc/self/ns/pid", ec);
  return ec ? "" : ns.string();
}

}  // namespace

std::string temp_base() {
  const char* tmp = getenv("TMPDIR");
  return tmp && *tmp ? tmp : "/tmp";
}

std::string make_temp_dir(const std::string& base, const std::string& run_id, bool disposable) {
  std::string pattern = base + "/ddprun-" + run_id + "-XXXXXX";
  if (!mkdtemp(pattern.data())) {
    throw std::runtime_error("cannot create a temporary folder " + pattern + ": " + strerror(errno));
  }
  if (disposable) std::ofstream(pattern + "/" + kOwnerFile) << getpid() << " " << pid_namespace() << "\n";
  return pattern;
}

int remove_stale_temp_dirs(const std::string& base) {
  const std::string ns = pid_namespace();
  if (ns.empty()) return 0;  // cannot tell whose pids these are
  int removed = 0;
  std::error_code ec;
  for (const auto& entry : fs::directory_iterator(base, ec)) {
    const std::string name = entry.path().filename().string();
    if (name.rfind("ddprun-", 0) != 0) continue;
    // A real folder of ours, not a link someone planted.
    struct stat st;
    if (lstat(entry.path().c_str(), &st) != 0 || !S_ISDIR(st.st_mode) || st.st_uid != geteuid()) continue;
    std::ifstream owner(entry.path() / kOwnerFile);
    long pid = 0;
    std::string owner_ns;
    if (!(owner >> pid >> owner_ns) || pid <= 0 || owner_ns != ns) continue;
    if (kill(static_cast<pid_t>(pid), 0) == 0 || errno != ESRCH) continue;  // alive (or not ours to ask)
    std::error_code gone;
    fs::remove_all(entry.path(), gone);
    if (!gone) ++removed;
  }
  return removed;
}

}  // namespace ddprun
