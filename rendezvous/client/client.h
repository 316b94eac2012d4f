// Clients of the rendezvous service: the agent's join, keep-alive and leave,
// and the Store that workers use, each over a gRPC channel.
#pragma once

#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>

#include "rendezvous/wire/security.h"
#include "rendezvous/store/store.h"
#include "rendezvous/store/types.h"

namespace grpc {
class Channel;
class ClientContext;
}  // namespace grpc

namespace ddprun {

class RendezvousRoute;

// A failed call to the rendezvous service (unreachable, refused, timed out).
class RendezvousCallError : public std::runtime_error {
 public:
  RendezvousCallError(const std::string& what, int code) : std::runtime_error(what), code_(code) {}
  int code() const { return code_; }  // the gRPC status code
  bool job_ended() const;              // the job finished or failed: nothing to join
  bool cancelled() const;
  bool refused() const;  // FAILED_PRECONDITION: bad for the job's state (a round that is over)

 private:
  int code_;
};

// A channel to "host:port" that ignores http_proxy settings and reconnects
// quickly (a worker may start before its first call can connect); TLS when
// tls has files. Throws AuthConfigError when they cannot be read.
// watch_peer: HTTP/2 pings every second find a peer that stopped answering.
std::shared_ptr<grpc::Channel> make_rendezvous_channel(const std::string& target,
                                                      const TlsFiles& tls = {}, bool watch_peer = false);

struct JoinArgs {
  std::string job_id;
  NodeSpec node;
  RoundSettings settings;
  JoinIntent intent;
  std::chrono::milliseconds lease{0};  // 0: no lease (one-node jobs)
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
};

// Lets another thread cancel a call in flight (a signal during a join, the
// end of a Hold).
class CallCanceller {
 public:
  void cancel();
  bool cancelled() const;

 private:
  friend class RendezvousClient;
  friend class RendezvousRoute;
  void attach(grpc::ClientContext* ctx);  // cancels at once if already cancelled
  void detach();
  mutable std::mutex mu_;
  grpc::ClientContext* ctx_ = nullptr;
  bool cancelled_ = false;
};

// Both clients follow a control plane's leader (redirect.h): calls go to
// the target they were made with (their home: the agent's own rendezvous
// service), and when it names the leader, there, until the leader goes
// away; then home is asked again.
//
// The agent's calls. A client speaks for the nodes it joins as: it makes a
// lease key (a random secret) for each with its first join, and the key
// goes with its later joins, keep-alives, Hold, Leave and progress reports
// for that node, which the service refuses (PERMISSION_DENIED) from anyone
// else. Thread-safe.
class RendezvousClient {
 public:
  explicit RendezvousClient(const std::string& target, const RendezvousAuth& auth = {});
  // Blocks until the round closes; throws RendezvousCallError.
  JoinResult join(const JoinArgs& args, CallCanceller* canceller = nullptr);
  // Renews the node's lease; throws RendezvousCallError.
  // workers_heal_round: the round in which all of this node's workers heal
  // in place (-1: none). heal: a request for a heal generation (id 0: none),
  // answered in the view.
  NodeView keep_alive(const std::string& job_id, const std::string& node_id,
                      std::chrono::milliseconds timeout, int64_t workers_heal_round = -1,
                      const HealRequest& heal = {});
  // Holds the node's place: opens a Hold call and blocks until the service
  // ends it or canceller cancels it; returns how it ended, in words.
  // on_open runs once the service holds the node; on_news each time the
  // service says the job has news (a keep-alive now learns it).
  std::string hold(const std::string& job_id, const std::string& node_id,
                   CallCanceller* canceller, const std::function<void()>& on_open = nullptr,
                   const std::function<void()>& on_news = nullptr);
  // Says the node leaves; throws RendezvousCallError (FAILED_PRECONDITION:
  // a success in `round` refused because that round is over).
  void leave(const std::string& job_id, const std::string& node_id, LeaveKind kind,
             const std::string& message, std::chrono::milliseconds timeout,
             std::optional<int64_t> round = std::nullopt);
  // Reports the job's training progress (the agent of global rank 0) and
  // this node's collectives (every agent); throws RendezvousCallError.
  void report_progress(const std::string& job_id, const std::string& node_id,
                       const std::optional<ProgressInfo>& progress, std::chrono::milliseconds timeout,
                       const std::optional<NodeCollectives>& collectives = std::nullopt);
  // Where the job stands (`ddprun status`); throws RendezvousCallError
  // (code NOT_FOUND for an unknown job, UNAUTHENTICATED for a wrong token,
  // UNAVAILABLE or DEADLINE_EXCEEDED when nothing answers).
  JobStatus status(const std::string& job_id, std::chrono::milliseconds timeout);
  // Where calls go now: the home target, or the leader it named.
  std::string target() const;
  // Drops the connection for a new one: calls from now on go over a fresh
  // TCP connection, calls in flight finish on the old one. After a cut
  // link the old connection can hold answers back for seconds (TCP's
  // retransmission back-off) while a new one carries them at once.
  void reconnect();

 private:
  // The lease key of node `node_id` in job `job_id` (made at its first join;
  // "" before).
  std::string lease_key(const std::string& job_id, const std::string& node_id) const;
  std::shared_ptr<RendezvousRoute> route_;
  mutable std::mutex keys_mu_;
  std::map<std::pair<std::string, std::string>, std::string> lease_keys_;  // (job, node) -> key
};

// The job's key-value store on the rendezvous service. Thread-safe. With a
// round, every call names it and the service refuses it once that round is
// over.
class GrpcStore final : public Store {
 public:
  GrpcStore(const std::string& target, std::string job_id,
            std::optional<int64_t> round = std::nullopt, const RendezvousAuth& auth = {});
  void set(const std::string& key, std::string_view value) override;
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override;
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override;
  int64_t add(const std::string& key, int64_t delta) override;

 private:
  template <typename Req>
  void stamp(Req& req) const;
  std::string job_id_;
  std::optional<int64_t> round_;
  std::shared_ptr<RendezvousRoute> route_;
};

}  // namespace ddprun
