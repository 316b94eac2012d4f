// A fake WorkerGroup for GroupPolicy's tests: the workers' slots as a test
// says they are now, read whole into every event as WorkerGroup reads them.
#pragma once

#include <chrono>
#include <optional>
#include <string>
#include <vector>

#include "agent/supervision/group_policy.h"

namespace ddprun::fakes {

using TP = GroupPolicy::TimePoint;

// Plays WorkerGroup for the policy: the workers' slots as the test says they
// are now, read whole into every event (as WorkerGroup reads them), a
// replacement's slot cleared when the policy starts one (WorkerGroup's
// reset_slot), and what the last step said (`ends`: how each exit counted).
struct FakeGroup {
  FakeGroup(int n, GroupPolicyOptions o, TP started = TP{}) : policy(n, o, started), ready(n, false), slots(n) {}

  std::vector<GroupCommand> step(const GroupEvent& e, TP now) {
    GroupStep s = policy.step(e, now);
    for (const auto& c : s.commands) {
      if (c.kind != GroupCommand::kReplaceWorker) continue;
      ready[c.worker] = false;
      slots[c.worker] = {};
    }
    ends = s.ends;
    return s.commands;
  }
  group_event::HealWords heal() const {
    group_event::HealWords h;
    for (bool r : ready) h.ready.push_back(r);
    h.other_nodes = other_nodes;
    return h;
  }
  // Exits reaped together; how each counted is in `ends`.
  std::vector<GroupCommand> exits(std::vector<group_event::Exit> e, TP now = TP{}) {
    return step(group_event::Exits{e, heal()}, now);
  }
  // One exit reaped alone (a failure: exit code 1); its commands are in `last`.
  WorkerEnd exit(int w, bool failed, TP now = TP{}) {
    return exit_with({.worker = w, .exit_code = failed ? 1 : 0}, now);
  }
  WorkerEnd exit_with(group_event::Exit x, TP now = TP{}) {
    last = exits({x}, now);
    return ends.at(0);
  }
  // The counters read (and the busy times, when known), with the slots.
  std::vector<GroupCommand> beats(std::vector<uint64_t> counts, TP now,
                                  std::vector<std::chrono::milliseconds> busy = {}) {
    group_event::Beats b;
    b.heal = heal();
    b.workers = slots;
    for (size_t w = 0; w < counts.size() && w < b.workers.size(); ++w) b.workers[w].beats = counts[w];
    b.busy_known = !busy.empty();
    for (size_t w = 0; w < busy.size() && w < b.workers.size(); ++w) b.workers[w].busy = busy[w];
    return step(b, now);
  }
  std::vector<GroupCommand> signal(int sig, TP now) { return step(group_event::Signal{sig}, now); }
  std::vector<GroupCommand> tick(TP now) { return step(group_event::Tick{}, now); }
  std::vector<GroupCommand> round_stop(const std::string& why, TP now) {
    return step(group_event::RoundStop{why}, now);
  }
  std::vector<GroupCommand> generation(uint32_t g, TP now) { return step(group_event::GenerationNamed{g}, now); }
  std::vector<GroupCommand> straggler(int w, const std::string& why, TP now = TP{}) {
    step(group_event::HealRead{heal()}, now);  // as WorkerGroup's monitor reads them first
    return step(group_event::Replace{w, group_event::Replace::kStraggler, why}, now);
  }
  void started(int w, bool from_standby, TP now) { step(group_event::ReplacementStarted{w, from_standby}, now); }
  // The heal words read alone (WorkerGroup's monitor does, for the agent).
  void read_heal(TP now = TP{}) { step(group_event::HealRead{heal()}, now); }
  // Every worker can heal and is inside a Healer step.
  void all_ready() {
    for (size_t w = 0; w < ready.size(); ++w) {
      ready[w] = true;
      slots[w].in_step = true;
    }
  }

  GroupPolicy policy;
  std::vector<bool> ready;  // the heal words
  std::optional<bool> other_nodes;
  std::vector<group_event::WorkerReading> slots;  // phase, in_step, finishing, stopped, awaited
  std::vector<WorkerEnd> ends;
  std::vector<GroupCommand> last;
};

}  // namespace ddprun::fakes
