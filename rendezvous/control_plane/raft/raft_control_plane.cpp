#include "rendezvous/control_plane/raft/raft_control_plane.h"

namespace ddprun {

namespace {
using Clock = std::chrono::steady_clock;
using Role = RaftStatus::Role;
}  // namespace

std::string raft_address(const std::string& service_address, const std::string& node_id) {
  return service_address + "#" + node_id;
}

std::optional<std::pair<std::string, std::string>> split_raft_address(const std::string& raft_address) {
  const auto hash = raft_address.find('#');
  if (hash == std::string::npos || hash == 0) return std::nullopt;
  return std::make_pair(raft_address.substr(0, hash), raft_address.substr(hash + 1));
}

RaftControlPlane::RaftControlPlane(RaftNode& node, std::chrono::milliseconds election_timeout)
    : node_(node), ttl_(election_timeout) {}

std::optional<int64_t> RaftControlPlane::campaign(const std::string&, const std::string&,
                                                  const std::function<bool()>& stop) {
  // Raft elects by itself; this waits for this member to be the leader,
  // then for everything committed before its term to be applied here, so
  // that load() reads the newest state.
  while (!stop()) {
    if (!node_.wait_for([](const RaftStatus& s) { return s.role == Role::kLeader; },
                        Clock::now() + std::chrono::milliseconds(200))) {
      continue;
    }
    const RaftStatus s = node_.status();
    if (s.role == Role::kLeader && node_.barrier(s.term, Clock::now() + ttl_)) {
      return static_cast<int64_t>(s.term);
    }
  }
  return std::nullopt;
}

std::optional<ControlLeader> RaftControlPlane::leader() {
  const RaftStatus s = node_.status();
  if (s.leader_id != 0) {
    if (const auto parts = split_raft_address(s.leader_address)) {
      return ControlLeader{parts->first, parts->second, static_cast<int64_t>(s.term)};
    }
  }
  // No leader known here: a service that may know (term 0: a guess).
  std::lock_guard lock(mu_);
  if (hints_.empty()) return std::nullopt;
  return ControlLeader{hints_[next_hint_++ % hints_.size()], "", 0};
}

std::vector<std::string> RaftControlPlane::candidates() {
  std::vector<std::string> out;
  for (const std::string& a : node_.status().voter_addresses) {
    if (const auto parts = split_raft_address(a)) out.push_back(parts->first);
  }
  return out;
}

void RaftControlPlane::set_hints(std::vector<std::string> services) {
  std::lock_guard lock(mu_);
  if (services == hints_) return;
  hints_ = std::move(services);
  next_hint_ = 0;
}

bool RaftControlPlane::wait_leader_gone(int64_t term, std::chrono::milliseconds timeout) {
  // A leader handing its leadership over names no leader while it still
  // leads: gone means a later term, or no leader and not leading.
  return node_.wait_for(
      [term](const RaftStatus& s) {
        return static_cast<int64_t>(s.term) > term || (s.leader_id == 0 && s.role != Role::kLeader);
      },
      Clock::now() + timeout);
}

bool RaftControlPlane::renew(int64_t term) {
  // Local: libraft's leader steps down by itself once it heard from no
  // majority for an election timeout. A leader handing its leadership over (leader_id 0) no longer serves;
  // nor one that has not heard from a majority for an election timeout
  // (paused or cut off, it may have been replaced before its own tick says
  // so: the others elect after the same timeout).
  const RaftStatus s = node_.status();
  const auto majority = node_.majority_heard_at();
  const bool recent = majority == Clock::time_point::max() || Clock::now() - majority < ttl_;
  return s.role == Role::kLeader && s.leader_id != 0 && static_cast<int64_t>(s.term) == term && recent;
}

void RaftControlPlane::resign(int64_t term) {
  if (renew(term)) node_.transfer();
}

bool RaftControlPlane::save(int64_t term, const std::string& state) {
  return node_.apply(static_cast<uint64_t>(term), state, Clock::now() + ttl_);
}

std::optional<std::string> RaftControlPlane::load() { return node_.state(); }

}  // namespace ddprun
