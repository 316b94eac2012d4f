#include "agent/agent.h"

#include <errno.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>
#include <spdlog/spdlog.h>

namespace ddprun {
namespace {

void make_dirs(const std::string& path) {
  std::error_code ec;
  std::filesystem::create_directories(path, ec);
  if (ec) throw std::runtime_error("cannot create folder " + path + ": " + ec.message());
}

std::string make_temp_dir(const std::string& run_id) {
  const char* tmp = getenv("TMPDIR");
  std::string pattern = std::string(tmp && *tmp ? tmp : "/tmp") + "/ddprun-" + run_id + "-XXXXXX";
  if (!mkdtemp(pattern.data())) {
    throw std::runtime_error("cannot create a temporary folder " + pattern + ": " + strerror(errno));
  }
  return pattern;
}

}  // namespace

Agent::Agent(AgentConfig config, RendezvousClient& rdzv, SignalChannel& signals)
    : cfg_(std::move(config)), rdzv_(rdzv), signals_(signals) {}

Agent::~Agent() { dismiss_standbys(); }

std::string Agent::attempt_dir(int attempt) const {
  return files_dir_ + "/attempt_" + std::to_string(attempt);
}

int Agent::pending_stop_signal() {
  int stop = 0;
  while (auto sig = signals_.next()) {
    if (is_stop_signal(*sig) && stop == 0) stop = *sig;
  }
  return stop;
}

// Per-rank files: in --log-dir when given; else redirects/tee need one made
// up; else only the error files need a home, in a folder removed at the end.
void Agent::prepare_files() {
  wants_files_ = !cfg_.log_dir.empty() || cfg_.redirects.all || cfg_.tee.all ||
                 !cfg_.redirects.by_local_rank.empty() || !cfg_.tee.by_local_rank.empty();
  if (!cfg_.log_dir.empty()) {
    files_dir_ = cfg_.log_dir;
    make_dirs(files_dir_);
  } else {
    files_dir_ = make_temp_dir(cfg_.run_id);
    files_dir_is_temp_ = !wants_files_;
    if (wants_files_) spdlog::info("worker logs are in {}", files_dir_);
  }
  // Heartbeats: for hang detection, and to know when standbys may start.
  if (cfg_.hang_timeout.count() > 0 || cfg_.standby) {
    heartbeats_ = std::make_unique<HeartbeatTable>(files_dir_ + "/heartbeat", cfg_.nproc);
  }
}

std::vector<WorkerLaunch> Agent::make_launches(int attempt, const JoinResult& joined) {
  const Assignment& a = joined.assignment;
  JobEnv job;
  job.role = cfg_.role;
  job.master_addr = cfg_.master_addr;
  job.master_port = cfg_.master_port;
  job.restart_count = attempt;
  job.max_restarts = cfg_.max_restarts;
  job.run_id = cfg_.run_id;
  job.rdzv_address = cfg_.rdzv_address;
  job.round = a.round;
  job.nccl_id = joined.nccl_id;
  job.local_addr = cfg_.local_addr;
  job.heartbeat_file = heartbeats_ ? heartbeats_->path() : "";

  std::vector<WorkerLaunch> launches;
  for (int lr = 0; lr < cfg_.nproc; ++lr) {
    WorkerLaunch l;
    l.id = WorkerIdentity{a.first_global_rank + lr, lr, cfg_.nproc, a.world_size, a.node_rank, a.num_nodes};
    const std::string dir = attempt_dir(attempt) + "/rank" + std::to_string(l.id.rank);
    make_dirs(dir);
    l.error_file = dir + "/error.json";
    const int redirect = cfg_.redirects.for_local_rank(lr);
    l.output.console_mask = kBoth & ~redirect;
    l.output.file_mask = wants_files_ ? kBoth : kNone;
    l.output.stdout_path = dir + "/stdout.log";
    l.output.stderr_path = dir + "/stderr.log";
    l.output.console_out_fd = cfg_.console_out_fd;
    l.output.console_err_fd = cfg_.console_err_fd;
    l.vars = worker_variables(l.id, job, l.error_file);
    l.spawn.path = cfg_.program;
    l.spawn.argv = cfg_.argv;
    l.spawn.env = merge_environment(cfg_.base_env, l.vars, cfg_.nproc);
    launches.push_back(std::move(l));
  }
  return launches;
}

// Standbys start with the environment the next attempt will most likely
// have (what libraries read at load time, like OMP_NUM_THREADS, must be
// there from the start); the exact variables follow at release.
void Agent::spawn_standbys(int attempt, const JoinResult& guess) {
  std::vector<WorkerLaunch> next = make_launches(attempt, guess);
  for (auto& l : next) {
    try {
      standbys_.push_back(spawn_standby(l.spawn));
    } catch (const std::exception& e) {
      spdlog::warn("cannot start a standby worker ({}); the next restart starts fresh ones", e.what());
      dismiss_standbys();
      return;
    }
  }
  spdlog::debug("{} standby worker(s) ready for restart {}", standbys_.size(), attempt);
}

void Agent::dismiss_standbys() {
  for (auto& s : standbys_) dismiss_standby(s);
  standbys_.clear();
}

int Agent::run() {
  prepare_files();
  int exit_code = kExitWorkerFailed;
  for (int attempt = 0; attempt <= cfg_.max_restarts; ++attempt) {
    if (int sig = pending_stop_signal()) {
      exit_code = 128 + sig;
      break;
    }
    JoinArgs join;
    join.job_id = cfg_.run_id;
    join.node = NodeSpec{cfg_.host + ":" + std::to_string(getpid()), cfg_.host, cfg_.nproc, cfg_.local_addr,
                         cfg_.node_rank, cfg_.wants_nccl_id};
    join.settings = cfg_.rdzv;
    join.timeout = cfg_.join_timeout;
    JoinResult joined;
    try {
      joined = rdzv_.join(join);
    } catch (const std::exception& e) {
      spdlog::error("{}", e.what());
      exit_code = kExitWorkerFailed;
      break;
    }
    if (cfg_.wants_nccl_id && joined.nccl_id.empty()) {
      spdlog::warn("no NCCL id for round {}: {}", joined.assignment.round, joined.nccl_id_error);
    }
    const Assignment& a = joined.assignment;
    spdlog::debug("round {}: node {} of {}, ranks {}..{} of {}", a.round, a.node_rank, a.num_nodes,
                  a.first_global_rank, a.first_global_rank + cfg_.nproc - 1, a.world_size);

    std::vector<WorkerLaunch> launches = make_launches(attempt, joined);
    if (standbys_.size() == launches.size()) {
      for (size_t i = 0; i < launches.size(); ++i) launches[i].standby = std::move(standbys_[i]);
      standbys_.clear();
    }
    dismiss_standbys();  // a set of the wrong size is of no use

    GroupResult result;
    try {
      GroupOptions go;
      go.host = cfg_.host;
      go.stop_timeout = cfg_.stop_timeout;
      go.heartbeats = heartbeats_.get();
      go.hang_timeout = cfg_.hang_timeout;
      go.monitor_interval = cfg_.monitor_interval;
      if (cfg_.standby && attempt < cfg_.max_restarts) {
        // Once every worker is past its start (it beats), warm up the next set.
        go.on_all_beating = [this, attempt, &joined] { spawn_standbys(attempt + 1, joined); };
      }
      if (heartbeats_) heartbeats_->reset();
      WorkerGroup group(std::move(launches), signals_, go);
      result = group.run();
    } catch (const std::exception& e) {
      spdlog::error("{}", e.what());
      exit_code = kExitWorkerFailed;
      break;
    }
    if (result.outcome == GroupResult::kSucceeded) {
      exit_code = kExitOk;
      break;
    }
    SummaryContext ctx{cfg_.run_id, attempt, cfg_.max_restarts, result.stopped_count,
                       result.outcome == GroupResult::kStoppedBySignal ? "stopped by " + signal_name(result.signal)
                                                                       : ""};
    write_all(cfg_.console_err_fd, format_failure_summary(result.failures, ctx));
    if (result.outcome == GroupResult::kStoppedBySignal) {
      exit_code = 128 + result.signal;
      break;
    }
    if (attempt < cfg_.max_restarts) {
      spdlog::warn("restarting the workers (restart {} of {}{})", attempt + 1, cfg_.max_restarts,
                   standbys_.empty() ? "" : ", from standby");
    }
  }

  dismiss_standbys();
  heartbeats_.reset();
  if (files_dir_is_temp_) {
    std::error_code ec;
    std::filesystem::remove_all(files_dir_, ec);
  }
  return exit_code;
}

}  // namespace ddprun
