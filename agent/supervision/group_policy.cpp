#include "agent/supervision/group_policy.h"

#include <signal.h>

#include <algorithm>
#include <cstdio>

#include "agent/base/signals.h"

namespace ddprun {

GroupPolicy::GroupPolicy(int workers, GroupPolicyOptions options, TimePoint started)
    : options_(options),
      alive_(workers, true),
      term_sent_(workers, false),
      hung_(workers, false),
      beats_(workers, 0),
      beat_changed_(workers, started),
      start_grace_(workers, std::chrono::milliseconds(0)),
      in_phase_(workers, false),
      phase_seen_(workers, false),
      phase_left_(workers, started),
      awaited_(workers, std::chrono::milliseconds(0)),
      in_step_(workers, false),
      finishing_(workers, false),
      stopped_(workers, false),
      stopped_before_pause_(workers, false),
      busy_now_(workers, std::chrono::milliseconds(0)),
      busy_at_beat_(workers, std::chrono::milliseconds(0)),
      slow_said_(workers, false),
      slow_told_at_(workers),
      started_(started),
      heal_ready_(workers, false),
      joining_(workers, false),
      heals_(workers, 0),
      join_failures_(workers, 0) {
  if (options_.learned_hang) learned_.emplace(workers, *options_.learned_hang);
  if (hang_watching()) {
    ProgressWatchOptions po;
    po.explicit_limit = options_.hang_timeout;
    po.learned = options_.learned_hang;
    progress_.emplace(workers, po);
  }
}

namespace {
// std::visit over the events, one lambda each.
template <class... F>
struct Handlers : F... {
  using F::operator()...;
};
template <class... F>
Handlers(F...) -> Handlers<F...>;  // clang 14 deduces no aggregate's arguments
}  // namespace

GroupStep GroupPolicy::step(const GroupEvent& event, TimePoint now) {
  namespace ev = group_event;
  auto only = [](std::vector<GroupCommand> commands) { return GroupStep{std::move(commands), {}}; };
  return std::visit(
      Handlers{
          [&](const ev::Exits& e) { return on_exits(e, now); },
          [&](const ev::Beats& b) { return only(on_beats(b, now)); },
          [&](const ev::HealRead& h) {
            take(h.heal);
            return GroupStep{};
          },
          [&](const ev::Signal& s) { return only(on_signal(s.sig, now)); },
          [&](const ev::RoundStop& r) { return only(on_round_stop(r.why, now)); },
          [&](const ev::GenerationNamed& g) { return only(on_generation(g.generation, now)); },
          [&](const ev::Tick&) { return only(on_tick(now)); },
          [&](const ev::OwnStall& s) {
            on_own_stall(s.stalled, now);
            return GroupStep{};
          },
          [&](const ev::Replace& r) { return only(on_replace(r)); },
          [&](const ev::ReplacementStarted& r) {
            on_replacement_started(r.worker, r.from_standby, now);
            return GroupStep{};
          },
          [&](const ev::WholeJob& j) {
            if (progress_) progress_->set_whole_job(j.whole);
            return GroupStep{};
          },
      },
      event);
}

void GroupPolicy::take(const group_event::HealWords& heal) {
  if (heal.other_nodes) other_nodes_ = *heal.other_nodes;
  for (size_t w = 0; w < heal.ready.size() && w < heal_ready_.size(); ++w) {
    if (!heal.ready[w] || !alive_[w]) continue;
    heal_ready_[w] = *heal.ready[w];
    if (heal_ready_[w]) {
      joining_[w] = false;  // a replacement that has the state
      join_failures_[w] = 0;
    }
  }
}

// The heal words first (as the workers said it last, before any exit
// counts), then each exit, then what they mean together.
GroupStep GroupPolicy::on_exits(const group_event::Exits& e, TimePoint now) {
  take(e.heal);
  GroupStep out;
  for (const auto& x : e.exits) out.ends.push_back(on_exit(x, x.reaped.value_or(now)));
  out.commands = after_exits(now);
  return out;
}

// A failed (or hung) worker is replaced only while the group runs on its
// own (no stop under way, no failure that stops it, nobody finished) and
// every worker still running, and the failed one itself, said it can heal
// or is a replacement still joining (a failure during a heal begins the
// next generation: the joining replacement connects in that one too); and
// at least one running worker must hold the state to heal from (a lone
// worker, or one whose every peer is new, restarts instead). Across nodes
// the rendezvous checks the other nodes' workers for that before it names
// a generation.
bool GroupPolicy::heal_allowed(int w) const {
  if (options_.max_heals <= 0 || stopping_ || any_failed_ || any_succeeded_) return false;
  if (!(heal_ready_[w] || joining_[w]) || heals_[w] >= options_.max_heals) return false;
  // A running worker that holds the training state (not one still joining,
  // nor one already on its way to be replaced: a pass that finds several
  // hung replaces no more of them than leaves one holding the state).
  bool state_survives = options_.generations_from_rendezvous && other_nodes_;
  for (size_t o = 0; o < alive_.size(); ++o) {
    if (static_cast<int>(o) == w || !alive_[o]) continue;
    if (std::find(to_replace_.begin(), to_replace_.end(), static_cast<int>(o)) != to_replace_.end()) continue;
    if (!(heal_ready_[o] || joining_[o]) || hung_[o]) return false;
    if (heal_ready_[o] && !joining_[o]) state_survives = true;
  }
  return state_survives;
}

// The others wait for a hung worker inside a step (their Healer heals
// there), or join as replacements: a heal can complete. Outside one (an
// evaluation, the end of training) they may never reach another
// collective, and a replacement would wait for them for ever.
bool GroupPolicy::peers_in_step(int w) const {
  for (size_t o = 0; o < alive_.size(); ++o) {
    if (static_cast<int>(o) == w || !alive_[o]) continue;
    if (std::find(to_replace_.begin(), to_replace_.end(), static_cast<int>(o)) != to_replace_.end()) continue;
    if (!in_step_[o] && !joining_[o]) return false;
  }
  return true;
}

bool GroupPolicy::any_alive() const {
  // One that waits for its generation is as good as running, until a stop.
  return std::find(alive_.begin(), alive_.end(), true) != alive_.end() || (!awaiting_.empty() && !stopping_);
}

int GroupPolicy::alive_count() const {
  return static_cast<int>(std::count(alive_.begin(), alive_.end(), true));
}

GroupCommand GroupPolicy::signal_running(int sig) {
  // A worker asked to stop no longer fails on its own: however it exits, it
  // was stopped. SIGUSR1/2 ask nothing of the kind.
  if (sig == SIGTERM || sig == SIGKILL || is_stop_signal(sig)) {
    for (size_t w = 0; w < alive_.size(); ++w) {
      if (alive_[w]) term_sent_[w] = true;
    }
  }
  GroupCommand c;
  c.kind = GroupCommand::kSignalRunning;
  c.sig = sig;
  return c;
}

std::vector<GroupCommand> GroupPolicy::begin_stop(int sig, TimePoint now) {
  stopping_ = true;
  stop_started_ = now;
  stop_for_failure_ = stop_signal_ == 0 && round_stop_.empty();
  kill_at_ = now + options_.stop_timeout;
  GroupCommand c = signal_running(sig);
  c.agent_decided = stop_signal_ == 0;
  return {c};
}

bool GroupPolicy::failed_on_its_own(const group_event::Exit& x, TimePoint now) const {
  if (!stopping_ || !x.failed()) return false;
  if (x.exited_before_stop) return true;
  if (x.error_written && *x.error_written <= stop_started_) return true;
  return x.signal == 0 && x.exit_code != 128 + SIGTERM && x.exit_code != 128 + SIGKILL &&
         now - stop_started_ <= kTogether;
}

WorkerEnd GroupPolicy::on_exit(const group_event::Exit& x, TimePoint now) {
  const int w = x.worker;
  const bool failed = x.failed();
  const bool on_its_own = failed_on_its_own(x, now);
  if (std::find(to_replace_.begin(), to_replace_.end(), w) != to_replace_.end()) {
    // A hung worker killed to be replaced: its replacement comes after the exits.
    alive_[w] = false;
    return WorkerEnd::kHealed;
  }
  // A replacement that failed before it could join: once may be chance (a
  // peer died under it); twice in a row is the program (it cannot load its
  // data, a bad device), and another would fail the same way.
  const bool failed_joining = failed && joining_[w] && !heal_ready_[w];
  if (failed_joining && ++join_failures_[w] >= kJoinFailures && !stopping_) {
    alive_[w] = false;
    any_failed_ = true;
    join_failed_ = w;
    return WorkerEnd::kFailed;
  }
  if (!hung_[w] && failed && heal_allowed(w)) {
    alive_[w] = false;
    to_replace_.push_back(w);
    return WorkerEnd::kHealed;
  }
  alive_[w] = false;
  if (hung_[w]) return WorkerEnd::kHung;  // its failure was recorded when it was found hung
  if (term_sent_[w] && failed && on_its_own && stop_for_failure_ && stop_signal_ == 0) {
    any_failed_ = true;
    return WorkerEnd::kFailed;
  }
  if (term_sent_[w]) {
    ++stopped_count_;
    return WorkerEnd::kStopped;
  }
  if (!failed) {
    any_succeeded_ = true;
    finishing_[w] = true;
    return WorkerEnd::kSucceeded;
  }
  any_failed_ = true;
  return WorkerEnd::kFailed;
}

std::vector<GroupCommand> GroupPolicy::after_exits(TimePoint now) {
  std::vector<GroupCommand> out;
  // Replacements, unless another worker's failure in the same batch stops
  // the group (then the ones to replace count as failed too).
  std::vector<int> replace;
  for (int w : to_replace_) {
    if (!alive_[w]) replace.push_back(w);  // a hung one not reaped yet waits for its exit
  }
  if (!replace.empty() && !stopping_ && !any_failed_) {
    to_replace_.erase(std::remove_if(to_replace_.begin(), to_replace_.end(),
                                     [&](int w) { return std::find(replace.begin(), replace.end(), w) != replace.end(); }),
                      to_replace_.end());
    if (options_.generations_from_rendezvous) {
      // One request covers every worker that waits: the generation named
      // for it is newer than any the job has seen.
      if (awaiting_.empty()) {
        GroupCommand ask;
        ask.kind = GroupCommand::kAskGeneration;
        out.push_back(ask);
      }
      awaiting_.insert(awaiting_.end(), replace.begin(), replace.end());
      return out;
    }
    ++generation_;
    return replace_workers(replace, now);
  }
  if (!replace.empty()) any_failed_ = true;
  if (join_failed_ >= 0 && !stopping_) {
    GroupCommand note;
    note.kind = GroupCommand::kNote;
    note.worker = join_failed_;
    note.why = "is not replaced again: its replacements failed " + std::to_string(join_failures_[join_failed_]) +
               " times in a row before they could join (the program fails there: another would too)";
    out.push_back(note);
    join_failed_ = -1;
  }
  // A replacement still joining takes the state from peers that hold it;
  // once one of them has finished (exited 0) the heal cannot complete and
  // it would wait for them for ever: the failure it replaced stands.
  if (any_succeeded_ && !stopping_ && !any_failed_) {
    for (size_t w = 0; w < alive_.size(); ++w) {
      if (!alive_[w] || !joining_[w]) continue;
      GroupCommand note;
      note.kind = GroupCommand::kNote;
      note.worker = static_cast<int>(w);
      note.why = "its replacement cannot heal: the workers that hold the state finished (exited 0) before it "
                 "joined; the failure it replaced stands";
      out.push_back(note);
      any_failed_ = true;
    }
  }
  if (stopping_ || !any_failed_) return out;
  for (auto& c : begin_stop(SIGTERM, now)) out.push_back(c);
  return out;
}

std::vector<GroupCommand> GroupPolicy::replace_workers(const std::vector<int>& workers, TimePoint now) {
  std::vector<GroupCommand> out;
  for (int w : workers) {
    alive_[w] = true;
    term_sent_[w] = false;
    hung_[w] = false;
    heal_ready_[w] = false;  // the replacement says so itself
    joining_[w] = true;
    beats_[w] = 0;
    beat_changed_[w] = now;
    busy_at_beat_[w] = busy_now_[w] = std::chrono::milliseconds(0);  // a new process counts from 0
    slow_said_[w] = false;
    slow_told_at_[w].reset();
    start_grace_[w] = first_beat_after_;  // until a ReplacementStarted says it came from a standby
    ++heals_[w];
    ++heal_count_;
    GroupCommand c;
    c.kind = GroupCommand::kReplaceWorker;
    c.worker = w;
    c.generation = generation_;
    out.push_back(c);
  }
  return out;
}

std::vector<GroupCommand> GroupPolicy::on_generation(uint32_t generation, TimePoint now) {
  if (awaiting_.empty() || stopping_) return {};  // a stop (signal, new round) came first
  std::vector<int> workers;
  workers.swap(awaiting_);
  if (generation == 0) {
    any_failed_ = true;  // refused: the failures stand
    return begin_stop(SIGTERM, now);
  }
  generation_ = generation;
  return replace_workers(workers, now);
}

std::vector<GroupCommand> GroupPolicy::on_signal(int sig, TimePoint now) {
  if (sig == SIGTSTP) {
    // SIGSTOP: a worker may catch or ignore SIGTSTP, and Ctrl-Z must pause it.
    if (!paused_at_) {
      paused_at_ = now;
      stopped_before_pause_ = stopped_;
    }
    GroupCommand self;
    self.kind = GroupCommand::kSuspendSelf;
    return {signal_running(SIGSTOP), self};
  }
  if (sig == SIGCONT) {
    // However long the pause (and whoever stopped ddprun), the workers had
    // no chance to beat: their silence starts again now.
    std::fill(beat_changed_.begin(), beat_changed_.end(), now);
    if (paused_at_ && progress_) {
      progress_->shift(std::chrono::duration_cast<std::chrono::milliseconds>(now - *paused_at_), now);
    }
    if (paused_at_ && stopping_ && !killed_) kill_at_ += now - *paused_at_;
    if (!paused_at_) return {};  // ddprun alone was stopped: the workers' stops are not its own
    paused_at_.reset();
    GroupCommand cont = signal_running(SIGCONT);
    for (size_t w = 0; w < stopped_before_pause_.size(); ++w) {
      if (stopped_before_pause_[w]) cont.except.push_back(static_cast<int>(w));
    }
    return {cont};
  }
  if (!is_stop_signal(sig)) return {signal_running(sig)};  // SIGUSR1/2: pass on
  if (stop_signal_ != 0 || (stopping_ && sig == SIGINT)) {
    // Asked twice: stop waiting for a graceful exit.
    killed_ = true;
    return {signal_running(SIGKILL)};
  }
  stop_signal_ = sig;
  if (stopping_) return {signal_running(sig)};
  return begin_stop(sig, now);
}

void GroupPolicy::on_replacement_started(int w, bool from_standby, TimePoint now) {
  beat_changed_[w] = now;
  busy_at_beat_[w] = busy_now_[w] = std::chrono::milliseconds(0);  // a new process counts from 0
  slow_said_[w] = false;
  slow_told_at_[w].reset();
  finishing_[w] = in_step_[w] = false;
  start_grace_[w] = from_standby ? std::chrono::milliseconds(0) : first_beat_after_;
  if (learned_) learned_->restart(w);
  if (progress_) progress_->restart(w);
  stopped_[w] = false;
  in_phase_[w] = phase_seen_[w] = false;
  awaited_[w] = std::chrono::milliseconds(0);
}

std::vector<GroupCommand> GroupPolicy::on_replace(const group_event::Replace& r) {
  auto kill = replace_chosen(r.worker, r.why);
  for (auto& c : kill) {
    c.straggler = r.reason == group_event::Replace::kStraggler;
    c.apart = r.reason == group_event::Replace::kApart;
  }
  return kill;
}

// A worker the agent chose to replace (not hung, not failed): killed, and
// replaced once its exit is seen, while it may be.
std::vector<GroupCommand> GroupPolicy::replace_chosen(int w, const std::string& why) {
  if (!may_replace(w)) return {};
  if (std::find(to_replace_.begin(), to_replace_.end(), w) != to_replace_.end()) return {};
  to_replace_.push_back(w);  // replaced once its exit is seen
  GroupCommand kill;
  kill.kind = GroupCommand::kKillWorker;
  kill.worker = w;
  kill.why = why;
  kill.heal = true;
  return {kill};
}

GroupCommand GroupPolicy::warm_standbys() {
  options_.wants_standbys = false;  // once
  GroupCommand c;
  c.kind = GroupCommand::kWarmStandbys;
  return c;
}

bool GroupPolicy::standbys_by_clock() const {
  return options_.wants_standbys && options_.standby_warmup.count() > 0 && !stopping_;
}

std::vector<GroupCommand> GroupPolicy::on_round_stop(const std::string& why, TimePoint now) {
  if (stopping_) return {};  // already stopping, for whatever reason
  round_stop_ = why;
  return begin_stop(SIGTERM, now);
}

std::vector<GroupCommand> GroupPolicy::on_tick(TimePoint now) {
  if (standbys_by_clock() && now >= started_ + options_.standby_warmup) return {warm_standbys()};
  if (!stopping_ || killed_ || now < kill_at_ || !any_alive()) return {};
  killed_ = true;
  return {signal_running(SIGKILL)};
}

int GroupPolicy::poll_timeout_ms(TimePoint now) const {
  if (stopping_ && !killed_) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(kill_at_ - now);
    return static_cast<int>(std::max<int64_t>(0, left.count()));
  }
  const bool watching = options_.heartbeats && (hang_watching() || options_.wants_standbys);
  if (watching && !stopping_) return static_cast<int>(options_.monitor_interval.count());
  if (standbys_by_clock()) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        started_ + options_.standby_warmup - now);
    return static_cast<int>(std::max<int64_t>(0, left.count()));
  }
  return -1;
}

GroupPolicy::Outcome GroupPolicy::outcome() const {
  if (stop_signal_ != 0) return kStoppedBySignal;
  if (any_failed_ || std::find(hung_.begin(), hung_.end(), true) != hung_.end()) return kWorkerFailed;
  if (!round_stop_.empty()) return kStoppedForRound;
  return kSucceeded;
}

}  // namespace ddprun
