#include "rendezvous/server/call_checks.h"

#include "rendezvous/store/memory_store.h"
#include "rendezvous/server/registry.h"
#include "rendezvous/wire/security.h"

namespace ddprun {
namespace {

using grpc::Status;
using grpc::StatusCode;

// Longest a single blocking call may ask to wait: a day.
constexpr int64_t kMaxTimeoutMs = 24LL * 3600 * 1000;
constexpr const char* kTokenFlags = "--rdzv-token, DDPRUN_RDZV_TOKEN or --rdzv-token-file";

}  // namespace

Status invalid_argument(const std::string& what) {
  return Status(StatusCode::INVALID_ARGUMENT, "rendezvous: " + what);
}

MaybeStatus check_token(const grpc::ServerContextBase& ctx, const std::string& token) {
  if (token.empty()) return std::nullopt;
  const auto& md = ctx.client_metadata();
  auto it = md.find(kTokenMetadataKey);
  if (it == md.end()) {
    return Status(StatusCode::UNAUTHENTICATED,
                  std::string("rendezvous: this rendezvous requires a token and the call carried "
                              "none; give every node the job's token (") +
                      kTokenFlags + ")");
  }
  if (!tokens_equal(token, std::string_view(it->second.data(), it->second.size()))) {
    return Status(StatusCode::UNAUTHENTICATED,
                  std::string("rendezvous: wrong token; every node must be given the same one (") +
                      kTokenFlags + ")");
  }
  return std::nullopt;
}

MaybeStatus check_job(const std::string& job_id) {
  if (job_id.empty()) return invalid_argument("job_id is empty");
  if (job_id.size() > 256) {
    return invalid_argument("job_id has " + std::to_string(job_id.size()) +
                            " bytes; at most 256");
  }
  return std::nullopt;
}

MaybeStatus check_key(const std::string& key, const ServiceLimits& limits) {
  if (key.empty()) return invalid_argument("key is empty");
  if (key.size() > limits.max_key_bytes) {
    return invalid_argument("key '" + key.substr(0, 64) + "...' has " +
                            std::to_string(key.size()) + " bytes; at most " +
                            std::to_string(limits.max_key_bytes));
  }
  return std::nullopt;
}

MaybeStatus check_value(const std::string& key, const std::string& value,
                        const ServiceLimits& limits) {
  if (value.size() > limits.max_value_bytes) {
    return Status(StatusCode::RESOURCE_EXHAUSTED,
                  "rendezvous: the value for key '" + key.substr(0, 64) + "' has " +
                      std::to_string(value.size()) + " bytes; at most " +
                      std::to_string(limits.max_value_bytes) +
                      " (raise --rdzv-conf max_value_bytes on the node that hosts the rendezvous)");
  }
  return std::nullopt;
}

MaybeStatus check_duration(const char* field, int64_t ms) {
  if (ms < 0 || ms > kMaxTimeoutMs) {
    return invalid_argument(std::string(field) + " " + std::to_string(ms) + " is outside [0, " +
                            std::to_string(kMaxTimeoutMs) + "]");
  }
  return std::nullopt;
}

MaybeStatus check_timeout(int64_t timeout_ms) { return check_duration("timeout_ms", timeout_ms); }

MaybeStatus check_lease_key(const std::string& key) {
  if (key.size() > kMaxLeaseKeyBytes) {
    return invalid_argument("lease_key is " + std::to_string(key.size()) + " bytes; at most " +
                            std::to_string(kMaxLeaseKeyBytes));
  }
  return std::nullopt;
}

Status to_status(std::exception_ptr error) {
  try {
    std::rethrow_exception(error);
  } catch (const StoreTimeout& e) {
    return Status(StatusCode::DEADLINE_EXCEEDED, e.what());
  } catch (const JoinTimeout& e) {
    return Status(StatusCode::DEADLINE_EXCEEDED, e.what());
  } catch (const StoreClosed& e) {
    return Status(StatusCode::UNAVAILABLE, e.what());
  } catch (const RegistryClosed& e) {
    return Status(StatusCode::UNAVAILABLE, e.what());
  } catch (const NotServedHere& e) {
    return Status(StatusCode::UNAVAILABLE, e.what());
  } catch (const ProgramMismatch& e) {
    return Status(StatusCode::INVALID_ARGUMENT, e.what());
  } catch (const NotThisNode& e) {
    return Status(StatusCode::PERMISSION_DENIED, e.what());
  } catch (const JobEnded& e) {
    return Status(StatusCode::ABORTED, e.what());
  } catch (const UnknownJob& e) {
    return Status(StatusCode::NOT_FOUND, e.what());
  } catch (const TooManyJobs& e) {
    return Status(StatusCode::RESOURCE_EXHAUSTED, e.what());
  } catch (const StoreQuotaExceeded& e) {
    return Status(StatusCode::RESOURCE_EXHAUSTED, e.what());
  } catch (const RendezvousError& e) {
    return Status(StatusCode::FAILED_PRECONDITION, e.what());
  } catch (const StoreError& e) {
    return Status(StatusCode::FAILED_PRECONDITION, e.what());
  } catch (const std::exception& e) {
    return Status(StatusCode::INTERNAL, std::string("rendezvous: ") + e.what());
  }
}

std::string client_host(const std::string& peer) {
  const size_t colon = peer.rfind(':');
  const size_t first = peer.find(':');
  // "unix:/path" and the like have no port to strip.
  if (colon == std::string::npos || colon == first) return peer;
  return peer.substr(0, colon);
}

}  // namespace ddprun
