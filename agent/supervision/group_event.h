// What GroupPolicy::step takes: one event of one attempt of a node's
// workers, each carrying everything its decision needs (what the workers'
// slots said is read with the exits or beats it explains, never set
// beforehand). WorkerGroup reads them from processes and shared memory;
// the policy's tests make them up with a fake clock.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <variant>
#include <vector>

#include "agent/health/progress_watch.h"

namespace ddprun {
namespace group_event {

// The heal words of the workers' slots (heartbeat_layout.h), read just
// before the exits or beats they come with: whether each worker says it
// can heal around a failed peer (absent: not read, an exited worker), and,
// when heal generations are the rendezvous's, whether other nodes run now
// (they hold the state too, so a node may heal even its only worker).
struct HealWords {
  std::vector<std::optional<bool>> ready;
  std::optional<bool> other_nodes;
};

// One worker's exit, and the evidence of whose failure it was: a worker
// asked to stop that failed counts as failed on its own (not stopped) when
// it had exited already when the stop signal was sent, wrote its error file
// before the stop, or exited with a code of its own (not a signal's, not
// 128 + SIGTERM or SIGKILL) within GroupPolicy::kTogether of the stop; and
// only when a worker failure began the stop (not a signal to ddprun, not
// the rendezvous).
struct Exit {
  using TimePoint = std::chrono::steady_clock::time_point;
  int worker = -1;
  int exit_code = 0;
  int signal = 0;  // the signal that ended it (0: it exited)
  bool exited_before_stop = false;
  std::optional<TimePoint> error_written{};  // when its error file was written, if it was
  std::optional<TimePoint> reaped{};         // when it was reaped (absent: the event's time)
  bool failed() const { return signal != 0 || exit_code != 0; }
};

// The exits reaped together (one SIGCHLD's worth): the first failure
// stops the others only after all of them count, so that workers that
// failed together all count as failures. GroupStep::ends says how each
// exit counted, in this order.
struct Exits {
  std::vector<Exit> exits;
  HealWords heal;
};

// One worker's slot and process, read in one pass (ignored for workers
// that exited).
struct WorkerReading {
  uint64_t beats = 0;  // its heartbeat counter
  // It announces a phase without collectives (a checkpoint, an
  // evaluation): the learned hang timeout neither learns from nor fires on
  // that silence, and counts the silence after it from its end; an
  // explicit --hang-timeout still counts it.
  bool silence_expected = false;
  // Inside a ddp::Healer step: a hung worker is replaced only while the
  // others are inside one (or join as replacements).
  bool in_step = false;
  // Past its last step (its final evaluation and saves are over): never
  // judged hung, however long its exit takes.
  bool finishing = false;
  // Its process is stopped now (SIGSTOP, a debugger; not the agent's own
  // pause): it computes nothing and waits for nobody.
  bool stopped = false;
  // How long its peers have waited for it inside a collective it never
  // entered (the flight records; 0: nobody waits for it).
  std::chrono::milliseconds awaited{0};
  // CPU time its processes ran or waited, runnable, to run (cumulative;
  // see Beats::busy_known).
  std::chrono::milliseconds busy{0};
  // Its progress counter and CPU times for the progress watch (alive,
  // joining and the phase are the policy's to fill in).
  ProgressReading progress;
};

// The heartbeat counters and slots read (every monitor interval).
struct Beats {
  std::vector<WorkerReading> workers;
  bool busy_known = false;  // every worker's busy time could be read
  HealWords heal;
};

// The heal words alone (the agent asks whether every worker heals in place).
struct HealRead {
  HealWords heal;
};

// A signal to ddprun (SIGINT, SIGTERM, SIGTSTP, SIGCONT, SIGUSR1, ...).
struct Signal {
  int sig = 0;
};

// The rendezvous says the workers must stop (a new round, the job failed).
struct RoundStop {
  std::string why;
};

// The rendezvous's answer to kAskGeneration: the generation to replace the
// waiting workers in, or 0 when it refused.
struct GenerationNamed {
  uint32_t generation = 0;
};

// The clock, each time round the loop.
struct Tick {};

// The agent itself did not run for `stalled` (its loop woke that much
// later than it asked): that stretch is nobody's silence.
struct OwnStall {
  std::chrono::milliseconds stalled{0};
};

// The agent chose to replace worker w (not hung, not failed): a straggler
// (--straggler-action replace) or a replica found apart twice (--verify-every).
struct Replace {
  enum Why { kStraggler, kApart };
  int worker = -1;
  Why reason = kStraggler;
  std::string why;
};

// Worker w's replacement (kReplaceWorker) started, from a warm standby (in
// ddp::init already: it beats at once) or as a fresh process.
struct ReplacementStarted {
  int worker = -1;
  bool from_standby = false;
};

// Whether every rank of the job runs on this node (a round that grows or
// shrinks changes it): the progress watch judges a job in which every rank
// waits only then.
struct WholeJob {
  bool whole = false;
};

}  // namespace group_event

using GroupEvent =
    std::variant<group_event::Exits, group_event::Beats, group_event::HealRead, group_event::Signal,
                 group_event::RoundStop, group_event::GenerationNamed, group_event::Tick, group_event::OwnStall,
                 group_event::Replace, group_event::ReplacementStarted, group_event::WholeJob>;

}  // namespace ddprun
