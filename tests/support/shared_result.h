// A result several tests of one ctest run need, such as the checksum of an
// uninterrupted reference run: gtest_discover_tests runs each test in a
// process of its own, so an in-process cache never hits. The first test
// that asks computes it, under a lock the others wait on, and writes it to
// a file keyed by the ctest process (its pid and start time) and `key`; the
// others read it. A test not run by ctest computes its own, as does every
// test when the result is empty (a failed run is never shared).
#pragma once

#include <fcntl.h>
#include <sys/file.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <sstream>
#include <string>

namespace ddptest {

namespace detail {
// "PID-STARTTIME" of the parent process when it is ctest, else "".
inline std::string ctest_run_id() {
  const std::string proc = "/proc/" + std::to_string(getppid());
  std::ifstream comm(proc + "/comm");
  std::string name;
  std::getline(comm, name);
  if (name != "ctest") return "";
  std::ifstream stat_file(proc + "/stat");
  const std::string stat((std::istreambuf_iterator<char>(stat_file)), {});
  // Field 22 (starttime) counts from the field after the command's ")".
  std::istringstream rest(stat.substr(stat.rfind(')') + 2));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
  }
  return std::to_string(getppid()) + "-" + field;
}
}  // namespace detail

inline std::string shared_result(const std::string& key, const std::function<std::string()>& compute) {
  const std::string run = detail::ctest_run_id();
  if (run.empty()) return compute();
  namespace fs = std::filesystem;
  const fs::path dir = fs::temp_directory_path() / ("ddprun-shared-" + run);
  fs::create_directories(dir);
  const fs::path file = dir / std::to_string(std::hash<std::string>{}(key));
  const int lock = open((file.string() + ".lock").c_str(), O_RDWR | O_CREAT | O_CLOEXEC, 0600);
  if (lock < 0) return compute();
  flock(lock, LOCK_EX);  // another test may be computing it: wait for it
  std::string value;
  if (std::ifstream in{file}) value.assign(std::istreambuf_iterator<char>(in), {});
  if (value.empty()) {
    value = compute();
    if (!value.empty()) {
      const fs::path tmp = file.string() + ".tmp";
      std::ofstream(tmp) << value;
      fs::rename(tmp, file);
    }
  }
  close(lock);  // and with it the lock
  return value;
}

}  // namespace ddptest
