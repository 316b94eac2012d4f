// --rdzv-backend etcd: what every agent runs so that losing the agent that
// serves the job's rendezvous costs what losing any node costs. Its own
// rendezvous service, on this node's address (a free port), which its
// workers and the agent call; and its part in the control plane
// (rendezvous/server/control_plane_host.h), which campaigns in etcd and, while
// this agent leads, serves the job from that service.
#pragma once

#include <memory>

#include "launcher/plan.h"
#include "rendezvous/server/control_plane_host.h"
#include "rendezvous/control_plane/etcd/etcd_control_plane.h"
#include "rendezvous/server/server.h"

namespace ddprun {

// What a control plane did, for the agent's log: which node serves the job
// and from when, and why one stopped (errors said once while they last).
ControlPlaneHost::OnEvent control_plane_log(const std::string& job_id);

class HostedControlPlane {
 public:
  // Listens and starts campaigning; fills in the agent's rendezvous address
  // and local address. Throws UsageError (an etcd endpoint that does not
  // resolve), ListenError, AuthConfigError.
  explicit HostedControlPlane(LaunchPlan& plan);
  // Stops serving and resigns (the next agent leads at once), then stops
  // the service.
  ~HostedControlPlane();
  HostedControlPlane(const HostedControlPlane&) = delete;
  HostedControlPlane& operator=(const HostedControlPlane&) = delete;

  RendezvousServer& server() { return *server_; }

 private:
  std::shared_ptr<EtcdClient> etcd_;
  std::unique_ptr<EtcdControlPlane> plane_;
  std::unique_ptr<ControlPlaneHost> host_;  // outlives the server: its handler asks it
  std::unique_ptr<RendezvousServer> server_;
};

}  // namespace ddprun
