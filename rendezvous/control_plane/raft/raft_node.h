// One member of a job's embedded control plane: libraft's consensus core
// (Debian's libraft, canonical/raft) with the I/O it asks for done here.
//
// Contract:
//   - The log lives in memory only. A member that dies never comes back
//     under its id (an agent that restarts is a new node), so nothing has to
//     outlive the process, and a commit costs no fsync.
//   - Messages go through the RaftTransport the caller gives (the
//     rendezvous service's ControlPeer call, rendezvous/control_plane/raft/raft_peer.h), so
//     they pass the same TLS and token checks as every other call.
//   - libraft is single-threaded: one thread of this class runs it (ticks,
//     received messages, I/O completions, the calls below); every public
//     method may be called from any thread and waits for that thread.
//   - The replicated state is one blob (the job's saved state): an applied
//     command replaces it, a snapshot is a copy of it. Only the newest one
//     matters, so snapshots come every few commands and the log stays short
//     even when the blob is megabytes.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>
#include <vector>

namespace ddprun {

class RaftTransport {
 public:
  virtual ~RaftTransport() = default;
  // Sends `bytes` (an encoded ddprun.v1.RaftMessage) to the member whose
  // Raft address is `address`. Must not block: queue, or drop when the
  // peer cannot be reached (Raft sends again).
  virtual void send(const std::string& address, std::string bytes) = 0;
};

struct RaftNodeOptions {
  uint64_t id = 0;       // > 0, unique in the job
  std::string address;   // what the others send to (RaftTransport's address)
  std::string job_id;    // messages of another job are dropped
  std::chrono::milliseconds heartbeat{100};
  // A leader that hears from no majority for this long steps down; a
  // follower that hears from no leader for this long (randomised up to
  // twice) starts an election.
  std::chrono::milliseconds election{1000};
  unsigned snapshot_threshold = 8;  // commands between snapshots
  unsigned snapshot_trailing = 2;   // commands kept after one
};

// What a member knows, as of the last thing its thread did.
struct RaftStatus {
  enum class Role { kUnavailable, kFollower, kCandidate, kLeader };
  Role role = Role::kUnavailable;
  uint64_t term = 0;
  uint64_t leader_id = 0;      // 0: no leader known
  std::string leader_address;
  uint64_t applied = 0;        // index of the last applied entry
  std::vector<uint64_t> voters;
  std::vector<uint64_t> members;  // every id in the configuration, voters or not
  std::vector<uint64_t> standbys;  // members that get the log but do not vote
  std::vector<std::string> voter_addresses;
  bool operator==(const RaftStatus&) const = default;
};

class RaftNode {
 public:
  RaftNode(RaftNodeOptions options, RaftTransport& transport);
  // Stops the thread; no callback runs afterwards.
  ~RaftNode();
  RaftNode(const RaftNode&) = delete;
  RaftNode& operator=(const RaftNode&) = delete;

  // Starts as the only voter (the job's first member leads at once) or
  // empty, to be added by a leader. Throws std::runtime_error with
  // libraft's words when it cannot start.
  void start(bool bootstrap);

  // A message from a peer (an encoded RaftMessage). Any thread; never blocks
  // on Raft. Malformed ones and other jobs' are dropped.
  void deliver(const std::string& bytes);

  RaftStatus status() const;
  // Blocks until `until(status)` holds (true) or the deadline passes; asks
  // again at each change of the status or the state. `until` may call this
  // node.
  bool wait_for(const std::function<bool(const RaftStatus&)>& until,
                std::chrono::steady_clock::time_point deadline) const;

  // Leader of `term` only: replicates `data` as the new state and waits for
  // a majority to commit it. False once another term leads, or the
  // deadline passes (no majority answers): nothing of a fenced leader's is
  // ever applied anywhere after a successor's first command.
  bool apply(uint64_t term, const std::string& data, std::chrono::steady_clock::time_point deadline);
  // Leader of `term` only: waits until everything committed before is
  // applied here (a new leader reads the state after this).
  bool barrier(uint64_t term, std::chrono::steady_clock::time_point deadline);
  // The newest applied state (nullopt: none yet).
  std::optional<std::string> state() const;
  // When this member had last heard from a majority of the voters (itself
  // counted), as its thread last saw it; time_point::max() when it is the
  // only voter. A leader whose majority is older than an election timeout
  // may have been replaced: it was paused, or cut off, and its own tick has
  // not said so yet.
  std::chrono::steady_clock::time_point majority_heard_at() const;
  // When this member last knew itself on a majority's side: as leader, its
  // majority_heard_at(); else the last message from a leader (which leads
  // only while it hears a majority). time_point::max() while it is not in
  // the configuration or is the only voter: then it judges nothing.
  std::chrono::steady_clock::time_point majority_contact_at() const;

  // Leader only: adds a member and makes it a voter once it caught up.
  // False when not leader, on a change already running, or at the deadline.
  bool add_voter(uint64_t id, const std::string& address, std::chrono::steady_clock::time_point deadline);
  // Leader only: adds a member that gets the log but does not vote (yet):
  // its promotion by add_voter is then one quick change, not a catch-up.
  bool add_standby(uint64_t id, const std::string& address, std::chrono::steady_clock::time_point deadline);
  // Leader only: removes a member (a lost node's).
  bool remove(uint64_t id, std::chrono::steady_clock::time_point deadline);
  // Leader only: hands the leadership to another voter (a clean exit).
  void transfer();

 private:
  bool add_as(uint64_t id, const std::string& address, int role, std::chrono::steady_clock::time_point deadline);
  friend struct RaftNodeIo;
  using Clock = std::chrono::steady_clock;

 public:
  struct Impl;  // the raft struct, its io and fsm: Raft thread only
  // A request's outcome, shared by its waiter and libraft's callback (which
  // may come after the waiter gave up).
  struct Outcome {
    bool done = false;
    int status = 0;
  };

 private:

  // Runs `begin` on the Raft thread (true: it made a request of libraft
  // that finishes `outcome`), then waits for the outcome; true for success.
  bool request(const std::function<bool(const std::shared_ptr<Outcome>&)>& begin,
               std::chrono::steady_clock::time_point deadline);
  // Runs `task` on the Raft thread and waits for it.
  void run(const std::function<void()>& task);
  // Queues `task` for the Raft thread (I/O completions, received messages).
  void post(std::function<void()> task);
  void loop();
  void publish();  // status_ from the raft struct; Raft thread

  std::unique_ptr<Impl> impl_;
  RaftNodeOptions options_;
  RaftTransport& transport_;

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;  // tasks arrive, status changes
  std::deque<std::function<void()>> tasks_;
  bool stop_ = false;
  RaftStatus status_;
  uint64_t changes_ = 0;  // counts changes of status_ and state_, for wait_for
  std::chrono::steady_clock::time_point majority_heard_at_{};
  std::chrono::steady_clock::time_point majority_contact_at_ = std::chrono::steady_clock::time_point::max();
  std::optional<std::string> state_;
  uint64_t published_state_version_ = 0;  // Impl's state_version that state_ holds
  std::thread thread_;
};

}  // namespace ddprun
