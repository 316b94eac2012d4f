#include "rendezvous/client.h"

#include <grpcpp/grpcpp.h>

#include "ddprun/v1/rendezvous.grpc.pb.h"

namespace ddprun {
namespace {

using Clock = std::chrono::system_clock;

// Short calls (set, add) get this long to reach the service.
constexpr auto kShortCallTimeout = std::chrono::seconds(60);
// Blocking calls get their own timeout plus this much for the trip.
constexpr auto kTripMargin = std::chrono::seconds(5);

void prepare(grpc::ClientContext& ctx, std::chrono::milliseconds timeout) {
  ctx.set_deadline(Clock::now() + timeout);
  // Wait for the channel to connect instead of failing at once: workers and
  // agents may call before the service is reachable.
  ctx.set_wait_for_ready(true);
}

std::string describe(const grpc::Status& s) {
  return s.error_message().empty() ? "gRPC status " + std::to_string(s.error_code())
                                   : s.error_message();
}

}  // namespace

std::shared_ptr<grpc::Channel> make_rendezvous_channel(const std::string& target) {
  grpc::ChannelArguments args;
  args.SetInt(GRPC_ARG_ENABLE_HTTP_PROXY, 0);
  args.SetInt(GRPC_ARG_INITIAL_RECONNECT_BACKOFF_MS, 20);
  args.SetInt(GRPC_ARG_MIN_RECONNECT_BACKOFF_MS, 20);
  args.SetInt(GRPC_ARG_MAX_RECONNECT_BACKOFF_MS, 1000);
  return grpc::CreateCustomChannel(target, grpc::InsecureChannelCredentials(), args);
}

RendezvousClient::RendezvousClient(const std::string& target)
    : target_(target), channel_(make_rendezvous_channel(target)) {}

JoinResult RendezvousClient::join(const JoinArgs& a) {
  v1::JoinRequest req;
  req.set_job_id(a.job_id);
  auto* n = req.mutable_node();
  n->set_node_id(a.node.node_id);
  n->set_host(a.node.host);
  n->set_local_world_size(a.node.local_world_size);
  n->set_local_addr(a.node.local_addr);
  n->set_node_rank_hint(a.node.node_rank_hint);
  n->set_wants_nccl_id(a.node.wants_nccl_id);
  req.set_min_nodes(a.settings.min_nodes);
  req.set_max_nodes(a.settings.max_nodes);
  req.set_last_call_ms(a.settings.last_call.count());
  req.set_timeout_ms(a.timeout.count());

  grpc::ClientContext ctx;
  prepare(ctx, a.timeout + kTripMargin);
  v1::JoinResponse resp;
  auto stub = v1::Rendezvous::NewStub(channel_);
  grpc::Status s = stub->Join(&ctx, req, &resp);
  if (!s.ok()) {
    throw RendezvousCallError("rendezvous at " + target_ + ": join failed: " + describe(s));
  }
  JoinResult r;
  r.assignment = Assignment{resp.round(), resp.node_rank(), resp.num_nodes(), resp.world_size(),
                            resp.first_global_rank()};
  r.nccl_id = resp.nccl_id();
  r.nccl_id_error = resp.nccl_id_error();
  return r;
}

struct GrpcStore::Stub {
  std::unique_ptr<v1::Rendezvous::Stub> stub;
};

GrpcStore::GrpcStore(const std::string& target, std::string job_id)
    : target_(target), job_id_(std::move(job_id)), stub_(std::make_shared<Stub>()) {
  stub_->stub = v1::Rendezvous::NewStub(make_rendezvous_channel(target));
}

void GrpcStore::set(const std::string& key, std::string_view value) {
  v1::SetRequest req;
  req.set_job_id(job_id_);
  req.set_key(key);
  req.set_value(std::string(value));
  v1::SetResponse resp;
  grpc::ClientContext ctx;
  prepare(ctx, kShortCallTimeout);
  grpc::Status s = stub_->stub->Set(&ctx, req, &resp);
  if (!s.ok()) {
    throw StoreError("store at " + target_ + ": set '" + key + "' failed: " + describe(s));
  }
}

std::string GrpcStore::get(const std::string& key, std::chrono::milliseconds timeout) {
  v1::GetRequest req;
  req.set_job_id(job_id_);
  req.set_key(key);
  req.set_timeout_ms(timeout.count());
  v1::GetResponse resp;
  grpc::ClientContext ctx;
  prepare(ctx, timeout + kTripMargin);
  grpc::Status s = stub_->stub->Get(&ctx, req, &resp);
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) throw StoreTimeout(key, timeout);
  if (!s.ok()) {
    throw StoreError("store at " + target_ + ": get '" + key + "' failed: " + describe(s));
  }
  return std::move(*resp.mutable_value());
}

void GrpcStore::wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) {
  v1::WaitRequest req;
  req.set_job_id(job_id_);
  for (const auto& k : keys) req.add_keys(k);
  req.set_timeout_ms(timeout.count());
  v1::WaitResponse resp;
  grpc::ClientContext ctx;
  prepare(ctx, timeout + kTripMargin);
  grpc::Status s = stub_->stub->Wait(&ctx, req, &resp);
  const std::string first = keys.empty() ? std::string() : keys.front();
  if (s.error_code() == grpc::StatusCode::DEADLINE_EXCEEDED) throw StoreTimeout(first, timeout);
  if (!s.ok()) {
    throw StoreError("store at " + target_ + ": wait for '" + first + "' failed: " + describe(s));
  }
}

int64_t GrpcStore::add(const std::string& key, int64_t delta) {
  v1::AddRequest req;
  req.set_job_id(job_id_);
  req.set_key(key);
  req.set_delta(delta);
  v1::AddResponse resp;
  grpc::ClientContext ctx;
  prepare(ctx, kShortCallTimeout);
  grpc::Status s = stub_->stub->Add(&ctx, req, &resp);
  if (!s.ok()) {
    throw StoreError("store at " + target_ + ": add '" + key + "' failed: " + describe(s));
  }
  return resp.value();
}

}  // namespace ddprun
