#include "launcher/control_plane_setup.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include "launcher/cli.h"
#include "launcher/net.h"
#include "rendezvous/server/nccl_unique_id.h"

namespace ddprun {

namespace {
// The etcd backend's term (see HostedControlPlane).
constexpr auto kEtcdTerm = std::chrono::seconds(3);
// How often a control plane that stays out of reach is said again.
constexpr auto kRepeatErrors = std::chrono::seconds(30);
}  // namespace

// What the control plane did, in the agent's log: which node serves the job
// and from when, and why one stopped.
ControlPlaneHost::OnEvent control_plane_log(const std::string& job_id) {
  // An error is said when it first comes, and again (it may have changed:
  // another member, another errno) at most every kRepeatErrors while the
  // control plane stays out of reach.
  struct Said {
    std::string text;
    std::chrono::steady_clock::time_point at{};
  };
  auto last_error = std::make_shared<Said>();
  return [job_id, last_error](const ControlPlaneEvent& e) {
    switch (e.kind) {
      case ControlPlaneEvent::Kind::kLeads:
        last_error->text.clear();
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
      case ControlPlaneEvent::Kind::kError: {
        // The campaign tries again every third of a ttl.
        const auto now = std::chrono::steady_clock::now();
        if (last_error->text.empty() || (last_error->text != e.detail && now - last_error->at >= kRepeatErrors)) {
          spdlog::warn("control plane: {}; trying again{}", e.detail,
                       last_error->text.empty() ? "" : " (said at most every 30 s while it lasts)");
          last_error->text = e.detail;
          last_error->at = now;
        }
        break;
      }
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
  a.probe_address = probe_address_of(server_->address(), a.local_addr);
  // What the join's and the keep-alives' errors name instead of this
  // agent's own service: etcd, and why it did not answer.
  a.control_plane_state = [host = host_.get(), endpoints = plan.etcd_endpoints]() -> std::string {
    std::string list;
    for (const auto& e : endpoints) list += (list.empty() ? "" : ",") + e;
    const std::string err = host->last_error();
    return err.empty() ? "" : "etcd at " + list + " did not answer (" + err + ")";
  };
  a.hosts_rendezvous = false;  // a leader that leaves hands the job on (it resigns)
  host_->start(server_->registry(), server_->address());
}

HostedControlPlane::~HostedControlPlane() {
  host_->stop();
  server_.reset();
}

}  // namespace ddprun
