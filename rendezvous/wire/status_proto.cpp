#include "rendezvous/wire/status_proto.h"

namespace ddprun {

NodeSpec from_proto(const v1::NodeInfo& n) {
  return NodeSpec{n.node_id(),        n.host(),          n.local_world_size(),
                  n.local_addr(),     n.node_rank_hint(), n.wants_nccl_id(),
                  n.master_port(),    n.heals(),          n.program(),
                  n.control_address(), n.probe_address()};
}

void to_proto(const NodeSpec& s, v1::NodeInfo* n) {
  n->set_node_id(s.node_id);
  n->set_host(s.host);
  n->set_local_world_size(s.local_world_size);
  n->set_local_addr(s.local_addr);
  n->set_node_rank_hint(s.node_rank_hint);
  n->set_wants_nccl_id(s.wants_nccl_id);
  n->set_master_port(s.master_port);
  n->set_heals(s.heals);
  n->set_program(s.program);
  n->set_control_address(s.control_address);
  n->set_probe_address(s.probe_address);
}

ProgressInfo from_proto(const v1::Progress& p) {
  ProgressInfo i;
  i.global_rank = p.global_rank();
  i.round = p.round();
  if (p.has_step()) i.step = p.step();
  if (p.has_total_steps()) i.total_steps = p.total_steps();
  if (p.has_epoch()) i.epoch = p.epoch();
  if (p.has_loss()) i.loss = p.loss();
  i.samples = p.samples();
  i.samples_per_sec = p.samples_per_sec();
  if (p.has_saved_step()) i.saved_step = p.saved_step();
  if (p.has_restored_step()) i.restored_step = p.restored_step();
  i.age = std::chrono::milliseconds(p.age_ms());
  i.heal_generation = p.heal_generation();
  if (p.has_slowest_rank()) i.slowest_rank = p.slowest_rank();
  i.slowest_score = p.slowest_score();
  i.slowest_is_straggler = p.slowest_is_straggler();
  i.verify_every = p.verify_every();
  if (p.has_replicas_agreed_step()) i.replicas_agreed_step = p.replicas_agreed_step();
  i.replica_verdicts = p.replica_verdicts();
  i.replica_verdict = p.replica_verdict();
  return i;
}

void to_proto(const ProgressInfo& i, v1::Progress* p) {
  p->set_global_rank(i.global_rank);
  p->set_round(i.round);
  if (i.step) p->set_step(*i.step);
  if (i.total_steps) p->set_total_steps(*i.total_steps);
  if (i.epoch) p->set_epoch(*i.epoch);
  if (i.loss) p->set_loss(*i.loss);
  p->set_samples(i.samples);
  p->set_samples_per_sec(i.samples_per_sec);
  if (i.saved_step) p->set_saved_step(*i.saved_step);
  if (i.restored_step) p->set_restored_step(*i.restored_step);
  p->set_age_ms(i.age.count());
  p->set_heal_generation(i.heal_generation);
  if (i.slowest_rank) p->set_slowest_rank(*i.slowest_rank);
  p->set_slowest_score(i.slowest_score);
  p->set_slowest_is_straggler(i.slowest_is_straggler);
  p->set_verify_every(i.verify_every);
  if (i.replicas_agreed_step) p->set_replicas_agreed_step(*i.replicas_agreed_step);
  p->set_replica_verdicts(i.replica_verdicts);
  p->set_replica_verdict(i.replica_verdict);
}

NodeCollectives from_proto(const v1::NodeCollectives& c) {
  NodeCollectives n;
  n.age = std::chrono::milliseconds(c.age_ms());
  for (const auto& r : c.ranks()) {
    n.ranks.push_back(RankCollective{r.global_rank(), r.op(), r.seq(), r.generation(), r.comm(), r.bytes(),
                                     r.inside(), std::chrono::milliseconds(r.age_ms())});
  }
  n.generation = c.generation();
  n.wait_ms = c.wait_ms();
  n.period_ms = c.period_ms();
  n.samples = c.samples();
  if (c.has_slowest_rank()) n.slowest_rank = c.slowest_rank();
  n.slowest_score = c.slowest_score();
  n.slowest_is_straggler = c.slowest_is_straggler();
  return n;
}

void to_proto(const NodeCollectives& n, v1::NodeCollectives* c) {
  c->set_age_ms(n.age.count());
  for (const RankCollective& r : n.ranks) {
    v1::RankCollective* out = c->add_ranks();
    out->set_global_rank(r.global_rank);
    out->set_op(r.op);
    out->set_seq(r.seq);
    out->set_generation(r.generation);
    out->set_comm(r.comm);
    out->set_bytes(r.bytes);
    out->set_inside(r.inside);
    out->set_age_ms(r.age.count());
  }
  c->set_generation(n.generation);
  c->set_wait_ms(n.wait_ms);
  c->set_period_ms(n.period_ms);
  c->set_samples(n.samples);
  if (n.slowest_rank) c->set_slowest_rank(*n.slowest_rank);
  c->set_slowest_score(n.slowest_score);
  c->set_slowest_is_straggler(n.slowest_is_straggler);
}

JobStatus from_proto(const v1::StatusResponse& r) {
  JobStatus s;
  s.phase = static_cast<JobPhase>(r.phase());
  s.round = r.round();
  s.round_closed = r.round_closed();
  s.reason = static_cast<RoundReason>(r.reason());
  s.detail = r.detail();
  s.restart_count = r.restart_count();
  s.settings.max_restarts = r.max_restarts();
  s.settings.min_nodes = r.min_nodes();
  s.settings.max_nodes = r.max_nodes();
  s.world_size = r.world_size();
  s.nodes_waiting = r.nodes_waiting();
  s.heal_generation = r.heal_generation();
  s.control_node = r.control_node();
  s.control_term = r.control_term();
  for (const auto& n : r.nodes()) {
    NodeStatus ns;
    ns.node_id = n.node_id();
    ns.host = n.host();
    ns.node_rank = n.node_rank();
    ns.local_world_size = n.local_world_size();
    ns.first_global_rank = n.first_global_rank();
    ns.waiting = n.waiting();
    ns.last_seen_ago = std::chrono::milliseconds(n.last_seen_ms_ago());
    ns.heals = n.heals();
    s.nodes.push_back(std::move(ns));
    if (n.has_collectives()) s.nodes.back().collectives = from_proto(n.collectives());
    if (n.has_score()) s.nodes.back().score = NodeScore{n.score(), n.straggler()};
  }
  if (r.has_progress()) s.progress = from_proto(r.progress());
  return s;
}

void to_proto(const std::string& job_id, const JobStatus& s, v1::StatusResponse* r) {
  r->set_job_id(job_id);
  r->set_phase(static_cast<v1::JobPhase>(s.phase));
  r->set_round(s.round);
  r->set_round_closed(s.round_closed);
  r->set_reason(static_cast<v1::RoundReason>(s.reason));
  r->set_detail(s.detail);
  r->set_restart_count(s.restart_count);
  r->set_max_restarts(s.settings.max_restarts);
  r->set_world_size(s.world_size);
  r->set_min_nodes(s.settings.min_nodes);
  r->set_max_nodes(s.settings.max_nodes);
  r->set_nodes_waiting(s.nodes_waiting);
  r->set_heal_generation(s.heal_generation);
  r->set_control_node(s.control_node);
  r->set_control_term(s.control_term);
  for (const NodeStatus& n : s.nodes) {
    v1::NodeStatus* out = r->add_nodes();
    out->set_node_id(n.node_id);
    out->set_host(n.host);
    out->set_node_rank(n.node_rank);
    out->set_local_world_size(n.local_world_size);
    out->set_first_global_rank(n.first_global_rank);
    out->set_waiting(n.waiting);
    out->set_last_seen_ms_ago(n.last_seen_ago.count());
    out->set_heals(n.heals);
    if (n.collectives) to_proto(*n.collectives, out->mutable_collectives());
    if (n.score) {
      out->set_score(n.score->score);
      out->set_straggler(n.score->straggler);
    }
  }
  if (s.progress) to_proto(*s.progress, r->mutable_progress());
}

}  // namespace ddprun
