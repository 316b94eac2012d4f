#include "rendezvous/control_plane/etcd/etcd_client.h"

#include <grpcpp/grpcpp.h>

#include "etcd/etcd_v3.grpc.pb.h"
#include "rendezvous/store/host_port.h"

namespace ddprun {

namespace pb = etcdserverpb;

struct EtcdClient::Stubs {
  std::shared_ptr<grpc::Channel> channel;
  std::unique_ptr<pb::KV::Stub> kv;
  std::unique_ptr<pb::Lease::Stub> lease;
  std::unique_ptr<pb::Maintenance::Stub> maintenance;
  std::unique_ptr<pb::Watch::Stub> watch;
};

namespace {

EtcdKeyValue from_pb(const pb::KeyValue& kv) {
  return EtcdKeyValue{kv.key(), kv.value(), kv.create_revision(), kv.mod_revision(), kv.lease()};
}

// Worth trying another member: this one is gone, cut off or too slow.
bool try_next(const grpc::Status& s) {
  return s.error_code() == grpc::StatusCode::UNAVAILABLE ||
         s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED;
}

}  // namespace

std::vector<std::string> EtcdClient::parse_endpoints(const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= list.size()) {
    size_t comma = list.find(',', start);
    if (comma == std::string::npos) comma = list.size();
    std::string e = list.substr(start, comma - start);
    start = comma + 1;
    if (e.empty()) continue;
    if (e.rfind("https://", 0) == 0) {
      throw std::invalid_argument("etcd endpoint '" + e +
                                  "': https is not supported; give the members' plain gRPC address "
                                  "(host:port) and keep etcd on a private network");
    }
    if (e.rfind("http://", 0) == 0) e = e.substr(7);
    if (!e.empty() && e.back() == '/') e.pop_back();
    HostPort hp;
    if (split_host_port(e, hp) != HostPortError::kNone || hp.port.empty() || !parse_port(hp.port)) {
      throw std::invalid_argument("etcd endpoint '" + e + "' is not host:port (e.g. 10.0.0.1:2379)");
    }
    out.push_back(e);
  }
  if (out.empty()) throw std::invalid_argument("no etcd endpoint in '" + list + "'");
  return out;
}

EtcdClient::EtcdClient(const std::vector<std::string>& endpoints, std::chrono::milliseconds call_timeout)
    : call_timeout_(call_timeout) {
  for (const auto& e : endpoints) {
    for (auto& one : parse_endpoints(e)) endpoints_.push_back(std::move(one));
  }
  if (endpoints_.empty()) throw std::invalid_argument("no etcd endpoint");
  stubs_.resize(endpoints_.size());
  for (size_t i = 0; i < endpoints_.size(); ++i) renew(i);
}

void EtcdClient::renew(size_t i) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  // Retry soon after a refused connection, but give each attempt a second:
  // gRPC takes the minimum back-off as the connect timeout too.
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 50);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 1000);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  auto s = std::make_shared<Stubs>();
  s->channel = grpc::CreateCustomChannel(endpoints_[i], grpc::InsecureChannelCredentials(), args);
  s->kv = pb::KV::NewStub(s->channel);
  s->lease = pb::Lease::NewStub(s->channel);
  s->maintenance = pb::Maintenance::NewStub(s->channel);
  s->watch = pb::Watch::NewStub(s->channel);
  std::lock_guard lock(mu_);
  stubs_[i] = std::move(s);
}

std::shared_ptr<EtcdClient::Stubs> EtcdClient::stubs(size_t i) {
  std::lock_guard lock(mu_);
  return stubs_[i];
}

EtcdClient::~EtcdClient() = default;

template <typename Call>
void EtcdClient::on_any(const char* what, Call&& call) {
  size_t first;
  {
    std::lock_guard lock(mu_);
    first = current_;
  }
  std::string errors;
  for (size_t tried = 0; tried < stubs_.size(); ++tried) {
    const size_t i = (first + tried) % stubs_.size();
    grpc::ClientContext ctx;
    ctx.set_deadline(std::chrono::system_clock::now() + call_timeout_);
    const grpc::Status s = call(*stubs(i), ctx);
    if (s.ok()) {
      std::lock_guard lock(mu_);
      current_ = i;
      return;
    }
    const std::string why = endpoints_[i] + ": " + s.error_message();
    if (!try_next(s)) throw EtcdError(std::string("etcd ") + what + ": " + why, s.error_code());
    // A channel whose first attempts found the member down (starting, or
    // restarting) never connected to it afterwards (gRPC 1.51 against etcd
    // 3.4: "tcp handshaker shutdown" on every attempt), while a new one
    // connects at once: the next call here gets a new one.
    renew(i);
    errors += (errors.empty() ? "" : "; ") + why;
  }
  throw EtcdError(std::string("etcd ") + what + ": no member answered (" + errors + ")",
                  grpc::StatusCode::UNAVAILABLE);
}

std::optional<EtcdKeyValue> EtcdClient::get(const std::string& key) {
  pb::RangeRequest req;
  req.set_key(key);
  pb::RangeResponse resp;
  on_any("get", [&](Stubs& s, grpc::ClientContext& ctx) { return s.kv->Range(&ctx, req, &resp); });
  if (resp.kvs_size() == 0) return std::nullopt;
  return from_pb(resp.kvs(0));
}

int64_t EtcdClient::put(const std::string& key, const std::string& value, int64_t lease) {
  pb::PutRequest req;
  req.set_key(key);
  req.set_value(value);
  req.set_lease(lease);
  pb::PutResponse resp;
  on_any("put", [&](Stubs& s, grpc::ClientContext& ctx) { return s.kv->Put(&ctx, req, &resp); });
  return resp.header().revision();
}

void EtcdClient::erase(const std::string& key) {
  pb::DeleteRangeRequest req;
  req.set_key(key);
  pb::DeleteRangeResponse resp;
  on_any("delete", [&](Stubs& s, grpc::ClientContext& ctx) { return s.kv->DeleteRange(&ctx, req, &resp); });
}

void EtcdClient::erase_range(const std::string& begin, const std::string& end) {
  pb::DeleteRangeRequest req;
  req.set_key(begin);
  req.set_range_end(end);
  pb::DeleteRangeResponse resp;
  on_any("delete range", [&](Stubs& s, grpc::ClientContext& ctx) { return s.kv->DeleteRange(&ctx, req, &resp); });
}

EtcdClient::Created EtcdClient::create(const std::string& key, const std::string& value, int64_t lease) {
  // if create_revision(key) == 0 (absent): put; else: get.
  pb::TxnRequest req;
  auto* c = req.add_compare();
  c->set_key(key);
  c->set_target(pb::Compare::CREATE);
  c->set_result(pb::Compare::EQUAL);
  c->set_create_revision(0);
  auto* put = req.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(value);
  put->set_lease(lease);
  req.add_failure()->mutable_request_range()->set_key(key);
  pb::TxnResponse resp;
  on_any("create", [&](Stubs& s, grpc::ClientContext& ctx) { return s.kv->Txn(&ctx, req, &resp); });
  Created out;
  out.created = resp.succeeded();
  if (out.created) {
    const int64_t rev = resp.header().revision();
    out.kv = EtcdKeyValue{key, value, rev, rev, lease};
  } else if (resp.responses_size() > 0 && resp.responses(0).response_range().kvs_size() > 0) {
    out.kv = from_pb(resp.responses(0).response_range().kvs(0));
  }
  // Else the key was gone again by the time of the range: kv stays empty
  // (create_revision 0) and the caller tries again.
  return out;
}

bool EtcdClient::put_if(const std::string& guard, int64_t guard_revision, const std::string& key,
                        const std::string& value) {
  pb::TxnRequest req;
  auto* c = req.add_compare();
  c->set_key(guard);
  c->set_target(pb::Compare::CREATE);
  c->set_result(pb::Compare::EQUAL);
  c->set_create_revision(guard_revision);
  auto* put = req.add_success()->mutable_request_put();
  put->set_key(key);
  put->set_value(value);
  pb::TxnResponse resp;
  on_any("fenced put", [&](Stubs& s, grpc::ClientContext& ctx) { return s.kv->Txn(&ctx, req, &resp); });
  return resp.succeeded();
}

bool EtcdClient::holds(const std::string& key, int64_t create_revision, int64_t lease, const std::string& value) {
  pb::TxnRequest req;
  auto* c = req.add_compare();
  c->set_key(key);
  c->set_target(pb::Compare::CREATE);
  c->set_result(pb::Compare::EQUAL);
  c->set_create_revision(create_revision);
  c = req.add_compare();
  c->set_key(key);
  c->set_target(pb::Compare::LEASE);
  c->set_result(pb::Compare::EQUAL);
  c->set_lease(lease);
  c = req.add_compare();
  c->set_key(key);
  c->set_target(pb::Compare::VALUE);
  c->set_result(pb::Compare::EQUAL);
  c->set_value(value);
  pb::TxnResponse resp;
  on_any("leader check", [&](Stubs& s, grpc::ClientContext& ctx) { return s.kv->Txn(&ctx, req, &resp); });
  return resp.succeeded();
}

bool EtcdClient::wait_deleted(const std::string& key, int64_t after, std::chrono::milliseconds timeout) {
  size_t i;
  {
    std::lock_guard lock(mu_);
    i = current_;
  }
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + timeout);
  auto stream = stubs(i)->watch->Watch(&ctx);
  pb::WatchRequest req;
  auto* create = req.mutable_create_request();
  create->set_key(key);
  create->set_start_revision(after + 1);
  if (!stream->Write(req)) return false;
  pb::WatchResponse resp;
  bool deleted = false;
  while (!deleted && stream->Read(&resp)) {
    if (resp.canceled()) break;  // compacted past `after`: the caller looks again
    for (const auto& ev : resp.events()) deleted |= ev.type() == pb::Event::DELETE;
  }
  ctx.TryCancel();
  stream->Finish();
  return deleted;
}

int64_t EtcdClient::grant_lease(std::chrono::seconds ttl, std::chrono::seconds* granted_ttl) {
  pb::LeaseGrantRequest req;
  req.set_ttl(ttl.count());
  pb::LeaseGrantResponse resp;
  on_any("lease grant", [&](Stubs& s, grpc::ClientContext& ctx) { return s.lease->LeaseGrant(&ctx, req, &resp); });
  if (!resp.error().empty()) throw EtcdError("etcd lease grant: " + resp.error(), grpc::StatusCode::UNKNOWN);
  if (granted_ttl) *granted_ttl = std::chrono::seconds(resp.ttl());
  return resp.id();
}

bool EtcdClient::keep_alive(int64_t lease) {
  // One request and its answer on a stream of their own: a renewal is rare
  // (a few a second at most) and a stream that a dead member broke would
  // otherwise have to be noticed and reopened.
  pb::LeaseKeepAliveResponse resp;
  bool answered = false;
  on_any("lease keep-alive", [&](Stubs& s, grpc::ClientContext& ctx) {
    auto stream = s.lease->LeaseKeepAlive(&ctx);
    pb::LeaseKeepAliveRequest req;
    req.set_id(lease);
    answered = stream->Write(req) && stream->Read(&resp);
    stream->WritesDone();
    if (answered) ctx.TryCancel();  // we have what we came for
    grpc::Status st = stream->Finish();
    return answered ? grpc::Status::OK : st;
  });
  return answered && resp.ttl() > 0;
}

void EtcdClient::revoke_lease(int64_t lease) {
  pb::LeaseRevokeRequest req;
  req.set_id(lease);
  pb::LeaseRevokeResponse resp;
  on_any("lease revoke", [&](Stubs& s, grpc::ClientContext& ctx) { return s.lease->LeaseRevoke(&ctx, req, &resp); });
}

EtcdMemberStatus EtcdClient::member_status(size_t endpoint) {
  std::shared_ptr<Stubs> stub = stubs(endpoint);
  Stubs& s = *stub;
  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + call_timeout_);
  pb::StatusResponse resp;
  const grpc::Status st = s.maintenance->Status(&ctx, pb::StatusRequest{}, &resp);
  if (!st.ok()) {
    if (try_next(st)) renew(endpoint);
    throw EtcdError("etcd status: " + endpoints_[endpoint] + ": " + st.error_message(), st.error_code());
  }
  return EtcdMemberStatus{resp.header().member_id(), resp.leader(), resp.version()};
}

}  // namespace ddprun
