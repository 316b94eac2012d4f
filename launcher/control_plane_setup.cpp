#include "launcher/control_plane_setup.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include "launcher/cli.h"
#include "launcher/net.h"
#include "rendezvous/nccl_unique_id.h"

namespace ddprun {

namespace {
// The etcd backend's term (see HostedControlPlane).
constexpr auto kEtcdTerm = std::chrono::seconds(3);
}  // namespace

// What the control plane did, in the agent's log: which node serves the job
// and from when, and why one stopped.
ControlPlaneHost::OnEvent control_plane_log(const std::string& job_id) {
  auto last_error = std::make_shared<std::string>();
  return [job_id, last_error](const ControlPlaneEvent& e) {
    switch (e.kind) {
      case ControlPlaneEvent::Kind::kLeads:
        last_error->clear();
        if (e.predecessor.empty()) {
          spdlog::info("control plane: this node serves job {}'s rendezvous (term {})", job_id, e.term);
        } else {
          spdlog::info("control plane: this node took over job {}'s rendezvous from node {} (term {})", job_id,
                       e.predecessor, e.term);
        }
        break;
      case ControlPlaneEvent::Kind::kStopped:
        spdlog::warn("control plane: this node stopped serving job {}'s rendezvous (term {}): {}; it goes on "
                     "as a member, served by whichever node leads next",
                     job_id, e.term, e.detail);
        break;
      case ControlPlaneEvent::Kind::kError:
        // Said once while it lasts: the campaign tries again every third of a ttl.
        if (*last_error != e.detail) spdlog::warn("control plane: {}; trying again", e.detail);
        *last_error = e.detail;
        break;
    }
  };
}

HostedControlPlane::HostedControlPlane(LaunchPlan& plan) {
  AgentConfig& a = plan.agent;
  if (a.local_addr.empty()) {
    // This node's address as the others see it: where the route to etcd leaves from.
    std::string etcd_address;
    try {
      etcd_address = resolve_address(plan.rdzv_listen_host);
      a.local_addr = source_address_towards(etcd_address);
    } catch (const std::exception& e) {
      throw UsageError(std::string("--rdzv-endpoint: ") + e.what());
    }
  }
  a.local_ifname = interface_of(a.local_addr);
  if (a.node_id.empty()) a.node_id = a.host + ":" + std::to_string(getpid());
  etcd_ = std::make_shared<EtcdClient>(plan.etcd_endpoints);
  // The term outlives ordinary jitter (renewed every third of it: a leader
  // unscheduled for two seconds keeps it); etcd rounds it up to its own
  // minimum (1.5 election timeouts). A dead leader's successor serves
  // after it.
  plane_ = std::make_unique<EtcdControlPlane>(etcd_, a.run_id, kEtcdTerm);
  host_ = std::make_unique<ControlPlaneHost>(*plane_, a.run_id, a.node_id, control_plane_log(a.run_id));
  ServerOptions o{a.local_addr, 0, a.rdzv_auth, plan.rdzv_limits, host_.get()};
  server_ = std::make_unique<RendezvousServer>(o, make_nccl_unique_id);
  a.rdzv_address = server_->address();
  a.takeover_allowance = plane_->ttl();
  a.hosts_rendezvous = false;  // a leader that leaves hands the job on (it resigns)
  host_->start(server_->registry(), server_->address());
}

HostedControlPlane::~HostedControlPlane() {
  host_->stop();
  server_.reset();
}

}  // namespace ddprun
