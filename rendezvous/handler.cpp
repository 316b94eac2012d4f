#include "rendezvous/handler.h"

#include <atomic>
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

// The status for an error of the registry or the store.
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
  } catch (const JobEnded& e) {
    return Status(StatusCode::ABORTED, e.what());
  } catch (const RendezvousError& e) {
    return Status(StatusCode::FAILED_PRECONDITION, e.what());
  } catch (const StoreError& e) {
    return Status(StatusCode::FAILED_PRECONDITION, e.what());
  } catch (const std::exception& e) {
    return Status(StatusCode::INTERNAL, std::string("rendezvous: ") + e.what());
  }
}

// Runs fn, turning the registry's and the store's exceptions into statuses.
template <typename Fn>
Status guarded(Fn&& fn) {
  try {
    fn();
    return Status::OK;
  } catch (...) {
    return to_status(std::current_exception());
  }
}

std::optional<int64_t> round_of(const auto& req) {
  return req.has_round() ? std::optional<int64_t>(req.round()) : std::nullopt;
}

// One Join call: parked in the registry until its round closes; a client
// that gives up (cancels, or goes away) takes its join back.
class JoinReactor final : public grpc::ServerUnaryReactor {
 public:
  explicit JoinReactor(JobRegistry& registry) : registry_(registry) {}

  void start(JoinCall call, v1::JoinResponse* resp) {
    const uint64_t ticket =
        registry_.join_async(std::move(call), [this, resp](JoinOutcome o) { finish(resp, o); });
    ticket_.store(ticket);
    release();
  }
  void OnCancel() override {
    const uint64_t ticket = ticket_.load();
    if (ticket != 0 && registry_.cancel(ticket)) {
      Finish(Status(StatusCode::CANCELLED, "rendezvous: join cancelled by the client"));
    }
  }
  // The join may complete (and gRPC end the call) before start() returns:
  // whichever of start() and OnDone() comes last deletes the reactor.
  void OnDone() override { release(); }

 private:
  void finish(v1::JoinResponse* resp, const JoinOutcome& o) {
    if (o.error) {
      Finish(to_status(o.error));
      return;
    }
    const Assignment& a = o.result->assignment;
    resp->set_round(a.round);
    resp->set_node_rank(a.node_rank);
    resp->set_num_nodes(a.num_nodes);
    resp->set_world_size(a.world_size);
    resp->set_first_global_rank(a.first_global_rank);
    resp->set_master_addr(a.master_addr);
    resp->set_master_port(a.master_port);
    resp->set_restart_count(a.restart_count);
    for (const auto& l : a.lost_since_last_round) resp->add_lost_nodes(l);
    resp->set_nccl_id(o.result->nccl_id);
    resp->set_nccl_id_error(o.result->nccl_id_error);
    Finish(Status::OK);
  }

  void release() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

  JobRegistry& registry_;
  std::atomic<uint64_t> ticket_{0};
  std::atomic<int> refs_{2};  // start() and OnDone()
};

// One Hold call: open as long as the node's agent lives. It never writes;
// when the client goes away (its process died, its connection closed) the
// node is dropped at once. A node that left first is unknown by then, so a
// clean exit drops nothing.
class HoldReactor final : public grpc::ServerWriteReactor<v1::KeepAliveResponse> {
 public:
  HoldReactor(JobRegistry& registry, std::string job_id, std::string node_id)
      : registry_(registry), job_id_(std::move(job_id)), node_id_(std::move(node_id)) {
    StartSendInitialMetadata();  // tells the client the hold is in place
  }
  void OnCancel() override {
    registry_.connection_lost(job_id_, node_id_);
    Finish(Status(StatusCode::CANCELLED, "rendezvous: hold ended"));
  }
  void OnDone() override { delete this; }

 private:
  JobRegistry& registry_;
  std::string job_id_;
  std::string node_id_;
};

class RefusedHold final : public grpc::ServerWriteReactor<v1::KeepAliveResponse> {
 public:
  explicit RefusedHold(const Status& s) { Finish(s); }
  void OnDone() override { delete this; }
};

}  // namespace

grpc::ServerWriteReactor<v1::KeepAliveResponse>* RendezvousHandler::Hold(
    grpc::CallbackServerContext*, const v1::KeepAliveRequest* req) {
  if (auto bad = check_job(req->job_id())) return new RefusedHold(*bad);
  if (req->node_id().empty()) return new RefusedHold(invalid("node_id is empty"));
  if (!registry_.knows(req->job_id(), req->node_id())) {
    return new RefusedHold(Status(StatusCode::FAILED_PRECONDITION,
                                  "rendezvous: node '" + req->node_id() + "' is not in job '" +
                                      req->job_id() + "'; join first"));
  }
  return new HoldReactor(registry_, req->job_id(), req->node_id());
}

grpc::ServerUnaryReactor* RendezvousHandler::Join(grpc::CallbackServerContext* ctx,
                                                  const v1::JoinRequest* req,
                                                  v1::JoinResponse* resp) {
  auto reject = [&](const Status& s) {
    auto* r = ctx->DefaultReactor();
    r->Finish(s);
    return r;
  };
  if (auto bad = check_job(req->job_id())) return reject(*bad);
  if (auto bad = check_timeout(req->timeout_ms())) return reject(*bad);
  if (!req->has_node() || req->node().node_id().empty()) {
    return reject(invalid("node.node_id is empty"));
  }
  const auto& n = req->node();
  if (n.local_world_size() < 1) {
    return reject(invalid("node '" + n.node_id() + "' has local_world_size " +
                          std::to_string(n.local_world_size())));
  }
  if (n.master_port() < 0 || n.master_port() > 65535) {
    return reject(invalid("node '" + n.node_id() + "' has master_port " +
                          std::to_string(n.master_port())));
  }
  if (req->last_call_ms() < 0 || req->last_call_ms() > kMaxTimeoutMs) {
    return reject(invalid("last_call_ms " + std::to_string(req->last_call_ms()) +
                          " is outside [0, " + std::to_string(kMaxTimeoutMs) + "]"));
  }
  if (req->lease_ms() < 0 || req->lease_ms() > kMaxTimeoutMs) {
    return reject(invalid("lease_ms " + std::to_string(req->lease_ms()) + " is outside [0, " +
                          std::to_string(kMaxTimeoutMs) + "]"));
  }
  if (req->max_restarts() < 0) return reject(invalid("max_restarts is negative"));

  JoinCall call;
  call.job_id = req->job_id();
  call.node = NodeSpec{n.node_id(),       n.host(),          n.local_world_size(), n.local_addr(),
                       n.node_rank_hint(), n.wants_nccl_id(), n.master_port()};
  call.settings = RoundSettings{req->min_nodes(), req->max_nodes(),
                                std::chrono::milliseconds(req->last_call_ms()), req->max_restarts()};
  call.intent = JoinIntent{req->last_round(), req->workers_failed()};
  call.lease = std::chrono::milliseconds(req->lease_ms());
  call.timeout = std::chrono::milliseconds(req->timeout_ms());
  auto* reactor = new JoinReactor(registry_);
  reactor->start(std::move(call), resp);
  return reactor;
}

Status RendezvousHandler::KeepAlive(grpc::ServerContext*, const v1::KeepAliveRequest* req,
                                    v1::KeepAliveResponse* resp) {
  if (auto bad = check_job(req->job_id())) return *bad;
  if (req->node_id().empty()) return invalid("node_id is empty");
  return guarded([&] {
    NodeView v = registry_.keep_alive(req->job_id(), req->node_id());
    resp->set_known(v.known);
    resp->set_round(v.round);
    resp->set_round_closed(v.closed);
    resp->set_phase(static_cast<v1::JobPhase>(v.phase));
    resp->set_reason(static_cast<v1::RoundReason>(v.reason));
    resp->set_detail(v.detail);
    resp->set_nodes_waiting(v.nodes_waiting);
    resp->set_restart_count(v.restart_count);
  });
}

Status RendezvousHandler::Leave(grpc::ServerContext*, const v1::LeaveRequest* req,
                                v1::LeaveResponse*) {
  if (auto bad = check_job(req->job_id())) return *bad;
  if (req->node_id().empty()) return invalid("node_id is empty");
  if (!v1::LeaveKind_IsValid(req->kind())) return invalid("unknown leave kind");
  return guarded([&] {
    registry_.leave(req->job_id(), req->node_id(), static_cast<LeaveKind>(req->kind()),
                    req->message());
  });
}

Status RendezvousHandler::Set(grpc::ServerContext*, const v1::SetRequest* req, v1::SetResponse*) {
  if (auto bad = check_key(req->job_id(), req->key())) return *bad;
  return guarded([&] { registry_.store(req->job_id(), round_of(*req)).set(req->key(), req->value()); });
}

Status RendezvousHandler::Get(grpc::ServerContext*, const v1::GetRequest* req,
                              v1::GetResponse* resp) {
  if (auto bad = check_key(req->job_id(), req->key())) return *bad;
  if (auto bad = check_timeout(req->timeout_ms())) return *bad;
  return guarded([&] {
    resp->set_value(registry_.store(req->job_id(), round_of(*req))
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
    registry_.store(req->job_id(), round_of(*req))
        .wait(keys, std::chrono::milliseconds(req->timeout_ms()));
  });
}

Status RendezvousHandler::Add(grpc::ServerContext*, const v1::AddRequest* req,
                              v1::AddResponse* resp) {
  if (auto bad = check_key(req->job_id(), req->key())) return *bad;
  return guarded([&] {
    resp->set_value(registry_.store(req->job_id(), round_of(*req)).add(req->key(), req->delta()));
  });
}

}  // namespace ddprun
