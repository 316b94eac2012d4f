#include "rendezvous/server/handler.h"

#include <atomic>
#include <chrono>
#include <optional>
#include <tuple>

#include "rendezvous/server/call_checks.h"
#include "rendezvous/server/report_checks.h"
#include "rendezvous/store/printable.h"
#include "rendezvous/wire/redirect.h"
#include "rendezvous/wire/status_proto.h"
#include "rendezvous/store/host_port.h"

namespace ddprun {
namespace {

using grpc::Status;
using grpc::StatusCode;

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

grpc::ServerUnaryReactor* refuse(grpc::CallbackServerContext* ctx, const Status& s) {
  auto* r = ctx->DefaultReactor();
  r->Finish(s);
  return r;
}

std::optional<int64_t> round_of(const auto& req) {
  return req.has_round() ? std::optional<int64_t>(req.round()) : std::nullopt;
}

// One Join call: parked in the registry until its round closes; a client
// that gives up (cancels, or goes away) takes its join back.
class JoinReactor final : public grpc::ServerUnaryReactor {
 public:
  // committed: whether the job's state its answer names is saved (and
  // if not, the status to answer instead).
  using Committed = std::function<MaybeStatus(const std::string& job_id)>;
  JoinReactor(JobRegistry& registry, Committed committed)
      : registry_(registry), committed_(std::move(committed)) {}

  void start(JoinCall call, v1::JoinResponse* resp) {
    job_id_ = call.job_id;
    const uint64_t ticket =
        registry_.join_async(std::move(call), [this, resp](JoinOutcome o) { finish(resp, o); });
    ticket_.store(ticket);
    release();
  }
  void OnCancel() override {
    const uint64_t ticket = ticket_.load();
    if (ticket != 0 && registry_.cancel(ticket)) {
      Finish(grpc::Status(StatusCode::CANCELLED, "rendezvous: join cancelled by the client"));
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
    if (MaybeStatus moved = committed_(job_id_)) {
      Finish(*moved);
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
    resp->set_heal_generation(a.heal_generation);
    resp->set_opened_because(a.opened_because);
    resp->set_lease_key(o.result->lease_key);
    resp->set_nccl_id(o.result->nccl_id);
    resp->set_nccl_id_error(o.result->nccl_id_error);
    Finish(Status::OK);
  }

  void release() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

  JobRegistry& registry_;
  Committed committed_;
  std::string job_id_;
  std::atomic<uint64_t> ticket_{0};
  std::atomic<int> refs_{2};  // start() and OnDone()
};

// One Hold call: open as long as the node's agent lives. When the client
// goes away (its process died, its connection closed) the node is dropped
// at once. A node that left first is unknown by then, so a clean exit drops
// nothing. While open, it writes an empty message each time the job has
// news (JobRegistry::watch_news): the agent then sends its keep-alive at
// once instead of at its next interval, and learns of a new round or a heal
// generation in a round trip.
class HoldReactor final : public grpc::ServerWriteReactor<v1::KeepAliveResponse> {
 public:
  HoldReactor(JobRegistry& registry, std::string job_id, std::string node_id)
      : registry_(registry), job_id_(std::move(job_id)), node_id_(std::move(node_id)),
        hold_(registry_.hold_opened(job_id_, node_id_)), writes_(std::make_shared<Writes>()) {
    writes_->reactor = this;
    StartSendInitialMetadata();  // tells the client the hold is in place
    // The registry holds the writes weakly: a nudge after OnDone finds no
    // reactor and writes nothing.
    std::weak_ptr<Writes> weak = writes_;
    ticket_ = registry_.watch_news(job_id_, [weak] {
      if (auto w = weak.lock()) w->nudge();
    });
  }
  void OnWriteDone(bool ok) override {
    std::lock_guard lock(writes_->mu);
    writes_->writing = false;
    if (!ok) writes_->finished = true;  // the stream is broken: OnCancel follows
    if (writes_->again && !writes_->finished) {
      writes_->again = false;
      writes_->writing = true;
      StartWrite(&writes_->message);
    }
  }
  void OnCancel() override {
    registry_.connection_lost(job_id_, node_id_, hold_);
    {
      std::lock_guard lock(writes_->mu);
      writes_->finished = true;
    }
    Finish(grpc::Status(StatusCode::CANCELLED, "rendezvous: hold ended"));
  }
  void OnDone() override {
    registry_.unwatch_news(ticket_);
    {
      std::lock_guard lock(writes_->mu);
      writes_->reactor = nullptr;
    }
    delete this;
  }

 private:
  // One write in flight at a time; news while one is out is written after it.
  struct Writes {
    std::mutex mu;
    HoldReactor* reactor = nullptr;
    bool writing = false, again = false, finished = false;
    v1::KeepAliveResponse message;  // empty: "ask again now"
    void nudge() {
      std::lock_guard lock(mu);
      if (!reactor || finished) return;
      if (writing) {
        again = true;
        return;
      }
      writing = true;
      reactor->StartWrite(&message);
    }
  };
  JobRegistry& registry_;
  std::string job_id_;
  std::string node_id_;
  uint64_t hold_;  // its id (JobRegistry::hold_opened)
  std::shared_ptr<Writes> writes_;
  uint64_t ticket_ = 0;
};

class RefusedHold final : public grpc::ServerWriteReactor<v1::KeepAliveResponse> {
 public:
  explicit RefusedHold(const Status& s) { Finish(s); }
  void OnDone() override { delete this; }
};


// One Get or Wait call, parked as a watch on the job's store: answered when
// the keys exist, when its timer ends it, or dropped when the client goes
// away. It holds a place in the wait quota until gRPC is done with it.
class WatchReactor final : public grpc::ServerUnaryReactor {
 public:
  using OnValues = std::function<void(std::vector<std::string>&)>;

  WatchReactor(std::shared_ptr<MemoryStore> store, DeadlineTimer& timer, WaitQuota& quota,
               std::string host, OnValues on_values)
      : store_(std::move(store)),
        timer_(timer),
        quota_(quota),
        host_(std::move(host)),
        on_values_(std::move(on_values)) {}
  ~WatchReactor() override { quota_.release(host_); }

  void start(std::vector<std::string> keys, std::chrono::milliseconds timeout) {
    const std::string first = keys.front();
    const uint64_t ticket =
        store_->watch(std::move(keys), [this](WatchResult r) { complete(std::move(r)); });
    ticket_.store(ticket);
    // The timer holds the store weakly and knows only the ticket: it may
    // fire after this reactor is gone, and then finds nothing to end.
    std::weak_ptr<MemoryStore> weak = store_;
    const uint64_t id = timer_.schedule(
        DeadlineTimer::Clock::now() + timeout, [weak, ticket, first, timeout] {
          if (auto store = weak.lock()) {
            store->end_watch(ticket, std::make_exception_ptr(StoreTimeout(first, timeout)));
          }
        });
    timer_id_.store(id);
    // Completed already (keys present, or at once on another thread)?
    if (done_.load()) timer_.cancel(id);
    release();
  }
  void OnCancel() override {
    const uint64_t ticket = ticket_.load();
    if (ticket != 0 && store_->end_watch(ticket, nullptr)) {
      done_.store(true);
      timer_.cancel(timer_id_.load());
      Finish(grpc::Status(StatusCode::CANCELLED, "rendezvous: wait cancelled by the client"));
    }
  }
  void OnDone() override { release(); }

 private:
  void complete(WatchResult r) {
    done_.store(true);
    if (const uint64_t id = timer_id_.load()) timer_.cancel(id);
    if (r.error) {
      Finish(to_status(r.error));
      return;
    }
    on_values_(r.values);
    Finish(Status::OK);
  }
  void release() {
    if (refs_.fetch_sub(1) == 1) delete this;
  }

  std::shared_ptr<MemoryStore> store_;
  DeadlineTimer& timer_;
  WaitQuota& quota_;
  std::string host_;
  OnValues on_values_;
  std::atomic<uint64_t> ticket_{0};
  std::atomic<uint64_t> timer_id_{0};
  std::atomic<bool> done_{false};
  std::atomic<int> refs_{2};  // start() and OnDone()
};

}  // namespace

RendezvousHandler::RendezvousHandler(JobRegistry& registry, HandlerOptions options)
    : registry_(registry),
      options_(std::move(options)),
      waits_(options_.limits.max_waits_per_client, options_.limits.max_waits) {}

grpc::ServerWriteReactor<v1::KeepAliveResponse>* RendezvousHandler::Hold(
    grpc::CallbackServerContext* ctx, const v1::KeepAliveRequest* req) {
  if (auto bad = check_token(*ctx, options_.token)) return new RefusedHold(*bad);
  if (auto bad = served(*ctx, req->job_id())) return new RefusedHold(*bad);
  if (req->node_id().empty()) return new RefusedHold(invalid_argument("node_id is empty"));
  if (auto bad = check_lease_key(req->lease_key())) return new RefusedHold(*bad);
  bool held = false;
  if (auto bad = guarded([&] { held = registry_.holds(req->job_id(), req->node_id(), req->lease_key()); });
      !bad.ok()) {
    return new RefusedHold(bad);  // someone else's node: its Hold would drop it when it ends
  }
  if (!held) {
    return new RefusedHold(grpc::Status(StatusCode::FAILED_PRECONDITION,
                                  "rendezvous: node '" + printable(req->node_id(), false) + "' is not in job '" +
                                      req->job_id() + "'; join first"));
  }
  return new HoldReactor(registry_, req->job_id(), req->node_id());
}

grpc::ServerUnaryReactor* RendezvousHandler::Join(grpc::CallbackServerContext* ctx,
                                                  const v1::JoinRequest* req,
                                                  v1::JoinResponse* resp) {
  if (auto bad = check_token(*ctx, options_.token)) return refuse(ctx, *bad);
  if (auto bad = served(*ctx, req->job_id())) return refuse(ctx, *bad);
  if (!options_.own_job.empty() && req->job_id() != options_.own_job) {
    // Another job's ddprun found this port taken and joined here: it would
    // run as this job's tenant, with none of its own rendezvous' settings,
    // and this job's ddprun would wait for it before it exits.
    return refuse(ctx, grpc::Status(StatusCode::FAILED_PRECONDITION,
                                    "rendezvous: this endpoint is the rendezvous of job '" + options_.own_job +
                                        "', hosted by that job's ddprun, not a service for other jobs: job '" +
                                        printable(req->job_id(), false) +
                                        "' needs an endpoint of its own (another --rdzv-endpoint port), or run "
                                        "`ddprun rendezvous` as a service both jobs use"));
  }
  if (auto bad = check_timeout(req->timeout_ms())) return refuse(ctx, *bad);
  if (!req->has_node() || req->node().node_id().empty()) {
    return refuse(ctx, invalid_argument("node.node_id is empty"));
  }
  const auto& n = req->node();
  if (n.node_id().size() > 512 || n.host().size() > 512 || n.local_addr().size() > 512 ||
      n.control_address().size() > 1100 || n.probe_address().size() > 600) {
    return refuse(ctx, invalid_argument("node id, host or local_addr longer than 512 bytes, control_address "
                                        "longer than 1100 or probe_address longer than 600"));
  }
  // The rendezvous connects to a node's probe address only on the node's
  // own host (its local_addr): never to one a caller chose elsewhere.
  if (!n.probe_address().empty()) {
    HostPort hp;
    const std::string host =
        split_host_port(n.probe_address(), hp) == HostPortError::kNone && !hp.port.empty() ? hp.host : "";
    if (host != n.local_addr()) {
      return refuse(ctx, invalid_argument("probe_address '" + printable(n.probe_address(), false) +
                                              "' is not on the node's local_addr '" + printable(n.local_addr(), false) +
                                              "'"));
    }
  }
  // Every agent prints them (in a takeover's, a shrink's or a grow's news).
  if (n.program().size() > kMaxProgramBytes) {
    return refuse(ctx, invalid_argument("node '" + printable(n.node_id(), false) + "' has a program of " +
                                            std::to_string(n.program().size()) + " bytes; at most " +
                                            std::to_string(kMaxProgramBytes)));
  }
  for (const auto& [field, v] : {std::pair<const char*, const std::string*>{"node id", &n.node_id()},
                                 {"host", &n.host()},
                                 {"local_addr", &n.local_addr()},
                                 {"program", &n.program()},
                                 {"control_address", &n.control_address()},
                                 {"probe_address", &n.probe_address()}}) {
    if (printable(*v, false) != *v) {
      return refuse(ctx, invalid_argument(std::string(field) + " '" + printable(*v, false) +
                                              "' holds control characters"));
    }
  }
  if (auto bad = check_lease_key(req->lease_key())) return refuse(ctx, *bad);
  if (n.local_world_size() < 1 || n.local_world_size() > (1 << 20)) {
    return refuse(ctx, invalid_argument("node '" + n.node_id() + "' has local_world_size " +
                                            std::to_string(n.local_world_size())));
  }
  if (n.master_port() < 0 || n.master_port() > 65535) {
    return refuse(ctx, invalid_argument("node '" + n.node_id() + "' has master_port " +
                                            std::to_string(n.master_port())));
  }
  if (auto bad = check_duration("last_call_ms", req->last_call_ms())) return refuse(ctx, *bad);
  if (auto bad = check_duration("lease_ms", req->lease_ms())) return refuse(ctx, *bad);
  if (req->max_restarts() < 0) return refuse(ctx, invalid_argument("max_restarts is negative"));

  JoinCall call;
  call.job_id = req->job_id();
  call.node = from_proto(n);
  call.settings = RoundSettings{req->min_nodes(), req->max_nodes(),
                                std::chrono::milliseconds(req->last_call_ms()), req->max_restarts()};
  call.intent = JoinIntent{req->last_round(), req->workers_failed(),
                           printable(req->failure().substr(0, kMaxFailureBytes), false)};
  call.lease = std::chrono::milliseconds(req->lease_ms());
  call.timeout = std::chrono::milliseconds(req->timeout_ms());
  call.lease_key = req->lease_key();
  auto* reactor = new JoinReactor(registry_, [this, ctx](const std::string& job_id) {
    return committed(*ctx, job_id, false);
  });
  reactor->start(std::move(call), resp);
  return reactor;
}

Status RendezvousHandler::KeepAlive(grpc::ServerContext* ctx, const v1::KeepAliveRequest* req,
                                    v1::KeepAliveResponse* resp) {
  if (auto bad = check_token(*ctx, options_.token)) return *bad;
  if (auto bad = served(*ctx, req->job_id())) return *bad;
  if (req->node_id().empty()) return invalid_argument("node_id is empty");
  if (req->heal_request().detail().size() > kMaxHealDetailBytes) {
    return invalid_argument("heal_request.detail is " + std::to_string(req->heal_request().detail().size()) +
                            " bytes; at most " + std::to_string(kMaxHealDetailBytes));
  }
  if (auto bad = check_lease_key(req->lease_key())) return *bad;
  // The detail reaches every agent's log and event log: one line, no
  // escape sequences.
  const HealRequest heal{req->heal_request().id(), printable(req->heal_request().detail(), false)};
  const grpc::Status s = guarded([&] {
    NodeView v = registry_.keep_alive(req->job_id(), req->node_id(), req->lease_key(), req->workers_heal_round(),
                                      heal);
    resp->set_known(v.known);
    resp->set_round(v.round);
    resp->set_round_closed(v.closed);
    resp->set_phase(static_cast<v1::JobPhase>(v.phase));
    resp->set_reason(static_cast<v1::RoundReason>(v.reason));
    resp->set_detail(v.detail);
    resp->set_nodes_waiting(v.nodes_waiting);
    resp->set_restart_count(v.restart_count);
    resp->set_heal_generation(v.heal_generation);
    resp->set_takeover_ready(v.takeover_ready);
    resp->set_heal_request_id(v.heal_request_id);
    resp->set_heal_request_generation(v.heal_request_generation);
    resp->set_heal_reason(static_cast<v1::HealReason>(v.heal_reason));
    resp->set_refusals(v.refusals);
    resp->set_refusal(v.refusal);
    resp->set_straggler_score(v.straggler_score);
    if (options_.gate) {
      for (const std::string& c : options_.gate->candidates()) resp->add_control_candidates(c);
      const auto [node, term] = options_.gate->serving_as();
      resp->set_control_node(node);
      resp->set_control_term(term);
    }
    if (v.placement.node_rank >= 0) {
      v1::Placement* p = resp->mutable_placement();
      p->set_node_rank(v.placement.node_rank);
      p->set_num_nodes(v.placement.num_nodes);
      p->set_world_size(v.placement.world_size);
      p->set_first_global_rank(v.placement.first_global_rank);
    }
    resp->set_server_mono_ns(
        std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
            .count());
  });
  return after_change(*ctx, req->job_id(), false, s);
}

Status RendezvousHandler::Leave(grpc::ServerContext* ctx, const v1::LeaveRequest* req,
                                v1::LeaveResponse*) {
  if (auto bad = check_token(*ctx, options_.token)) return *bad;
  if (auto bad = served(*ctx, req->job_id())) return *bad;
  if (req->node_id().empty()) return invalid_argument("node_id is empty");
  if (!v1::LeaveKind_IsValid(req->kind())) return invalid_argument("unknown leave kind");
  if (auto bad = check_lease_key(req->lease_key())) return *bad;
  const grpc::Status s = guarded([&] {
    registry_.leave(req->job_id(), req->node_id(), req->lease_key(), static_cast<LeaveKind>(req->kind()),
                    printable(req->message().substr(0, 4096), false), round_of(*req));
  });
  return after_change(*ctx, req->job_id(), true, s);
}

Status RendezvousHandler::Set(grpc::ServerContext* ctx, const v1::SetRequest* req,
                              v1::SetResponse*) {
  if (auto bad = check_token(*ctx, options_.token)) return *bad;
  if (auto bad = served(*ctx, req->job_id())) return *bad;
  if (auto bad = check_key(req->key(), options_.limits)) return *bad;
  if (auto bad = check_value(req->key(), req->value(), options_.limits)) return *bad;
  const grpc::Status s =
      guarded([&] { registry_.store(req->job_id(), round_of(*req))->set(req->key(), req->value()); });
  return after_change(*ctx, req->job_id(), true, s);
}

Status RendezvousHandler::Add(grpc::ServerContext* ctx, const v1::AddRequest* req,
                              v1::AddResponse* resp) {
  if (auto bad = check_token(*ctx, options_.token)) return *bad;
  if (auto bad = served(*ctx, req->job_id())) return *bad;
  if (auto bad = check_key(req->key(), options_.limits)) return *bad;
  const grpc::Status s = guarded([&] {
    resp->set_value(registry_.store(req->job_id(), round_of(*req))->add(req->key(), req->delta()));
  });
  return after_change(*ctx, req->job_id(), true, s);
}

Status RendezvousHandler::ReportProgress(grpc::ServerContext* ctx, const v1::ProgressReport* req,
                                         v1::ProgressReportResponse*) {
  if (auto bad = check_token(*ctx, options_.token)) return *bad;
  if (auto bad = served(*ctx, req->job_id())) return *bad;
  if (req->node_id().empty()) return invalid_argument("node_id is empty");
  if (req->node_id().size() > 512) return invalid_argument("node_id longer than 512 bytes");
  if (auto bad = check_progress(req->progress())) return *bad;
  if (auto bad = check_collectives(req->collectives())) return *bad;
  if (auto bad = check_lease_key(req->lease_key())) return *bad;
  return guarded([&] {
    registry_.report_progress(req->job_id(), req->node_id(), req->lease_key(),
                              req->has_progress() ? std::optional(from_proto(req->progress())) : std::nullopt,
                              req->has_collectives() ? std::optional(from_proto(req->collectives())) : std::nullopt);
  });
}

Status RendezvousHandler::Status(grpc::ServerContext* ctx, const v1::StatusRequest* req,
                                 v1::StatusResponse* resp) {
  if (auto bad = check_token(*ctx, options_.token)) return *bad;
  if (auto bad = served(*ctx, req->job_id())) return *bad;
  return guarded([&] {
    JobStatus s = registry_.status(req->job_id());
    if (options_.gate) std::tie(s.control_node, s.control_term) = options_.gate->serving_as();
    to_proto(req->job_id(), s, resp);
  });
}

grpc::ServerUnaryReactor* RendezvousHandler::Get(grpc::CallbackServerContext* ctx,
                                                 const v1::GetRequest* req,
                                                 v1::GetResponse* resp) {
  if (auto bad = check_token(*ctx, options_.token)) return refuse(ctx, *bad);
  if (auto bad = served(*ctx, req->job_id())) return refuse(ctx, *bad);
  if (auto bad = check_key(req->key(), options_.limits)) return refuse(ctx, *bad);
  if (auto bad = check_timeout(req->timeout_ms())) return refuse(ctx, *bad);
  return park_wait(ctx, req->job_id(), round_of(*req), {req->key()}, req->timeout_ms(),
                   [resp](std::vector<std::string>& values) {
                     resp->set_value(std::move(values.front()));
                   });
}

grpc::ServerUnaryReactor* RendezvousHandler::Wait(grpc::CallbackServerContext* ctx,
                                                  const v1::WaitRequest* req, v1::WaitResponse*) {
  if (auto bad = check_token(*ctx, options_.token)) return refuse(ctx, *bad);
  if (auto bad = served(*ctx, req->job_id())) return refuse(ctx, *bad);
  if (auto bad = check_timeout(req->timeout_ms())) return refuse(ctx, *bad);
  if (req->keys_size() == 0) return refuse(ctx, invalid_argument("keys is empty"));
  if (static_cast<size_t>(req->keys_size()) > options_.limits.max_job_keys) {
    return refuse(ctx, invalid_argument("waits for " + std::to_string(req->keys_size()) +
                                            " keys; at most " +
                                            std::to_string(options_.limits.max_job_keys)));
  }
  for (const auto& k : req->keys()) {
    if (auto bad = check_key(k, options_.limits)) return refuse(ctx, *bad);
  }
  return park_wait(ctx, req->job_id(), round_of(*req), {req->keys().begin(), req->keys().end()},
                   req->timeout_ms(), [](std::vector<std::string>&) {});
}

MaybeStatus RendezvousHandler::served(grpc::ServerContextBase& ctx, const std::string& job_id) {
  if (auto bad = check_job(job_id)) return bad;
  if (!options_.gate) return std::nullopt;
  if (const std::string own = options_.gate->job(); !own.empty() && own != job_id) {
    return grpc::Status(StatusCode::FAILED_PRECONDITION,
                        "rendezvous: this service runs job '" + own + "''s control plane, not job '" + job_id +
                            "''s: --rdzv-endpoint names another job's rendezvous (give each job its own port, "
                            "or check --rdzv-id)");
  }
  const std::optional<std::string> leader = options_.gate->leader_elsewhere(job_id);
  if (!leader) return std::nullopt;
  return moved(ctx, job_id, *leader);
}

MaybeStatus RendezvousHandler::committed(grpc::ServerContextBase& ctx, const std::string& job_id, bool force) {
  if (!options_.gate || options_.gate->commit(job_id, force)) return std::nullopt;
  return moved(ctx, job_id, options_.gate->leader_elsewhere(job_id).value_or(""));
}

grpc::Status RendezvousHandler::after_change(grpc::ServerContextBase& ctx, const std::string& job_id, bool force,
                                             const grpc::Status& s) {
  return s.ok() ? committed(ctx, job_id, force).value_or(s) : s;
}

grpc::Status RendezvousHandler::moved(grpc::ServerContextBase& ctx, const std::string& job_id,
                                      const std::string& leader) {
  if (leader.empty()) {
    return grpc::Status(StatusCode::UNAVAILABLE, std::string(kNotServedPrefix) + "job '" + job_id +
                                                     "' has no leader now; electing one");
  }
  ctx.AddTrailingMetadata(kLeaderMetadataKey, leader);
  return grpc::Status(StatusCode::UNAVAILABLE,
                      std::string(kNotServedPrefix) + "job '" + job_id + "' is served at " + leader);
}

grpc::ServerUnaryReactor* RendezvousHandler::park_wait(
    grpc::CallbackServerContext* ctx, const std::string& job_id, std::optional<int64_t> round,
    std::vector<std::string> keys, int64_t timeout_ms,
    std::function<void(std::vector<std::string>&)> on_values) {
  std::shared_ptr<MemoryStore> store;
  try {
    store = registry_.store(job_id, round);
  } catch (...) {
    return refuse(ctx, to_status(std::current_exception()));
  }
  std::string host = client_host(ctx->peer());
  if (auto refused = waits_.acquire(host)) {
    return refuse(ctx, grpc::Status(StatusCode::RESOURCE_EXHAUSTED, *refused));
  }
  auto* reactor = new WatchReactor(std::move(store), timer_, waits_, std::move(host),
                                   std::move(on_values));
  reactor->start(std::move(keys), std::chrono::milliseconds(timeout_ms));
  return reactor;
}

}  // namespace ddprun
