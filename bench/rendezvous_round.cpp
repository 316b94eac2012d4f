// One rendezvous round of N simulated agents against one rendezvous server:
// the time from the first Join sent to the last JoinResponse received.
//
// The server runs in this process (RendezvousServer on 127.0.0.1:0), or
// elsewhere (--target HOST:PORT, e.g. `ddprun rendezvous --port P`). The N
// agents are N asynchronous Join calls issued from one thread on one
// CompletionQueue over a few channels (--channels, each its own TCP
// connection), not N threads. Every agent must get a distinct node rank in
// 0..N-1 and world size N; otherwise the program exits 1. Times are printed,
// never asserted. bench/rendezvous_round.py drives it and adds the anchor.
// --etcd ENDPOINTS: the in-process server serves each round's job as the
// elected leader of its control plane in that etcd (rendezvous/
// control_plane_host.h), so every answer waits until the job's state is
// saved there (the cost of --rdzv-backend etcd).
// --raft-voters V: the same with the embedded control plane's Raft group of V
// members in this process, each behind a rendezvous service of its own (the
// default from 3 nodes): every answer waits until a majority holds the state.
//
//   rendezvous_round [--nodes 1000,10000] [--repeats 3] [--channels 8]
//                    [--target HOST:PORT | --etcd HOST:PORT,... | --raft-voters 3]
//                    [--out FILE.json]
#include <absl/synchronization/mutex.h>
#include <grpcpp/grpcpp.h>
#include <unistd.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <atomic>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <future>
#include <memory>
#include <optional>
#include <sstream>
#include <string>
#include <vector>

#include "ddprun/v1/rendezvous.grpc.pb.h"
#include "rendezvous/server/control_plane_host.h"
#include "rendezvous/control_plane/etcd/etcd_control_plane.h"
#include "rendezvous/server/nccl_unique_id.h"
#include "rendezvous/control_plane/raft/raft_control_plane.h"
#include "rendezvous/control_plane/raft/raft_node.h"
#include "rendezvous/control_plane/raft/raft_peer.h"
#include "rendezvous/server/server.h"

namespace {

using Clock = std::chrono::steady_clock;
namespace v1 = ddprun::v1;

struct Options {
  std::vector<int> nodes{1000, 10000};
  int repeats = 3;
  int channels = 8;
  std::string target;  // empty: a server in this process
  std::string out;
  int64_t timeout_ms = 120000;
};

// One round's figures, in seconds from the first Join sent.
struct Sample {
  double sent = 0;         // the last Join handed to gRPC
  double first_reply = 0;  // the first response: the round has closed
  double total = 0;        // the last response
};

// A channel with its own TCP connection: gRPC otherwise shares one
// subchannel between channels with the same target and arguments.
std::shared_ptr<grpc::Channel> make_channel(const std::string& target, int index) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  args.SetInt("ddprun.bench.channel", index);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

struct Call {
  grpc::ClientContext ctx;
  v1::JoinResponse resp;
  grpc::Status status;
  std::unique_ptr<grpc::ClientAsyncResponseReader<v1::JoinResponse>> reader;
};

double seconds(Clock::duration d) { return std::chrono::duration<double>(d).count(); }

// Runs one round of n agents in job job_id; nullopt (and a message on
// stderr) when any agent failed or the assignment is wrong.
std::optional<Sample> run_round(const std::vector<std::unique_ptr<v1::Rendezvous::Stub>>& stubs,
                                const std::string& job_id, int n, int64_t timeout_ms) {
  // Everything but the calls themselves is prepared before the clock starts.
  std::vector<v1::JoinRequest> reqs(n);
  for (int i = 0; i < n; ++i) {
    auto& r = reqs[i];
    r.set_job_id(job_id);
    auto* node = r.mutable_node();
    node->set_node_id("agent-" + std::to_string(i));
    node->set_host("127.0.0.1");
    node->set_local_world_size(1);
    node->set_local_addr("127.0.0.1");
    node->set_node_rank_hint(-1);
    r.set_min_nodes(n);
    r.set_max_nodes(n);
    r.set_timeout_ms(timeout_ms);
    r.set_last_round(-1);
    r.set_lease_ms(0);
  }
  std::vector<std::unique_ptr<Call>> calls(n);
  const auto deadline = std::chrono::system_clock::now() + std::chrono::milliseconds(timeout_ms) +
                        std::chrono::seconds(5);
  for (auto& c : calls) {
    c = std::make_unique<Call>();
    c->ctx.set_deadline(deadline);
    c->ctx.set_wait_for_ready(true);
  }
  grpc::CompletionQueue cq;

  const auto t0 = Clock::now();
  for (int i = 0; i < n; ++i) {
    Call& c = *calls[i];
    c.reader = stubs[i % stubs.size()]->PrepareAsyncJoin(&c.ctx, reqs[i], &cq);
    c.reader->StartCall();
    c.reader->Finish(&c.resp, &c.status, reinterpret_cast<void*>(static_cast<intptr_t>(i)));
  }
  const auto t_sent = Clock::now();
  std::optional<Clock::time_point> t_first;
  int got = 0;
  void* tag = nullptr;
  bool ok = false;
  while (got < n && cq.Next(&tag, &ok)) {
    if (!t_first) t_first = Clock::now();
    ++got;
  }
  const auto t_last = Clock::now();
  cq.Shutdown();
  while (cq.Next(&tag, &ok)) {
  }

  // Every agent: OK, a distinct node rank in 0..n-1, world size n.
  std::vector<int> holder(n, -1);
  int failures = 0;
  int64_t round = -1;
  for (int i = 0; i < n; ++i) {
    const Call& c = *calls[i];
    auto fail = [&](const std::string& why) {
      if (failures++ < 5) std::fprintf(stderr, "rendezvous_round: agent %d: %s\n", i, why.c_str());
    };
    if (!c.status.ok()) {
      fail("Join failed: " + c.status.error_message() + " (gRPC code " +
           std::to_string(c.status.error_code()) + ")");
      continue;
    }
    const auto& r = c.resp;
    if (r.world_size() != n || r.num_nodes() != n) {
      fail("world size " + std::to_string(r.world_size()) + ", " + std::to_string(r.num_nodes()) +
           " nodes; expected " + std::to_string(n));
      continue;
    }
    if (r.node_rank() < 0 || r.node_rank() >= n) {
      fail("node rank " + std::to_string(r.node_rank()) + " outside 0.." + std::to_string(n - 1));
      continue;
    }
    if (holder[r.node_rank()] != -1) {
      fail("node rank " + std::to_string(r.node_rank()) + " also given to agent " +
           std::to_string(holder[r.node_rank()]));
      continue;
    }
    holder[r.node_rank()] = i;
    if (round == -1) round = r.round();
    if (r.round() != round) fail("round " + std::to_string(r.round()) + ", others got " +
                                 std::to_string(round));
  }
  if (got != n) {
    std::fprintf(stderr, "rendezvous_round: %d of %d responses arrived\n", got, n);
    return std::nullopt;
  }
  if (failures > 0) {
    std::fprintf(stderr, "rendezvous_round: %d of %d agents failed (job '%s')\n", failures, n,
                 job_id.c_str());
    return std::nullopt;
  }
  return Sample{seconds(t_sent - t0), seconds(*t_first - t0), seconds(t_last - t0)};
}

// The server's gate: the control-plane host of the round being measured
// (each round is a job of its own; the host serves one job).
struct RoundGate final : ddprun::ServingGate {
  std::atomic<ddprun::ControlPlaneHost*> host{nullptr};
  std::optional<std::string> leader_elsewhere(const std::string& job) override {
    auto* h = host.load();
    return h ? h->leader_elsewhere(job) : std::optional<std::string>(std::string());
  }
  bool commit(const std::string& job, bool force) override {
    auto* h = host.load();
    return h && h->commit(job, force);
  }
  std::pair<std::string, int64_t> serving_as() const override {
    auto* h = host.load();
    return h ? h->serving_as() : std::pair<std::string, int64_t>{"", 0};
  }
};

// A member of a round's Raft group: its Raft node, sending over gRPC, and
// (for all but the serving one) a rendezvous service of its own to receive.
struct RaftMember {
  RaftMember(const std::string& job, uint64_t id, ddprun::ControlPeerService* peer, std::string service) {
    if (!peer) {
      own_peer = std::make_unique<ddprun::ControlPeerService>("");
      ddprun::ServerOptions o;
      o.peer_service = own_peer.get();
      own_server = std::make_unique<ddprun::RendezvousServer>(o, ddprun::make_nccl_unique_id);
      peer = own_peer.get();
      service = own_server->address();
    }
    this->peer = peer;
    transport = std::make_unique<ddprun::GrpcRaftTransport>(ddprun::GrpcRaftTransport::Options{});
    ddprun::RaftNodeOptions n;
    n.id = id;
    n.address = ddprun::raft_address(service, "member-" + std::to_string(id));
    n.job_id = job;
    n.heartbeat = std::chrono::milliseconds(75);  // as ddprun's (launcher/embedded_control_plane.cpp)
    n.election = std::chrono::milliseconds(600);
    address = n.address;
    node = std::make_unique<ddprun::RaftNode>(n, *transport);
    peer->attach(node.get());
    node->start(id == 1);
  }
  ~RaftMember() {
    peer->attach(nullptr);
    node.reset();
    transport.reset();
    own_server.reset();
  }
  std::unique_ptr<ddprun::ControlPeerService> own_peer;
  std::unique_ptr<ddprun::RendezvousServer> own_server;
  ddprun::ControlPeerService* peer = nullptr;
  std::unique_ptr<ddprun::GrpcRaftTransport> transport;
  std::unique_ptr<ddprun::RaftNode> node;
  std::string address;
};

// This process leads job `job` in its control plane: returns its host once it serves.
std::unique_ptr<ddprun::ControlPlaneHost> lead(ddprun::ControlPlane& plane, const std::string& job,
                                               ddprun::RendezvousServer& server) {
  std::promise<void> leads;
  auto host = std::make_unique<ddprun::ControlPlaneHost>(
      plane, job, "bench", [&leads, said = false](const ddprun::ControlPlaneEvent& e) mutable {
        if (e.kind == ddprun::ControlPlaneEvent::Kind::kLeads && !said) {
          said = true;
          leads.set_value();
        }
      });
  host->start(server.registry(), server.address());
  leads.get_future().wait();
  return host;
}

double median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  const size_t m = v.size() / 2;
  return v.size() % 2 ? v[m] : (v[m - 1] + v[m]) / 2;
}

}  // namespace

int main(int argc, char** argv) {
  // As ddprun does (launcher/main.cpp): no lock-order checks on gRPC's mutexes.
  absl::SetMutexDeadlockDetectionMode(absl::OnDeadlockCycle::kIgnore);
  CLI::App app{"Time of one rendezvous round of N simulated agents (async gRPC Joins)",
               "rendezvous_round"};
  Options o;
  app.add_option("--nodes", o.nodes, "Agents per round, comma separated")
      ->delimiter(',')
      ->check(CLI::PositiveNumber);
  app.add_option("--repeats", o.repeats, "Rounds per N, each a fresh job")
      ->check(CLI::PositiveNumber);
  app.add_option("--channels", o.channels, "gRPC channels (TCP connections) the agents share")
      ->check(CLI::PositiveNumber);
  app.add_option("--target", o.target,
                 "HOST:PORT of a running rendezvous (ddprun rendezvous); default: a server in "
                 "this process");
  std::string etcd;
  app.add_option("--etcd", etcd, "etcd members (HOST:PORT,...): each round's job is served as its control plane's leader")
      ->excludes("--target");
  int raft_voters = 0;
  app.add_option("--raft-voters", raft_voters,
                 "a Raft group of this many members in this process serves each round's job (the embedded "
                 "control plane)")
      ->excludes("--target")
      ->excludes("--etcd")
      ->check(CLI::Range(1, 5));
  app.add_option("--timeout-ms", o.timeout_ms, "Join timeout of every agent")
      ->check(CLI::PositiveNumber);
  app.add_option("--out", o.out, "Also write the results here as JSON");
  CLI11_PARSE(app, argc, argv);

  RoundGate gate;
  ddprun::ControlPeerService serving_peer("");  // the serving member's messages, on the server's port
  std::shared_ptr<ddprun::EtcdClient> etcd_client;
  if (!etcd.empty()) etcd_client = std::make_shared<ddprun::EtcdClient>(std::vector<std::string>{etcd});
  std::unique_ptr<ddprun::RendezvousServer> server;
  std::string target = o.target;
  if (target.empty()) {
    // No agent asks for an NCCL id; the source is never called.
    ddprun::ServerOptions so{"127.0.0.1", 0, {}, {}, etcd.empty() && raft_voters == 0 ? nullptr : &gate};
    if (raft_voters > 0) so.peer_service = &serving_peer;
    server = std::make_unique<ddprun::RendezvousServer>(so, [] { return std::string(128, '\0'); });
    target = server->address();
  }
  std::vector<std::unique_ptr<v1::Rendezvous::Stub>> stubs;
  for (int i = 0; i < o.channels; ++i) {
    auto ch = make_channel(target, i);
    // Connections are made before the clock starts: the round is measured.
    if (!ch->WaitForConnected(std::chrono::system_clock::now() + std::chrono::seconds(10))) {
      std::fprintf(stderr, "rendezvous_round: cannot connect to %s\n", target.c_str());
      return 1;
    }
    stubs.push_back(v1::Rendezvous::NewStub(ch));
  }

  std::printf("rendezvous round: server %s (%s%s), %d channel(s), %d repeat(s)\n", target.c_str(),
              server ? "in this process" : "external",
              !etcd.empty()      ? (", its state saved in etcd at " + etcd).c_str()
              : raft_voters > 0 ? (", its state committed by a Raft group of " + std::to_string(raft_voters)).c_str()
                                 : "",
              o.channels, o.repeats);
  std::fflush(stdout);
  // A job id no earlier run of this program used, even on a long-lived server.
  const std::string run_tag = std::to_string(getpid()) + "-" +
                              std::to_string(std::chrono::system_clock::now().time_since_epoch() /
                                             std::chrono::milliseconds(1));
  std::ostringstream json;
  json << "{\"server\": \"" << (server ? "in-process" : "external") << "\", \"target\": \""
       << target << "\", \"channels\": " << o.channels << ", \"results\": [";
  std::vector<std::string> rows;
  bool all_ok = true;
  for (size_t k = 0; k < o.nodes.size(); ++k) {
    const int n = o.nodes[k];
    std::vector<Sample> samples;
    for (int rep = 0; rep < o.repeats; ++rep) {
      const std::string job = "bench-" + run_tag + "-n" + std::to_string(n) + "-r" +
                              std::to_string(rep);
      std::unique_ptr<ddprun::ControlPlane> plane;
      std::unique_ptr<ddprun::ControlPlaneHost> host;
      std::vector<std::unique_ptr<RaftMember>> members;
      if (etcd_client) {
        plane = std::make_unique<ddprun::EtcdControlPlane>(etcd_client, job, std::chrono::seconds(2));
        host = lead(*plane, job, *server);
        gate.host = host.get();
      } else if (raft_voters > 0) {
        // The serving member first (alone, it leads), then the others voted in.
        members.push_back(std::make_unique<RaftMember>(job, 1, &serving_peer, server->address()));
        plane = std::make_unique<ddprun::RaftControlPlane>(*members[0]->node, std::chrono::milliseconds(600));
        host = lead(*plane, job, *server);
        for (int v = 2; v <= raft_voters; ++v) {
          members.push_back(std::make_unique<RaftMember>(job, v, nullptr, ""));
          if (!members[0]->node->add_voter(v, members.back()->address,
                                           std::chrono::steady_clock::now() + std::chrono::seconds(30))) {
            std::fprintf(stderr, "rendezvous_round: member %d did not become a voter\n", v);
            return 1;
          }
        }
        gate.host = host.get();
      }
      auto s = run_round(stubs, job, n, o.timeout_ms);
      gate.host = nullptr;
      host.reset();  // resigns
      plane.reset();
      members.clear();
      if (!s) {
        all_ok = false;
        break;
      }
      std::printf("  N=%d repeat %d: %.3f s (all sent %.3f s, first reply %.3f s)\n", n, rep,
                  s->total, s->sent, s->first_reply);
      std::fflush(stdout);
      samples.push_back(*s);
    }
    if (!all_ok) break;
    std::vector<double> total, sent, first;
    for (const auto& s : samples) {
      total.push_back(s.total);
      sent.push_back(s.sent);
      first.push_back(s.first_reply);
    }
    char row[256];
    std::snprintf(row, sizeof(row), "| %d | %.3f | %.3f | %.3f | %.3f |", n, median(total),
                  *std::min_element(total.begin(), total.end()), median(sent), median(first));
    rows.push_back(row);
    json << (k ? ", " : "") << "{\"nodes\": " << n << ", \"median_s\": " << median(total)
         << ", \"min_s\": " << *std::min_element(total.begin(), total.end())
         << ", \"samples\": [";
    for (size_t i = 0; i < samples.size(); ++i) {
      json << (i ? ", " : "") << "{\"total_s\": " << samples[i].total
           << ", \"sent_s\": " << samples[i].sent
           << ", \"first_reply_s\": " << samples[i].first_reply << "}";
    }
    json << "]}";
  }
  json << "]}\n";

  std::printf("\n| N | median s | min s | all sent (median) s | first reply (median) s |\n");
  std::printf("|---:|---:|---:|---:|---:|\n");
  for (const auto& r : rows) std::printf("%s\n", r.c_str());
  if (!o.out.empty() && all_ok) {
    std::ofstream(o.out) << json.str();
  }
  if (!all_ok) {
    std::fprintf(stderr, "rendezvous_round: a round failed; no results written\n");
    return 1;
  }
  return 0;
}
