// The agent's temporary folders: one whose owner died is removed by the
// next agent; a live owner's, another pid namespace's, a folder without an
// owner (the user's log files) and someone else's files are not.
#include "agent/base/temp_dir.h"

#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>

namespace ddprun {
namespace {

namespace fs = std::filesystem;

// A pid that no process has any more: a child that exited and was reaped.
pid_t dead_pid() {
  const pid_t child = fork();
  if (child == 0) _exit(0);
  int status;
  waitpid(child, &status, 0);
  return child;
}

std::string our_pid_namespace() { return fs::read_symlink("/proc/self/ns/pid").string(); }

fs::path folder(const fs::path& base, const std::string& name, const std::string& owner) {
  fs::create_directories(base / name);
  if (!owner.empty()) std::ofstream(base / name / "owner") << owner << "\n";
  return base / name;
}

TEST(TempDir, AFolderWhoseOwnerDiedIsRemovedAndNoOtherIs) {
  const fs::path base = fs::temp_directory_path() / ("ddprun-temp-dir-test-" + std::to_string(getpid()));
  fs::remove_all(base);
  fs::create_directories(base);
  const std::string ns = our_pid_namespace();
  const fs::path dead = folder(base, "ddprun-job-dead", std::to_string(dead_pid()) + " " + ns);
  const fs::path live = folder(base, "ddprun-job-live", std::to_string(getpid()) + " " + ns);
  const fs::path elsewhere = folder(base, "ddprun-job-elsewhere", std::to_string(dead_pid()) + " pid:[1]");
  const fs::path logs = folder(base, "ddprun-job-logs", "");
  const fs::path other = folder(base, "not-ddprun", std::to_string(dead_pid()) + " " + ns);
  EXPECT_EQ(remove_stale_temp_dirs(base.string()), 1);
  EXPECT_FALSE(fs::exists(dead));
  EXPECT_TRUE(fs::exists(live));
  EXPECT_TRUE(fs::exists(elsewhere));
  EXPECT_TRUE(fs::exists(logs));
  EXPECT_TRUE(fs::exists(other));

  // The agent's own folder names it, and so survives while it lives.
  const std::string mine = make_temp_dir(base.string(), "job", /*disposable=*/true);
  const std::string kept = make_temp_dir(base.string(), "job", /*disposable=*/false);
  EXPECT_EQ(remove_stale_temp_dirs(base.string()), 0);
  EXPECT_TRUE(fs::exists(fs::path(mine) / "owner"));
  EXPECT_FALSE(fs::exists(fs::path(kept) / "owner"));
  fs::remove_all(base);
}

}  // namespace
}  // namespace ddprun
