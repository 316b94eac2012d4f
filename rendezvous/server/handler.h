// The gRPC face of the rendezvous: checks each call's token and validates
// its request before touching any state, converts it and calls the
// JobRegistry, and maps errors to gRPC status codes. Join, Get and Wait are
// asynchronous (a parked call holds no thread); the others are short.
#pragma once

#include <string>

#include "ddprun/v1/rendezvous.grpc.pb.h"
#include "rendezvous/server/deadline_timer.h"
#include "rendezvous/server/call_checks.h"
#include "rendezvous/store/limits.h"
#include "rendezvous/server/registry.h"
#include "rendezvous/server/serving_gate.h"
#include "rendezvous/server/wait_quota.h"

namespace ddprun {

struct HandlerOptions {
  std::string token;  // every call must carry it; empty: no check
  ServiceLimits limits;
  // Set when the jobs have a control plane (serving_gate.h): only its
  // leader serves a job; the others say where it is.
  ServingGate* gate = nullptr;
  // A job's own rendezvous (ServerOptions::own_job): joins of another job
  // are refused, naming both.
  std::string own_job{};
};

class RendezvousHandler final
    : public v1::Rendezvous::WithCallbackMethod_Join<v1::Rendezvous::WithCallbackMethod_Hold<
          v1::Rendezvous::WithCallbackMethod_Get<
              v1::Rendezvous::WithCallbackMethod_Wait<v1::Rendezvous::Service>>>> {
 public:
  RendezvousHandler(JobRegistry& registry, HandlerOptions options);

  grpc::ServerUnaryReactor* Join(grpc::CallbackServerContext*, const v1::JoinRequest*,
                                 v1::JoinResponse*) override;
  grpc::ServerWriteReactor<v1::KeepAliveResponse>* Hold(grpc::CallbackServerContext*,
                                                        const v1::KeepAliveRequest*) override;
  grpc::Status KeepAlive(grpc::ServerContext*, const v1::KeepAliveRequest*,
                         v1::KeepAliveResponse*) override;
  grpc::Status Leave(grpc::ServerContext*, const v1::LeaveRequest*, v1::LeaveResponse*) override;
  grpc::Status Set(grpc::ServerContext*, const v1::SetRequest*, v1::SetResponse*) override;
  grpc::ServerUnaryReactor* Get(grpc::CallbackServerContext*, const v1::GetRequest*,
                                v1::GetResponse*) override;
  grpc::ServerUnaryReactor* Wait(grpc::CallbackServerContext*, const v1::WaitRequest*,
                                 v1::WaitResponse*) override;
  grpc::Status Add(grpc::ServerContext*, const v1::AddRequest*, v1::AddResponse*) override;
  grpc::Status ReportProgress(grpc::ServerContext*, const v1::ProgressReport*,
                              v1::ProgressReportResponse*) override;
  grpc::Status Status(grpc::ServerContext*, const v1::StatusRequest*,
                      v1::StatusResponse*) override;

  // Store waits parked now (tests).
  size_t parked_waits() const { return waits_.in_use(); }
  bool await_parked_waits_at_most(size_t n, std::chrono::milliseconds timeout) const {
    return waits_.wait_until_at_most(n, timeout);
  }

 private:
  // The job id's form, then whether this process serves the job: the
  // status to answer with (UNAVAILABLE, naming the leader) when not.
  MaybeStatus served(grpc::ServerContextBase& ctx, const std::string& job_id);
  // After a change: whether it is saved for a successor (nullopt), or the
  // status to answer instead (this process stopped leading meanwhile).
  MaybeStatus committed(grpc::ServerContextBase& ctx, const std::string& job_id, bool force);
  // s, a change's answer, once the change is saved; s itself when it failed.
  grpc::Status after_change(grpc::ServerContextBase& ctx, const std::string& job_id, bool force,
                            const grpc::Status& s);
  static grpc::Status moved(grpc::ServerContextBase& ctx, const std::string& job_id, const std::string& leader);
  // Parks a store wait for keys; on_values fills the response.
  grpc::ServerUnaryReactor* park_wait(grpc::CallbackServerContext* ctx, const std::string& job_id,
                                      std::optional<int64_t> round, std::vector<std::string> keys,
                                      int64_t timeout_ms,
                                      std::function<void(std::vector<std::string>&)> on_values);

  JobRegistry& registry_;
  const HandlerOptions options_;
  WaitQuota waits_;
  DeadlineTimer timer_;
};

}  // namespace ddprun
