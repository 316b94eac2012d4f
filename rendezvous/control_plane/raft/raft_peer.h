// The embedded control plane's Raft messages between agents, over their
// rendezvous services (proto/ddprun/v1/raft.proto, ControlPeer.Deliver):
// the same port, TLS and token as every other call, so a stranger who can
// reach a service can no more vote in a job's Raft than join the job.
//
//   - ControlPeerService: the receiving side, registered beside the
//     Rendezvous service (ServerOptions::peer_service). It joins a
//     message's chunks and hands it to the member attached to it (a
//     message that arrives before one is attached is dropped: Raft sends
//     again).
//   - GrpcRaftTransport: the sending side (RaftTransport). A queue and a
//     thread per peer, so that Raft's thread never waits on the network; a
//     queue that grows past its bounds drops its oldest messages, and a
//     failed call drops its message and makes a new channel (Raft sends
//     again; gRPC 1.51 does not reconnect an old channel to a peer that was
//     down when it first tried).
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <string>
#include <thread>

#include "ddprun/v1/raft.grpc.pb.h"
#include "rendezvous/control_plane/raft/raft_node.h"
#include "rendezvous/wire/security.h"

namespace ddprun {

class ControlPeerService final : public v1::ControlPeer::Service {
 public:
  // `token`: what every call must carry (empty: none); a message whose
  // chunks add up to more than max_message_bytes is refused.
  ControlPeerService(std::string token, size_t max_message_bytes = size_t{256} << 20);

  // Where messages go from now on (nullptr: nowhere). The member must stay
  // alive until it is detached.
  void attach(RaftNode* node);

  grpc::Status Deliver(grpc::ServerContext* ctx, grpc::ServerReader<v1::RaftChunk>* reader,
                       v1::RaftDelivered* done) override;

 private:
  std::string token_;
  size_t max_message_bytes_;
  std::mutex mu_;  // held while delivering: a detached member is never called
  RaftNode* node_ = nullptr;
};

class GrpcRaftTransport final : public RaftTransport {
 public:
  struct Options {
    RendezvousAuth auth;                          // the token and TLS files calls carry
    std::chrono::milliseconds call_timeout{2000};
    size_t chunk_bytes = size_t{512} << 10;       // under the service's message limit
    size_t max_queued = 64;                        // messages per peer
    size_t max_queued_bytes = size_t{64} << 20;    // bytes per peer
  };
  explicit GrpcRaftTransport(Options options);
  ~GrpcRaftTransport() override;  // stops the senders; queued messages are dropped
  GrpcRaftTransport(const GrpcRaftTransport&) = delete;
  GrpcRaftTransport& operator=(const GrpcRaftTransport&) = delete;

  // `address` is a Raft address (raft_control_plane.h): its service part is
  // where the message goes.
  void send(const std::string& address, std::string bytes) override;

  // Messages handed over and not (yet) delivered: dropped or failed.
  uint64_t dropped() const;

 private:
  struct Peer;
  void drain(Peer& peer);

  Options options_;
  std::mutex mu_;
  std::map<std::string, std::unique_ptr<Peer>> peers_;  // by service address
  std::atomic<uint64_t> dropped_{0};
};

}  // namespace ddprun
