// WorkerGroup, beats and hangs: the slots read on every beat for the
// policy (beats, phases, progress, CPU time, who waits on whom); a hang:
// every live worker asked for its stacks before any kill, the other nodes'
// ranks asked for, the verdict; and the asked-for stacks of a live job (the
// stack signal sent to ddprun).
#include "agent/supervision/worker_group.h"
#include "agent/supervision/worker_group_worker.h"

#include <errno.h>
#include <signal.h>
#include <stdlib.h>
#include <unistd.h>

#include <cstdio>
#include <cstring>
#include <future>
#include <spdlog/spdlog.h>

#include "agent/health/cpu_busy.h"
#include "agent/health/hang_verdict.h"
#include "agent/base/monotonic_clock.h"
#include "channel/event_log.h"
#include "channel/output_file.h"
#include "channel/stack_dump.h"

namespace ddprun {

namespace {

// Writes text to a new file STEM-XXXXXX.txt ("-a1B2c3"), made with O_EXCL
// and mode 0600 (mkstemps), so that a file planted under a guessable name
// in a shared TMPDIR is never written to. Returns its path, or "" with err
// set.
std::string write_new_file(const std::string& stem, const std::string& text, std::string& err) {
  std::string name = stem + "-XXXXXX.txt";
  const int fd = mkstemps(name.data(), 4);
  if (fd < 0) {
    err = name + ": " + std::strerror(errno);
    return "";
  }
  err = channel::write_and_close(fd, name, text);
  return err.empty() ? name : "";
}

}  // namespace

void WorkerGroup::start_stack_collection(bool for_hang) {
  collecting_for_hang_ = for_hang;
  std::vector<StackTarget> targets;
  if (options_.heartbeats) {
    for (size_t i = 0; i < workers_.size(); ++i) {
      if (!policy_->alive(static_cast<int>(i))) continue;
      const auto& id = workers_[i]->launch->id;
      targets.push_back({id.rank, workers_[i]->pid, options_.heartbeats->stack_file(id.local_rank)});
    }
  }
  if (for_hang) {
    spdlog::warn("rank(s) hung: asking {} worker(s) for their stacks before any kill", targets.size());
  } else {
    spdlog::info("asked for the stacks ({}): asking {} worker(s); the job goes on",
                 signal_name(channel::stack_dump_signal()), targets.size());
  }
  const auto start = std::chrono::steady_clock::now();
  collecting_ = std::make_unique<StackCollection>(std::move(targets), start);
  if (for_hang && options_.asks_other_ranks && options_.host) {
    remote_ = std::async(std::launch::async, [host = options_.host] { return host->other_ranks(); });
    remote_deadline_ = start + std::chrono::seconds(3);
  }
}

void WorkerGroup::check_stack_collection(bool now) {
  if (!collecting_) return;
  const auto t = std::chrono::steady_clock::now();
  // The other nodes' answer too, unless it is late.
  const bool remote_done = !remote_.valid() || t >= remote_deadline_ ||
                           remote_.wait_for(std::chrono::seconds(0)) == std::future_status::ready;
  if (!((collecting_->done(t) && remote_done) || now)) return;
  hang_verdict_ = finish_stack_collection();
  collecting_.reset();
  auto commands = std::move(deferred_);
  deferred_.clear();
  for (const auto& c : commands) run_command(c);  // the kills carry the verdict
}

// The verdict, the stacks in short on the console and whole in the stacks
// file; returns the verdict.
std::string WorkerGroup::finish_stack_collection() {
  const std::vector<StackReport> reports = collecting_->reports();
  const int64_t now_ns = monotonic_ns();
  std::vector<RankView> views;
  for (size_t i = 0; i < workers_.size(); ++i) {
    const auto& id = workers_[i]->launch->id;
    RankView v;
    v.rank = id.rank;
    for (const auto& c : deferred_) {
      v.hung = v.hung || (c.kind == GroupCommand::kKillWorker && c.worker == static_cast<int>(i));
    }
    if (options_.heartbeats) v.flight = options_.heartbeats->flight(id.local_rank);
    v.stacks.state = StackReport::kGone;
    for (const auto& r : reports) {
      if (r.rank == id.rank && r.pid == workers_[i]->pid) v.stacks = r;
    }
    if (!policy_->alive(static_cast<int>(i)) && v.flight.empty()) continue;
    views.push_back(std::move(v));
  }
  if (remote_.valid()) {
    if (remote_.wait_for(std::chrono::seconds(0)) == std::future_status::ready) {
      try {
        for (auto& v : remote_.get()) views.push_back(std::move(v));
      } catch (const std::exception& e) {
        spdlog::warn("hang: the verdict is this node's only (the other nodes' collectives: {})", e.what());
      }
    } else {
      spdlog::warn("hang: the verdict is this node's only (the rendezvous did not say where the other nodes' ranks are in time)");
    }
    // Done with it. A call still under way (only when the collection was cut
    // short) is waited for here, up to its own timeout (2 s).
    remote_ = {};
  }
  std::sort(views.begin(), views.end(), [](const RankView& a, const RankView& b) { return a.rank < b.rank; });
  const HangVerdict judged = judge_hang(views, now_ns);
  const std::string& verdict = judged.text;
  hang_suspects_ = judged.suspects;
  const char* title = collecting_for_hang_ ? "hang" : "stacks";
  spdlog::warn("{}: {}", title, verdict);
  for (const auto& v : views) {
    if (v.stacks.state == StackReport::kRemote) continue;
    if (v.stacks.state == StackReport::kAnswered && !v.stacks.where.empty()) {
      spdlog::warn("  rank {} (pid {}) is in: {}", v.rank, v.stacks.pid, v.stacks.where);
    } else if (v.stacks.state != StackReport::kAnswered) {
      spdlog::warn("  rank {}: {}", v.rank, describe_state(v.stacks.state));
    }
  }
  std::string stem = options_.stacks_stem;
  // Asked for on a live job: a file per request.
  if (!collecting_for_hang_ && !stem.empty()) stem += "-asked-" + std::to_string(++asked_);
  if (!stem.empty()) {
    std::string text = std::string(title) + ": " + verdict + "\n";
    for (const auto& v : views) {
      if (v.stacks.state == StackReport::kRemote) continue;
      text += "\n=== rank " + std::to_string(v.rank) + " (pid " + std::to_string(v.stacks.pid) + "): " +
              (v.stacks.state == StackReport::kAnswered ? "stacks" : describe_state(v.stacks.state)) + "\n" +
              v.stacks.text;
    }
    std::string err;
    stacks_file_ = write_new_file(stem, text, err);
    if (stacks_file_.empty()) {
      spdlog::warn("cannot write the stacks: {}", err);
    } else {
      spdlog::warn("every rank's stacks, all threads: {}", stacks_file_);
    }
    if (!collecting_for_hang_ && !options_.asked_stacks_copy.empty()) {
      // Renamed into place: `ddprun status --stacks` waits for the rename.
      const std::string tmp = options_.asked_stacks_copy + ".tmp";
      std::string copy_err = channel::write_output_file(tmp, text);
      if (copy_err.empty() && std::rename(tmp.c_str(), options_.asked_stacks_copy.c_str()) != 0) {
        copy_err = options_.asked_stacks_copy + ": " + std::strerror(errno);
        std::remove(tmp.c_str());
      }
      if (!copy_err.empty()) {
        // `ddprun status --stacks` waits for this copy: say why it will not
        // come, here and (a line is smaller than the stacks) to it.
        const std::string why = "cannot write the copy of the stacks that `ddprun status --stacks` reads (" +
                                copy_err + "); the stacks are on the job's console" +
                                (stacks_file_.empty() ? "" : " and in " + stacks_file_);
        spdlog::warn("{}", why);
        const std::string err_path = options_.asked_stacks_copy + ".err";
        if (channel::write_output_file(err_path + ".tmp", why + "\n").empty()) {
          std::rename((err_path + ".tmp").c_str(), err_path.c_str());
        }
      }
    }
  }
  return verdict;
}

// Its failure dates from its last sign of life.
void WorkerGroup::record_hung(const GroupCommand& kill, const std::string& verdict) {
  const Worker& w = *workers_[kill.worker];
  WorkerExit e;
  e.rank = w.launch->id.rank;
  e.local_rank = w.launch->id.local_rank;
  e.pid = w.pid;
  e.host = options_.host_name;
  e.time = std::chrono::system_clock::now() -
           std::chrono::duration_cast<std::chrono::system_clock::duration>(kill.silent);
  e.reason = kill.why + (verdict.empty() ? "" : "; " + verdict);
  e.blamed = std::find(hang_suspects_.begin(), hang_suspects_.end(), e.rank) != hang_suspects_.end();
  spdlog::warn("rank {} (pid {}) {}; killing it and {}", e.rank, e.pid, e.reason,
               kill.heal ? "replacing it while the others go on" : "stopping the other workers");
  if (options_.events) {
    options_.events->write(channel::events::kHang,
                           {{"attempt", options_.attempt}, {"rank", e.rank}, {"local_rank", e.local_rank},
                            {"silent_s", kill.silent.count() / 1000.0}, {"verdict", verdict},
                            {"stacks_file", stacks_file_}});
  }
  if (kill.heal) {
    killed_hung_[kill.worker] = kill.why;  // its exit is a heal's, told when it is reaped
    return;
  }
  result_.failures.push_back(std::move(e));
}

// One reading of every live worker's slot and process (the policy judges
// silences and progress from it).
void WorkerGroup::check_heartbeats() {
  if (!options_.heartbeats) return;
  const auto now = std::chrono::steady_clock::now();
  group_event::Beats beats;
  beats.heal = heal_words();
  beats.workers.resize(workers_.size());
  beats.busy_known = true;  // how busy each worker was (cgroup or /proc): known for all or none
  std::vector<channel::Phase> phases(workers_.size(), channel::Phase::kNone);
  for (size_t i = 0; i < workers_.size(); ++i) {
    if (!policy_->alive(static_cast<int>(i))) continue;
    const int lr = workers_[i]->launch->id.local_rank;
    group_event::WorkerReading& r = beats.workers[i];
    phases[i] = options_.heartbeats->phase(lr);
    r.finishing = phases[i] == channel::Phase::kFinishing;
    r.silence_expected = phases[i] != channel::Phase::kNone && !r.finishing;
    r.in_step = options_.heartbeats->in_step(lr);
    r.beats = options_.heartbeats->read(lr);
    r.progress.advanced = options_.heartbeats->advanced(lr);
    r.progress.checkpoint = phases[i] == channel::Phase::kCheckpoint;
    // The agent's own pause (Ctrl-Z) stops them too, but then it does not run.
    r.stopped = process_stopped(workers_[i]->pid);
    if (const auto t = cpu_times(workers_[i]->cgroup, workers_[i]->pid)) {
      r.busy = r.progress.busy = t->busy();
      r.progress.used = std::chrono::duration_cast<std::chrono::milliseconds>(t->used);
      r.progress.cpu_known = true;
    } else {
      beats.busy_known = false;
    }
  }
  // Who the others wait for, for the workers in an announced phase.
  if (std::any_of(phases.begin(), phases.end(), [](channel::Phase p) { return p != channel::Phase::kNone; })) {
    std::vector<std::vector<channel::FlightEntry>> flights(workers_.size());
    for (size_t i = 0; i < workers_.size(); ++i) {
      if (!policy_->alive(static_cast<int>(i))) continue;
      flights[i] = options_.heartbeats->flight(workers_[i]->launch->id.local_rank);
    }
    const int64_t now_ns = std::chrono::duration_cast<std::chrono::nanoseconds>(now.time_since_epoch()).count();
    const auto waited = awaited_ns(flights, now_ns);
    for (size_t i = 0; i < workers_.size(); ++i) {
      beats.workers[i].awaited = std::chrono::milliseconds(waited[i] / 1000000);
    }
  }
  execute(policy_->step(beats, now).commands);
}

}  // namespace ddprun
