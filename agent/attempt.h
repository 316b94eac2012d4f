// One attempt of this node's workers: a round's, or a restart's. It sets
// the WorkerGroup up, answers what the group asks of its host (the monitor's
// beat, news from the rendezvous, standbys, heal generations named across
// nodes) and completes the group's result for the Lifecycle (its root
// cause, or the node's hand-over), with the failure summary and events. What a keep-alive's news means for the
// workers is AttemptPolicy's (attempt_policy.h); whether to restart,
// rejoin or stop, the Lifecycle's; a worker's exit, hang or slowness,
// GroupPolicy's. The node's services and the state that outlives the
// attempt are reached through AttemptHost (attempt_host.h), the Agent.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "agent/attempt_host.h"
#include "agent/supervision/group_host.h"
#include "agent/lifecycle.h"
#include "agent/supervision/worker_group.h"
#include "rendezvous/client/client.h"

namespace ddprun {

class Attempt final : public GroupHost {
 public:
  Attempt(AttemptHost& node, int attempt, const JoinResult& joined, Lifecycle& life);
  // Runs the workers until they all exited; throws SpawnError when one
  // cannot start.
  GroupResult run();

  void on_monitor() override;
  std::optional<std::string> stop_now() override;
  void on_all_beating() override;
  std::optional<std::string> on_control() override;
  std::optional<Standby> take_standby() override;
  void ask_heal(const std::string& why) override;
  std::optional<uint32_t> heal_answer() override;
  bool other_nodes() override;
  std::vector<RankView> other_ranks() override;

 private:
  // The round's news in the log and the event log, as the workers start.
  void announce();
  GroupOptions group_options();
  // The workers' place moved (a shrink or a grow named in a generation).
  void move(const NodeView& view);
  // A keep-alive's straggler verdict (AttemptPolicy's straggler_news_of):
  // the node will hand its place over (hand_over says when), or is told
  // once why it goes on.
  void hand_over_if_straggler(const NodeView& view);
  // On the monitor's beat, once the node is to hand its place over: why
  // its workers stop now, when every one of them is inside a collective of
  // a Healer step (so are the other nodes' then: they wait for it there,
  // and heal; outside a step they would fail and restart). nullopt: not yet.
  std::optional<std::string> hand_over(const NodeView& view);
  // The group's result completed: a stop for the round that was this
  // node's hand-over says so; a failure names its root cause. Writes the
  // failure summary and the events.
  GroupResult end_of(GroupResult result);

  AttemptHost& node_;
  const AgentConfig& cfg_;
  const int attempt_;
  const JoinResult& joined_;
  Lifecycle& life_;
  Assignment a_;  // a shrink or a grow moves this node's ranks while the workers run
  WorkerGroup* running_ = nullptr;  // the group, while it runs (a move renumbers it)
  bool heals_ = false;              // a failed worker may be replaced while the others go on
  bool restart_standbys_ = false;   // warm a whole set for the next restart
  bool heal_standby_ = false;       // keep one warm for a heal's replacement
  uint64_t heal_request_ = 0;       // this node's heal request in flight (0: none)
  bool refill_standby_ = false;     // a heal took the warm standby: warm another on the next beat
  std::string handed_over_;         // why the workers stopped to hand the node's place over ("": they did not)
  std::optional<NodeView> hand_over_;  // the keep-alive that named this node the straggler, while it is to hand over
  bool straggler_told_ = false;     // the workers were named the job's straggler, and told so
};

}  // namespace ddprun
