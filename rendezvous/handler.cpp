#include "rendezvous/handler.h"

#include <chrono>
#include <optional>

namespace ddprun {
namespace {

using grpc::Status;
using grpc::StatusCode;

// Longest a single blocking call may ask to wait: a day.
constexpr int64_t kMaxTimeoutMs = 24LL * 3600 * 1000;

Status invalid(const std::string& what) {
  return Status(StatusCode::INVALID_ARGUMENT, "rendezvous: " + what);
}

std::optional<Status> check_job(const std::string& job_id) {
  if (job_id.empty()) return invalid("job_id is empty");
  return std::nullopt;
}

std::optional<Status> check_key(const std::string& job_id, const std::string& key) {
  if (auto bad = check_job(job_id)) return bad;
  if (key.empty()) return invalid("key is empty");
  return std::nullopt;
}

std::optional<Status> check_timeout(int64_t timeout_ms) {
  if (timeout_ms < 0 || timeout_ms > kMaxTimeoutMs) {
    return invalid("timeout_ms " + std::to_string(timeout_ms) + " is outside [0, " +
                   std::to_string(kMaxTimeoutMs) + "]");
  }
  return std::nullopt;
}

// Runs fn, turning the registry's and the store's exceptions into statuses.
template <typename Fn>
Status guarded(Fn&& fn) {
  try {
    fn();
    return Status::OK;
  } catch (const StoreTimeout& e) {
    return Status(StatusCode::DEADLINE_EXCEEDED, e.what());
  } catch (const JoinTimeout& e) {
    return Status(StatusCode::DEADLINE_EXCEEDED, e.what());
  } catch (const StoreClosed& e) {
    return Status(StatusCode::UNAVAILABLE, e.what());
  } catch (const RegistryClosed& e) {
    return Status(StatusCode::UNAVAILABLE, e.what());
  } catch (const RendezvousError& e) {
    return Status(StatusCode::FAILED_PRECONDITION, e.what());
  } catch (const StoreError& e) {
    return Status(StatusCode::FAILED_PRECONDITION, e.what());
  } catch (const std::exception& e) {
    return Status(StatusCode::INTERNAL, std::string("rendezvous: ") + e.what());
  }
}

}  // namespace

Status RendezvousHandler::Join(grpc::ServerContext*, const v1::JoinRequest* req,
                               v1::JoinResponse* resp) {
  if (auto bad = check_job(req->job_id())) return *bad;
  if (auto bad = check_timeout(req->timeout_ms())) return *bad;
  if (!req->has_node() || req->node().node_id().empty()) return invalid("node.node_id is empty");
  const auto& n = req->node();
  if (n.local_world_size() < 1) {
    return invalid("node '" + n.node_id() + "' has local_world_size " +
                   std::to_string(n.local_world_size()));
  }
  if (req->last_call_ms() < 0) return invalid("last_call_ms is negative");

  NodeSpec node{n.node_id(), n.host(), n.local_world_size(), n.local_addr(), n.node_rank_hint(),
                n.wants_nccl_id()};
  RoundSettings settings{req->min_nodes(), req->max_nodes(),
                         std::chrono::milliseconds(req->last_call_ms())};
  return guarded([&] {
    JoinResult r = registry_.join(req->job_id(), node, settings,
                                  std::chrono::milliseconds(req->timeout_ms()));
    resp->set_round(r.assignment.round);
    resp->set_node_rank(r.assignment.node_rank);
    resp->set_num_nodes(r.assignment.num_nodes);
    resp->set_world_size(r.assignment.world_size);
    resp->set_first_global_rank(r.assignment.first_global_rank);
    resp->set_nccl_id(r.nccl_id);
    resp->set_nccl_id_error(r.nccl_id_error);
  });
}

Status RendezvousHandler::Set(grpc::ServerContext*, const v1::SetRequest* req, v1::SetResponse*) {
  if (auto bad = check_key(req->job_id(), req->key())) return *bad;
  return guarded([&] { registry_.store(req->job_id()).set(req->key(), req->value()); });
}

Status RendezvousHandler::Get(grpc::ServerContext*, const v1::GetRequest* req,
                              v1::GetResponse* resp) {
  if (auto bad = check_key(req->job_id(), req->key())) return *bad;
  if (auto bad = check_timeout(req->timeout_ms())) return *bad;
  return guarded([&] {
    resp->set_value(registry_.store(req->job_id())
                        .get(req->key(), std::chrono::milliseconds(req->timeout_ms())));
  });
}

Status RendezvousHandler::Wait(grpc::ServerContext*, const v1::WaitRequest* req,
                               v1::WaitResponse*) {
  if (auto bad = check_job(req->job_id())) return *bad;
  if (auto bad = check_timeout(req->timeout_ms())) return *bad;
  std::vector<std::string> keys(req->keys().begin(), req->keys().end());
  for (const auto& k : keys) {
    if (k.empty()) return invalid("an empty key in keys");
  }
  return guarded([&] {
    registry_.store(req->job_id()).wait(keys, std::chrono::milliseconds(req->timeout_ms()));
  });
}

Status RendezvousHandler::Add(grpc::ServerContext*, const v1::AddRequest* req,
                              v1::AddResponse* resp) {
  if (auto bad = check_key(req->job_id(), req->key())) return *bad;
  return guarded(
      [&] { resp->set_value(registry_.store(req->job_id()).add(req->key(), req->delta())); });
}

}  // namespace ddprun
