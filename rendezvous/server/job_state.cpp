#include "rendezvous/server/job_state.h"

#include <algorithm>

#include "ddprun/v1/job_state.pb.h"
#include "rendezvous/wire/status_proto.h"

namespace ddprun {

namespace {

using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;

int64_t ago_ms(Clock::time_point then, Clock::time_point now) {
  return std::max<int64_t>(0, std::chrono::duration_cast<milliseconds>(now - then).count());
}

void fail_unless(bool ok, const std::string& what) {
  if (!ok) throw JobStateError("saved job state: " + what);
}

}  // namespace

// RoundState's friend: reads and writes its private state.
struct RoundStateCodec {
  static void save(const RoundState& r, Clock::time_point now, v1::SavedRounds* out) {
    out->set_min_nodes(r.settings_.min_nodes);
    out->set_max_nodes(r.settings_.max_nodes);
    out->set_last_call_ms(r.settings_.last_call.count());
    out->set_max_restarts(r.settings_.max_restarts);
    out->set_round(r.round_);
    out->set_closed(r.closed_);
    out->set_phase(static_cast<v1::JobPhase>(r.phase_));
    out->set_end_message(r.end_message_);
    out->set_restarts(r.restarts_);
    out->set_generation(r.generation_);
    out->set_reason(static_cast<v1::RoundReason>(r.reason_));
    out->set_detail(r.detail_);
    out->set_heal_generation(r.heal_generation_);
    out->set_refusals(r.refusals_);
    out->set_refusal(r.refusal_);
    out->set_heal_reason(static_cast<v1::HealReason>(r.heal_reason_));
    // Sorted by id: the same state always makes the same bytes.
    std::vector<const std::pair<const std::string, RoundState::Node>*> nodes;
    for (const auto& kv : r.nodes_) nodes.push_back(&kv);
    std::sort(nodes.begin(), nodes.end(), [](auto* a, auto* b) { return a->first < b->first; });
    for (const auto* kv : nodes) {
      const RoundState::Node& n = kv->second;
      auto* s = out->add_nodes();
      to_proto(n.spec, s->mutable_spec());
      s->set_lease_ms(n.lease.count());
      s->set_workers_heal_round(n.workers_heal_round);
      s->set_heal_request_id(n.heal_request_id);
      s->set_heal_request_generation(n.heal_request_generation);
      s->set_lease_key(n.lease_key);
      s->set_heal_credit(n.heal_credit);
    }
    for (const auto& m : r.members_) out->add_members(m);
    for (const auto& w : r.waiting_) out->add_waiting(w);
    out->set_min_reached_ago_ms(r.min_reached_at_ ? ago_ms(*r.min_reached_at_, now) : -1);
    out->set_follows_running_round(r.follows_running_round_);
    for (const auto& e : r.expected_) out->add_expected(e);
    for (const auto& [id, a] : r.assignments_) {
      auto* s = out->add_assignments();
      s->set_node_id(id);
      s->set_round(a.round);
      s->set_node_rank(a.node_rank);
      s->set_num_nodes(a.num_nodes);
      s->set_world_size(a.world_size);
      s->set_first_global_rank(a.first_global_rank);
      s->set_master_addr(a.master_addr);
      s->set_master_port(a.master_port);
      s->set_restart_count(a.restart_count);
      for (const auto& l : a.lost_since_last_round) s->add_lost_since_last_round(l);
      s->set_heal_generation(a.heal_generation);
      s->set_opened_because(a.opened_because);
    }
    for (const auto& [id, rank] : r.last_ranks_) (*out->mutable_last_ranks())[id] = rank;
    for (const auto& l : r.lost_) {
      auto* s = out->add_lost();
      s->set_node_id(l.node_id);
      s->set_host(l.host);
      s->set_last_seen_ago_ms(ago_ms(l.last_seen, now));
      s->set_why(l.why);
      s->set_dropped_ago_ms(ago_ms(l.dropped_at, now));
      s->set_lease_ms(l.lease.count());
    }
    out->set_lost_reported(r.lost_reported_);
  }

  static RoundState load(const v1::SavedRounds& in, Clock::time_point now) {
    RoundSettings settings{in.min_nodes(), in.max_nodes(), milliseconds(in.last_call_ms()),
                           in.max_restarts()};
    std::optional<RoundState> made;
    try {
      made.emplace(settings);
    } catch (const RendezvousError& e) {
      throw JobStateError(std::string("saved job state: ") + e.what());
    }
    RoundState& r = *made;
    r.round_ = in.round();
    r.closed_ = in.closed();
    r.phase_ = static_cast<JobPhase>(in.phase());
    r.end_message_ = in.end_message();
    r.restarts_ = in.restarts();
    // One higher than the saver's: waiters re-check against the new state.
    r.generation_ = in.generation() + 1;
    r.reason_ = static_cast<RoundReason>(in.reason());
    r.detail_ = in.detail();
    r.heal_generation_ = in.heal_generation();
    r.refusals_ = in.refusals();
    r.refusal_ = in.refusal();
    r.heal_reason_ = static_cast<HealReason>(in.heal_reason());
    fail_unless(in.phase() >= v1::JOB_ACTIVE && in.phase() <= v1::JOB_FAILED, "unknown job phase");
    for (const auto& s : in.nodes()) {
      fail_unless(!s.spec().node_id().empty(), "a node without an id");
      fail_unless(s.lease_ms() >= 0, "a negative lease");
      RoundState::Node n;
      n.spec = from_proto(s.spec());
      n.lease = milliseconds(s.lease_ms());
      // Every lease starts afresh now: when a node was last heard is the
      // old leader's knowledge, on its clock.
      n.last_seen = now;
      n.workers_heal_round = s.workers_heal_round();
      n.heal_request_id = s.heal_request_id();
      n.heal_request_generation = s.heal_request_generation();
      n.lease_key = s.lease_key();
      n.heal_credit = std::clamp<double>(s.heal_credit(), 0, RoundState::kHealBurst);
      n.heal_credit_at = now;
      const std::string id = n.spec.node_id;
      fail_unless(r.nodes_.emplace(id, std::move(n)).second, "node '" + id + "' saved twice");
      if (s.lease_ms() > 0) {
        const Clock::time_point due = now + milliseconds(s.lease_ms());
        if (!r.lease_check_at_ || due < *r.lease_check_at_) r.lease_check_at_ = due;
      }
    }
    for (const auto& m : in.members()) {
      // (A member that left when its workers finished stays one: the
      // round's record of who ran it.)
      fail_unless(r.member_set_.insert(m).second, "member '" + m + "' saved twice");
      r.members_.push_back(m);
    }
    for (const auto& w : in.waiting()) {
      fail_unless(r.nodes_.count(w) > 0, "waiting node '" + w + "' is not a node of the job");
      r.waiting_.push_back(w);
    }
    if (in.min_reached_ago_ms() >= 0) r.min_reached_at_ = now - milliseconds(in.min_reached_ago_ms());
    r.follows_running_round_ = in.follows_running_round();
    for (const auto& e : in.expected()) r.expected_.insert(e);
    for (const auto& s : in.assignments()) {
      fail_unless(r.member_set_.count(s.node_id()) > 0,
                  "an assignment for '" + s.node_id() + "', not a member");
      Assignment a;
      a.round = s.round();
      a.node_rank = s.node_rank();
      a.num_nodes = s.num_nodes();
      a.world_size = s.world_size();
      a.first_global_rank = s.first_global_rank();
      a.master_addr = s.master_addr();
      a.master_port = s.master_port();
      a.restart_count = s.restart_count();
      a.lost_since_last_round.assign(s.lost_since_last_round().begin(), s.lost_since_last_round().end());
      a.heal_generation = s.heal_generation();
      a.opened_because = s.opened_because();
      r.assignments_[s.node_id()] = std::move(a);
    }
    for (const auto& [id, rank] : in.last_ranks()) r.last_ranks_[id] = rank;
    for (const auto& s : in.lost()) {
      r.lost_.push_back(LostNode{s.node_id(), s.host(), now - milliseconds(std::max<int64_t>(0, s.last_seen_ago_ms())),
                                 s.why(), now - milliseconds(std::max<int64_t>(0, s.dropped_ago_ms())),
                                 milliseconds(s.lease_ms())});
    }
    fail_unless(in.lost_reported() <= r.lost_.size(), "more losses reported than lost");
    r.lost_reported_ = in.lost_reported();
    return std::move(*made);
  }
};

std::string encode_job_state(const JobStateParts& parts, Clock::time_point now) {
  v1::JobState s;
  s.set_format(1);
  if (parts.job_id) s.set_job_id(*parts.job_id);
  if (parts.rounds) RoundStateCodec::save(*parts.rounds, now, s.mutable_rounds());
  StoreEntries store = parts.store;
  std::sort(store.begin(), store.end());
  for (const auto& [k, v] : store) {
    auto* e = s.add_store();
    e->set_key(k);
    e->set_value(v);
  }
  s.set_store_round(parts.store_round);
  s.set_nccl_round(parts.nccl_round);
  s.set_nccl_id(parts.nccl_id);
  s.set_nccl_id_error(parts.nccl_id_error);
  s.set_leader_node_id(parts.leader_node_id);
  s.set_term(parts.term);
  std::string out;
  s.SerializeToString(&out);
  return out;
}

RestoredJob decode_job_state(std::string_view bytes, Clock::time_point now) {
  v1::JobState s;
  if (!s.ParseFromArray(bytes.data(), static_cast<int>(bytes.size()))) {
    throw JobStateError("saved job state: " + std::to_string(bytes.size()) +
                        " bytes that are not a ddprun.v1.JobState");
  }
  fail_unless(s.format() == 1, "format " + std::to_string(s.format()) + ", this ddprun reads format 1");
  fail_unless(!s.job_id().empty(), "no job id");
  RestoredJob out;
  out.job_id = s.job_id();
  if (s.has_rounds()) out.rounds.emplace(RoundStateCodec::load(s.rounds(), now));
  for (const auto& e : s.store()) out.store.emplace_back(e.key(), e.value());
  out.store_round = s.store_round();
  out.nccl_round = s.nccl_round();
  out.nccl_id = s.nccl_id();
  out.nccl_id_error = s.nccl_id_error();
  out.leader_node_id = s.leader_node_id();
  out.term = s.term();
  return out;
}

}  // namespace ddprun
