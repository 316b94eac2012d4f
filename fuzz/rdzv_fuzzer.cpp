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
#include "rendezvous/client.h"
#include "rendezvous/server.h"

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
void shorten(T& value) {
  if (value > 20 && value <= 24LL * 3600 * 1000) value = 20;
}

void check(const grpc::Status& s, const char* method) {
  if (s.error_code() == grpc::StatusCode::INTERNAL) {
    std::fprintf(stderr, "%s answered INTERNAL: %s\n", method, s.error_message().c_str());
    std::abort();
  }
}

template <typename Req>
bool parse(Req& req, const uint8_t* data, size_t size) {
  return req.ParseFromArray(data, static_cast<int>(size));
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

  switch (method) {
    case 0: {
      ddprun::v1::JoinRequest req;
      if (!parse(req, data, size)) return 0;
      auto t = req.timeout_ms();
      shorten(t);
      req.set_timeout_ms(t);
      auto l = req.last_call_ms();
      shorten(l);
      req.set_last_call_ms(l);
      ddprun::v1::JoinResponse resp;
      check(svc.stub->Join(&ctx, req, &resp), "Join");
      break;
    }
    case 1: {
      ddprun::v1::KeepAliveRequest req;
      if (!parse(req, data, size)) return 0;
      ddprun::v1::KeepAliveResponse resp;
      check(svc.stub->KeepAlive(&ctx, req, &resp), "KeepAlive");
      break;
    }
    case 2: {
      ddprun::v1::KeepAliveRequest req;
      if (!parse(req, data, size)) return 0;
      // A hold that is accepted stays open: end it soon, as a dying agent would.
      ctx.set_deadline(std::chrono::system_clock::now() + 20ms);
      auto reader = svc.stub->Hold(&ctx, req);
      ddprun::v1::KeepAliveResponse ignored;
      while (reader->Read(&ignored)) {
      }
      check(reader->Finish(), "Hold");
      break;
    }
    case 3: {
      ddprun::v1::LeaveRequest req;
      if (!parse(req, data, size)) return 0;
      ddprun::v1::LeaveResponse resp;
      check(svc.stub->Leave(&ctx, req, &resp), "Leave");
      break;
    }
    case 4: {
      ddprun::v1::SetRequest req;
      if (!parse(req, data, size)) return 0;
      ddprun::v1::SetResponse resp;
      check(svc.stub->Set(&ctx, req, &resp), "Set");
      break;
    }
    case 5: {
      ddprun::v1::GetRequest req;
      if (!parse(req, data, size)) return 0;
      auto t = req.timeout_ms();
      shorten(t);
      req.set_timeout_ms(t);
      ddprun::v1::GetResponse resp;
      check(svc.stub->Get(&ctx, req, &resp), "Get");
      break;
    }
    case 6: {
      ddprun::v1::WaitRequest req;
      if (!parse(req, data, size)) return 0;
      auto t = req.timeout_ms();
      shorten(t);
      req.set_timeout_ms(t);
      ddprun::v1::WaitResponse resp;
      check(svc.stub->Wait(&ctx, req, &resp), "Wait");
      break;
    }
    case 7: {
      ddprun::v1::AddRequest req;
      if (!parse(req, data, size)) return 0;
      ddprun::v1::AddResponse resp;
      check(svc.stub->Add(&ctx, req, &resp), "Add");
      break;
    }
  }
  return 0;
}
