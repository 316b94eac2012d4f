#include "agent/worker_group.h"

#include <errno.h>
#include <algorithm>
#include <poll.h>
#include <signal.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>

#include <spdlog/spdlog.h>

namespace ddprun {

struct WorkerGroup::Worker {
  const WorkerLaunch* launch = nullptr;
  pid_t pid = -1;
  int fds[2] = {-1, -1};  // stdout, stderr read ends
  std::unique_ptr<WorkerOutput> output;
  bool running = false;
  bool term_sent = false;  // the group asked it to stop
  bool hung = false;       // judged hung, failure already recorded
  uint64_t beats = 0;      // heartbeat counter last seen
  std::chrono::steady_clock::time_point beat_changed;  // when it last moved
};

WorkerGroup::WorkerGroup(std::vector<WorkerLaunch> launches, SignalChannel& signals,
                         GroupOptions options)
    : launches_(std::move(launches)), signals_(signals), options_(std::move(options)) {}

WorkerGroup::~WorkerGroup() {
  // Only reached with running workers when run() threw: make sure none is left.
  for (auto& w : workers_) {
    if (w->running) {
      kill(-w->pid, SIGKILL);
      int status;
      while (waitpid(w->pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    for (int& fd : w->fds) {
      if (fd >= 0) close(fd);
    }
  }
}

bool WorkerGroup::any_running() const {
  for (const auto& w : workers_) {
    if (w->running) return true;
  }
  return false;
}

void WorkerGroup::start_all() {
  for (auto& launch : launches_) {
    auto w = std::make_unique<Worker>();
    w->launch = &launch;
    unlink(launch.error_file.c_str());  // a stale one would be mistaken for this run's
    w->output = std::make_unique<WorkerOutput>(launch.id.rank, launch.output);
    // A standby is already running, waiting in ddp::init(): tell it who it
    // is and take over its process. One that died meanwhile is replaced.
    SpawnedProcess p;
    if (launch.standby) {
      try {
        release_standby(*launch.standby, launch.vars);
        p = launch.standby->process;
        launch.standby->process = SpawnedProcess{};
      } catch (const SpawnError& e) {
        spdlog::warn("{}; starting a fresh worker instead", e.what());
        dismiss_standby(*launch.standby);
      }
      launch.standby.reset();
    }
    if (p.pid < 0) p = spawn_process(launch.spawn);
    w->pid = p.pid;
    w->fds[0] = p.stdout_fd;
    w->fds[1] = p.stderr_fd;
    w->running = true;
    w->beat_changed = std::chrono::steady_clock::now();
    workers_.push_back(std::move(w));
  }
}

void WorkerGroup::signal_running(int sig) {
  for (auto& w : workers_) {
    if (!w->running) continue;
    // The whole process group: the worker and whatever it started.
    kill(-w->pid, sig);
    if (sig == SIGTERM || sig == SIGKILL || is_stop_signal(sig)) w->term_sent = true;
  }
}

void WorkerGroup::begin_stop(int sig) {
  stopping_ = true;
  kill_at_ = std::chrono::steady_clock::now() + options_.stop_timeout;
  signal_running(sig);
}

void WorkerGroup::handle_signal(int sig) {
  if (sig == SIGCHLD) {
    reap();
    return;
  }
  if (!is_stop_signal(sig)) {  // SIGUSR1/2: pass on, nothing else
    signal_running(sig);
    return;
  }
  if (stop_signal_ != 0 || (stopping_ && sig == SIGINT)) {
    // Asked twice: stop waiting for a graceful exit.
    spdlog::warn("received {} again: killing the workers now", signal_name(sig));
    signal_running(SIGKILL);
    killed_ = true;
    return;
  }
  spdlog::warn("received {}: passing it on to {} worker(s)", signal_name(sig),
               std::count_if(workers_.begin(), workers_.end(), [](auto& w) { return w->running; }));
  stop_signal_ = sig;
  if (stopping_) {
    signal_running(sig);
  } else {
    begin_stop(sig);
  }
}

// Reads what the worker's pipes hold now; until_eof also closes them.
void WorkerGroup::drain(Worker& w, bool until_eof) {
  char buf[65536];
  for (int i = 0; i < 2; ++i) {
    int& fd = w.fds[i];
    while (fd >= 0) {
      ssize_t n = read(fd, buf, sizeof(buf));
      if (n > 0) {
        w.output->write(i == 0 ? kStdout : kStderr, std::string_view(buf, static_cast<size_t>(n)));
        continue;
      }
      if (n < 0 && errno == EINTR) continue;
      if (n == 0 || (n < 0 && errno != EAGAIN) || until_eof) {
        // End of stream, or the worker is gone and whatever still holds the
        // pipe open (a child it left behind) is not waited for.
        close(fd);
        fd = -1;
      }
      break;
    }
  }
}

void WorkerGroup::reap() {
  for (auto& w : workers_) {
    if (!w->running) continue;
    int status = 0;
    pid_t r = waitpid(w->pid, &status, WNOHANG);
    if (r != w->pid) continue;
    w->running = false;
    // Everything the worker wrote is in its pipes now.
    drain(*w, /*until_eof=*/true);
    w->output->finish();

    WorkerExit e;
    e.rank = w->launch->id.rank;
    e.local_rank = w->launch->id.local_rank;
    e.pid = w->pid;
    e.host = options_.host;
    e.time = std::chrono::system_clock::now();
    if (WIFSIGNALED(status)) {
      e.signal = WTERMSIG(status);
    } else {
      e.exit_code = WEXITSTATUS(status);
    }
    if (w->hung) continue;  // its failure was recorded when it was found hung
    if (w->term_sent) {
      ++result_.stopped_count;  // it ended because we stopped it, however it exited
      continue;
    }
    if (!e.failed()) continue;
    e.error_message = read_error_file(w->launch->error_file);
    const auto& tail = w->output->stderr_tail();
    e.stderr_tail.assign(tail.begin(), tail.end());
    if (!stopping_) {
      spdlog::warn("rank {} (pid {}) failed ({}); stopping the other workers", e.rank, e.pid,
                   describe_exit(e));
    }
    result_.failures.push_back(std::move(e));
  }
  // Stop the others only after this pass, so that workers that failed
  // together all count as failures rather than as stopped by us.
  if (!stopping_ && !result_.failures.empty()) begin_stop(SIGTERM);
}

// A worker whose heartbeat counter has not moved for hang_timeout (after it
// started beating: programs without worker_lib never do) is hung: it is
// killed at once (it may be stopped, or stuck) and the others are stopped.
void WorkerGroup::check_heartbeats() {
  if (!watching_heartbeats() || stopping_) return;
  const auto now = std::chrono::steady_clock::now();
  bool found = false;
  bool all_beating = true;
  for (auto& w : workers_) {
    if (!w->running) continue;
    const uint64_t beats = options_.heartbeats->read(w->launch->id.local_rank);
    if (beats == 0) all_beating = false;
    if (beats != w->beats) {
      w->beats = beats;
      w->beat_changed = now;
      continue;
    }
    const auto silent = now - w->beat_changed;
    if (beats == 0 || options_.hang_timeout.count() == 0 || silent < options_.hang_timeout) continue;
    WorkerExit e;
    e.rank = w->launch->id.rank;
    e.local_rank = w->launch->id.local_rank;
    e.pid = w->pid;
    e.host = options_.host;
    // Its failure dates from its last sign of life.
    e.time = std::chrono::system_clock::now() -
             std::chrono::duration_cast<std::chrono::system_clock::duration>(silent);
    char why[160];
    std::snprintf(why, sizeof(why), "hung: no heartbeat for %.1f s (--hang-timeout %.1f s)",
                  std::chrono::duration<double>(silent).count(),
                  std::chrono::duration<double>(options_.hang_timeout).count());
    e.reason = why;
    spdlog::warn("rank {} (pid {}) {}; killing it and stopping the other workers", e.rank, e.pid, e.reason);
    kill(-w->pid, SIGKILL);
    w->hung = true;
    result_.failures.push_back(std::move(e));
    found = true;
  }
  if (found) {
    begin_stop(SIGTERM);
    return;
  }
  if (all_beating && options_.on_all_beating) {
    auto ready = std::move(options_.on_all_beating);
    options_.on_all_beating = nullptr;
    ready();
  }
}

// Only while the workers run on their own: once they are stopping for any
// reason, outside news changes nothing.
void WorkerGroup::check_control() {
  if (stopping_ || !options_.on_control) return;
  if (auto why = options_.on_control()) {
    spdlog::warn("{}: stopping the workers for the next round", *why);
    round_stop_ = *why;
    begin_stop(SIGTERM);
  }
}

GroupResult WorkerGroup::run() {
  try {
    start_all();
  } catch (...) {
    begin_stop(SIGKILL);  // the destructor reaps them
    throw;
  }

  std::vector<pollfd> fds;
  std::vector<std::pair<Worker*, int>> owners;  // which worker/stream each pollfd is
  while (any_running()) {
    fds.clear();
    owners.clear();
    fds.push_back({signals_.fd(), POLLIN, 0});
    owners.push_back({nullptr, -1});
    const bool control = options_.control_fd >= 0 && options_.on_control;
    if (control) {
      fds.push_back({options_.control_fd, POLLIN, 0});
      owners.push_back({nullptr, -1});
    }
    const size_t first_worker = control ? 2 : 1;
    for (auto& w : workers_) {
      for (int i = 0; i < 2; ++i) {
        if (w->fds[i] >= 0) {
          fds.push_back({w->fds[i], POLLIN, 0});
          owners.push_back({w.get(), i});
        }
      }
    }
    int timeout_ms = -1;
    if (stopping_ && !killed_) {
      auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
          kill_at_ - std::chrono::steady_clock::now());
      timeout_ms = static_cast<int>(std::max<int64_t>(0, left.count()));
    } else if (watching_heartbeats() && !stopping_) {
      timeout_ms = static_cast<int>(options_.monitor_interval.count());
    }
    int n = poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) throw std::runtime_error("poll failed");

    for (size_t i = first_worker; i < fds.size(); ++i) {
      if (fds[i].revents) drain(*owners[i].first, /*until_eof=*/false);
    }
    if (fds[0].revents & POLLIN) {
      while (auto sig = signals_.next()) handle_signal(*sig);
    }
    if (control && (fds[1].revents & POLLIN)) check_control();
    check_heartbeats();
    if (stopping_ && !killed_ && std::chrono::steady_clock::now() >= kill_at_ && any_running()) {
      spdlog::warn("workers still running {} ms after being asked to stop: sending SIGKILL",
                   options_.stop_timeout.count());
      signal_running(SIGKILL);
      killed_ = true;
    }
  }

  if (stop_signal_ != 0) {
    result_.outcome = GroupResult::kStoppedBySignal;
    result_.signal = stop_signal_;
  } else if (!result_.failures.empty()) {
    result_.outcome = GroupResult::kWorkerFailed;
  } else if (!round_stop_.empty()) {
    result_.outcome = GroupResult::kStoppedForRound;
    result_.stop_reason = round_stop_;
  }
  return result_;
}

}  // namespace ddprun
