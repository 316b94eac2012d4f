// The gRPC face of the rendezvous: validates each request before touching
// any state, converts it and calls the JobRegistry, and maps errors to gRPC
// status codes. Join is asynchronous (a parked join holds no thread); the
// other calls are short or bounded by their own timeouts.
#pragma once

#include "ddprun/v1/rendezvous.grpc.pb.h"
#include "rendezvous/registry.h"

namespace ddprun {

class RendezvousHandler final
    : public v1::Rendezvous::WithCallbackMethod_Join<
          v1::Rendezvous::WithCallbackMethod_Hold<v1::Rendezvous::Service>> {
 public:
  explicit RendezvousHandler(JobRegistry& registry) : registry_(registry) {}

  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext*, const v1::JoinRequest*,
                                 v1::JoinResponse*) override;
  grpc::ServerWriteReactor<v1::KeepAliveResponse>* Hold(grpc::CallbackServerContext*,
                                                        const v1::KeepAliveRequest*) override;
  grpc::Status KeepAlive(grpc::ServerContext*, const v1::KeepAliveRequest*,
                         v1::KeepAliveResponse*) override;
  grpc::Status Leave(grpc::ServerContext*, const v1::LeaveRequest*, v1::LeaveResponse*) override;
  grpc::Status Set(grpc::ServerContext*, const v1::SetRequest*, v1::SetResponse*) override;
  grpc::Status Get(grpc::ServerContext*, const v1::GetRequest*, v1::GetResponse*) override;
  grpc::Status Wait(grpc::ServerContext*, const v1::WaitRequest*, v1::WaitResponse*) override;
  grpc::Status Add(grpc::ServerContext*, const v1::AddRequest*, v1::AddResponse*) override;

 private:
  JobRegistry& registry_;
};

}  // namespace ddprun
