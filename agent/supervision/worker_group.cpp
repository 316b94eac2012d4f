#include "agent/supervision/worker_group.h"
#include "agent/supervision/worker_group_worker.h"

#include <errno.h>
#include <algorithm>
#include <poll.h>
#include <signal.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>

#include "agent/processes/job_cgroup.h"
#include "agent/processes/shm_cleanup.h"
#include "channel/env_names.h"
#include "channel/shm_names.h"
#include "channel/stack_dump.h"
#include "channel/event_log.h"

#include <spdlog/spdlog.h>

namespace ddprun {

namespace {

// A poll that returns later than its timeout by more than this is a stall
// of the agent (group_event::OwnStall).
constexpr auto kLateWake = std::chrono::milliseconds(100);

// A failed worker's exit in words: why it was killed (hung), else its
// exit code or signal.
std::string failure_of(const WorkerExit& e) { return e.reason.empty() ? describe_exit(e) : e.reason; }

}  // namespace


WorkerGroup::WorkerGroup(std::vector<WorkerLaunch> launches, SignalChannel& signals,
                         GroupOptions options)
    : launches_(std::move(launches)), signals_(signals), options_(std::move(options)) {}

WorkerGroup::~WorkerGroup() {
  // Only reached with running workers when run() threw: make sure none is left.
  for (size_t i = 0; i < workers_.size(); ++i) {
    auto& w = workers_[i];
    if (policy_ && policy_->alive(static_cast<int>(i))) {
      kill(-w->pid, SIGKILL);
      int status;
      while (waitpid(w->pid, &status, 0) < 0 && errno == EINTR) {
      }
    }
    kill_cgroup(w->cgroup);
    for (int& fd : w->fds) {
      if (fd >= 0) close(fd);
    }
  }
}

void WorkerGroup::start_all() {
  workers_.clear();
  for (size_t i = 0; i < launches_.size(); ++i) {
    workers_.push_back(std::make_unique<Worker>());
    workers_.back()->launch = &launches_[i];
    start(i, /*append_logs=*/false, {});
  }
}

bool WorkerGroup::start(size_t i, bool append_logs, const std::map<std::string, std::string>& extra_vars) {
  Worker& w = *workers_[i];
  WorkerLaunch& launch = launches_[i];
  unlink(launch.error_file.c_str());  // a stale one would be mistaken for this run's
  w.output = std::make_unique<WorkerOutput>(launch.id.rank, launch.output, append_logs);
  std::map<std::string, std::string> vars = launch.vars;
  SpawnRequest spawn = launch.spawn;
  for (const auto& [k, v] : extra_vars) {
    vars[k] = v;
    spawn.env.push_back(k + "=" + v);
  }
  // A standby is already running, waiting in ddp::init(): tell it who it
  // is and take over its process. One that died meanwhile is replaced.
  SpawnedProcess p;
  bool from_standby = false;
  if (launch.standby) {
    try {
      release_standby(*launch.standby, vars);
      p = launch.standby->process;
      launch.standby->process = SpawnedProcess{};
      from_standby = true;
    } catch (const SpawnError& e) {
      spdlog::warn("{}; starting a fresh worker instead", e.what());
      dismiss_standby(*launch.standby);
    }
    launch.standby.reset();
  }
  if (p.pid < 0) p = spawn_process(spawn);
  w.pid = p.pid;
  w.fds[0] = p.stdout_fd;
  w.fds[1] = p.stderr_fd;
  w.cgroup = p.cgroup;
  w.exited_before_stop = false;
  if (options_.events) {
    nlohmann::json f = {{"attempt", options_.attempt}, {"rank", launch.id.rank},
                        {"local_rank", launch.id.local_rank}, {"pid", p.pid}, {"standby", from_standby}};
    if (!extra_vars.empty()) f["heal_generation"] = policy_->generation();
    options_.events->write(channel::events::kSpawn, std::move(f));
  }
  return from_standby;
}

void WorkerGroup::execute(const std::vector<GroupCommand>& commands) {
  for (const auto& c : commands) {
    // A hung worker: every worker's stacks first, then the kill and what
    // follows it (stopping the others would lose their stacks). While the
    // stacks are asked for (3 s at most) every command waits its turn.
    if ((c.kind == GroupCommand::kKillWorker && !c.straggler && !c.apart) || (collecting_ && collecting_for_hang_)) {
      deferred_.push_back(c);
      if (!collecting_) start_stack_collection(/*for_hang=*/true);
      collecting_for_hang_ = true;  // one asked for already serves the hang
      continue;
    }
    run_command(c);
  }
}

void WorkerGroup::run_command(const GroupCommand& c) {
  switch (c.kind) {
    case GroupCommand::kSignalRunning:
      // Workers that exited since the last reap failed (or not) before
      // this signal could reach them: their exit is their own.
      for (size_t i = 0; i < workers_.size(); ++i) {
        siginfo_t info{};
        if (policy_->alive(static_cast<int>(i)) &&
            waitid(P_PID, static_cast<id_t>(workers_[i]->pid), &info,
                   WEXITED | WNOHANG | WNOWAIT) == 0 &&
            info.si_pid == workers_[i]->pid) {
          workers_[i]->exited_before_stop = true;
        }
      }
      for (size_t i = 0; i < workers_.size(); ++i) {
        if (!options_.heartbeats || !policy_->alive(static_cast<int>(i))) continue;
        const int lr = workers_[i]->launch->id.local_rank;
        if (c.agent_decided) options_.heartbeats->set_stop_reason(lr, channel::kAgentDecided);
        // A worker that waits for a heal generation gives up: none comes.
        if (policy_->stopping()) options_.heartbeats->set_no_heal_coming(lr, true);
      }
      for (size_t i = 0; i < workers_.size(); ++i) {
        // The whole process group: the worker and whatever it started.
        const bool skip = std::find(c.except.begin(), c.except.end(), static_cast<int>(i)) != c.except.end();
        if (policy_->alive(static_cast<int>(i)) && !skip) kill(-workers_[i]->pid, c.sig);
      }
      break;
    case GroupCommand::kKillWorker:
      if (c.straggler || c.apart) {
        killed_hung_[c.worker] = c.why;  // its exit is a heal's, told when it is reaped
        spdlog::warn("rank {} (pid {}) is {}; killing it and replacing it while the others go on ({})",
                     workers_[c.worker]->launch->id.rank, workers_[c.worker]->pid, c.why,
                     c.straggler ? "--straggler-action replace" : "--verify-every");
      } else {
        record_hung(c, hang_verdict_);
      }
      if (policy_->alive(c.worker)) kill(-workers_[c.worker]->pid, SIGKILL);
      break;
    case GroupCommand::kReplaceWorker:
      replace(c.worker, c.generation);
      break;
    case GroupCommand::kAskGeneration: {
      std::string why;
      for (const auto& [i, e] : awaiting_) {
        why += (why.empty() ? "" : "; ") + ("rank " + std::to_string(e.rank) + " failed (" +
                                           failure_of(e) + ")");
      }
      if (options_.host) options_.host->ask_heal(why);
      break;
    }
    case GroupCommand::kSuspendSelf:
      suspend_self();
      break;
    case GroupCommand::kNote: {
      const auto& id = workers_[c.worker]->launch->id;
      spdlog::warn("rank {} (pid {}) {}", id.rank, workers_[c.worker]->pid, c.why);
      if (options_.events && c.silent.count() > 0) {
        options_.events->write(channel::events::kSlow,
                               {{"attempt", options_.attempt}, {"rank", id.rank}, {"local_rank", id.local_rank},
                                {"silent_s", c.silent.count() / 1000.0}, {"detail", c.why}});
      }
      break;
    }
    case GroupCommand::kWarmStandbys:
      if (options_.warm_standbys && options_.host) {
        options_.warm_standbys = false;  // once
        options_.host->on_all_beating();
      }
      break;
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

// What the policy needs to judge whose failure an exit was (GroupPolicy's
// evidence rule, group_event::Exit): the code or signal, whether it had
// exited before the stop signal was sent, when its error file was written
// (on the steady clock), and when it was reaped.
group_event::Exit WorkerGroup::exit_of(int i, const WorkerExit& e) const {
  const Worker& w = *workers_[i];
  group_event::Exit x;
  x.worker = i;
  x.exit_code = e.exit_code;
  x.signal = e.signal;
  x.exited_before_stop = w.exited_before_stop;
  x.reaped = std::chrono::steady_clock::now();
  struct stat st;
  if (stat(w.launch->error_file.c_str(), &st) == 0) {
    const auto written = std::chrono::system_clock::time_point(
        std::chrono::duration_cast<std::chrono::system_clock::duration>(
            std::chrono::seconds(st.st_mtim.tv_sec) + std::chrono::nanoseconds(st.st_mtim.tv_nsec)));
    const auto ago = std::chrono::system_clock::now() - written;  // the file's age, on the steady clock
    x.error_written = *x.reaped - std::chrono::duration_cast<std::chrono::steady_clock::duration>(ago);
  }
  return x;
}

void WorkerGroup::reap() {
  // The heal words as the workers said them last, before any exit counts
  // (and before a verdict of replicas apart, which may replace one).
  group_event::Exits exits;
  exits.heal = heal_words();
  policy_->step(group_event::HealRead{exits.heal}, std::chrono::steady_clock::now());
  check_replicas();  // a verdict of replicas apart, before the exits it ends in
  std::vector<std::pair<int, WorkerExit>> seen;  // the exits, in the event's order
  for (size_t i = 0; i < workers_.size(); ++i) {
    Worker& w = *workers_[i];
    if (!policy_->alive(static_cast<int>(i))) continue;
    int status = 0;
    pid_t r = waitpid(w.pid, &status, WNOHANG);
    if (r != w.pid) continue;
    // Whatever it started and left running (in any process group or
    // session) ends with it, and so does a shared-memory segment it made
    // but died before unlinking.
    kill_cgroup(w.cgroup);
    if (int n = remove_worker_segments(w.pid, channel::kShmDir); n > 0) {
      spdlog::debug("removed {} shared-memory segment(s) worker pid {} left in {}", n, w.pid, channel::kShmDir);
    }
    // Everything the worker wrote is in its pipes now.
    drain(w, /*until_eof=*/true);
    w.output->finish();

    WorkerExit e;
    e.rank = w.launch->id.rank;
    e.local_rank = w.launch->id.local_rank;
    e.pid = w.pid;
    e.host = options_.host_name;
    e.time = std::chrono::system_clock::now();
    if (WIFSIGNALED(status)) {
      e.signal = WTERMSIG(status);
    } else {
      e.exit_code = WEXITSTATUS(status);
    }
    if (options_.events) {
      nlohmann::json f = {{"attempt", options_.attempt}, {"rank", e.rank},
                          {"local_rank", e.local_rank}, {"pid", e.pid}};
      if (e.signal != 0) {
        f["signal"] = signal_name(e.signal);
      } else {
        f["exit_code"] = e.exit_code;
      }
      options_.events->write(channel::events::kExit, std::move(f));
    }
    if (auto hung = killed_hung_.find(static_cast<int>(i)); hung != killed_hung_.end()) {
      e.reason = hung->second;
      killed_hung_.erase(hung);
    }
    exits.exits.push_back(exit_of(static_cast<int>(i), e));
    seen.emplace_back(static_cast<int>(i), std::move(e));
  }
  // How each exit counts, then what they mean together (the first failure
  // stops the others; a worker that may heal is replaced).
  const bool was_stopping = policy_->stopping();
  const GroupStep step = policy_->step(exits, std::chrono::steady_clock::now());
  const auto& commands = step.commands;
  std::vector<std::pair<int, WorkerExit>> heal_pending;
  for (size_t k = 0; k < seen.size(); ++k) {
    auto& [i, e] = seen[k];
    const Worker& w = *workers_[i];
    const WorkerEnd end = step.ends[k];
    if (end != WorkerEnd::kFailed && end != WorkerEnd::kHealed) continue;
    e.error_message = read_error_file(w.launch->error_file);
    const auto& tail = w.output->stderr_tail();
    e.stderr_tail.assign(tail.begin(), tail.end());
    if (end == WorkerEnd::kHealed) {
      heal_pending.emplace_back(i, std::move(e));
      continue;
    }
    if (!was_stopping && policy_->heals_ran_out(i)) {
      spdlog::warn("rank {} (pid {}) failed ({}); its heals ran out: it was replaced {} time(s), all that "
                   "--max-heals {} allows per rank (raise --max-heals to replace it again); stopping the other "
                   "workers",
                   e.rank, e.pid, describe_exit(e), policy_->heals_of(i), options_.max_heals);
    } else if (!was_stopping) {
      spdlog::warn("rank {} (pid {}) failed ({}); stopping the other workers", e.rank, e.pid,
                   describe_exit(e));
    }
    result_.failures.push_back(std::move(e));
  }
  // The heals the policy agreed to are told; the others became failures.
  for (auto& [i, e] : heal_pending) {
    const bool replaced = replaces(commands, i);
    if (policy_->awaiting_generation(i)) {
      spdlog::warn("rank {} (pid {}) failed ({}); asking the rendezvous for a heal generation to replace it in "
                   "while the other workers go on",
                   e.rank, e.pid, failure_of(e));
      awaiting_.emplace_back(i, std::move(e));
    } else if (replaced) {
      spdlog::warn("rank {} (pid {}) failed ({}); replacing it while the other workers go on (heal {} of the "
                   "job; --max-heals {} per rank)",
                   e.rank, e.pid, failure_of(e), policy_->heal_count(),
                   options_.max_heals);
      record_heal(i, std::move(e));
    } else {
      spdlog::warn("rank {} (pid {}) failed ({}); stopping the other workers", e.rank, e.pid, describe_exit(e));
      result_.failures.push_back(std::move(e));
    }
  }
  execute(commands);
}

void WorkerGroup::drain_consoles(std::chrono::milliseconds limit) {
  using Clock = std::chrono::steady_clock;
  const auto deadline = Clock::now() + limit;
  auto last_progress = Clock::now();
  auto backlog = [this] {
    size_t n = 0;
    for (auto& w : workers_) n += w->output->console_backlog();
    return n;
  };
  size_t before = backlog();
  while (before > 0 && Clock::now() < deadline) {
    std::vector<pollfd> fds;
    for (auto& w : workers_) {
      for (Console* c : w->output->waiting_consoles()) fds.push_back({c->fd(), POLLOUT, 0});
    }
    // Writable by poll's measure (4 KiB free) is not always by ours (a pipe
    // keeps room for ddprun's own lines), so each round waits a little
    // whatever poll says: this paces the retries, it orders nothing.
    if (poll(fds.data(), fds.size(), 20) < 0 && errno != EINTR) return;
    for (auto& w : workers_) w->output->flush_console();
    const size_t after = backlog();
    if (after < before) {
      last_progress = Clock::now();
    } else if (Clock::now() - last_progress >= std::chrono::seconds(1)) {
      return;  // a second without the console taking anything: it is not reading
    } else {
      poll(nullptr, 0, 20);
    }
    before = after;
  }
}

// News from the rendezvous (only while the workers run on their own: once
// they are stopping for any reason, it changes nothing).
void WorkerGroup::check_control() {
  if (policy_->stopping() || !options_.host) return;
  if (auto why = options_.host->on_control()) stop_for(*why, std::chrono::steady_clock::now());
}

void WorkerGroup::stop_for(const std::string& why, std::chrono::steady_clock::time_point now) {
  spdlog::warn("{}: stopping the workers for the next round", why);
  execute(policy_->step(group_event::RoundStop{why}, now).commands);
}

// The agent's look at the workers' progress, on the monitor's beat.
void WorkerGroup::check_monitor() {
  if (!options_.host) return;
  const auto now = std::chrono::steady_clock::now();
  if (now < next_monitor_) return;
  next_monitor_ = now + options_.monitor_interval;
  // The heal words, for all_heal_in_place(), which the agent reports.
  policy_->step(group_event::HealRead{heal_words()}, now);
  check_stragglers();
  check_replicas();
  options_.host->on_monitor();
  if (policy_->stopping()) return;
  if (auto why = options_.host->stop_now()) stop_for(*why, now);
}

// How long poll may wait: the policy's limit, and the monitor's next beat.
static int with_monitor(int policy_ms, bool monitoring, std::chrono::steady_clock::time_point next) {
  if (!monitoring) return policy_ms;
  const auto left = std::chrono::ceil<std::chrono::milliseconds>(next - std::chrono::steady_clock::now());
  const int ms = static_cast<int>(std::max<int64_t>(0, left.count()));
  return policy_ms < 0 ? ms : std::min(policy_ms, ms);
}

GroupResult WorkerGroup::run() {
  GroupPolicyOptions po;
  po.stop_timeout = options_.stop_timeout;
  po.hang_timeout = options_.hang_timeout;
  po.learned_hang = options_.learned_hang;
  po.monitor_interval = options_.monitor_interval;
  po.heartbeats = options_.heartbeats != nullptr;
  po.wants_standbys = options_.warm_standbys && options_.host;
  po.standby_warmup = options_.standby_warmup;
  po.max_heals = options_.heartbeats ? options_.max_heals : 0;
  po.generations_from_rendezvous = options_.heals_named_by_rendezvous && options_.host;
  policy_ = std::make_unique<GroupPolicy>(static_cast<int>(launches_.size()), po,
                                          std::chrono::steady_clock::now());
  policy_->step(group_event::WholeJob{launches_.empty() || launches_[0].id.group_world_size == 1},
                std::chrono::steady_clock::now());
  start_all();  // on a failure to start, the destructor kills those started

  std::vector<pollfd> fds;
  std::vector<std::pair<Worker*, int>> owners;  // which worker/stream each pollfd is
  while (policy_->any_alive()) {
    fds.clear();
    owners.clear();
    fds.push_back({signals_.fd(), POLLIN, 0});
    owners.push_back({nullptr, -1});
    const bool control = options_.control_fd >= 0 && options_.host;
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
    // Consoles that have lines waiting: woken when they take more.
    const size_t first_console = fds.size();
    for (auto& w : workers_) {
      for (Console* c : w->output->waiting_consoles()) fds.push_back({c->fd(), POLLOUT, 0});
    }
    int timeout_ms = with_monitor(policy_->poll_timeout_ms(std::chrono::steady_clock::now()),
                                  options_.host != nullptr, next_monitor_);
    // Workers answering for their stacks are looked at every 10 ms.
    if (collecting_) timeout_ms = timeout_ms < 0 ? 10 : std::min(timeout_ms, 10);
    const auto asked = std::chrono::steady_clock::now() + std::chrono::milliseconds(std::max(timeout_ms, 0));
    int n = poll(fds.data(), fds.size(), timeout_ms);
    if (n < 0 && errno != EINTR) throw std::runtime_error("poll failed");
    // Woke well after it asked to: this agent was not running meanwhile.
    if (const auto woke = std::chrono::steady_clock::now(); timeout_ms >= 0 && woke > asked + kLateWake) {
      policy_->step(group_event::OwnStall{std::chrono::duration_cast<std::chrono::milliseconds>(woke - asked)}, woke);
    }

    for (size_t i = first_worker; i < first_console; ++i) {
      if (fds[i].revents) drain(*owners[i].first, /*until_eof=*/false);
    }
    if (first_console < fds.size()) {
      for (auto& w : workers_) w->output->flush_console();
    }
    if (fds[0].revents & POLLIN) {
      while (auto sig = signals_.next()) {
        if (*sig == SIGCHLD) {
          reap();
          continue;
        }
        if (*sig == channel::stack_dump_signal()) {
          if (!collecting_) start_stack_collection(/*for_hang=*/false);
          continue;
        }
        if (*sig == SIGTSTP) {
          spdlog::info("received SIGTSTP: stopping {} worker(s), then ddprun (fg or SIGCONT continues)",
                       policy_->alive_count());
        } else if (*sig == SIGCONT) {
          spdlog::info("continued: continuing {} worker(s)", policy_->alive_count());
        }
        if (is_stop_signal(*sig)) {
          const bool again = policy_->stop_requested_by_signal() ||
                             (policy_->stopping() && *sig == SIGINT);
          if (again) {
            spdlog::warn("received {} again: killing the workers now", signal_name(*sig));
          } else {
            spdlog::warn("received {}: passing it on to {} worker(s)", signal_name(*sig),
                         policy_->alive_count());
          }
        }
        execute(policy_->step(group_event::Signal{*sig}, std::chrono::steady_clock::now()).commands);
      }
    }
    // The answer may come with any view: it is looked at each time round
    // (the control fd wakes the loop, then on_control consumes its news).
    check_heal_answer();
    if (control && (fds[1].revents & POLLIN)) check_control();
    check_heal_answer();
    check_heartbeats();
    check_stack_collection();
    check_monitor();
    auto ticked = policy_->step(group_event::Tick{}, std::chrono::steady_clock::now()).commands;
    if (!ticked.empty() && ticked.front().kind == GroupCommand::kSignalRunning) {
      spdlog::warn("workers still running {} ms after being asked to stop: sending SIGKILL",
                   options_.stop_timeout.count());
    }
    execute(ticked);
  }

  // Every worker exited while their stacks were asked for: what they gave.
  check_stack_collection(/*now=*/true);
  // Workers that waited for a heal generation when the group stopped failed.
  for (auto& [i, e] : awaiting_) result_.failures.push_back(std::move(e));
  awaiting_.clear();
  // A group that failed while a heal was under way (its replacement had not
  // taken the state yet: the survivors failed outside a step, say) failed
  // of that worker's failure too, and it came first: the root cause is
  // among the failures, not among the heals.
  if (policy_->outcome() == GroupPolicy::kWorkerFailed) {
    std::vector<size_t> unfinished;
    for (const auto& [i, at] : latest_heal_) {
      if (policy_->joining(i)) unfinished.push_back(at);
    }
    std::sort(unfinished.rbegin(), unfinished.rend());
    for (size_t at : unfinished) {
      result_.failures.push_back(std::move(result_.healed[at]));
      result_.healed.erase(result_.healed.begin() + static_cast<std::ptrdiff_t>(at));
    }
  }

  // The workers are done. A console that reads slowly gets the rest; one
  // that does not read at all loses it.
  drain_consoles(std::chrono::seconds(10));
  for (auto& w : workers_) {
    if (const uint64_t dropped = w->output->abandon_console()) {
      spdlog::warn("rank {}: {} line(s) of output dropped: the console was not reading",
                   w->launch->id.rank, dropped);
    }
    for (auto& loss : w->output->log_losses()) result_.log_losses.push_back(std::move(loss));
  }

  result_.outcome = policy_->outcome();
  if (result_.outcome == GroupOutcome::kStoppedBySignal) result_.signal = policy_->stop_signal();
  if (result_.outcome == GroupOutcome::kStoppedForRound) result_.why = policy_->stop_reason();
  result_.stopped_count = policy_->stopped_count();
  return result_;
}

}  // namespace ddprun
