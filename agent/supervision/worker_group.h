// One attempt of a node's workers: starts them, streams their output, reaps
// them, forwards signals, and on the first failure stops the rest (SIGTERM,
// then SIGKILL after the stop timeout). Single-threaded, driven by poll() on
// the workers' pipes, the launcher's signalfd and the lease keeper's fd.
// What to do is GroupPolicy's decision; this class does the I/O.
#pragma once

#include <chrono>
#include <functional>
#include <future>
#include <map>
#include <set>
#include <memory>
#include <optional>
#include <string>
#include <vector>

#include "agent/health/cpu_busy.h"
#include "agent/processes/env.h"
#include "agent/output/event_log.h"
#include "agent/output/failure_report.h"
#include "agent/supervision/group_host.h"
#include "agent/supervision/group_policy.h"
#include "agent/health/hang_verdict.h"
#include "agent/health/heartbeat_table.h"
#include "agent/base/signals.h"
#include "agent/processes/spawn.h"
#include "agent/health/stack_collection.h"
#include "agent/health/straggler_scores.h"
#include "agent/processes/standby.h"
#include "agent/output/worker_output.h"

namespace ddprun {

struct WorkerLaunch {
  WorkerIdentity id;
  SpawnRequest spawn;
  std::map<std::string, std::string> vars;  // what ddprun sets (spawn.env holds them too)
  OutputOptions output;
  std::string error_file;
  // A warm standby process to release with `vars` instead of spawning.
  std::optional<Standby> standby;
};

struct GroupOptions {
  std::string host_name;  // this node, as exits name it
  std::chrono::milliseconds stop_timeout{std::chrono::seconds(10)};  // SIGTERM → SIGKILL
  // Hang detection: with a table and a timeout > 0, a worker whose counter
  // stays still that long (after its first beat) fails. Checked every
  // monitor_interval.
  HeartbeatTable* heartbeats = nullptr;
  std::chrono::milliseconds hang_timeout{0};
  std::optional<LearnedTimeoutOptions> learned_hang;  // --hang-timeout auto
  // --straggler-action replace: a rank found slow is replaced through a
  // heal (within max_heals); otherwise it is only named.
  bool replace_stragglers = false;
  std::chrono::milliseconds monitor_interval{100};
  // Who runs the group (GroupHost): asked on the monitor's beat, when
  // control_fd is readable, for standbys and heal generations. Null: none
  // (no monitor beat, no news from outside the node).
  GroupHost* host = nullptr;
  // host->on_all_beating() once, the first time every worker has beaten
  // (needs heartbeats), or standby_warmup after the start when that is > 0
  // (programs that never beat).
  bool warm_standbys = false;
  std::chrono::milliseconds standby_warmup{0};
  // News from outside the node (the lease keeper's fd): when readable,
  // host->on_control() says why the workers must stop, or nullopt.
  int control_fd = -1;
  // The event log (spawn, exit, hang) and the attempt its lines name.
  EventLog* events = nullptr;
  int attempt = 0;
  // Checkpointless recovery (GroupPolicyOptions::max_heals): with
  // heartbeats, a failed worker of a program that can heal is replaced
  // while the others go on, at most this many times per worker. 0: never.
  // A replacement's process is host->take_standby()'s, else a fresh spawn.
  int max_heals = 0;
  // Across nodes: a replacement waits for the rendezvous to name its
  // generation (host->ask_heal, then host->heal_answer() when control_fd
  // says the answer came).
  bool heals_named_by_rendezvous = false;
  // Where a hang's stacks go, every rank's in full: a new file
  // STEM-XXXXXX.txt (empty: printed only); those asked for on a live job
  // (the stack signal sent to ddprun) go beside, STEM-asked-N-XXXXXX.txt.
  std::string stacks_stem;
  // Stacks asked for on a live job are also copied here (renamed into
  // place, for `ddprun status --stacks`); empty: not.
  std::string asked_stacks_copy;
  // Across nodes: a hang's verdict asks host->other_ranks() for the other
  // nodes' ranks (their newest collective), so that it is the job's.
  bool asks_other_ranks = false;
};

class WorkerGroup {
 public:
  WorkerGroup(std::vector<WorkerLaunch> launches, SignalChannel& signals, GroupOptions options);
  ~WorkerGroup();

  // Starts every worker and returns once all have exited. Throws SpawnError
  // (after stopping the workers already started) when one cannot start.
  GroupResult run();
  // The round moved this node's ranks while the workers run (it shrank or
  // grew): local rank r is global rank first_global_rank + r of world_size,
  // on node node_rank of num_nodes, from now on, in messages, events and
  // the failure summary. Call from the group's own calls to its host (on_control).
  void renumber(int first_global_rank, int world_size, int node_rank, int num_nodes);
  // Whether every worker of the group heals in place now (GroupPolicy::can_heal):
  // what the agent's keep-alives tell the rendezvous. False before the start.
  bool all_heal_in_place() const;
  // Whether a replacement is still taking the state from its peers (its
  // heal is under way).
  bool any_joining() const;
  // The local ranks' straggler scores so far (the progress line shows them).
  const StragglerScores& stragglers() const { return stragglers_; }
  // The slowest rank as the agent judged it: a straggler by its scores is
  // none where this node's load explained it (check_stragglers said so).
  std::optional<StragglerScores::Slowest> slowest() const;
  // The same for the progress line: "" before any, else "slowest: rank 1
  // (0.41)", with " straggler", or ", this node's load" where excused.
  std::string slowest_text() const;

 private:
  struct Worker;
  void start_all();
  void reap();
  group_event::Exit exit_of(int i, const WorkerExit& e) const;
  void drain(Worker& w, bool until_eof);
  void check_heartbeats();
  void check_control();
  // The workers stop for a reason from outside the node (on_control,
  // stop_now): a new round, the job failed, a hand-over.
  void stop_for(const std::string& why, std::chrono::steady_clock::time_point now);
  // The rendezvous's answer for the workers that wait for a heal generation.
  void check_heal_answer();
  void check_monitor();
  void check_stragglers();
  // The workers' comparisons of their replicas (their slots' replicas
  // blocks, read with the monitor): each verdict told once, and a worker
  // apart twice replaced (worker_group_replicas.cpp).
  void check_replicas();
  // Gives a console that is slow, not stalled, the lines it has not taken
  // yet: waits while it takes some within a second, for at most `limit`.
  void drain_consoles(std::chrono::milliseconds limit);
  // Carries the policy's commands out.
  void execute(const std::vector<GroupCommand>& commands);
  void run_command(const GroupCommand& c);
  void record_hung(const GroupCommand& kill, const std::string& verdict);
  // A hang: before any kill, every live worker is asked for its stacks;
  // the kill and every command after it wait (deferred_) until they
  // answered or their time is up; the kills then carry the verdict.
  void start_stack_collection(bool for_hang);
  void check_stack_collection(bool now = false);
  std::string finish_stack_collection();
  // Starts a replacement for worker i in `generation` and tells the
  // others to heal in it.
  void replace(int i, uint32_t generation);
  // What the policy judges heals by, as it stands now: which workers say
  // they can heal, and (heal_namer) whether other nodes run. Empty without
  // heartbeats or heals.
  group_event::HealWords heal_words() const;
  // Starts worker i's process (from its standby if it has one); true when
  // it came from a standby.
  bool start(size_t i, bool append_logs, const std::map<std::string, std::string>& extra_vars);

  std::vector<WorkerLaunch> launches_;
  SignalChannel& signals_;
  GroupOptions options_;
  std::vector<std::unique_ptr<Worker>> workers_;
  std::unique_ptr<GroupPolicy> policy_;  // made when the workers start
  GroupResult result_;
  std::chrono::steady_clock::time_point next_monitor_{};
  // Failed workers waiting for the rendezvous to name their replacement's
  // generation (HealNamer).
  std::vector<std::pair<int, WorkerExit>> awaiting_;
  std::map<int, std::string> killed_hung_;  // why hung workers were killed
  // Each worker's latest heal: its index in result_.healed.
  std::map<int, size_t> latest_heal_;
  void record_heal(int i, WorkerExit e);
  std::unique_ptr<StackCollection> collecting_;
  // The other nodes' ranks for the verdict (GroupOptions::other_ranks),
  // awaited until remote_deadline_ at most.
  std::future<std::vector<RankView>> remote_;
  std::chrono::steady_clock::time_point remote_deadline_{};
  bool collecting_for_hang_ = false;  // else asked for (the stack signal sent to ddprun)
  int asked_ = 0;                     // stacks asked for so far
  std::string stacks_file_;           // where the last ones went
  std::string hang_verdict_;          // the last ones' verdict, which the kills they held carry
  std::vector<int> hang_suspects_;    // the ranks it blames
  // Stragglers among the local ranks (their flight records, read with the
  // monitor), each said once per heal generation (the scores start over).
  StragglerScores stragglers_;
  std::vector<int> stragglers_said_;
  std::vector<int> excused_by_load_;  // of those, the ones this node's load explained
  // Each worker's CPU times since the scores' generation began (slowed_by_load).
  std::vector<CpuTimes> cpu_window_;
  std::chrono::steady_clock::time_point cpu_window_start_{};
  std::string slowed_by_load(int w, double score) const;
  std::vector<GroupCommand> deferred_;
  // Replica verdicts told in this attempt ("<verdict>@<step>"; by design:
  // once).
  std::set<std::string> replica_verdicts_told_;
};

}  // namespace ddprun
