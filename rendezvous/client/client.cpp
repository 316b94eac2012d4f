#include "rendezvous/client/client.h"

#include <grpcpp/grpcpp.h>

#include <algorithm>
#include <thread>

#include "ddprun/v1/rendezvous.grpc.pb.h"
#include "rendezvous/store/printable.h"
#include "rendezvous/wire/redirect.h"
#include "rendezvous/wire/security.h"
#include "rendezvous/wire/status_proto.h"

namespace ddprun {
namespace {

using Clock = std::chrono::system_clock;

// Short calls (set, add) get this long to reach the service.
constexpr auto kShortCallTimeout = std::chrono::seconds(60);
// Blocking calls get their own timeout plus this much for the trip.
constexpr auto kTripMargin = std::chrono::seconds(5);

// UNAVAILABLE from the transport (a reset, a refused or lost connection),
// not the service's own refusal (its messages start "rendezvous: ", like
// "rendezvous: shutting down", which is final).
bool is_transport_error(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE && s.error_message().rfind("rendezvous: ", 0) != 0;
}

std::string describe(const grpc::Status& s) {
  return s.error_message().empty() ? "gRPC status " + std::to_string(s.error_code())
                                   : s.error_message();
}

}  // namespace

std::shared_ptr<grpc::Channel> make_rendezvous_channel(const std::string& target,
                                                      const TlsFiles& tls, bool watch_peer) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 20);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 20);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  // A channel of its own connections: a new channel (RendezvousClient::
  // reconnect) must not share the old one's, which a cut link left stuck.
  args.SetInt(GRPC_ARG_USE_LOCAL_SUBCHANNEL_POOL, 1);
  if (watch_peer) {
    // A process that stops answering (paused; its host frozen) while its
    // kernel still holds the connection fails the calls in flight within
    // two seconds, instead of at their deadlines (the service permits it).
    args.SetInt(GRPC_ARG_KEEPALIVE_TIME_MS, 1000);
    args.SetInt(GRPC_ARG_KEEPALIVE_TIMEOUT_MS, 1000);
    args.SetInt(GRPC_ARG_HTTP2_MAX_PINGS_WITHOUT_DATA, 0);  // a Hold call carries no data for long
  }
  return grpc::CreateCustomChannel(target, channel_credentials(tls), args);
}

bool RendezvousCallError::job_ended() const { return code_ == grpc::StatusCode::ABORTED; }
bool RendezvousCallError::cancelled() const { return code_ == grpc::StatusCode::CANCELLED; }
bool RendezvousCallError::refused() const { return code_ == grpc::StatusCode::FAILED_PRECONDITION; }

void CallCanceller::cancel() {
  std::lock_guard lock(mu_);
  cancelled_ = true;
  if (ctx_) ctx_->TryCancel();
}

bool CallCanceller::cancelled() const {
  std::lock_guard lock(mu_);
  return cancelled_;
}

void CallCanceller::attach(grpc::ClientContext* ctx) {
  std::lock_guard lock(mu_);
  ctx_ = ctx;
  if (cancelled_) ctx_->TryCancel();
}

void CallCanceller::detach() {
  std::lock_guard lock(mu_);
  ctx_ = nullptr;
}

// Where a client's calls go: its home target, or the leader home named
// (redirect.h). Thread-safe; the stubs are shared, so a call in flight
// keeps its own while another thread moves the route.
class RendezvousRoute {
 public:
  struct Stub {
    std::unique_ptr<v1::Rendezvous::Stub> stub;
    std::string token;
    std::string target;
    bool home = true;
  };

  RendezvousRoute(std::string home, RendezvousAuth auth) : home_target_(std::move(home)), auth_(std::move(auth)) {
    reconnect();
  }
  std::shared_ptr<Stub> stub() const {
    std::lock_guard lock(mu_);
    return away_ ? away_ : home_;
  }
  std::string target() const { return stub()->target; }
  // A call on the route can be cancelled by `c` (null: by nobody).
  static void attach(CallCanceller* c, grpc::ClientContext* ctx) {
    if (c) c->attach(ctx);
  }
  static void detach(CallCanceller* c) {
    if (c) c->detach();
  }
  // The service at `from` named the leader.
  void moved(const std::shared_ptr<Stub>& from, const std::string& leader) {
    std::lock_guard lock(mu_);
    if ((away_ ? away_ : home_) != from) return;  // another call moved it already
    if (leader == home_target_) {
      away_.reset();
    } else if (!away_ || away_->target != leader) {
      away_ = make(leader, false);
    }
  }
  // The leader at `from` went away: ask home again.
  void go_home(const std::shared_ptr<Stub>& from) {
    std::lock_guard lock(mu_);
    if (away_ == from) away_.reset();
  }
  void reconnect() {
    std::lock_guard lock(mu_);
    home_ = make(home_target_, true);
    if (away_) away_ = make(away_->target, false);
  }

 private:
  std::shared_ptr<Stub> make(const std::string& target, bool home) const {
    auto s = std::make_shared<Stub>();
    s->stub = v1::Rendezvous::NewStub(make_rendezvous_channel(target, auth_.tls, /*watch_peer=*/!home));
    s->token = auth_.token;
    s->target = target;
    s->home = home;
    return s;
  }
  const std::string home_target_;
  const RendezvousAuth auth_;
  mutable std::mutex mu_;
  std::shared_ptr<Stub> home_;
  std::shared_ptr<Stub> away_;  // the leader home named (null: home serves, or nobody named)
};

namespace {

// How long a client waits before it asks again while the control plane
// has no leader, or names one that just failed (its term has not run out).
constexpr auto kElectionBackoff = std::chrono::milliseconds(50);

std::optional<std::string> named_leader(const grpc::ClientContext& ctx) {
  const auto& md = ctx.GetServerTrailingMetadata();
  auto it = md.find(kLeaderMetadataKey);
  if (it == md.end()) return std::nullopt;
  return std::string(it->second.data(), it->second.size());
}

// Makes a call on the route until it is answered by the job's leader, or
// fails otherwise, or the deadline passes: a service that names the leader
// sends the call there; one with no leader yet is asked again after a
// back-off; a leader that does not answer sends it back home. Home's own
// failures are the caller's to handle, as without a control plane.
// wait_for_ready (wait for the channel to connect instead of failing at
// once: workers and agents may call before the service is reachable)
// applies at home only: a leader that went away must show.
template <typename Call>
grpc::Status routed(RendezvousRoute& route, Clock::time_point deadline, bool wait_for_ready, CallCanceller* canceller,
                    Call&& call) {
  std::string failed;  // the leader that last failed to answer
  while (true) {
    const std::shared_ptr<RendezvousRoute::Stub> stub = route.stub();
    grpc::ClientContext ctx;
    attach_token(ctx, stub->token);
    ctx.set_deadline(deadline);
    ctx.set_wait_for_ready(wait_for_ready && stub->home);
    RendezvousRoute::attach(canceller, &ctx);
    grpc::Status s = call(*stub, ctx);
    RendezvousRoute::detach(canceller);
    if (s.error_code() != grpc::StatusCode::UNAVAILABLE || Clock::now() >= deadline ||
        (canceller && canceller->cancelled())) {
      // A leader that took the whole deadline (paused, or its host gone
      // silent) is asked nothing more: the next call asks home again.
      if (!stub->home && (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED ||
                          s.error_code() == grpc::StatusCode::UNAVAILABLE)) {
        route.go_home(stub);
      }
      return s;
    }
    const bool not_served = s.error_message().rfind(kNotServedPrefix, 0) == 0;
    if (std::optional<std::string> leader = named_leader(ctx)) {
      if (*leader == failed) std::this_thread::sleep_for(kElectionBackoff);  // its term has not run out yet
      route.moved(stub, *leader);
    } else if (!stub->home) {
      failed = stub->target;
      route.go_home(stub);
    } else if (not_served) {
      std::this_thread::sleep_for(kElectionBackoff);  // electing a leader
    } else {
      return s;
    }
  }
}

}  // namespace

RendezvousClient::RendezvousClient(const std::string& target, const RendezvousAuth& auth)
    : route_(std::make_shared<RendezvousRoute>(target, auth)) {}

void RendezvousClient::reconnect() { route_->reconnect(); }

std::string RendezvousClient::target() const { return route_->target(); }

std::string RendezvousClient::lease_key(const std::string& job_id, const std::string& node_id) const {
  std::lock_guard lock(keys_mu_);
  auto it = lease_keys_.find({job_id, node_id});
  return it == lease_keys_.end() ? "" : it->second;
}

JoinResult RendezvousClient::join(const JoinArgs& a, CallCanceller* canceller) {
  v1::JoinRequest req;
  req.set_job_id(a.job_id);
  {
    // The node's key, made before its first join goes out: its keep-alives
    // while the join waits (a spare) carry it already.
    std::lock_guard lock(keys_mu_);
    std::string& key = lease_keys_[{a.job_id, a.node.node_id}];
    if (key.empty()) key = random_lease_key();
    req.set_lease_key(key);
  }
  to_proto(a.node, req.mutable_node());
  req.set_min_nodes(a.settings.min_nodes);
  req.set_max_nodes(a.settings.max_nodes);
  req.set_last_call_ms(a.settings.last_call.count());
  req.set_max_restarts(a.settings.max_restarts);
  req.set_timeout_ms(a.timeout.count());
  req.set_last_round(a.intent.last_round);
  req.set_workers_failed(a.intent.workers_failed);
  req.set_failure(a.intent.failure.substr(0, kMaxFailureBytes));
  req.set_lease_ms(a.lease.count());

  // A join may wait long (for the other nodes, for a host that went away),
  // and the connection under it may break meanwhile: a link that was cut
  // for longer than the host kept it open comes back with a reset. Such a
  // transport error is no answer: the same join is sent again (the service
  // takes a node's newer join in place of its older one) until join_timeout
  // is spent; each new call waits for the channel to reconnect, at gRPC's
  // reconnect back-off.
  const auto give_up_at = Clock::now() + a.timeout;
  v1::JoinResponse resp;
  grpc::Status s;
  while (true) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(give_up_at - Clock::now());
    req.set_timeout_ms(std::max<int64_t>(1, left.count()));
    // Each try on the newest connection.
    s = routed(*route_, Clock::now() + std::max(left, std::chrono::milliseconds(1)) + kTripMargin, true, canceller,
               [&](RendezvousRoute::Stub& st, grpc::ClientContext& ctx) { return st.stub->Join(&ctx, req, &resp); });
    if (!is_transport_error(s) || Clock::now() >= give_up_at || (canceller && canceller->cancelled())) break;
  }
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED &&
      s.error_message() == "Deadline Exceeded") {
    // Our own deadline, not the service's answer: it never answered.
    throw RendezvousCallError("rendezvous at " + target() + ": no answer within " +
                                  std::to_string(a.timeout.count() / 1000.0).substr(0, 5) +
                                  " s (is it up and reachable, with the same TLS settings?); "
                                  "to wait longer raise --rdzv-conf join_timeout=SECONDS",
                              s.error_code());
  }
  if (!s.ok()) {
    throw RendezvousCallError("rendezvous at " + target() + ": join failed: " + describe(s),
                              s.error_code());
  }
  JoinResult r;
  r.assignment = Assignment{resp.round(),       resp.node_rank(),         resp.num_nodes(),
                            resp.world_size(),  resp.first_global_rank(), resp.master_addr(),
                            resp.master_port(), resp.restart_count(),
                            {},
                            resp.heal_generation(),
                            printable(resp.opened_because().substr(0, kMaxRoundDetailBytes), false)};
  for (const auto& l : resp.lost_nodes()) r.assignment.lost_since_last_round.push_back(printable(l, false));
  r.nccl_id = resp.nccl_id();
  r.nccl_id_error = resp.nccl_id_error();
  r.lease_key = resp.lease_key();
  return r;
}

NodeView RendezvousClient::keep_alive(const std::string& job_id, const std::string& node_id,
                                      std::chrono::milliseconds timeout, int64_t workers_heal_round,
                                      const HealRequest& heal) {
  v1::KeepAliveRequest req;
  req.set_job_id(job_id);
  req.set_node_id(node_id);
  req.set_lease_key(lease_key(job_id, node_id));
  req.set_workers_heal_round(workers_heal_round);
  if (heal.id != 0) {
    req.mutable_heal_request()->set_id(heal.id);
    req.mutable_heal_request()->set_detail(heal.detail);
  }
  v1::KeepAliveResponse resp;
  // No wait_for_ready: a lost link must show.
  grpc::Status s = routed(*route_, Clock::now() + timeout, false, nullptr, [&](RendezvousRoute::Stub& st, grpc::ClientContext& ctx) {
    return st.stub->KeepAlive(&ctx, req, &resp);
  });
  if (!s.ok()) {
    throw RendezvousCallError("rendezvous at " + target() + ": keep-alive failed: " + describe(s),
                              s.error_code());
  }
  NodeView v;
  v.known = resp.known();
  v.round = resp.round();
  v.closed = resp.round_closed();
  v.phase = static_cast<JobPhase>(resp.phase());
  v.reason = static_cast<RoundReason>(resp.reason());
  v.detail = printable(resp.detail(), false);  // other nodes' words: printed by this agent
  v.nodes_waiting = resp.nodes_waiting();
  v.restart_count = resp.restart_count();
  v.server_mono_ns = resp.server_mono_ns();
  v.heal_generation = resp.heal_generation();
  v.takeover_ready = resp.takeover_ready();
  v.heal_request_id = resp.heal_request_id();
  v.heal_request_generation = resp.heal_request_generation();
  v.heal_reason = static_cast<HealReason>(resp.heal_reason());
  v.refusals = resp.refusals();
  v.refusal = printable(resp.refusal(), false);
  v.straggler_score = resp.straggler_score();
  // Addresses to call: printable, and few (a hostile leader could send many).
  for (const auto& c : resp.control_candidates()) {
    if (v.control_candidates.size() >= 8) break;
    if (!c.empty() && c.size() <= 512 && printable(c, false) == c) v.control_candidates.push_back(c);
  }
  if (resp.has_placement()) {
    const auto& p = resp.placement();
    v.placement = Placement{p.node_rank(), p.num_nodes(), p.world_size(), p.first_global_rank()};
  }
  v.control_node = printable(resp.control_node().substr(0, 256), false);
  v.control_term = resp.control_term();
  return v;
}

std::string RendezvousClient::hold(const std::string& job_id, const std::string& node_id,
                                  CallCanceller* canceller, const std::function<void()>& on_open,
                                  const std::function<void()>& on_news) {
  const std::shared_ptr<RendezvousRoute::Stub> stub = route_->stub();  // reconnect() may swap it meanwhile
  v1::KeepAliveRequest req;
  req.set_job_id(job_id);
  req.set_node_id(node_id);
  req.set_lease_key(lease_key(job_id, node_id));
  grpc::ClientContext ctx;  // no deadline: it stays open while the node lives
  attach_token(ctx, stub->token);
  if (canceller) canceller->attach(&ctx);
  auto reader = stub->stub->Hold(&ctx, req);
  reader->WaitForInitialMetadata();
  if (on_open) on_open();
  v1::KeepAliveResponse news;  // empty: the job has news, ask for it
  while (reader->Read(&news)) {
    if (on_news) on_news();
  }
  grpc::Status s = reader->Finish();
  if (canceller) canceller->detach();
  // Not served there: the next Hold goes where the service said, or home.
  if (std::optional<std::string> leader = named_leader(ctx)) {
    route_->moved(stub, *leader);
  } else if (!stub->home && s.error_code() == grpc::StatusCode::UNAVAILABLE) {
    route_->go_home(stub);
  }
  return describe(s);
}

void RendezvousClient::leave(const std::string& job_id, const std::string& node_id, LeaveKind kind,
                             const std::string& message, std::chrono::milliseconds timeout,
                             std::optional<int64_t> round) {
  v1::LeaveRequest req;
  if (round) req.set_round(*round);
  req.set_job_id(job_id);
  req.set_node_id(node_id);
  req.set_lease_key(lease_key(job_id, node_id));
  req.set_kind(static_cast<v1::LeaveKind>(kind));
  req.set_message(message);
  v1::LeaveResponse resp;
  grpc::Status s = routed(*route_, Clock::now() + timeout, false, nullptr, [&](RendezvousRoute::Stub& st, grpc::ClientContext& ctx) {
    return st.stub->Leave(&ctx, req, &resp);
  });
  if (!s.ok()) {
    throw RendezvousCallError("rendezvous at " + target() + ": leave failed: " + describe(s),
                              s.error_code());
  }
}

void RendezvousClient::report_progress(const std::string& job_id, const std::string& node_id,
                                       const std::optional<ProgressInfo>& progress,
                                       std::chrono::milliseconds timeout,
                                       const std::optional<NodeCollectives>& collectives) {
  v1::ProgressReport req;
  req.set_job_id(job_id);
  req.set_node_id(node_id);
  req.set_lease_key(lease_key(job_id, node_id));
  if (progress) to_proto(*progress, req.mutable_progress());
  if (collectives) to_proto(*collectives, req.mutable_collectives());
  v1::ProgressReportResponse resp;
  grpc::Status s = routed(*route_, Clock::now() + timeout, false, nullptr, [&](RendezvousRoute::Stub& st, grpc::ClientContext& ctx) {
    return st.stub->ReportProgress(&ctx, req, &resp);
  });
  if (!s.ok()) {
    throw RendezvousCallError("rendezvous at " + target() + ": progress report failed: " +
                                  describe(s),
                              s.error_code());
  }
}

JobStatus RendezvousClient::status(const std::string& job_id, std::chrono::milliseconds timeout) {
  v1::StatusRequest req;
  req.set_job_id(job_id);
  v1::StatusResponse resp;
  // No wait_for_ready: nothing there must show.
  grpc::Status s = routed(*route_, Clock::now() + timeout, false, nullptr, [&](RendezvousRoute::Stub& st, grpc::ClientContext& ctx) {
    return st.stub->Status(&ctx, req, &resp);
  });
  if (!s.ok()) throw RendezvousCallError(describe(s), s.error_code());
  return from_proto(resp);
}

GrpcStore::GrpcStore(const std::string& target, std::string job_id, std::optional<int64_t> round,
                     const RendezvousAuth& auth)
    : job_id_(std::move(job_id)), round_(round), route_(std::make_shared<RendezvousRoute>(target, auth)) {}

template <typename Req>
void GrpcStore::stamp(Req& req) const {
  req.set_job_id(job_id_);
  if (round_) req.set_round(*round_);
}

void GrpcStore::set(const std::string& key, std::string_view value) {
  v1::SetRequest req;
  stamp(req);
  req.set_key(key);
  req.set_value(std::string(value));
  v1::SetResponse resp;
  grpc::Status s = routed(*route_, Clock::now() + kShortCallTimeout, true, nullptr, [&](RendezvousRoute::Stub& st, grpc::ClientContext& ctx) {
    return st.stub->Set(&ctx, req, &resp);
  });
  if (!s.ok()) {
    throw StoreError("store at " + route_->target() + ": set '" + key + "' failed: " + describe(s));
  }
}

std::string GrpcStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  v1::GetRequest req;
  stamp(req);
  req.set_key(key);
  req.set_timeout_ms(timeout.count());
  v1::GetResponse resp;
  grpc::Status s = routed(*route_, Clock::now() + timeout + kTripMargin, true, nullptr,
                          [&](RendezvousRoute::Stub& st, grpc::ClientContext& ctx) { return st.stub->Get(&ctx, req, &resp); });
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) throw StoreTimeout(key, timeout);
  if (!s.ok()) {
    throw StoreError("store at " + route_->target() + ": get '" + key + "' failed: " + describe(s));
  }
  return std::move(*resp.mutable_value());
}

void GrpcStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  v1::WaitRequest req;
  stamp(req);
  for (const auto& k : keys) req.add_keys(k);
  req.set_timeout_ms(timeout.count());
  v1::WaitResponse resp;
  grpc::Status s = routed(*route_, Clock::now() + timeout + kTripMargin, true, nullptr,
                          [&](RendezvousRoute::Stub& st, grpc::ClientContext& ctx) { return st.stub->Wait(&ctx, req, &resp); });
  const std::string first = keys.empty() ? std::string() : keys.front();
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) throw StoreTimeout(first, timeout);
  if (!s.ok()) {
    throw StoreError("store at " + route_->target() + ": wait for '" + first + "' failed: " + describe(s));
  }
}

int64_t GrpcStore::add(const std::string& key, int64_t delta) {
  v1::AddRequest req;
  stamp(req);
  req.set_key(key);
  req.set_delta(delta);
  v1::AddResponse resp;
  grpc::Status s = routed(*route_, Clock::now() + kShortCallTimeout, true, nullptr, [&](RendezvousRoute::Stub& st, grpc::ClientContext& ctx) {
    return st.stub->Add(&ctx, req, &resp);
  });
  if (!s.ok()) {
    throw StoreError("store at " + route_->target() + ": add '" + key + "' failed: " + describe(s));
  }
  return resp.value();
}

}  // namespace ddprun
