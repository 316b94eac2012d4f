// What a WorkerGroup asks of whoever runs it (the agent's Attempt): news
// from outside the node, warm standbys, the rendezvous' heal generations,
// the other nodes' ranks. One interface instead of a callback each; a
// default answers "nothing", so a group run without a host (or a host that
// does not name heals) behaves as with none. Every call comes on the
// group's own loop and must not block, except other_ranks().
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "agent/health/hang_verdict.h"
#include "agent/processes/standby.h"

namespace ddprun {

class GroupHost {
 public:
  virtual ~GroupHost() = default;
  // About every monitor interval while the workers run (progress, reports).
  virtual void on_monitor() {}
  // Looked at on the same beat: why the workers must stop now (a
  // hand-over), or nullopt.
  virtual std::optional<std::string> stop_now() { return std::nullopt; }
  // Once, when every worker has beaten (or the standby warm-up passed), if
  // GroupOptions::warm_standbys: warm up the next workers.
  virtual void on_all_beating() {}
  // GroupOptions::control_fd is readable: why the workers must stop (a new
  // round, the job failed), or nullopt.
  virtual std::optional<std::string> on_control() { return std::nullopt; }
  // A replacement's process: a warm standby, or nullopt for a fresh spawn.
  virtual std::optional<Standby> take_standby() { return std::nullopt; }
  // Across nodes (GroupOptions::heals_named_by_rendezvous): asks for the
  // next heal generation (why: what failed, in words); its answer, looked
  // at when control_fd is readable (nullopt while none came, 0 refused);
  // and whether other nodes run now (group_event::HealWords::other_nodes).
  virtual void ask_heal(const std::string& why) { (void)why; }
  virtual std::optional<uint32_t> heal_answer() { return std::nullopt; }
  virtual bool other_nodes() { return false; }
  // Across nodes (GroupOptions::asks_other_ranks): the other nodes' ranks,
  // for a hang's verdict. Called on a thread of its own; may take a network
  // round trip, and throws or returns nothing when the rendezvous does not
  // answer.
  virtual std::vector<RankView> other_ranks() { return {}; }
};

}  // namespace ddprun
