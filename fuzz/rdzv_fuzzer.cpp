// libFuzzer target: arbitrary requests to every method of a live rendezvous
// service (real gRPC over loopback, one server for the whole run).
//
// Input: byte 0 picks the method, byte 1 whether the call carries the
// service's token, the rest is the request message as protobuf bytes
// (mutated freely; what does not parse is dropped). Waiting fields are cut
// to a few milliseconds, unless out of range, so each run stays short.
//
// Besides crashes and sanitizer reports, a reply of INTERNAL fails the run:
// every bad request must be refused by validation with a named reason.
#include <grpcpp/grpcpp.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <memory>

#include "ddprun/v1/rendezvous.grpc.pb.h"
#include "rendezvous/client/client.h"
#include "rendezvous/server/server.h"

namespace {

using namespace std::chrono_literals;
using ddprun::v1::Rendezvous;

constexpr const char* kToken = "fuzz-token";

struct Service {
  Service() {
    ddprun::ServiceLimits limits;
    limits.max_jobs = 64;
    limits.max_job_bytes = 1 << 20;
    limits.max_job_keys = 1000;
    limits.max_waits_per_client = 64;
    server = std::make_unique<ddprun::RendezvousServer>(
        ddprun::ServerOptions{"127.0.0.1", 0, {kToken, {}}, limits},
        [] { return std::string(128, 'n'); });
    stub = Rendezvous::NewStub(ddprun::make_rendezvous_channel(server->address()));
  }
  std::unique_ptr<ddprun::RendezvousServer> server;
  std::unique_ptr<Rendezvous::Stub> stub;
};

void quiet(google::protobuf::LogLevel, const char*, int, const std::string&) {}

Service& service() {
  // Unparsable inputs are the fuzzer's daily bread: protobuf need not say so.
  static bool silenced = (google::protobuf::SetLogHandler(quiet), true);
  (void)silenced;
  static Service* s = new Service();  // never destroyed: the process ends with the run
  return *s;
}

// A waiting time the service accepts becomes a short one.
template <typename T>
T shortened(T value) {
  return value > 20 && value <= 24LL * 3600 * 1000 ? 20 : value;
}

// The fields that make a call wait, per request type.
void shorten(ddprun::v1::JoinRequest& r) {
  r.set_timeout_ms(shortened(r.timeout_ms()));
  r.set_last_call_ms(shortened(r.last_call_ms()));
}
void shorten(ddprun::v1::GetRequest& r) { r.set_timeout_ms(shortened(r.timeout_ms())); }
void shorten(ddprun::v1::WaitRequest& r) { r.set_timeout_ms(shortened(r.timeout_ms())); }
template <typename Req>
void shorten(Req&) {}

void check(const grpc::Status& s, const char* method) {
  if (s.error_code() == grpc::StatusCode::INTERNAL) {
    std::fprintf(stderr, "%s answered INTERNAL: %s\n", method, s.error_message().c_str());
    std::abort();
  }
}

// One unary call of `method` with the input as its request.
template <typename Req, typename Resp, typename Method>
void unary(const uint8_t* data, size_t size, grpc::ClientContext& ctx, const char* name,
           Method method) {
  Req req;
  if (!req.ParseFromArray(data, static_cast<int>(size))) return;
  shorten(req);
  Resp resp;
  check(method(&ctx, req, &resp), name);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  Service& svc = service();
  const int method = data[0] % 8;
  const bool with_token = data[1] & 1;
  data += 2;
  size -= 2;

  grpc::ClientContext ctx;
  ctx.set_deadline(std::chrono::system_clock::now() + 2s);
  if (with_token) ctx.AddMetadata("x-ddprun-token", kToken);

  Rendezvous::Stub& stub = *svc.stub;
  namespace v1 = ddprun::v1;
  switch (method) {
    case 0:
      unary<v1::JoinRequest, v1::JoinResponse>(data, size, ctx, "Join", [&](auto... a) {
        return stub.Join(a...);
      });
      break;
    case 1:
      unary<v1::KeepAliveRequest, v1::KeepAliveResponse>(
          data, size, ctx, "KeepAlive", [&](auto... a) { return stub.KeepAlive(a...); });
      break;
    case 2: {
      v1::KeepAliveRequest req;
      if (!req.ParseFromArray(data, static_cast<int>(size))) return 0;
      // A hold that is accepted stays open: end it soon, as a dying agent would.
      ctx.set_deadline(std::chrono::system_clock::now() + 20ms);
      auto reader = stub.Hold(&ctx, req);
      v1::KeepAliveResponse ignored;
      while (reader->Read(&ignored)) {
      }
      check(reader->Finish(), "Hold");
      break;
    }
    case 3:
      unary<v1::LeaveRequest, v1::LeaveResponse>(data, size, ctx, "Leave", [&](auto... a) {
        return stub.Leave(a...);
      });
      break;
    case 4:
      unary<v1::SetRequest, v1::SetResponse>(data, size, ctx, "Set", [&](auto... a) {
        return stub.Set(a...);
      });
      break;
    case 5:
      unary<v1::GetRequest, v1::GetResponse>(data, size, ctx, "Get", [&](auto... a) {
        return stub.Get(a...);
      });
      break;
    case 6:
      unary<v1::WaitRequest, v1::WaitResponse>(data, size, ctx, "Wait", [&](auto... a) {
        return stub.Wait(a...);
      });
      break;
    case 7:
      unary<v1::AddRequest, v1::AddResponse>(data, size, ctx, "Add", [&](auto... a) {
        return stub.Add(a...);
      });
      break;
  }
  return 0;
}
