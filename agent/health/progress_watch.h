// Hang detection by progress: a job is hung when its training stops
// moving, whatever its processes do. Heartbeats (GroupPolicy, Beats events)
// prove that a worker lives: a pulse beats while it waits in a collective,
// so a deadlock in which every rank waits, or a rank that spins while the
// others wait for it, never falls silent. This watch reads each worker's
// progress counter instead (flight_record.h's `advanced`: a collective
// that returned, a Python optimizer step) with its CPU times, and finds
// two hangs:
//
//  - A rank that spins: no step of its own for the spin bound, and as much
//    CPU time run meanwhile (it computes, or holds the GIL, for ever),
//    while a peer of this node idles (waits for it). Its CPU time, not
//    the clock, is what counts: a loaded machine makes a slow rank's step
//    take longer, not its CPU time, so slowness is never judged.
//  - Every rank waits: no rank of the job advanced for the stuck limit and
//    none of them was busy meanwhile (each ran or waited to run for less
//    than kBusyShare of that time) and none writes a checkpoint it
//    announced. Only where the whole job runs on this node (another
//    node's rank may be the slow one the others wait for) and once some
//    rank has advanced (a start-up takes what it takes).
//
// The limits. A job in which every rank waits is hung after the stuck
// limit: the largest of the stuck floor (kStuckFloor, or four times
// --hang-timeout auto's floor: 60 s by default), --hang-timeout N, and
// `multiple` times the longest gap between a worker's advances (its first
// gaps, and those that spanned an announced phase, left out). A rank
// spins past the spin bound: the largest of the spin floor (kSpinFloor, or
// twice auto's floor: 30 s), --hang-timeout N and `multiple` times the
// most CPU time one gap took. Both are far above the heartbeats' limit on
// purpose: a stopped or sleeping rank is found by its silence in seconds;
// these hangs are found in a minute instead of a collective's 30-minute
// timeout, and a short --hang-timeout never makes a pause or a slow step
// of a healthy job look like one.
// Pure: fed readings and the clock, asked for a verdict; unit-tested.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "agent/health/learned_timeout.h"

namespace ddprun {

struct ProgressWatchOptions {
  std::chrono::milliseconds explicit_limit{0};  // --hang-timeout N (0: none)
  // --hang-timeout auto's learning (floor, multiple, gaps); absent with an
  // explicit limit only.
  std::optional<LearnedTimeoutOptions> learned;
  bool whole_job = true;  // every rank of the job runs on this node
};

// One worker, as read now.
struct ProgressReading {
  bool alive = false;
  uint64_t advanced = 0;               // its progress counter
  std::chrono::milliseconds used{0};   // CPU time run, cumulative
  std::chrono::milliseconds busy{0};   // run or waited runnable, cumulative
  bool cpu_known = false;
  bool stopped = false;     // SIGSTOP or a debugger (it computes nothing); GroupPolicy fills it in
  bool in_phase = false;    // an announced phase (evaluation, checkpoint…)
  bool checkpoint = false;  // that phase is a checkpoint (I/O takes what it takes)
  bool finishing = false;   // past its last step
  bool joining = false;     // a replacement that has not joined yet
};

struct ProgressVerdict {
  enum Kind { kNone, kSpins, kAllWait };
  Kind kind = kNone;
  std::vector<int> workers;  // kSpins: the spinning one; kAllWait: every live one
  std::string why;
  std::chrono::milliseconds still{0};  // how long without a step
};

class ProgressWatch {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  static constexpr std::chrono::seconds kSpinFloor{30};
  static constexpr std::chrono::seconds kStuckFloor{60};
  static constexpr double kBusyShare = 0.5;

  ProgressWatch(int workers, ProgressWatchOptions options);

  ProgressVerdict observe(const std::vector<ProgressReading>& now_read, TimePoint now);
  // Worker w is a fresh process (a replacement): its start-up comes again
  // (its CPU times count from its next reading).
  void restart(int w);
  // Whether every rank of the job runs on this node (a round that shrank
  // to this node alone makes it so).
  void set_whole_job(bool whole) { options_.whole_job = whole; }
  // Nobody could run for `stalled` (the agent was stopped, or paused the
  // workers): that stretch is nobody's stillness.
  void shift(std::chrono::milliseconds stalled, TimePoint now);

  // The limits as things stand (see the top of this file).
  std::chrono::milliseconds stuck_limit() const;
  std::chrono::milliseconds spin_bound() const;
  std::chrono::milliseconds stuck_floor() const;
  std::chrono::milliseconds spin_floor() const;

 private:
  struct Worker {
    uint64_t advanced = 0;
    std::optional<TimePoint> advanced_at;  // none: not advanced since its start
    std::chrono::milliseconds used_at{0};  // CPU time run when it last advanced
    int gaps = 0;                          // gaps seen since its start
    bool phase_seen = false;               // in an announced phase since it last advanced
    bool rebase = false;                   // a fresh process: its next reading is its baseline
    std::optional<TimePoint> started_at;   // a fresh process: when it was first read
  };
  int multiple() const;

  ProgressWatchOptions options_;
  std::vector<Worker> w_;
  std::chrono::milliseconds longest_gap_{0};   // wall
  std::chrono::milliseconds longest_used_{0};  // CPU time run in a gap
  // The node's newest advance, and every worker's busy time then.
  std::optional<TimePoint> any_at_;
  std::vector<std::chrono::milliseconds> busy_at_any_;
};

}  // namespace ddprun
