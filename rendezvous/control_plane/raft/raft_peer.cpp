#include "rendezvous/control_plane/raft/raft_peer.h"

#include <grpcpp/grpcpp.h>

#include "rendezvous/server/call_checks.h"
#include "rendezvous/client/client.h"
#include "rendezvous/control_plane/raft/raft_control_plane.h"

namespace ddprun {

ControlPeerService::ControlPeerService(std::string token, size_t max_message_bytes)
    : token_(std::move(token)), max_message_bytes_(max_message_bytes) {}

void ControlPeerService::attach(RaftNode* node) {
  std::lock_guard lock(mu_);
  node_ = node;
}

grpc::Status ControlPeerService::Deliver(grpc::ServerContext* ctx, grpc::ServerReader<v1::RaftChunk>* reader,
                                         v1::RaftDelivered*) {
  if (auto bad = check_token(*ctx, token_)) return *bad;
  std::string message;
  v1::RaftChunk chunk;
  while (reader->Read(&chunk)) {
    if (message.size() + chunk.part().size() > max_message_bytes_) {
      return grpc::Status(grpc::StatusCode::RESOURCE_EXHAUSTED,
                          "control plane: a Raft message over " + std::to_string(max_message_bytes_) + " bytes");
    }
    message += chunk.part();
  }
  std::lock_guard lock(mu_);
  if (node_) node_->deliver(message);  // it checks the job and the recipient
  return grpc::Status::OK;
}

struct GrpcRaftTransport::Peer {
  std::string target;
  std::mutex mu;
  std::condition_variable cv;
  std::deque<std::string> queue;
  size_t queued_bytes = 0;
  bool stop = false;
  std::thread thread;
};

GrpcRaftTransport::GrpcRaftTransport(Options options) : options_(std::move(options)) {}

GrpcRaftTransport::~GrpcRaftTransport() {
  std::map<std::string, std::unique_ptr<Peer>> peers;
  {
    std::lock_guard lock(mu_);
    peers.swap(peers_);
  }
  for (auto& [_, p] : peers) {
    {
      std::lock_guard lock(p->mu);
      p->stop = true;
    }
    p->cv.notify_all();
  }
  for (auto& [_, p] : peers) p->thread.join();
}

uint64_t GrpcRaftTransport::dropped() const { return dropped_.load(); }

void GrpcRaftTransport::send(const std::string& address, std::string bytes) {
  const auto parts = split_raft_address(address);
  const std::string target = parts ? parts->first : address;
  Peer* peer = nullptr;
  {
    std::lock_guard lock(mu_);
    auto& p = peers_[target];
    if (!p) {
      p = std::make_unique<Peer>();
      p->target = target;
      Peer* raw = p.get();
      p->thread = std::thread([this, raw] { drain(*raw); });
    }
    peer = p.get();
  }
  {
    std::lock_guard lock(peer->mu);
    peer->queued_bytes += bytes.size();
    peer->queue.push_back(std::move(bytes));
    // Past its bounds the oldest go: Raft sends what is still needed again.
    while (peer->queue.size() > 1 &&
           (peer->queue.size() > options_.max_queued || peer->queued_bytes > options_.max_queued_bytes)) {
      peer->queued_bytes -= peer->queue.front().size();
      peer->queue.pop_front();
      ++dropped_;
    }
  }
  peer->cv.notify_all();
}

void GrpcRaftTransport::drain(Peer& peer) {
  std::unique_ptr<v1::ControlPeer::Stub> stub;
  while (true) {
    std::string message;
    {
      std::unique_lock lock(peer.mu);
      peer.cv.wait(lock, [&] { return peer.stop || !peer.queue.empty(); });
      if (peer.stop) return;
      message = std::move(peer.queue.front());
      peer.queue.pop_front();
      peer.queued_bytes -= message.size();
    }
    bool ok = false;
    try {
      if (!stub) stub = v1::ControlPeer::NewStub(make_rendezvous_channel(peer.target, options_.auth.tls));
      grpc::ClientContext ctx;
      attach_token(ctx, options_.auth.token);
      ctx.set_deadline(std::chrono::system_clock::now() + options_.call_timeout);
      v1::RaftDelivered done;
      auto writer = stub->Deliver(&ctx, &done);
      // At least one chunk (an empty message is one empty chunk).
      bool written = true;
      size_t at = 0;
      do {
        v1::RaftChunk chunk;
        chunk.set_part(message.substr(at, options_.chunk_bytes));
        written = writer->Write(chunk);
        at += options_.chunk_bytes;
      } while (written && at < message.size());
      writer->WritesDone();
      ok = written && writer->Finish().ok();
    } catch (const std::exception&) {
      ok = false;  // TLS files unreadable: nothing reaches this peer
    }
    if (!ok) {
      ++dropped_;
      stub.reset();  // a new channel for the next message
    }
  }
}

}  // namespace ddprun
