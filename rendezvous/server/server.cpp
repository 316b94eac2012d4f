#include "rendezvous/server/server.h"

#include <grpcpp/grpcpp.h>

#include <chrono>
#include <stdexcept>

#include "rendezvous/server/handler.h"

namespace ddprun {

RendezvousServer::RendezvousServer(const std::string& host, int port,
                                   JobRegistry::IdSource id_source)
    : RendezvousServer(ServerOptions{host, port, {}, {}}, std::move(id_source)) {}

RendezvousServer::RendezvousServer(ServerOptions options, JobRegistry::IdSource id_source)
    : host_(options.host), registry_(std::move(id_source), options.limits) {
  const ServiceLimits& limits = options.limits;
  auto credentials = server_credentials(options.auth.tls);
  handler_ = std::make_unique<RendezvousHandler>(registry_,
                                                 HandlerOptions{options.auth.token, limits, options.gate, options.own_job});
  const bool ipv6 = host_.find(':') != std::string::npos;
  const std::string listen =
      (ipv6 ? "[" + host_ + "]" : host_) + ":" + std::to_string(options.port);
  grpc::ServerBuilder builder;
  // gRPC shares ports (SO_REUSEPORT) by default: then a second agent that
  // tries to host the same endpoint would succeed and split the job.
  builder.AddChannelArgument(GRPC_ARG_ALLOW_REUSEPORT, 0);
  // Connections cost a file descriptor each: close those that carry no call
  // (clients reconnect when they next call) and those that never finish
  // the handshake.
  builder.AddChannelArgument(GRPC_ARG_MAX_CONNECTION_IDLE_MS,
                             static_cast<int>(limits.idle_timeout.count()));
  builder.AddChannelArgument(GRPC_ARG_SERVER_HANDSHAKE_TIMEOUT_MS,
                             static_cast<int>(limits.handshake_timeout.count()));
  // Clients that follow a control plane's leader ping it every second while
  // a call is open (make_rendezvous_channel's watch_peer): allowed, not
  // struck as abuse.
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MIN_RECV_PING_INTERVAL_WITHOUT_DATA_MS, 500);
  builder.AddChannelArgument(GRPC_ARG_HTTP2_MAX_PING_STRIKES, 0);
  // Nothing bigger than a value and its key ever needs to come in.
  builder.SetMaxReceiveMessageSize(
      static_cast<int>(limits.max_value_bytes + limits.max_key_bytes + 64 * 1024));
  builder.AddListeningPort(listen, credentials, &port_);
  builder.RegisterService(handler_.get());
  if (options.peer_service) builder.RegisterService(options.peer_service);
  server_ = builder.BuildAndStart();
  if (!server_ || port_ == 0) {
    throw ListenError("rendezvous: cannot listen on " + listen +
                      " (is the port in use, or the address not this host's? change --rdzv-endpoint)");
  }
  trimmer_ = std::make_unique<MemoryTrimmer>(std::chrono::seconds(10));
}

RendezvousServer::~RendezvousServer() { shutdown(); }

std::string RendezvousServer::address() const {
  const bool ipv6 = host_.find(':') != std::string::npos;
  return (ipv6 ? "[" + host_ + "]" : host_) + ":" + std::to_string(port_);
}

void RendezvousServer::shutdown() {
  trimmer_.reset();
  if (!server_) return;
  // Wake handlers blocked in joins and store waits first, so that shutting
  // the server down does not wait for their timeouts.
  registry_.close();
  server_->Shutdown(std::chrono::system_clock::now() + std::chrono::seconds(1));
  server_->Wait();
  server_.reset();
}

}  // namespace ddprun
