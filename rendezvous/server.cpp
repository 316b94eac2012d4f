#include "rendezvous/server.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <stdexcept>

#include "rendezvous/handler.h"

namespace ddprun {

RendezvousServer::RendezvousServer(const std::string& host, int port,
                                   JobRegistry::IdSource id_source)
    : host_(host), registry_(std::move(id_source)) {
  handler_ = std::make_unique<RendezvousHandler>(registry_);
  const bool ipv6 = host.find(':') != std::string::npos;
  const std::string listen = (ipv6 ? "[" + host + "]" : host) + ":" + std::to_string(port);
  grpc::ServerBuilder builder;
  // gRPC shares ports (SO_REUSEPORT) by default: then a second agent that
  // tries to host the same endpoint would succeed and split the job.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  builder.AddListeningPort(listen, grpc::InsecureServerCredentials(), &port_);
  builder.RegisterService(handler_.get());
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) {
    throw ListenError("rendezvous: cannot listen on " + listen +
                      " (is the port in use, or the address not this host's? change --rdzv-endpoint)");
  }
}

RendezvousServer::~RendezvousServer() { shutdown(); }

std::string RendezvousServer::address() const {
  const bool ipv6 = host_.find(':') != std::string::npos;
  return (ipv6 ? "[" + host_ + "]" : host_) + ":" + std::to_string(port_);
}

void RendezvousServer::shutdown() {
  if (!server_) return;
  // Wake handlers blocked in joins and store waits first, so that shutting
  // the server down does not wait for their timeouts.
  registry_.close();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
  server_.reset();
}

}  // namespace ddprun
