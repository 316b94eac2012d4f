// What one attempt of the workers (attempt.h) needs of its node, the Agent:
// the node's settings and services, the warm standbys it keeps between
// attempts, the progress it watches, and what it does with the
// rendezvous' news. The Attempt owns its own state and changes the node's
// only through these calls (as WorkerGroup asks its GroupHost); the node's
// state that outlives an attempt (the standbys, the heal generation the
// workers were told, the news already said) stays the Agent's.
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "agent/agent_config.h"
#include "agent/output/event_log.h"
#include "agent/output/failure_report.h"
#include "agent/health/heartbeat_table.h"
#include "agent/lease_keeper.h"
#include "agent/base/signals.h"
#include "agent/processes/standby.h"
#include "agent/supervision/worker_group.h"
#include "rendezvous/client/client.h"

namespace ddprun {

class AttemptHost {
 public:
  virtual ~AttemptHost() = default;

  // The node's settings and services. heartbeats(): null without them;
  // lease(): null where the node keeps none (keep-alives carry the news).
  virtual const AgentConfig& config() const = 0;
  virtual EventLog& events() = 0;
  virtual HeartbeatTable* heartbeats() = 0;
  virtual LeaseKeeper* lease() = 0;
  virtual SignalChannel& signals() = 0;
  // The start of the file names a hang's stacks of `attempt` go to (beside
  // the logs, or in TMPDIR: they outlive the job).
  virtual std::string stacks_stem(int attempt) const = 0;
  // Whether a failed worker of assignment a may be replaced while the
  // others go on; whether the rendezvous names the job's heal generations.
  virtual bool heals(const Assignment& a) const = 0;
  virtual bool names_heals_at_rendezvous() const = 0;

  // The workers of an attempt, and the warm standbys the node keeps: up to
  // n of them (the rest dismissed), one for a heal's replacement, more.
  virtual std::vector<WorkerLaunch> launches(int attempt, const JoinResult& joined) = 0;
  virtual std::vector<Standby> take_standbys(size_t n) = 0;
  virtual std::optional<Standby> take_standby() = 0;
  virtual bool has_standbys() const = 0;
  virtual void warm_standbys(int attempt, const JoinResult& guess, int count) = 0;

  // While the workers run: progress counted afresh (and the heal generation
  // they start in told), watched on the monitor's beat, the workers' heal
  // reported; at the end the last checkpoint seen, the status line cleared
  // and the workers' store keys dropped.
  virtual void begin_watching(int attempt, const Assignment& a) = 0;
  virtual void watch_progress(int attempt, const Assignment& a, const WorkerGroup* group) = 0;
  virtual void report_workers_heal(const Assignment& a, const WorkerGroup* group) = 0;
  virtual void end_watching(int attempt, const Assignment& a) = 0;

  // The rendezvous' news, from a keep-alive. note_view: nodes waiting,
  // refusals and the serving node, each said once. told_generation: the
  // newest heal generation the workers were told (or that was named for
  // this node's own heal: no news to tell); heard_generation raises it.
  virtual void note_view(int attempt, const NodeView& view) = 0;
  virtual uint32_t told_generation() const = 0;
  virtual void heard_generation(uint32_t generation) = 0;
  virtual void tell_workers_whether_heals_come(const Assignment& a, const NodeView* view) = 0;
  virtual void heal_with_others(int attempt, const NodeView& view) = 0;
  virtual void move_with(int attempt, Assignment& a, const NodeView& view) = 0;
  virtual std::vector<RankView> other_nodes_ranks() = 0;
  virtual void tell_straggler_node(int attempt, const NodeView& view, const std::string& what_now,
                                   bool handed_over, const std::string& detail) = 0;
  // "node 'id' (host)", for what this node says of itself.
  virtual std::string node_name() const = 0;
  // Why the running round was superseded, as this node heard it while its
  // workers ran: the next round's announcement does not say it again.
  // take_: what was heard ("" if nothing), forgotten.
  virtual void heard_round_detail(const std::string& detail) = 0;
  virtual std::string take_heard_round_detail() = 0;

  // The end: who serves the rendezvous (for a failure summary; "" without
  // a control plane), and the log lines the workers' output lost.
  virtual std::string control_plane_line() const = 0;
  virtual void add_log_losses(const std::vector<LogLoss>& losses) = 0;
};

}  // namespace ddprun
