#include "agent/agent.h"

#include <errno.h>
#include <fcntl.h>
#include <poll.h>
#include <string.h>
#include <sys/eventfd.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <mutex>
#include <nlohmann/json.hpp>
#include <spdlog/spdlog.h>
#include <thread>

#include "agent/attempt.h"
#include "channel/event_log.h"

namespace ddprun {
namespace ev = channel::events;

Agent::Agent(AgentConfig config, RendezvousClient& rdzv, SignalChannel& signals,
             std::function<size_t()> nodes_in_rendezvous)
    : cfg_(std::move(config)),
      rdzv_(rdzv),
      signals_(signals),
      nodes_in_rendezvous_(std::move(nodes_in_rendezvous)),
      node_id_(cfg_.node_id.empty() ? cfg_.host + ":" + std::to_string(getpid()) : cfg_.node_id),
      events_(node_id_) {}

Agent::~Agent() {
  dismiss_standbys();
  for (int fd : duplicate_fd_) {
    if (fd >= 0) close(fd);
  }
}

int Agent::pending_stop_signal() {
  int stop = 0;
  while (auto sig = signals_.next()) {
    if (is_stop_signal(*sig) && stop == 0) stop = *sig;
  }
  return stop;
}

std::vector<WorkerLaunch> Agent::make_launches(int attempt, const JoinResult& joined, bool standbys) {
  const Assignment& a = joined.assignment;
  JobEnv job;
  job.role = cfg_.role;
  // Across nodes MASTER_ADDR is node 0's address as the others reach it.
  const bool remote_master = a.num_nodes > 1 && !a.master_addr.empty();
  job.master_addr = remote_master ? a.master_addr : cfg_.master_addr;
  job.master_port = remote_master && a.master_port > 0 ? a.master_port : cfg_.master_port;
  job.restart_count = a.restart_count;
  job.max_restarts = cfg_.rdzv.max_restarts;
  job.run_id = cfg_.run_id;
  job.rdzv_address = cfg_.rdzv_address;
  job.rdzv_auth = cfg_.rdzv_auth;
  job.round = a.round;
  job.nccl_id = joined.nccl_id;
  job.local_addr = cfg_.local_addr;
  job.local_ifname = cfg_.local_ifname;
  job.heartbeat_file = heartbeats_ ? heartbeats_->path() : "";
  job.python_startup_dir = python_startup_dir_;
  job.python_package_dir = python_package_dir_;
  job.agent_store = static_cast<bool>(fresh_key_space_);
  job.heals = heals_in(a) || heals_across(a);
  job.heal_generation = a.heal_generation;
  job.verify_every = cfg_.verify_every;
  job.progress_by_agent = a.first_global_rank == 0 &&
                          (progress_on_terminal_ || cfg_.progress_interval.count() > 0);
  if (!trace_node_dir_.empty()) {
    job.trace_node_dir = trace_node_dir_;
    job.attempt = attempt;
    job.trace_steps = cfg_.trace_steps;
    make_dirs(trace_node_dir_ + "/attempt_" + std::to_string(attempt));
  }

  std::vector<WorkerLaunch> launches;
  for (int lr = 0; lr < cfg_.nproc; ++lr) {
    WorkerLaunch l;
    l.id = WorkerIdentity{a.first_global_rank + lr, lr, cfg_.nproc, a.world_size, a.node_rank, a.num_nodes};
    const std::string dir = attempt_dir(attempt) + "/rank" + std::to_string(l.id.rank);
    if (!standbys) make_dirs(dir);  // a standby's guessed rank may never run here
    l.error_file = dir + "/error.json";
    // A tee'd stream stays on the console even when redirected (torchrun).
    const int redirect = cfg_.redirects.for_local_rank(lr) & ~cfg_.tee.for_local_rank(lr);
    l.output.console_mask = kBoth & ~redirect;
    const auto& shown = cfg_.console_local_ranks;
    if (!shown.empty() && std::find(shown.begin(), shown.end(), lr) == shown.end()) {
      l.output.console_mask = kNone;
    }
    if (!cfg_.line_prefix_template.empty()) {
      l.output.console_prefix =
          expand_line_prefix(cfg_.line_prefix_template, cfg_.role, l.id.rank, lr, cfg_.host);
    }
    for (int i = 0; i < 2; ++i) {
      l.output.duplicate_filters[i] = cfg_.duplicate_filters[i];
      l.output.duplicate_fd[i] = duplicate_fd_[i];
    }
    l.output.file_mask = wants_files_ ? kBoth : kNone;
    l.output.stdout_path = dir + "/stdout.log";
    l.output.stderr_path = dir + "/stderr.log";
    l.output.console_out = console_out_.get();
    l.output.console_err = console_err_;
    l.vars = worker_variables(l.id, job, l.error_file);
    if (cfg_.virtual_local_rank) apply_virtual_local_rank(l.vars, cfg_.base_env, lr);
    l.spawn.path = cfg_.program;
    l.spawn.argv = cfg_.argv;
    l.spawn.env = merge_environment(cfg_.base_env, l.vars, cfg_.nproc);
    if (cgroup_) l.spawn.cgroup = cgroup_->next_worker_dir();
    if (static_cast<size_t>(lr) < numa_.size()) {
      l.spawn.cpus = numa_[lr].cpus;
      l.spawn.mem_nodes = numa_[lr].mem_nodes;
    }
    launches.push_back(std::move(l));
  }
  return launches;
}

// Standbys start with the environment the next attempt will most likely
// have (what libraries read at load time, like OMP_NUM_THREADS, must be
// there from the start); the exact variables follow at release.
void Agent::spawn_standbys(int attempt, const JoinResult& guess, int count) {
  std::vector<WorkerLaunch> next = make_launches(attempt, guess, /*standbys=*/true);
  if (count >= 0 && count < static_cast<int>(next.size())) next.resize(static_cast<size_t>(count));
  for (auto& l : next) {
    if (!cfg_.standby_argv.empty()) l.spawn.argv = cfg_.standby_argv;
    try {
      standbys_.push_back(spawn_standby(l.spawn));
      standbys_.back().vars = l.vars;
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

// Joins the next round. The join runs on a thread of its own so that this
// loop keeps reading signals: a stop signal cancels the join at once.
JoinEnd Agent::join_round(const JoinIntent& intent, int attempt) {
  JoinEnd end;
  if (int sig = pending_stop_signal()) {
    end.signal = sig;
    return end;
  }
  JoinArgs args;
  args.job_id = cfg_.run_id;
  args.node = NodeSpec{node_id_,         cfg_.host,          cfg_.nproc,       cfg_.local_addr,
                       cfg_.node_rank,   cfg_.wants_nccl_id, cfg_.master_port, takes_over(), program_identity(),
                       cfg_.control_address, cfg_.probe_address};
  args.settings = cfg_.rdzv;
  args.intent = intent;
  args.lease = cfg_.lease_timeout;
  args.timeout = cfg_.join_timeout;
  if (cfg_.rdzv.max_nodes > 1) {
    spdlog::info("joining job {} at {} as {} ({} node(s) needed, up to {})", cfg_.run_id,
                 cfg_.rdzv_address, node_id_, cfg_.rdzv.min_nodes, cfg_.rdzv.max_nodes);
  }

  CallCanceller canceller;
  const int done_fd = eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (done_fd < 0) throw std::runtime_error("eventfd failed for the join");
  std::thread joiner([&] {
    try {
      end.joined = rdzv_.join(args, &canceller);
    } catch (const RendezvousCallError& e) {
      end.error = e.what();
      end.job_ended = e.job_ended();
    } catch (const std::exception& e) {
      end.error = e.what();
    }
    const uint64_t one = 1;
    [[maybe_unused]] ssize_t n = write(done_fd, &one, sizeof(one));
  });
  int stop = 0;
  bool told_lost = false;
  std::optional<NodeView> ended;  // the job ended while this node joined
  auto tell_lost = [&](const LeaseStatus& st) {
    if (!st.contact_lost || told_lost) return;
    const std::string state = control_plane_state();
    if (state.empty()) {
      spdlog::warn("no answer from the rendezvous at {} ({}); waiting for it up to --rdzv-conf join_timeout={} s",
                   cfg_.rdzv_address, st.error, cfg_.join_timeout.count() / 1000.0);
    } else {
      spdlog::warn("no answer from the job's rendezvous: {}; waiting for it up to --rdzv-conf join_timeout={} s",
                   state, cfg_.join_timeout.count() / 1000.0);
    }
    told_lost = true;
  };
  if (lease_) tell_lost(lease_->peek());
  // A node back for another round asks, every keep-alive interval, whether
  // it may still act for the job: one cut off from its control plane's
  // majority learns so only while it waits here, and leaves.
  const bool may_be_fenced = cfg_.fenced && intent.last_round >= 0;
  const int poll_ms = may_be_fenced ? static_cast<int>(std::max<int64_t>(cfg_.keep_alive_interval.count(), 10)) : -1;
  while (true) {
    // The lease keeper's news too: a rendezvous that went away (its host
    // died) is said once; the join waits for it to come back (a restarted
    // `ddprun rendezvous` lets the job form again) until join_timeout.
    pollfd fds[3] = {{signals_.fd(), POLLIN, 0}, {done_fd, POLLIN, 0},
                     {lease_ ? lease_->fd() : -1, POLLIN, 0}};
    if (poll(fds, 3, poll_ms) < 0 && errno != EINTR) break;
    if (may_be_fenced && end.fenced.empty()) {
      end.fenced = cfg_.fenced();
      if (!end.fenced.empty()) canceller.cancel();
    }
    if (fds[2].revents & POLLIN) {
      const LeaseStatus st = lease_->take();
      tell_lost(st);
      if (st.view) warm_up_spare(attempt, *st.view);
      if (st.view && st.view->phase != JobPhase::kActive && !ended) {
        // Over while this node waited (its join may be stuck on a link that
        // was cut): nothing to join any more.
        ended = st.view;
        canceller.cancel();
      }
    }
    if (fds[0].revents & POLLIN) {
      while (auto sig = signals_.next()) {
        if (*sig == SIGTSTP) suspend_self();  // no workers to stop first
        if (!is_stop_signal(*sig) || stop != 0) continue;
        stop = *sig;
        spdlog::warn("received {} while joining: giving up the join", signal_name(stop));
        canceller.cancel();
      }
    }
    if (fds[1].revents & POLLIN) break;
  }
  joiner.join();
  close(done_fd);
  if (end.joined) end.fenced.clear();  // it got through after all
  const bool unanswered = end.error.find("no answer within") != std::string::npos ||
                          end.error.find("has no leader now") != std::string::npos;
  if (!end.joined && unanswered) {
    // The error names this agent's own service, which only relays to the
    // control plane's leader: say what the control plane knows instead.
    if (const std::string state = control_plane_state(); !state.empty()) {
      char waited[32];
      std::snprintf(waited, sizeof(waited), "%.1f", cfg_.join_timeout.count() / 1000.0);
      end.error = std::string("no answer from the job's rendezvous within ") + waited + " s: " + state +
                  "; to wait longer raise --rdzv-conf join_timeout=SECONDS";
    }
  }
  if (lease_) {
    lease_->reset();  // news from before this join is stale
    if (end.joined) lease_->hold();
  }
  if (stop != 0) {
    end.signal = stop;
    if (end.joined) end.joined.reset();  // joined at the last moment: leave all the same
  } else if (ended && !end.joined) {
    end.job_ended = true;
    end.error = "rendezvous: " + ended->detail + "; nothing more to join";
  }
  return end;
}

GroupResult Agent::run_workers(int attempt, const JoinResult& joined, Lifecycle& life) {
  AttemptHost& node = *this;
  return Attempt(node, attempt, joined, life).run();
}

void Agent::note_control_plane(int attempt, const NodeView& view) {
  // A later term only (an older view may arrive late).
  if (view.control_node.empty() || view.control_term <= control_term_) return;
  nlohmann::json e = {{"attempt", attempt}, {"node", view.control_node}, {"term", view.control_term}};
  if (!control_node_.empty()) {
    ++control_takeovers_;
    spdlog::warn("node {} took over the job's rendezvous (term {}; node {} served term {})", view.control_node,
                 view.control_term, control_node_, control_term_);
    e["previous_node"] = control_node_;
    e["previous_term"] = control_term_;
  } else {
    spdlog::info("node {} serves the job's rendezvous (term {})", view.control_node, view.control_term);
  }
  e["takeovers"] = control_takeovers_;
  events_.write(ev::kControlPlane, std::move(e));
  control_node_ = view.control_node;
  control_term_ = view.control_term;
}

std::string Agent::leave(LeaveKind kind, const std::string& message, std::optional<int64_t> round) {
  // Before the Leave: the host merges the trace once every node has left
  // (and answers keep-alives until then).
  write_trace_clock(cfg_.lease_timeout);
  // A control plane that cannot be reached (no leader, etcd gone) will not
  // hear it anyway: a second's try, not five.
  const auto patience = control_plane_state().empty() ? std::chrono::seconds(5) : std::chrono::seconds(1);
  try {
    rdzv_.leave(cfg_.run_id, node_id_, kind, message, patience, kind == LeaveKind::kSucceeded ? round : std::nullopt);
  } catch (const RendezvousCallError& e) {
    if (kind == LeaveKind::kSucceeded && e.refused()) return e.what();
    // The rendezvous may be gone (its host finished or died): nothing to tell.
    spdlog::debug("{}", e.what());
  } catch (const std::exception& e) {
    spdlog::debug("{}", e.what());
  }
  return "";
}

// The agent that hosts the rendezvous stays until every node has left (or
// its lease ran out), so a node that finishes first does not pull the
// rendezvous from under the others. Signals end the wait.
void Agent::await_others(LeaveKind how_this_node_left) {
  if (!nodes_in_rendezvous_) return;
  // After a success the others finish their last steps; after a failure
  // they only need to hear of it (one keep-alive) and leave. Nodes lost in
  // the job's last moments count too, for two leases (a flapping link).
  const auto patience = how_this_node_left == LeaveKind::kSucceeded
                            ? cfg_.join_timeout
                            : std::max(2 * cfg_.lease_timeout, std::chrono::milliseconds(1000));
  const auto deadline = std::chrono::steady_clock::now() + patience;
  size_t announced = 0;
  while (true) {
    const size_t left = nodes_in_rendezvous_();
    if (left == 0) return;
    if (left != announced) {
      spdlog::info("waiting for {} other node(s) to leave before closing the rendezvous", left);
      announced = left;
    }
    if (std::chrono::steady_clock::now() >= deadline) {
      spdlog::warn("{} node(s) still in the job after {} s; closing the rendezvous", left,
                   patience.count() / 1000.0);
      return;
    }
    pollfd fd{signals_.fd(), POLLIN, 0};
    if (poll(&fd, 1, static_cast<int>(cfg_.monitor_interval.count())) > 0) {
      if (pending_stop_signal() != 0) return;
    }
  }
}

int Agent::run() {
  try {
    prepare_files();
    contain_processes();
    open_consoles();
  } catch (...) {
    remove_temp_files();  // a full TMPDIR keeps no empty folder of ours
    throw;
  }
  start_progress_display();
  events_.write(ev::kJobStart, {{"run_id", cfg_.run_id}, {"nproc", cfg_.nproc}, {"program", cfg_.program}});
  std::string end_detail;
  if (cfg_.lease_timeout.count() > 0) {
    lease_ = std::make_unique<LeaseKeeper>(
        rdzv_, LeaseOptions{cfg_.run_id, node_id_, cfg_.keep_alive_interval, cfg_.lease_timeout,
                            cfg_.on_control_candidates, cfg_.takeover_allowance});
  }
  if (heartbeats_) {
    status_ = std::make_unique<StatusReporter>(rdzv_, *heartbeats_,
                                               StatusReporterOptions{cfg_.run_id, node_id_});
  }
  Lifecycle life(LifecycleOptions{cfg_.rdzv.max_restarts, cfg_.hosts_rendezvous});
  std::optional<JoinResult> joined;
  int attempt = 0;
  int exit_code = kExitWorkerFailed;
  NodeCommand act = life.start();
  try {
    while (act.kind != NodeCommand::kExit) {
      switch (act.kind) {
        case NodeCommand::kJoin: {
          JoinEnd end;
          end.fenced = joined && cfg_.fenced ? cfg_.fenced() : "";
          if (end.fenced.empty()) end = join_round(act.intent, attempt);
          if (!end.fenced.empty() && end.signal == 0) {
            spdlog::error("{}: the job goes on without this node, which leaves", end.fenced);
            end_detail = "fenced: " + end.fenced;
            act = NodeCommand{};
            act.kind = NodeCommand::kExit;
            act.exit_code = kExitWorkerFailed;
            break;
          }
          if (end.joined) joined = end.joined;
          if (!end.joined && end.signal == 0) spdlog::error("{}", end.error);
          act = life.on_join(end);
          break;
        }
        case NodeCommand::kRunWorkers:
          act = life.on_group_end(run_workers(attempt++, *joined, life));
          break;
        case NodeCommand::kLeave:
          end_detail = act.message;
          if (act.leave == LeaveKind::kFailed && cfg_.rdzv.max_nodes > 1) {
            spdlog::error("this node fails the job: {}", act.message);
          }
          if (const std::string refused = leave(act.leave, act.message, joined ? std::optional(joined->assignment.round) : std::nullopt);
              !refused.empty()) {
            act = life.on_success_refused("its workers finished, but the job did not (" + refused + ")");
            break;
          }
          act = life.on_left();
          break;
        case NodeCommand::kAwaitOthers:
          await_others(act.leave);
          act = life.on_others_gone();
          break;
        case NodeCommand::kExit:
          break;
      }
    }
    exit_code = act.exit_code;
    if (!act.message.empty()) end_detail = act.message;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    end_detail = e.what();
    leave(LeaveKind::kFailed, e.what(), std::nullopt);
    exit_code = kExitWorkerFailed;
  }

  stop_progress_display();
  events_.write(ev::kJobEnd, {{"exit_code", exit_code}, {"detail", end_detail}});
  // Lost log lines do not change the exit code (the job did what it did),
  // but are never lost silently.
  write_all(cfg_.console_err_fd, format_log_losses(log_losses_));
  write_trace_clock(std::chrono::milliseconds(0));
  status_.reset();
  lease_.reset();
  dismiss_standbys();
  cgroup_.reset();  // kills whatever is left in the job's cgroup
  heartbeats_.reset();
  remove_temp_files();
  return exit_code;
}

}  // namespace ddprun
