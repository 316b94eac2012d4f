// What the rendezvous handler checks before it touches anything, and how
// the registry's and the store's errors become gRPC statuses. Each check
// returns the status to answer with, or nothing when the input is fine.
#pragma once

#include <grpcpp/grpcpp.h>

#include <exception>
#include <optional>
#include <string>

#include "rendezvous/store/limits.h"

namespace ddprun {

using MaybeStatus = std::optional<grpc::Status>;

grpc::Status invalid_argument(const std::string& what);

// The call carries the service's token (a service without one takes any call).
MaybeStatus check_token(const grpc::ServerContextBase& ctx, const std::string& token);
MaybeStatus check_job(const std::string& job_id);
// A key's form (the job id is check_job's).
MaybeStatus check_key(const std::string& key, const ServiceLimits& limits);
MaybeStatus check_value(const std::string& key, const std::string& value,
                        const ServiceLimits& limits);
MaybeStatus check_timeout(int64_t timeout_ms);
// A lease key's size (its value is the registry's to check).
MaybeStatus check_lease_key(const std::string& key);
MaybeStatus check_duration(const char* field, int64_t ms);

// The status for an error of the registry or the store.
grpc::Status to_status(std::exception_ptr error);

// The client's host ("ipv4:10.0.0.2:51234" → "ipv4:10.0.0.2"): what a
// per-client limit counts by (all ranks of a node share it).
std::string client_host(const std::string& peer);

}  // namespace ddprun
