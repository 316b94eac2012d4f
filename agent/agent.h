// The per-node agent: joins a rendezvous round, runs the node's workers as a
// WorkerGroup, holds the node's lease, and follows the job from round to
// round (restarts after failures, lost nodes, late joiners) until it ends.
// What to do next is decided by the Lifecycle (pure policy); this class only
// carries its actions out. With --standby it keeps a warm set of workers
// ready for the next restart.
#pragma once

#include <algorithm>
#include <functional>
#include <utility>
#include <memory>
#include <vector>

#include "agent/agent_config.h"
#include "agent/attempt_host.h"
#include "agent/processes/numa.h"
#include "agent/output/console.h"
#include "agent/output/event_log.h"
#include "agent/output/progress.h"
#include "agent/health/heartbeat_table.h"
#include "agent/processes/job_cgroup.h"
#include "agent/lease_keeper.h"
#include "agent/lifecycle.h"
#include "agent/base/signals.h"
#include "agent/processes/standby.h"
#include "agent/health/status_reporter.h"
#include "agent/job_metrics.h"
#include "agent/supervision/worker_group.h"
#include "rendezvous/client/client.h"

namespace ddprun {

// Exit codes of ddprun.
constexpr int kExitOk = 0;
constexpr int kExitWorkerFailed = 1;
constexpr int kExitUsage = 2;
// Stopped by signal s: 128 + s, as a shell reports it.

// The Agent is the AttemptHost of each attempt of its workers (privately:
// only the attempts it runs call it so).
class Agent : private AttemptHost {
 public:
  // nodes_in_rendezvous: for the agent that hosts the rendezvous, how many
  // nodes are still in the jobs it serves (it waits for 0 before it exits).
  Agent(AgentConfig config, RendezvousClient& rdzv, SignalChannel& signals,
        std::function<size_t()> nodes_in_rendezvous = nullptr);
  ~Agent() override;  // dismisses unused standby workers
  // The launcher hosts the workers' c10d store (TCPStore protocol) on
  // MASTER_PORT: workers are told TORCHELASTIC_USE_AGENT_STORE=True, and
  // fresh_key_space runs whenever a group of workers has ended.
  void host_worker_store(std::function<void()> fresh_key_space) {
    fresh_key_space_ = std::move(fresh_key_space);
  }
  // Runs the job; returns ddprun's exit code. Failure summaries go to the
  // console's stderr.
  int run();
  // Its event log: --log-dir's file is added by run(); others (--trace)
  // may be added before.
  EventLog& event_log() { return events_; }
  // This node's id in the job (--node-id, or host:pid).
  const std::string& node_id() const { return node_id_; }
  // --metrics-port: the job's numbers, folded from this agent's events and
  // its ranks' progress (the launcher serves them).
  void keep_metrics(std::shared_ptr<JobMetrics> metrics);

 private:
  // AttemptHost (attempt_host.h): what one attempt of the workers asks of
  // this node (agent_host.cpp).
  const AgentConfig& config() const override { return cfg_; }
  EventLog& events() override { return events_; }
  HeartbeatTable* heartbeats() override { return heartbeats_.get(); }
  LeaseKeeper* lease() override { return lease_.get(); }
  SignalChannel& signals() override { return signals_; }
  std::string stacks_stem(int attempt) const override;
  bool heals(const Assignment& a) const override { return heals_in(a) || heals_across(a) || names_heals_at_rendezvous(); }
  std::vector<WorkerLaunch> launches(int attempt, const JoinResult& joined) override {
    return make_launches(attempt, joined);
  }
  std::vector<Standby> take_standbys(size_t n) override;
  std::optional<Standby> take_standby() override;
  bool has_standbys() const override { return !standbys_.empty(); }
  void warm_standbys(int attempt, const JoinResult& guess, int count) override {
    spawn_standbys(attempt, guess, count);
  }
  void begin_watching(int attempt, const Assignment& a) override;
  void end_watching(int attempt, const Assignment& a) override;
  void note_view(int attempt, const NodeView& view) override;
  uint32_t told_generation() const override { return heal_generation_; }
  void heard_generation(uint32_t generation) override { heal_generation_ = std::max(heal_generation_, generation); }
  std::string node_name() const override;
  void heard_round_detail(const std::string& detail) override { heard_round_detail_ = detail; }
  std::string take_heard_round_detail() override { return std::exchange(heard_round_detail_, std::string()); }
  std::string control_plane_line() const override;
  void add_log_losses(const std::vector<LogLoss>& losses) override {
    log_losses_.insert(log_losses_.end(), losses.begin(), losses.end());
  }

  // A stop signal that arrived while no workers ran (0 if none).
  int pending_stop_signal();
  std::string attempt_dir(int attempt) const;
  static void make_dirs(const std::string& path);  // throws naming the folder
  void prepare_files();
  void remove_temp_files();  // the temporary files folder (no --log-dir), if any
  void contain_processes();
  void open_consoles();
  // The workers of one attempt (standbys, if any, are attached by the caller).
  // standbys: for standby processes, whose ranks are a guess until they are
  // released (no rank folders are made for them).
  std::vector<WorkerLaunch> make_launches(int attempt, const JoinResult& joined, bool standbys = false);
  // Whether a failed worker of this round may be replaced while the others
  // go on, in a generation this agent names: one node (the agent owns every
  // rank), heartbeats to announce it, and --max-heals above 0. Across nodes
  // the rendezvous names it (heals_across).
  bool heals_in(const Assignment& a) const { return a.num_nodes == 1 && cfg_.max_heals > 0 && heartbeats_ != nullptr; }
  // Whether this node may take over a lost node's ranks, be healed with by
  // one that does (RoundState's takeover), and replace a failed worker of its
  // own in a generation the rendezvous names: --max-heals above 0,
  // heartbeats and a lease (keep-alives carry the news both ways).
  bool takes_over() const { return cfg_.max_heals > 0 && heartbeats_ != nullptr && cfg_.lease_timeout.count() > 0; }
  bool heals_across(const Assignment& a) const { return a.num_nodes > 1 && takes_over(); }
  // Whether the rendezvous names this job's heal generations: a job that may
  // run on several nodes (--nnodes MAX above 1), even while it runs on one
  // (the round may grow), that heals across nodes (takes_over).
  bool names_heals_at_rendezvous() const override {
    return takes_over() && lease_ != nullptr && cfg_.rdzv.max_nodes > 1;
  }
  // AgentConfig::control_plane_state, "" without a control plane.
  std::string control_plane_state() const { return cfg_.control_plane_state ? cfg_.control_plane_state() : ""; }
  // On the monitor's beat: tells the rendezvous whether all local workers
  // heal in place in this round (a takeover, a grow or a worker heal needs
  // every other member's).
  void report_workers_heal(const Assignment& a, const WorkerGroup* group) override;
  // What this node's workers run, as the rendezvous compares it with a
  // running round's members: the program's name and its arguments.
  std::string program_identity() const;
  // Across nodes: writes into every local slot whether a heal would come
  // for a failed peer (every member's workers heal: view). A lost node that
  // no spare takes over and no shrink heals around then costs a round: the
  // agent stops its waiting workers when it sees it.
  void tell_workers_whether_heals_come(const Assignment& a, const NodeView* view) override;
  // A view of the running round with a newer heal generation (a waiting
  // node took over a lost one's ranks, or another member replaces a failed
  // worker): the local workers heal in it.
  void heal_with_others(int attempt, const NodeView& view) override;
  // A view of the running round with a newer heal generation and another
  // placement for this node (the round shrank past a lost node, or grew by
  // a newcomer): `a` takes the new ranks and world size, the local workers
  // are told them and heal in that generation.
  void move_with(int attempt, Assignment& a, const NodeView& view) override;
  // Starts the standby set for attempt (their variables come at release).
  // count: how many (-1: one per local worker).
  void spawn_standbys(int attempt, const JoinResult& guess, int count = -1);
  void dismiss_standbys();

  // The lifecycle's actions.
  // attempt: the one the round's workers will be (a spare warms them up).
  JoinEnd join_round(const JoinIntent& intent, int attempt);
  // While this node waits for a place and the running round's members all
  // heal (a takeover would start its workers): warm them up as standbys.
  void warm_up_spare(int attempt, const NodeView& view);
  // One attempt of the workers: attempt.h.
  GroupResult run_workers(int attempt, const JoinResult& joined, Lifecycle& life);
  // Tells the rendezvous this node leaves; a success names the round its
  // workers ran in. Returns why the rendezvous refused a success ("" when
  // it took the leave, or could not be reached).
  std::string leave(LeaveKind kind, const std::string& message, std::optional<int64_t> round);
  // On the monitor's beat while workers run: checkpoints in the event log,
  // rank 0's progress on the console. Never blocks.
  // `group`: the running workers (null between attempts), whose straggler
  // scores the progress line shows.
  void watch_progress(int attempt, const Assignment& a, const WorkerGroup* group) override;
  // Across nodes, about twice a second: this node's collectives for the
  // rendezvous (StatusReporter::set_collectives).
  void report_collectives(const Assignment& a, const WorkerGroup& group);
  // Another node's ranks as the rendezvous last heard of them, for a hang
  // verdict made here (asks the rendezvous: call off the I/O loop).
  std::vector<RankView> other_nodes_ranks() override;
  // A keep-alive named another serving node or term: said once, in the log
  // and the event log.
  void note_control_plane(int attempt, const NodeView& view);
  // Says once that this node is the job's straggler and what it does now
  // (the log line and the straggler_node event).
  void tell_straggler_node(int attempt, const NodeView& view, const std::string& what_now, bool handed_over,
                           const std::string& detail) override;
  void start_progress_display();
  void stop_progress_display();
  void await_others(LeaveKind how_this_node_left);
  // --trace: this node's clock offset to the rendezvous host, in clock.json.
  void write_trace_clock(std::chrono::milliseconds wait);

  AgentConfig cfg_;
  RendezvousClient& rdzv_;
  SignalChannel& signals_;
  std::function<size_t()> nodes_in_rendezvous_;
  std::function<void()> fresh_key_space_;  // set when this agent hosts the worker store
  std::string node_id_;
  std::string files_dir_;  // log dir, or a temporary folder for error files
  bool files_dir_is_temp_ = false;
  std::string python_startup_dir_;  // PYTHONPATH's first folder for Python workers ("" : none)
  std::string python_package_dir_;  // then the ddprun package's folder ("" : none found)
  bool wants_files_ = false;
  std::string trace_node_dir_;  // --trace DIR/<node id made file-safe>; empty: off
  std::unique_ptr<HeartbeatTable> heartbeats_;
  std::unique_ptr<JobCgroup> cgroup_;
  // The workers' way to the console (one object when out and err are one pipe).
  std::unique_ptr<Console> console_out_, console_err_own_;
  Console* console_err_ = nullptr;  // null where the kernel does not allow one
  std::unique_ptr<LeaseKeeper> lease_;
  std::unique_ptr<StatusReporter> status_;  // with heartbeats: rank 0's progress for `ddprun status`
  std::vector<Standby> standbys_;  // for the next attempt
  int nodes_waiting_ = 0;          // late nodes last reported waiting
  std::string heard_round_detail_;  // why the running round was superseded, as this node heard it
  uint32_t refusals_told_ = 0;     // nodes refused for another program, said so far
  // Who serves the job's rendezvous (a control plane's), as last heard, and
  // how many times another node took it over since this agent started.
  std::string control_node_;
  int64_t control_term_ = 0;
  int control_takeovers_ = 0;
  uint32_t heal_generation_ = 0;   // the running round's, as told to the workers
  std::vector<LogLoss> log_losses_;  // of every attempt, told at the end
  int duplicate_fd_[2] = {-1, -1};   // filtered_std{out,err}.log (--duplicate-*-filters)
  std::vector<NumaPlacement> numa_;  // per local rank (--numa-binding)
  EventLog events_;
  std::shared_ptr<JobMetrics> metrics_;  // null without --metrics-port
  std::chrono::steady_clock::time_point last_progress_event_{};  // the event log's last `progress`
  // Progress: what each local rank last reported (for checkpoint events),
  // and rank 0's reports, when this node runs it.
  std::vector<channel::Progress> seen_;
  ProgressMeter meter_;
  bool progress_on_terminal_ = false;  // a status line on console_err_
  std::chrono::steady_clock::time_point last_progress_log_{}, last_status_draw_{}, last_collectives_{};
  int64_t logged_step_ = -1;
};

}  // namespace ddprun
