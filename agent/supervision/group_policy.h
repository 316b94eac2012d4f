// The supervision of one attempt of a node's workers as a pure state
// machine, as etcd's raft steps: one event in (group_event.h: exits reaped,
// heartbeats read, a signal, news from the rendezvous, the clock), the
// commands to carry out back (signal the running workers, kill one, replace
// one, warm up standbys), through the one entry point step(). Every event
// carries what its decision needs, so no order of calls matters.
// WorkerGroup does the I/O (spawning, pipes, reaping, reading slots,
// sending signals) and reports what it saw; every decision is unit-tested
// with a fake clock and no processes.
#pragma once

#include <algorithm>
#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "agent/supervision/group_event.h"
#include "agent/supervision/group_result.h"
#include "agent/health/learned_timeout.h"
#include "agent/health/progress_watch.h"

namespace ddprun {

// How a worker's exit counts.
// kHealed: it failed (or hung and was killed) and is replaced while the
// others keep running (see GroupPolicyOptions::max_heals).
enum class WorkerEnd { kSucceeded, kFailed, kStopped, kHung, kHealed };

struct GroupCommand {
  // kSuspendSelf: stop ddprun itself (after its workers, Ctrl-Z).
  // kReplaceWorker: start a replacement for `worker` (which failed) and tell
  // every running worker to heal in `generation`.
  // kAskGeneration: ask the rendezvous for a heal generation to replace the
  // workers that wait for one in (generations_from_rendezvous); its answer
  // comes as a GenerationNamed event.
  // kNote: tell the user something about `worker` (`why`), do nothing: a
  // silent worker that is slow, not hung; a replacement that cannot heal.
  enum Kind { kSignalRunning, kKillWorker, kWarmStandbys, kSuspendSelf, kReplaceWorker, kAskGeneration, kNote };
  Kind kind = kSignalRunning;
  int sig = 0;     // kSignalRunning
  // kSignalRunning of a stop the agent decided itself (a worker failed or
  // hung, a new round), not one the user's signal to ddprun began: the
  // workers are told so first (channel::StopReason).
  bool agent_decided = false;
  int worker = -1;  // kKillWorker (always SIGKILL, the worker's whole process group), kReplaceWorker
  std::vector<int> except;  // kSignalRunning: workers not to signal
  uint32_t generation = 0;  // kReplaceWorker
  bool heal = false;        // kKillWorker: the hung worker will be replaced, the others go on
  bool straggler = false;   // kKillWorker: a straggler replaced (--straggler-action replace), not hung
  bool apart = false;       // kKillWorker: a rank whose replica was apart twice (--verify-every), not hung
  // kKillWorker of a hung worker: why, and how long it had been silent;
  // kNote: what to say.
  std::string why;
  std::chrono::milliseconds silent{0};
};

struct GroupPolicyOptions {
  std::chrono::milliseconds stop_timeout{std::chrono::seconds(10)};  // SIGTERM → SIGKILL
  std::chrono::milliseconds hang_timeout{0};                         // 0: none set (--hang-timeout)
  // --hang-timeout auto: the limit learned from the job's heartbeats
  // (learned_timeout.h), beside any explicit one. Absent: not learned.
  std::optional<LearnedTimeoutOptions> learned_hang;
  std::chrono::milliseconds monitor_interval{100};
  bool heartbeats = false;      // counters can be read
  bool wants_standbys = false;  // warm them once every worker beats
  // Programs that never beat (Python scripts): warm the standbys this long
  // after the start instead, once the workers are past their imports. 0:
  // wait for the beats.
  std::chrono::milliseconds standby_warmup{0};
  // Checkpointless recovery: a worker that fails while every worker says
  // it can heal (HealWords) is replaced and the others keep running,
  // at most this many times per worker (a rank that fails again and again,
  // a bad device, then stops the group as before). 0: never.
  int max_heals = 0;
  // In a multi-node job a heal generation is the rendezvous's to name
  // (every worker of the job heals in it, and the rendezvous checks that
  // the other nodes' workers hold the state): a failed worker to replace
  // waits for one (kAskGeneration, then GenerationNamed) instead of starting
  // at once.
  bool generations_from_rendezvous = false;
};

// What one step decided: the commands to carry out, in order, and for an
// Exits event how each exit counted (in the event's order).
struct GroupStep {
  std::vector<GroupCommand> commands;
  std::vector<WorkerEnd> ends;
};

class GroupPolicy {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  using Outcome = GroupOutcome;  // never kHandedOver here
  using enum GroupOutcome;

  GroupPolicy(int workers, GroupPolicyOptions options, TimePoint started);

  // The one way in: what `event` (seen at `now`) changes, and what to do.
  //
  // Exits: each exit counts (WorkerEnd), then the first failure stops the
  // others (SIGTERM, SIGKILL stop_timeout later on a Tick); a failed worker
  // that may heal is replaced instead (kReplaceWorker, or kAskGeneration
  // when the rendezvous names generations, answered by GenerationNamed).
  // Beats: a worker silent too long is hung and killed (replaced when it
  // may heal, else the others stop), unless it is slow (busy) or excused;
  // the progress watch judges ranks that spin while the others wait.
  // Signal: SIGINT/SIGTERM/SIGHUP/SIGQUIT stop the workers (twice: kill
  // them); SIGUSR1/2 are passed on; SIGTSTP (Ctrl-Z) stops the workers with
  // SIGSTOP, then ddprun; SIGCONT continues them (not one that a debugger
  // or an operator had stopped before: that stop is theirs), and the pause
  // counts neither as silence nor towards the stop timeout.
  // RoundStop: the workers stop for the rendezvous. Tick: the stop's
  // SIGKILL, standbys of programs that never beat (standby_warmup after the
  // start). Replace: a straggler or a replica apart is killed to be
  // replaced through a heal (within --max-heals), or nothing when it cannot
  // heal now (the job goes on at its pace).
  GroupStep step(const GroupEvent& event, TimePoint now);

  // Failures this close to a stop that a worker failure began count as
  // the worker's own (it failed at nearly the same moment, before our
  // SIGTERM could reach it), given evidence (see group_event::Exit).
  static constexpr std::chrono::milliseconds kTogether{100};
  // A worker named slow, not hung, is named so again at most this often:
  // under a short --hang-timeout its silences come every second or two.
  static constexpr std::chrono::seconds kSlowNoteEvery{60};
  // Replacements of one worker that fail in a row before they join: at
  // this many the worker is not replaced again (the group stops).
  static constexpr int kJoinFailures = 2;
  // Slowness is not a hang (Beats). A silent worker that was busy (ran, or
  // waited runnable to run) for at least kBusyShare of its silence is slow,
  // not hung: a kNote says so, once a silence. While any silent worker of
  // the node has been busy for kLongSilence, an idle silent one may be
  // waiting for it (a collective without a pulse) and is not judged
  // either. A stopped worker is never excused by a busy peer.
  static constexpr double kBusyShare = ProgressWatch::kBusyShare;
  static constexpr std::chrono::milliseconds kLongSilence{1000};

  // Whether worker w heals in place as things stand: it said it can, or it
  // is a replacement still joining, or a failed worker that waits for the
  // generation to be replaced in (see heal_allowed).
  bool can_heal(int w) const { return heal_ready_[w] || joining_[w] || awaiting_generation(w); }
  // The learned hang timeout, when --hang-timeout auto.
  const std::optional<LearnedTimeout>& learned() const { return learned_; }
  // Whether worker w is a replacement that has not said it can heal yet
  // (its heal is not over).
  bool joining(int w) const { return joining_[w]; }
  // Whether failed worker w waits for the rendezvous to name its heal's
  // generation (it is not alive meanwhile).
  bool awaiting_generation(int w) const {
    return std::find(awaiting_.begin(), awaiting_.end(), w) != awaiting_.end();
  }
  // Whether a worker is past its last step, or exited 0: the job ends.
  bool finishing_job() const {
    return any_succeeded_ || std::find(finishing_.begin(), finishing_.end(), true) != finishing_.end();
  }
  // Whether a Replace of worker w would replace it as things stand.
  bool may_replace(int w) const { return alive_[w] && heal_allowed(w); }
  // What to do about straggler w, found now (or a replica apart twice, with
  // replace true): kLoad: this node's load explains its slowness
  // (`load_explains`: StragglerScores::slowed_by_load), it goes on; kWarn:
  // it is only named (no --straggler-action replace); kKept: it would be
  // replaced but cannot heal now (--max-heals spent, a peer that cannot
  // heal), it goes on; kReplace: kill it to be replaced through a heal (a
  // Replace event); kWait: to be replaced, but a heal is handled inside a
  // ddp::Healer step and a worker is outside one (evaluating, say: the heal
  // would fail its next collective), so look again on the next beat.
  enum class StragglerAction { kWait, kLoad, kWarn, kKept, kReplace };
  StragglerAction straggler_action(int w, bool load_explains, bool replace, bool all_in_step) const {
    if (load_explains) return StragglerAction::kLoad;
    if (!replace) return StragglerAction::kWarn;
    if (!may_replace(w)) return StragglerAction::kKept;
    return all_in_step ? StragglerAction::kReplace : StragglerAction::kWait;
  }

  // How long the I/O loop may wait for events (-1: until one comes).
  int poll_timeout_ms(TimePoint now) const;
  bool alive(int w) const { return alive_[w]; }
  bool any_alive() const;
  int alive_count() const;
  bool stopping() const { return stopping_; }
  bool stop_requested_by_signal() const { return stop_signal_ != 0; }
  // When the workers were asked to stop (valid while stopping()).
  TimePoint stop_started() const { return stop_started_; }

  Outcome outcome() const;
  int stop_signal() const { return stop_signal_; }
  const std::string& stop_reason() const { return round_stop_; }
  int stopped_count() const { return stopped_count_; }
  // Heals so far, and the generation of the last one (0: none).
  int heal_count() const { return heal_count_; }
  // Worker w's replacements so far, and whether they are all --max-heals
  // allows it (its next failure stops the group).
  int heals_of(int w) const { return heals_[w]; }
  bool heals_ran_out(int w) const { return options_.max_heals > 0 && heals_[w] >= options_.max_heals; }
  uint32_t generation() const { return generation_; }

 private:
  // The events, one handler each (see step()).
  GroupStep on_exits(const group_event::Exits& e, TimePoint now);
  std::vector<GroupCommand> on_beats(const group_event::Beats& b, TimePoint now);
  std::vector<GroupCommand> on_signal(int sig, TimePoint now);
  std::vector<GroupCommand> on_round_stop(const std::string& why, TimePoint now);
  std::vector<GroupCommand> on_generation(uint32_t generation, TimePoint now);
  std::vector<GroupCommand> on_tick(TimePoint now);
  void on_own_stall(std::chrono::milliseconds stalled, TimePoint now);
  std::vector<GroupCommand> on_replace(const group_event::Replace& r);
  void on_replacement_started(int w, bool from_standby, TimePoint now);
  // The heal words read with an event: a worker that says it can heal has
  // joined, if it was a replacement.
  void take(const group_event::HealWords& heal);
  // One exit, then what the exits seen together mean.
  WorkerEnd on_exit(const group_event::Exit& x, TimePoint now);
  // Whether failed exit x is the worker's own failure although it was asked
  // to stop (see group_event::Exit).
  bool failed_on_its_own(const group_event::Exit& x, TimePoint now) const;
  std::vector<GroupCommand> after_exits(TimePoint now);
  // Hang detection by silence, then by progress (progress_watch.h).
  std::vector<GroupCommand> judge_silence(const std::vector<uint64_t>& counts, TimePoint now,
                                          const std::vector<std::chrono::milliseconds>& busy);
  std::vector<GroupCommand> judge_progress(std::vector<ProgressReading> readings, TimePoint now);
  std::vector<GroupCommand> replace_chosen(int w, const std::string& why);
  std::vector<GroupCommand> begin_stop(int sig, TimePoint now);
  GroupCommand signal_running(int sig);
  GroupCommand warm_standbys();
  bool standbys_by_clock() const;
  bool heal_allowed(int w) const;
  bool peers_in_step(int w) const;
  // Why worker w, whose counter (`count`) has not moved since
  // beat_changed_[w], has been silent too long by now; empty while it has
  // not. (Whether that is a hang or slowness is judge_silence's.)
  std::string hung_because(int w, uint64_t count, TimePoint now) const;
  // Worker w's busy time since its counter last moved (0 when unknown).
  std::chrono::milliseconds busy_since_beat(int w) const;
  bool hang_watching() const { return options_.hang_timeout.count() > 0 || learned_.has_value(); }
  // Starts replacements for `workers` in generation_ (already advanced).
  std::vector<GroupCommand> replace_workers(const std::vector<int>& workers, TimePoint now);

  GroupPolicyOptions options_;
  std::vector<bool> alive_;      // not reaped yet
  std::vector<bool> term_sent_;  // asked to stop: its exit counts as stopped
  std::vector<bool> hung_;       // judged hung: its failure is recorded already
  std::vector<uint64_t> beats_;  // counter last seen
  std::vector<TimePoint> beat_changed_;
  // How long the slowest of the first workers took from its start to its
  // first beat: what a fresh replacement is allowed before its own.
  std::chrono::milliseconds first_beat_after_{0};
  std::vector<std::chrono::milliseconds> start_grace_;  // a joining replacement's allowance
  // The learned hang timeout, and the announced phases it skips: whether
  // the worker is in one, has been since its last beat, and when it last was.
  std::optional<LearnedTimeout> learned_;
  std::vector<bool> in_phase_;
  std::vector<bool> phase_seen_;
  std::vector<TimePoint> phase_left_;
  std::vector<std::chrono::milliseconds> awaited_;  // see WorkerReading::awaited
  std::vector<bool> in_step_;                        // see WorkerReading::in_step
  std::vector<bool> finishing_;                      // see WorkerReading::finishing
  std::vector<bool> stopped_;                        // see WorkerReading::stopped
  std::vector<bool> stopped_before_pause_;           // stopped by someone else before a Ctrl-Z
  std::optional<ProgressWatch> progress_;            // see judge_progress
  // Busy time (see judge_silence): the latest reading, and the one when the
  // counter last moved; whether this silence was said to be slowness.
  std::vector<std::chrono::milliseconds> busy_now_;
  std::vector<std::chrono::milliseconds> busy_at_beat_;
  std::vector<bool> slow_said_;
  std::vector<std::optional<TimePoint>> slow_told_at_;  // the last such note (see kSlowNoteEvery)
  bool stopping_ = false;
  bool killed_ = false;
  bool any_failed_ = false;
  int stop_signal_ = 0;
  std::string round_stop_;
  TimePoint kill_at_{};
  TimePoint started_;
  TimePoint stop_started_{};
  bool stop_for_failure_ = false;  // a worker's failure began the stop
  std::optional<TimePoint> paused_at_;  // when SIGTSTP stopped the workers
  int stopped_count_ = 0;
  // Heals: which workers can, how often each was replaced, the ones to
  // replace after the exits being reported, any clean exit (then the group
  // is finishing and cannot heal).
  std::vector<bool> heal_ready_;
  std::vector<bool> joining_;  // a replacement that has not said it can heal yet
  std::vector<int> heals_;
  std::vector<int> join_failures_;  // see kJoinFailures
  int join_failed_ = -1;            // a worker that just ran out of them (for after_exits' note)
  std::vector<int> to_replace_;
  std::vector<int> awaiting_;  // to replace once the rendezvous names a generation
  bool other_nodes_ = true;    // see HealWords::other_nodes
  bool any_succeeded_ = false;
  int heal_count_ = 0;
  uint32_t generation_ = 0;
};

}  // namespace ddprun
