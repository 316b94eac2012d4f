// What the agent sets up before its first round and takes down at the end:
// the run's folder (--log-dir) or a temporary one, the filtered-output
// files, NUMA placements, the --trace node folder and its clock file, the
// heartbeat table, the job's cgroup, and the consoles the workers' lines
// go to. Agent::run (agent.cpp) calls these in order.
#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cctype>
#include <ctime>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>

#include "agent/agent.h"
#include "agent/processes/spawn.h"
#include "agent/base/temp_dir.h"
#include "channel/event_log.h"
#include "channel/output_file.h"
#include "channel/python_startup.h"

namespace ddprun {
namespace {

void make_dirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) throw std::runtime_error("cannot create folder " + path + ": " + ec.message());
}

// <log_dir>/<run id>-<YYYYmmdd-HHMMSS>[-n]: a folder of this run's own, so
// that a run never overwrites an earlier one's logs (mkdir makes it or
// fails: two runs started in the same second get different names).
std::string make_run_dir(const std::string& log_dir, const std::string& run_id) {
  make_dirs(log_dir);
  const std::time_t now = std::time(nullptr);
  std::tm tm{};
  localtime_r(&now, &tm);
  char stamp[32];
  std::strftime(stamp, sizeof(stamp), "%Y%m%d-%H%M%S", &tm);
  const std::string base = log_dir + "/" + run_id + "-" + stamp;
  for (int n = 0; n < 1000; ++n) {
    const std::string dir = n == 0 ? base : base + "-" + std::to_string(n);
    if (mkdir(dir.c_str(), 0755) == 0) return dir;
    if (errno != EEXIST) throw std::runtime_error("cannot create folder " + dir + ": " + strerror(errno));
  }
  throw std::runtime_error("cannot create a folder for this run's logs in " + log_dir);
}

// A node id ("host:pid") as a folder name: "host.pid", anything unusual as '_'.
std::string file_safe(const std::string& node_id) {
  std::string out = node_id;
  for (char& c : out) {
    if (c == ':') c = '.';
    else if (!std::isalnum(static_cast<unsigned char>(c)) && c != '.' && c != '-' && c != '_') c = '_';
  }
  return out;
}

}  // namespace

namespace ev = channel::events;

void Agent::make_dirs(const std::string& path) { ddprun::make_dirs(path); }

std::string Agent::attempt_dir(int attempt) const {
  return files_dir_ + "/attempt_" + std::to_string(attempt);
}

// Per-rank files: in --log-dir when given; else redirects/tee need one made
// up; else only the error files need a home, in a folder removed at the end.
void Agent::prepare_files() {
  wants_files_ = !cfg_.log_dir.empty() || cfg_.redirects.all || cfg_.tee.all ||
                 !cfg_.redirects.by_local_rank.empty() || !cfg_.tee.by_local_rank.empty() ||
                 !cfg_.duplicate_filters[0].empty() || !cfg_.duplicate_filters[1].empty();
  if (!cfg_.log_dir.empty()) {
    files_dir_ = make_run_dir(cfg_.log_dir, cfg_.run_id);
    spdlog::info("worker logs are in {}", files_dir_);
    events_.add_file(files_dir_ + "/" + ev::kFileName);
  } else {
    const std::string base = temp_base();
    // Folders that SIGKILLed agents left behind go first.
    if (int n = remove_stale_temp_dirs(base); n > 0) {
      spdlog::debug("removed {} temporary folder(s) that ended agents left in {}", n, base);
    }
    files_dir_ = make_temp_dir(base, cfg_.run_id, /*disposable=*/!wants_files_);
    files_dir_is_temp_ = !wants_files_;
    if (wants_files_) spdlog::info("worker logs are in {}", files_dir_);
  }
  const char* names[2] = {"/filtered_stdout.log", "/filtered_stderr.log"};
  for (int i = 0; i < 2; ++i) {
    if (cfg_.duplicate_filters[i].empty()) continue;
    const std::string path = files_dir_ + names[i];
    duplicate_fd_[i] = channel::open_output_file(path, O_APPEND);
    if (duplicate_fd_[i] < 0) {
      throw std::runtime_error("cannot open " + path + ": " + channel::open_error_text(errno));
    }
  }
  if (!cfg_.numa_binding.empty()) {
    numa_ = numa_placements(cfg_.numa_binding, cfg_.nproc,
                            read_numa_topology("", getenv("CUDA_VISIBLE_DEVICES")));
    for (size_t lr = 0; lr < numa_.size(); ++lr) {
      std::string cpus;
      for (int c : numa_[lr].cpus) cpus += (cpus.empty() ? "" : ",") + std::to_string(c);
      spdlog::debug("local rank {}: CPUs {} (--numa-binding {})", lr, cpus, cfg_.numa_binding);
    }
  }
  if (!cfg_.trace_dir.empty()) {
    trace_node_dir_ = cfg_.trace_dir + "/" + file_safe(node_id_);
    make_dirs(trace_node_dir_);
    // The agent track of the merged trace: rounds, spawns, exits, restarts.
    events_.add_file(trace_node_dir_ + "/" + channel::events::kFileName);
  }
  // Heartbeats: for hang detection (with --hang-timeout), to know when
  // standbys may start, and the workers' progress (always).
  try {
    heartbeats_ = std::make_unique<HeartbeatTable>(files_dir_ + "/heartbeat", cfg_.nproc);
  } catch (const std::runtime_error& e) {
    throw std::runtime_error(std::string(e.what()) + (cfg_.log_dir.empty()
                                                          ? "; make room there or point TMPDIR at another folder"
                                                          : "; make room there or pick another --log-dir"));
  }
  // Python workers dump their stacks on ddprun's signal (python_startup.h).
  if (!cfg_.python.empty()) {
    const std::string dir = heartbeats_->path() + ".python";
    std::error_code ec;
    std::filesystem::create_directory(dir, ec);
    const std::string err = ec ? ec.message()
                               : channel::write_output_file(dir + "/" + channel::kPythonStartupFile,
                                                            channel::python_startup());
    if (err.empty()) {
      python_startup_dir_ = dir;
    } else {
      spdlog::warn("cannot write the Python workers' start-up in {} ({}): a hang will show no Python stacks",
                   dir, err);
    }
  }
  // The ddprun package (ddprun.Healer), so that scripts import it with no
  // install step, whatever runs them (a script, or `python3 script.py` as
  // the program): an install's share/ddprun/python, the build tree's, or
  // a wheel's (site-packages/ddprun.scripts/ddprun beside
  // site-packages/ddprun: auditwheel moves the program there).
  for (const char* rel : {"/../share/ddprun/python", "/../python", "/.."}) {
    const std::string candidate = executable_dir() + rel;
    std::error_code ec;
    if (std::filesystem::exists(candidate + "/ddprun/__init__.py", ec)) {
      const std::filesystem::path clean = std::filesystem::weakly_canonical(candidate, ec);
      python_package_dir_ = ec ? candidate : clean.string();
      break;
    }
  }
}

// The node hosting the rendezvous (and a one-node job) is the reference:
// offset 0. The others take their lease keeper's best estimate, waiting up
// to `wait` for a first one (a job shorter than a keep-alive interval);
// without one their times stay as they are, and the file says so with
// rtt_ns -1.
void Agent::write_trace_clock(std::chrono::milliseconds wait) {
  if (trace_node_dir_.empty()) return;
  ClockEstimate clock;
  if (!cfg_.hosts_rendezvous && lease_) {
    auto estimate = lease_->clock_within(wait);
    clock = estimate ? *estimate : ClockEstimate{0, -1};
  }
  const std::string path = trace_node_dir_ + "/clock.json";
  const std::string tmp = path + ".tmp";
  if (const std::string err = channel::write_output_file(
          tmp, nlohmann::json{{"offset_ns", clock.offset_ns}, {"rtt_ns", clock.rtt_ns}}.dump() + "\n");
      !err.empty()) {
    spdlog::warn("--trace: cannot write {}", err);
    return;
  }
  // Renamed into place: a merge never reads half a file.
  std::error_code ec;
  std::filesystem::rename(tmp, path, ec);
  if (ec) spdlog::warn("--trace: cannot write {}: {}", path, ec.message());
}

// Contains the job's processes (see job_cgroup.h); where that is not
// possible, says once what it means.
void Agent::contain_processes() {
  std::string why;
  cgroup_ = JobCgroup::create(why);
  if (!cgroup_) {
    spdlog::warn("cannot keep the job's processes in a cgroup ({}); a process a worker starts in "
                 "a session of its own may outlive the job", why);
  }
}

// stdout and stderr may be one pipe or terminal (2>&1): then one Console
// serves both, so that lines on the two never interleave mid-line.
void Agent::open_consoles() {
  console_out_ = std::make_unique<Console>(cfg_.console_out_fd);
  struct stat out, err;
  const bool same = fstat(cfg_.console_out_fd, &out) == 0 && fstat(cfg_.console_err_fd, &err) == 0 &&
                    out.st_dev == err.st_dev && out.st_ino == err.st_ino;
  if (same) {
    console_err_ = console_out_.get();
  } else {
    console_err_own_ = std::make_unique<Console>(cfg_.console_err_fd);
    console_err_ = console_err_own_.get();
  }
}

void Agent::remove_temp_files() {
  if (!python_startup_dir_.empty()) {
    std::error_code ec;
    std::filesystem::remove_all(python_startup_dir_, ec);
  }
  if (!files_dir_is_temp_) return;
  heartbeats_.reset();
  std::error_code ec;
  std::filesystem::remove_all(files_dir_, ec);
}

}  // namespace ddprun
