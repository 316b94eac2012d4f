// Runs the rendezvous gRPC service in this process (the launcher hosts it).
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "rendezvous/store/limits.h"
#include "rendezvous/server/memory_trimmer.h"
#include "rendezvous/server/registry.h"
#include "rendezvous/wire/security.h"

namespace grpc {
class Server;
class Service;
}

namespace ddprun {

class RendezvousHandler;
class ServingGate;

class ListenError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct ServerOptions {
  std::string host = "127.0.0.1";
  int port = 0;  // 0: a free one
  // The token every call must carry (empty: none) and the TLS files.
  RendezvousAuth auth;
  ServiceLimits limits;
  // Jobs with a control plane: see HandlerOptions::gate (outlives the server).
  ServingGate* gate = nullptr;
  // The embedded control plane's Raft messages (rendezvous/control_plane/raft/raft_peer.h),
  // served on the same port (outlives the server); null: none.
  grpc::Service* peer_service = nullptr;
  // A job's own rendezvous, hosted by its ddprun (not `ddprun rendezvous`,
  // a service for many jobs): this job's id; any other job is refused.
  std::string own_job{};
};

class RendezvousServer {
 public:
  // Listens on host:port; port 0 picks a free one (see port()). Throws
  // ListenError naming the address when it cannot listen (the port is
  // taken: no other process can share it), AuthConfigError when the TLS
  // files cannot be used.
  RendezvousServer(ServerOptions options, JobRegistry::IdSource id_source);
  RendezvousServer(const std::string& host, int port, JobRegistry::IdSource id_source);
  ~RendezvousServer();  // shuts down, waking blocked calls
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  int port() const { return port_; }
  // "host:port" to hand to clients.
  std::string address() const;
  JobRegistry& registry() { return registry_; }
  RendezvousHandler& handler() { return *handler_; }
  void shutdown();

 private:
  std::string host_;
  int port_ = 0;
  JobRegistry registry_;
  std::unique_ptr<RendezvousHandler> handler_;
  std::unique_ptr<grpc::Server> server_;
  std::unique_ptr<MemoryTrimmer> trimmer_;  // what a connection flood left, back to the system
};

}  // namespace ddprun
