#include "launcher/embedded_control_plane.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>

#include "launcher/cli.h"
#include "launcher/control_plane_setup.h"
#include "launcher/net.h"
#include "rendezvous/server/nccl_unique_id.h"

namespace ddprun {

namespace {

// Raft's clock: a leader sends heartbeats every 100 ms and steps down after
// 1 s without a majority; a follower that hears no leader for 1-2 s starts
// an election (PreVote first: it deposes nobody while the others still hear
// the leader). Its timers run on lived time (RaftNode), so a member's own
// stall is not counted against the others. A term that ends anyway (a
// loaded machine) costs a pause, not a node: the old leader goes on as a
// member.
constexpr auto kHeartbeat = std::chrono::milliseconds(100);
constexpr auto kElection = std::chrono::milliseconds(1000);

}  // namespace

void DeferredGate::set(ServingGate* gate) {
  std::lock_guard lock(mu_);
  gate_ = gate;
}

std::optional<std::string> DeferredGate::leader_elsewhere(const std::string& job_id) {
  std::lock_guard lock(mu_);
  return gate_ ? gate_->leader_elsewhere(job_id) : std::optional<std::string>(std::string());
}

bool DeferredGate::commit(const std::string& job_id, bool force) {
  std::lock_guard lock(mu_);
  return gate_ && gate_->commit(job_id, force);
}

std::pair<std::string, int64_t> DeferredGate::serving_as() const {
  std::lock_guard lock(mu_);
  return gate_ ? gate_->serving_as() : std::pair<std::string, int64_t>{"", 0};
}

std::string DeferredGate::job() const {
  std::lock_guard lock(mu_);
  return gate_ ? gate_->job() : "";
}

std::vector<std::string> DeferredGate::candidates() {
  std::lock_guard lock(mu_);
  return gate_ ? gate_->candidates() : std::vector<std::string>{};
}

EmbeddedControlPlane::EmbeddedControlPlane(LaunchPlan& plan) {
  AgentConfig& a = plan.agent;
  // The listed nodes (the endpoint first), as addresses and ports.
  std::vector<std::pair<std::string, int>> listed;
  const std::vector<std::pair<std::string, int>> given =
      plan.rdzv_peers.empty() ? decltype(plan.rdzv_peers){{plan.rdzv_listen_host, plan.rdzv_listen_port}} : plan.rdzv_peers;
  for (const auto& [host, port] : given) {
    try {
      listed.emplace_back(resolve_address(host), port);
    } catch (const std::exception& e) {
      throw UsageError(std::string("--rdzv-endpoint: ") + e.what());
    }
  }
  const std::string& endpoint_address = listed.front().first;
  if (a.local_addr.empty()) a.local_addr = source_address_towards(endpoint_address);
  a.local_ifname = interface_of(a.local_addr);
  if (a.node_id.empty()) a.node_id = a.host + ":" + std::to_string(getpid());
  if (a.node_id.find('#') != std::string::npos) {
    // The node id ends the member's Raft address after a '#'.
    throw UsageError("--rdzv-backend embedded: this node's id '" + a.node_id +
                     "' holds a '#' (from its host name?), which the control plane's addresses cannot carry");
  }

  // 1. The service: the endpoint's port on the endpoint's host (this agent
  //    then starts the group); else the first listed node's port on this
  //    node's address that is free (a late node finds the job there); else
  //    a free port on this node's address.
  peer_ = std::make_unique<ControlPeerService>(a.rdzv_auth.token);
  bool first = false;
  for (size_t i = 0; i < listed.size() && !server_ && plan.rdzv_host_mode != "off"; ++i) {
    const auto& [address, port] = listed[i];
    if (!is_local_address(address)) continue;
    try {
      server_ = std::make_unique<RendezvousServer>(
          ServerOptions{address, port, a.rdzv_auth, plan.rdzv_limits, &gate_, peer_.get()}, make_nccl_unique_id);
      first = i == 0;
    } catch (const ListenError& e) {
      if (i == 0 && plan.rdzv_host_mode == "on") throw;
      // Another agent of this job serves there, or another job does: this
      // node serves at a port of its own and joins through the listed one,
      // whose service refuses a job that is not its own.
      spdlog::info("{}: taken; this node joins the job through it and serves at a port of its own", e.what());
    }
  }
  if (!server_) {
    server_ = std::make_unique<RendezvousServer>(
        ServerOptions{a.local_addr, 0, a.rdzv_auth, plan.rdzv_limits, &gate_, peer_.get()}, make_nccl_unique_id);
  }

  // 2. Its member of the job's Raft group, at that service.
  const std::string control_address = raft_address(server_->address(), a.node_id);
  GrpcRaftTransport::Options t;
  t.auth = a.rdzv_auth;
  t.call_timeout = kElection;
  transport_ = std::make_unique<GrpcRaftTransport>(t);
  RaftNodeOptions n;
  n.id = raft_id_of(a.node_id);
  n.address = control_address;
  n.job_id = a.run_id;
  n.heartbeat = kHeartbeat;
  n.election = kElection;
  node_ = std::make_unique<RaftNode>(n, *transport_);
  peer_->attach(node_.get());
  plane_ = std::make_unique<RaftControlPlane>(*node_, kElection);
  // Until this node votes or hears better, the listed nodes (the endpoint's
  // first) are whom its service sends calls to.
  if (!first) {
    std::vector<std::string> hints;
    for (const auto& [address, port] : listed) {
      if (const std::string h = with_port(address, port); h != server_->address()) hints.push_back(h);
    }
    plane_->set_hints(hints);
  }
  host_ = std::make_unique<ControlPlaneHost>(*plane_, a.run_id, a.node_id, control_plane_log(a.run_id));
  gate_.set(host_.get());
  node_->start(first);
  host_->start(server_->registry(), server_->address());
  membership_ = std::make_unique<RaftMembership>(*node_, server_->registry(), a.run_id, [](const std::string& did) {
    spdlog::info("control plane: {}", did);
  });

  a.rdzv_address = server_->address();
  a.takeover_allowance = 2 * kElection;
  a.probe_address = probe_address_of(server_->address(), a.local_addr);
  // What the join's and the keep-alives' errors name instead of this
  // agent's own service: the listed nodes, while none leads.
  std::string listed_text;
  for (const auto& [host, port] : given) listed_text += (listed_text.empty() ? "" : ", ") + with_port(host, port);
  a.control_plane_state = [node = node_.get(), listed_text]() -> std::string {
    if (node->status().leader_id != 0) return "";
    return "no control-plane leader: none of the nodes --rdzv-endpoint lists (" + listed_text +
           ") answered as one";
  };
  a.hosts_rendezvous = false;  // a leader that leaves hands the job on
  a.control_address = control_address;
  // This node may no longer act for the job (asked before and while it
  // joins again): it has been out of a majority's reach for longer than a
  // lease (a partition left it on the smaller side, or most nodes are
  // gone), counted in lived time (its own stalls left out). Where a
  // majority is, the job goes on, and drops this node when its lease runs
  // out.
  const auto cut_off_after = std::max<std::chrono::steady_clock::duration>(a.lease_timeout, 2 * kElection);
  a.fenced = [node = node_.get(), cut_off_after]() -> std::string {
    const auto contact = node->majority_contact_at();
    const auto now = std::chrono::steady_clock::now();
    if (contact == std::chrono::steady_clock::time_point::max() || now - contact < cut_off_after) return "";
    char text[256];
    std::snprintf(text, sizeof text,
                  "this node has reached no majority of the job's %zu control-plane voters for %.1f s "
                  "(a network partition left it on the smaller side, or most nodes are gone)",
                  node->status().voters.size(), std::chrono::duration<double>(now - contact).count());
    return text;
  };
  a.on_control_candidates = [plane = plane_.get()](const std::vector<std::string>& voters) {
    plane->set_hints(voters);
  };
  if (first) spdlog::info("starting job {}'s control plane on {}", a.run_id, server_->address());
}

EmbeddedControlPlane::~EmbeddedControlPlane() {
  membership_.reset();
  host_->stop();  // resigns: a voter on another node leads at once
  // The hand-over is a message to that voter: it must leave before the
  // transport stops (the new leader's first message says it arrived).
  node_->wait_for([](const RaftStatus& s) { return s.role != RaftStatus::Role::kLeader; },
                  std::chrono::steady_clock::now() + kElection);
  gate_.set(nullptr);
  server_.reset();
  peer_->attach(nullptr);
  plane_.reset();
  node_.reset();
  transport_.reset();
}

}  // namespace ddprun
