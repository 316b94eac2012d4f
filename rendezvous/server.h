// Runs the rendezvous gRPC service in this process (the launcher hosts it).
#pragma once

#include <memory>
#include <stdexcept>
#include <string>

#include "rendezvous/registry.h"

namespace grpc {
class Server;
}

namespace ddprun {

class RendezvousHandler;

class ListenError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class RendezvousServer {
 public:
  // Listens on host:port; port 0 picks a free one (see port()). Throws
  // ListenError naming the address when it cannot listen (the port is
  // taken: no other process can share it).
  RendezvousServer(const std::string& host, int port, JobRegistry::IdSource id_source);
  ~RendezvousServer();  // shuts down, waking blocked calls
  RendezvousServer(const RendezvousServer&) = delete;
  RendezvousServer& operator=(const RendezvousServer&) = delete;

  int port() const { return port_; }
  // "host:port" to hand to clients.
  std::string address() const;
  JobRegistry& registry() { return registry_; }
  void shutdown();

 private:
  std::string host_;
  int port_ = 0;
  JobRegistry registry_;
  std::unique_ptr<RendezvousHandler> handler_;
  std::unique_ptr<grpc::Server> server_;
};

}  // namespace ddprun
