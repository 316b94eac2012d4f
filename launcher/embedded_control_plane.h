// --rdzv-backend embedded: the job's control plane with no service to run.
// Every agent runs its own rendezvous service and a member of the job's Raft
// group (rendezvous/control_plane/raft/raft_node.h) on it; the agent on the endpoint's host
// starts the group alone and serves first, and the leader makes the first
// nodes that join voters (rendezvous/control_plane/raft/raft_membership.h). The Raft leader
// serves the job (rendezvous/server/control_plane_host.h): when its node is lost,
// a voter on another node takes over within an election timeout, with the
// job's state as the last commit left it.
//
// Agents and their workers call their own service, which sends them on to
// the leader, or, when it knows none (it is no voter, or the leader it knew
// is gone), to the voters its keep-alives named.
#pragma once

#include <memory>
#include <optional>
#include <string>

#include "launcher/plan.h"
#include "rendezvous/server/control_plane_host.h"
#include "rendezvous/control_plane/raft/raft_control_plane.h"
#include "rendezvous/control_plane/raft/raft_membership.h"
#include "rendezvous/control_plane/raft/raft_node.h"
#include "rendezvous/control_plane/raft/raft_peer.h"
#include "rendezvous/server/server.h"

namespace ddprun {

// A gate whose host is made after the server it is given to (the Raft
// member needs the server's address first). Until then it serves nothing.
class DeferredGate final : public ServingGate {
 public:
  void set(ServingGate* gate);
  std::optional<std::string> leader_elsewhere(const std::string& job_id) override;
  bool commit(const std::string& job_id, bool force) override;
  std::pair<std::string, int64_t> serving_as() const override;
  std::vector<std::string> candidates() override;
  std::string job() const override;

 private:
  mutable std::mutex mu_;
  ServingGate* gate_ = nullptr;
};

class EmbeddedControlPlane {
 public:
  // Listens (the endpoint's port on the endpoint's host, else a free one on
  // this node's address) and joins the Raft group; fills in the agent's
  // rendezvous and control addresses. Throws UsageError (an endpoint that
  // does not resolve), ListenError, AuthConfigError.
  explicit EmbeddedControlPlane(LaunchPlan& plan);
  // Stops serving and hands the leadership on, then stops the service.
  ~EmbeddedControlPlane();
  EmbeddedControlPlane(const EmbeddedControlPlane&) = delete;
  EmbeddedControlPlane& operator=(const EmbeddedControlPlane&) = delete;

 private:
  DeferredGate gate_;
  std::unique_ptr<ControlPeerService> peer_;
  std::unique_ptr<RendezvousServer> server_;
  std::unique_ptr<GrpcRaftTransport> transport_;
  std::unique_ptr<RaftNode> node_;
  std::unique_ptr<RaftControlPlane> plane_;
  std::unique_ptr<ControlPlaneHost> host_;
  std::unique_ptr<RaftMembership> membership_;
};

}  // namespace ddprun
