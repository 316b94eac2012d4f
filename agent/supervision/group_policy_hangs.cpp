// GroupPolicy, hangs: the slots read with the beats, a silence judged
// (hung, or slow and excused), the agent's own stalls, and the progress
// watch's verdicts. The rest of the policy is in group_policy.cpp.
#include <signal.h>

#include <algorithm>
#include <cstdio>

#include "agent/supervision/group_policy.h"

namespace ddprun {

// The slots as read now (an exited worker's reading is ignored), then the
// silences judged, then the progress.
std::vector<GroupCommand> GroupPolicy::on_beats(const group_event::Beats& b, TimePoint now) {
  take(b.heal);
  const size_t n = std::min(b.workers.size(), alive_.size());
  std::vector<uint64_t> counts(alive_.size(), 0);
  std::vector<std::chrono::milliseconds> busy;
  if (b.busy_known) busy.assign(alive_.size(), std::chrono::milliseconds(0));
  std::vector<ProgressReading> readings(alive_.size());
  for (size_t w = 0; w < n; ++w) {
    if (!alive_[w]) continue;
    const auto& r = b.workers[w];
    finishing_[w] = r.finishing;
    in_phase_[w] = r.silence_expected;
    if (in_phase_[w]) {
      phase_seen_[w] = true;
      phase_left_[w] = now;
    }
    in_step_[w] = r.in_step;
    stopped_[w] = r.stopped;
    awaited_[w] = r.awaited;
    counts[w] = r.beats;
    if (b.busy_known) busy[w] = r.busy;
    readings[w] = r.progress;
  }
  auto out = judge_silence(counts, now, busy);
  for (auto& c : judge_progress(std::move(readings), now)) out.push_back(std::move(c));
  return out;
}

// Silence that is a hang: beyond an explicit --hang-timeout, or beyond
// the learned limit (--hang-timeout auto) for a worker it watches outside
// an announced phase. Programs without worker_lib never beat and are never
// judged; a replacement, which runs worker_lib, is judged from its start
// plus its allowance (the time the first workers took to beat).
std::string GroupPolicy::hung_because(int w, uint64_t count, TimePoint now) const {
  using std::chrono::milliseconds;
  const auto s = [](milliseconds t) { return t.count() / 1000.0; };
  const auto silent = std::chrono::duration_cast<milliseconds>(now - beat_changed_[w]);
  if (count == 0 && !joining_[w]) return "";  // not beating yet, maybe never (no worker_lib)
  const milliseconds grace = count == 0 ? start_grace_[w] : milliseconds(0);
  char head[96];
  if (count == 0) {
    std::snprintf(head, sizeof(head), "hung: a replacement that never beat, %.1f s after its start", s(silent));
  } else {
    std::snprintf(head, sizeof(head), "hung: no heartbeat for %.1f s", s(silent));
  }
  char start[48] = "";
  if (count == 0) std::snprintf(start, sizeof(start), ", and %.1f s to start", s(grace));
  char why[320];
  if (options_.hang_timeout.count() > 0 && silent >= options_.hang_timeout + grace) {
    std::snprintf(why, sizeof(why), "%s (--hang-timeout %.1f s%s)", head, s(options_.hang_timeout), start);
    return why;
  }
  if (!learned_) return "";
  // A fresh replacement is judged once the job has learned its rhythm from
  // the others; any other worker once it showed its own.
  const bool judged = count == 0 ? learned_->longest().count() > 0 : learned_->watching(w);
  if (!judged) {
    // Not learned yet, but stopped (SIGSTOP, a debugger): it computes
    // nothing, so the first steps' bound holds (four times the floor: 60 s).
    const auto bound = 4 * learned_->options().floor;
    if (!stopped_[w] || silent < bound + grace) return "";
    std::snprintf(why, sizeof(why),
                  "%s, stopped (--hang-timeout auto has not learned the job's rhythm yet: the first steps' bound, "
                  "%.1f s)",
                  head, s(bound));
    return why;
  }
  if (in_phase_[w]) {
    // Announced: only the others' wait for it tells a hang.
    if (awaited_[w] < learned_->limit() || silent < learned_->limit()) return "";
    std::snprintf(why, sizeof(why),
                  "%s in a phase it announced, while the others have waited %.1f s for it in a collective "
                  "(--hang-timeout auto: %.1f s)",
                  head, s(awaited_[w]), s(learned_->limit()));
    return why;
  }
  const auto quiet = std::chrono::duration_cast<milliseconds>(now - std::max(beat_changed_[w], phase_left_[w]));
  if (quiet < learned_->limit() + grace) return "";
  std::snprintf(why, sizeof(why),
                "%s (--hang-timeout auto: %.1f s, %dx the longest gap between heartbeats, %.2f s, and at least "
                "%.1f s%s)",
                head, s(learned_->limit()), learned_->options().multiple, s(learned_->longest()),
                s(learned_->options().floor), start);
  return why;
}

void GroupPolicy::on_own_stall(std::chrono::milliseconds stalled, TimePoint now) {
  if (stalled.count() <= 0) return;
  for (size_t w = 0; w < alive_.size(); ++w) {
    beat_changed_[w] = std::min(beat_changed_[w] + stalled, now);
    phase_left_[w] = std::min(phase_left_[w] + stalled, now);
  }
  if (progress_) progress_->shift(stalled, now);
}

std::chrono::milliseconds GroupPolicy::busy_since_beat(int w) const {
  return std::max(std::chrono::milliseconds(0), busy_now_[w] - busy_at_beat_[w]);
}

// A worker silent past its limit (hung_because) is hung unless it is slow
// (see kBusyShare in the header); a hung one is killed at once (it may be
// stopped, or stuck), and replaced if it may heal and is inside a step,
// else the others are stopped. Only an announced phase excuses silence,
// and only the learned limit's (see hung_because): a worker that waits for
// its peers beats (its pulse), and a stopped one cannot.
std::vector<GroupCommand> GroupPolicy::judge_silence(const std::vector<uint64_t>& counts, TimePoint now,
                                                     const std::vector<std::chrono::milliseconds>& busy) {
  using std::chrono::milliseconds;
  std::vector<GroupCommand> out;
  for (size_t w = 0; w < busy.size() && w < busy_now_.size(); ++w) busy_now_[w] = busy[w];
  if (!options_.heartbeats || stopping_) return out;
  const auto s = [](milliseconds t) { return t.count() / 1000.0; };
  // Silent workers that are busy: slow, and maybe what the idle ones wait for.
  auto is_busy = [&](size_t w) {
    const auto silent = std::chrono::duration_cast<milliseconds>(now - beat_changed_[w]);
    return !busy.empty() && silent.count() > 0 && busy_since_beat(static_cast<int>(w)).count() >= kBusyShare * silent.count();
  };
  // (Busy through a silence of a second at least: a step's usual compute
  // between two beats excuses nobody.)
  bool someone_busy = false;
  for (size_t w = 0; w < alive_.size() && w < counts.size(); ++w) {
    if (alive_[w] && counts[w] == beats_[w] && now - beat_changed_[w] >= kLongSilence && is_busy(w)) {
      someone_busy = true;
    }
  }
  bool all_beating = true;
  std::vector<GroupCommand> kills;
  for (size_t w = 0; w < alive_.size() && w < counts.size(); ++w) {
    if (!alive_[w]) continue;
    // Killed to be replaced: silent until it is reaped, and no longer judged.
    if (std::find(to_replace_.begin(), to_replace_.end(), static_cast<int>(w)) != to_replace_.end()) continue;
    if (counts[w] == 0) all_beating = false;
    if (counts[w] != beats_[w]) {
      if (beats_[w] == 0 && heals_[w] == 0) {
        // A first worker's first beat: how long a fresh process takes.
        first_beat_after_ = std::max(first_beat_after_,
                                     std::chrono::duration_cast<milliseconds>(now - started_));
      }
      // The rhythm, leaving out gaps that spanned an announced phase.
      if (learned_ && beats_[w] != 0 && !phase_seen_[w]) {
        learned_->on_gap(static_cast<int>(w), std::chrono::duration_cast<milliseconds>(now - beat_changed_[w]));
      }
      phase_seen_[w] = in_phase_[w];
      beats_[w] = counts[w];
      beat_changed_[w] = now;
      busy_at_beat_[w] = busy_now_[w];
      slow_said_[w] = false;
      continue;
    }
    if (!hang_watching() || finishing_[w]) continue;
    const std::string why = hung_because(static_cast<int>(w), counts[w], now);
    if (why.empty()) continue;
    const auto silent = std::chrono::duration_cast<milliseconds>(now - beat_changed_[w]);
    if ((is_busy(w) || someone_busy) && !stopped_[w]) {
      // Slow, not hung: said once a silence, and at most once every
      // kSlowNoteEvery a worker.
      const bool told_lately = slow_told_at_[w] && now - *slow_told_at_[w] < kSlowNoteEvery;
      if (!slow_said_[w] && !told_lately) {
        slow_said_[w] = true;
        slow_told_at_[w] = now;
        GroupCommand note;
        note.kind = GroupCommand::kNote;
        note.worker = static_cast<int>(w);
        note.silent = silent;
        char text[320];
        if (is_busy(w)) {
          std::snprintf(text, sizeof(text),
                        "is slow, not hung: silent for %.1f s, but it ran or waited to run for %.1f s of "
                        "it (a long step, or a loaded machine); it goes on",
                        s(silent), s(busy_since_beat(static_cast<int>(w))));
        } else {
          std::snprintf(text, sizeof(text),
                        "has had no heartbeat for %.1f s, but another worker of this node is busy and slow "
                        "meanwhile (it may wait for that one); it goes on",
                        s(silent));
        }
        note.why = text;
        out.push_back(note);
      }
      continue;
    }
    GroupCommand kill;
    kill.kind = GroupCommand::kKillWorker;
    kill.worker = static_cast<int>(w);
    kill.why = why;
    kill.silent = silent;
    kill.heal = heal_allowed(static_cast<int>(w)) && peers_in_step(static_cast<int>(w));
    if (kill.heal) {
      to_replace_.push_back(static_cast<int>(w));  // replaced once its exit is seen
    } else {
      hung_[w] = true;
    }
    kills.push_back(kill);
  }
  out.insert(out.end(), kills.begin(), kills.end());
  const bool stop = std::any_of(kills.begin(), kills.end(), [](const GroupCommand& c) { return !c.heal; });
  if (stop) {
    for (auto& c : begin_stop(SIGTERM, now)) out.push_back(c);
    return out;
  }
  if (all_beating && options_.wants_standbys && options_.standby_warmup.count() == 0) {
    out.push_back(warm_standbys());
  }
  return out;
}

std::vector<GroupCommand> GroupPolicy::judge_progress(std::vector<ProgressReading> readings, TimePoint now) {
  std::vector<GroupCommand> out;
  if (!options_.heartbeats || stopping_ || !progress_) return out;
  for (size_t w = 0; w < readings.size() && w < alive_.size(); ++w) {
    ProgressReading& r = readings[w];
    // Killed to be replaced, or judged already: no longer watched.
    const bool replacing = std::find(to_replace_.begin(), to_replace_.end(), static_cast<int>(w)) != to_replace_.end();
    r.alive = alive_[w] && !replacing && !hung_[w];
    r.joining = joining_[w];
    r.in_phase = in_phase_[w];
    r.finishing = finishing_[w];
    r.stopped = stopped_[w];
  }
  const ProgressVerdict v = progress_->observe(readings, now);
  if (v.kind == ProgressVerdict::kNone) return out;
  bool stop = false;
  for (int w : v.workers) {
    GroupCommand kill;
    kill.kind = GroupCommand::kKillWorker;
    kill.worker = w;
    kill.why = v.why;
    kill.silent = v.still;
    // A rank that spins is replaced as a hung one is; a job in which every
    // rank waits has nobody to replace.
    kill.heal = v.kind == ProgressVerdict::kSpins && heal_allowed(w) && peers_in_step(w);
    if (kill.heal) {
      to_replace_.push_back(w);
    } else {
      hung_[w] = true;
      stop = true;
    }
    out.push_back(kill);
  }
  if (stop) {
    for (auto& c : begin_stop(SIGTERM, now)) out.push_back(c);
  }
  return out;
}

}  // namespace ddprun
