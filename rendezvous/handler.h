// The gRPC face of the rendezvous: validates each request, converts it and
// calls the JobRegistry, and maps errors to gRPC status codes.
#pragma once

#include "ddprun/v1/rendezvous.grpc.pb.h"
#include "rendezvous/registry.h"

namespace ddprun {

class RendezvousHandler final : public v1::Rendezvous::Service {
 public:
  explicit RendezvousHandler(JobRegistry& registry) : registry_(registry) {}

  grpc::Status Join(grpc::ServerContext*, const v1::JoinRequest*, v1::JoinResponse*) override;
  grpc::Status Set(grpc::ServerContext*, const v1::SetRequest*, v1::SetResponse*) override;
  grpc::Status Get(grpc::ServerContext*, const v1::GetRequest*, v1::GetResponse*) override;
  grpc::Status Wait(grpc::ServerContext*, const v1::WaitRequest*, v1::WaitResponse*) override;
  grpc::Status Add(grpc::ServerContext*, const v1::AddRequest*, v1::AddResponse*) override;

 private:
  JobRegistry& registry_;
};

}  // namespace ddprun
