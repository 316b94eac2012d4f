// The embedded backend of the control plane (no service to run): a Raft
// group among the job's first agents (rendezvous/control_plane/raft/raft_node.h, Debian's
// libraft). The Raft leader is the one that serves the rendezvous; its
// term is the Raft term; a save is a Raft command, committed by a majority
// of the voters, so a leader cut off from the majority saves nothing (the
// fence), and steps down after an election timeout without hearing from
// one. A member's Raft address is "<its rendezvous service>#<node id>".
#pragma once

#include <chrono>
#include <mutex>
#include <vector>
#include <string>

#include "rendezvous/control_plane/control_plane.h"
#include "rendezvous/control_plane/raft/raft_node.h"

namespace ddprun {

// A Raft address from its parts, and back (nullopt: not one).
std::string raft_address(const std::string& service_address, const std::string& node_id);
std::optional<std::pair<std::string, std::string>> split_raft_address(const std::string& raft_address);

class RaftControlPlane final : public ControlPlane {
 public:
  // `node` outlives this; its election timeout is the term's ttl.
  RaftControlPlane(RaftNode& node, std::chrono::milliseconds election_timeout);

  std::optional<int64_t> campaign(const std::string& address, const std::string& node_id,
                                  const std::function<bool()>& stop) override;
  std::optional<ControlLeader> leader() override;
  bool wait_leader_gone(int64_t term, std::chrono::milliseconds timeout) override;
  bool renew(int64_t term) override;
  void resign(int64_t term) override;
  bool save(int64_t term, const std::string& state) override;
  std::optional<std::string> load() override;
  std::chrono::milliseconds ttl() const override { return ttl_; }
  // The voters' services, as this member knows them.
  std::vector<std::string> candidates() override;

  // Services to try when this member knows no leader (it is no voter, or
  // the leader it knew is lost): the job's endpoint at first, then the
  // voters its agent hears of in keep-alives. leader() names them in turn,
  // so that a dead one is passed over.
  void set_hints(std::vector<std::string> services);

 private:
  RaftNode& node_;
  std::chrono::milliseconds ttl_;
  std::mutex mu_;
  std::vector<std::string> hints_;
  size_t next_hint_ = 0;
};

}  // namespace ddprun
