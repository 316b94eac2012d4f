// RaftNode, its thread: the loop that runs libraft (ticks, received
// messages, the callers' tasks, I/O completions) and publishes what the
// node knows after each thing it did. The calls and libraft's I/O are in
// raft_node.cpp.
#include <algorithm>

#include "rendezvous/control_plane/raft/raft_node.h"
#include "rendezvous/control_plane/raft/raft_node_impl.h"

namespace ddprun {
namespace {

// A wake-up later than asked by more than this is a stall (see lived_now).
constexpr auto kLateWake = std::chrono::milliseconds(50);

}  // namespace

void RaftNode::publish() {
  RaftStatus s;
  struct raft& r = impl_->raft;
  switch (raft_state(&r)) {
    case RAFT_FOLLOWER: s.role = RaftStatus::Role::kFollower; break;
    case RAFT_CANDIDATE: s.role = RaftStatus::Role::kCandidate; break;
    case RAFT_LEADER: s.role = RaftStatus::Role::kLeader; break;
    default: s.role = RaftStatus::Role::kUnavailable; break;
  }
  if (impl_->started && !impl_->closed) {
    s.term = r.current_term;
    raft_id leader = 0;
    const char* address = nullptr;
    raft_leader(&r, &leader, &address);
    s.leader_id = leader;
    if (address) s.leader_address = address;
    s.applied = raft_last_applied(&r);
    for (unsigned i = 0; i < r.configuration.n; ++i) {
      s.members.push_back(r.configuration.servers[i].id);
      if (r.configuration.servers[i].role == RAFT_VOTER) {
        s.voters.push_back(r.configuration.servers[i].id);
        s.voter_addresses.push_back(r.configuration.servers[i].address);
      } else if (r.configuration.servers[i].role == RAFT_STANDBY) {
        s.standbys.push_back(r.configuration.servers[i].id);
      }
    }
  }
  // The time by which a majority of the voters had been heard: this member
  // (when it votes), and the most recently heard others it takes. A node
  // not in the configuration (yet) judges nothing: max.
  const bool member = std::find(s.members.begin(), s.members.end(), options_.id) != s.members.end();
  Clock::time_point majority = Clock::time_point::max();
  if (member && s.voters.size() > 1) {
    std::vector<Clock::time_point> others;
    bool votes = false;
    for (uint64_t v : s.voters) {
      if (v == options_.id) {
        votes = true;
        continue;
      }
      auto it = impl_->heard.find(v);
      others.push_back(it == impl_->heard.end() ? Clock::time_point::min() : it->second);
    }
    const size_t majority_size = s.voters.size() / 2 + 1;
    const size_t need = votes ? majority_size - 1 : majority_size;  // others needed
    if (need > 0 && need <= others.size()) {
      std::sort(others.begin(), others.end(), std::greater<>());
      majority = others[need - 1];
    } else if (need > 0) {
      majority = Clock::time_point::min();
    }
  }
  // On the majority's side: as leader, its majority; as follower, the last
  // word from a leader; with no leader known, as it last was.
  std::optional<Clock::time_point> contact;
  if (!member || majority == Clock::time_point::max()) {
    contact = Clock::time_point::max();
  } else if (s.role == RaftStatus::Role::kLeader) {
    contact = majority;
  } else if (s.leader_id != 0) {
    auto it = impl_->heard.find(s.leader_id);
    contact = it == impl_->heard.end() ? impl_->lived_now() : it->second;  // a leader named in a snapshot or entry
  }
  // Published on the steady clock: a caller's now minus these is lived time.
  majority = impl_->to_steady(majority);
  if (contact) contact = impl_->to_steady(*contact);
  bool changed = false;
  {
    std::lock_guard lock(mu_);
    majority_heard_at_ = majority;
    if (contact) {
      majority_contact_at_ = *contact;
    } else if (majority_contact_at_ == Clock::time_point::max()) {
      majority_contact_at_ = Clock::now();  // no leader since it became a member: from now
    }
    if (!(s == status_)) {
      status_ = std::move(s);
      changed = true;
    }
    // The blob (megabytes in a big job) is copied only when the FSM changed,
    // not compared after every message and tick.
    if (impl_->has_state && impl_->state_version != published_state_version_) {
      state_ = impl_->state;
      published_state_version_ = impl_->state_version;
      changed = true;
    }
    if (changed) ++changes_;
  }
  if (changed) cv_.notify_all();
}

void RaftNode::loop() {
  auto next_tick = Clock::now() + impl_->tick_every;
  std::unique_lock lock(mu_);
  while (true) {
    if (stop_ && tasks_.empty()) break;
    if (!tasks_.empty()) {
      auto task = std::move(tasks_.front());
      tasks_.pop_front();
      lock.unlock();
      task();
      impl_->complete(0);  // the I/O the task started, now that it returned
      publish();
      cv_.notify_all();  // run()'s waiter
      lock.lock();
      continue;
    }
    const auto now = Clock::now();
    if (now >= next_tick) {
      lock.unlock();
      if (impl_->started && !impl_->closed) impl_->tick(&impl_->io);
      impl_->complete(0);
      publish();
      lock.lock();
      next_tick = Clock::now() + impl_->tick_every;
      continue;
    }
    cv_.wait_until(lock, next_tick, [&] { return stop_ || !tasks_.empty(); });
    // Woke well past the tick it waited for: this thread did not run.
    if (const auto woke = Clock::now(); woke > next_tick + kLateWake) impl_->stalled += woke - next_tick;
  }
}

}  // namespace ddprun
