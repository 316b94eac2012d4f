// The state behind the rendezvous service, one entry per job: its rounds, its
// key-value store and the NCCL id of its current round. No gRPC here: the
// handler validates requests and calls this; tests call it directly.
//
// Joins are asynchronous: a join is parked until its round closes and then
// completed by whichever call (or the timer thread) closed it, so thousands
// of waiting agents hold no thread each. One timer thread ends last-call
// windows, leases and join timeouts.
#pragma once

#include <atomic>
#include <chrono>
#include <condition_variable>
#include <exception>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <string_view>
#include <thread>
#include <unordered_map>
#include <vector>

#include "rendezvous/store/limits.h"
#include "rendezvous/server/liveness_probe.h"
#include "rendezvous/store/memory_store.h"
#include "rendezvous/server/node_scores.h"
#include "rendezvous/server/round.h"

namespace ddprun {

// The join did not complete in time. Says how far the round got.
class JoinTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The rendezvous is shutting down.
class RegistryClosed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A store call for a job no agent has joined: jobs are created by Join only.
class UnknownJob : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The job is not served here any more (its control plane moved to another
// agent): the client asks its own agent's rendezvous where it went.
class NotServedHere : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// A new job would pass ServiceLimits::max_jobs.
class TooManyJobs : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

struct JoinCall {
  std::string job_id;
  NodeSpec node;
  RoundSettings settings;
  JoinIntent intent;
  std::chrono::milliseconds lease{0};  // 0: the node holds no lease
  std::chrono::milliseconds timeout{std::chrono::minutes(10)};
  // The node's lease key: it becomes the node's if the node is new to the
  // job, and must be the node's if not (RoundState::check_lease).
  std::string lease_key;
};

// A finished join: a result, or the error it failed with.
struct JoinOutcome {
  std::optional<JoinResult> result;
  std::exception_ptr error;
};

class JobRegistry {
 public:
  using IdSource = std::function<std::string()>;
  using JoinDone = std::function<void(JoinOutcome)>;

  // id_source makes NCCL unique ids (make_nccl_unique_id in production).
  explicit JobRegistry(IdSource id_source, ServiceLimits limits = {});
  ~JobRegistry();  // closes

  // Parks the join until its round closes, it times out or fails; then calls
  // done exactly once (never under the registry's lock; maybe before this
  // returns). Returns a ticket for cancel().
  uint64_t join_async(JoinCall call, JoinDone done);
  // Forgets a parked join without calling its done; false if it has already
  // completed (or is completing).
  bool cancel(uint64_t ticket);
  // Joins and waits (tests, tools).
  JoinResult join(JoinCall call);

  // The calls that speak for a node (keep_alive, leave, holds,
  // report_progress) carry the lease key its join was given (JoinResult):
  // for a node in the job a wrong one throws NotThisNode and changes nothing.
  //
  // A node's sign of life, and what it should know about the job.
  // workers_heal_round, heal: see RoundState::keep_alive.
  NodeView keep_alive(const std::string& job_id, const std::string& node_id, const std::string& lease_key,
                      int64_t workers_heal_round = -1, const HealRequest& heal = {});
  // round: a success's round (RoundState::leave; throws RendezvousError
  // when that round is over).
  void leave(const std::string& job_id, const std::string& node_id, const std::string& lease_key,
             LeaveKind kind, const std::string& message, std::optional<int64_t> round = std::nullopt);
  // A Hold call of the node opened (after holds() said yes): its id. The
  // node's newest Hold is the one that counts: an agent that connected
  // afresh (a cut link) opens another, and the old one's end means nothing.
  uint64_t hold_opened(const std::string& job_id, const std::string& node_id);
  // Hold `hold` of the node ended without a Leave, and no newer Hold of
  // the node is open. Its agent may be gone, or its link blipped, or it
  // reconnects: the node is lost only if its lease runs out
  // (RoundState::connection_closed) - or, sooner, if its host refuses a
  // connect at the node's probe address while it stays silent (probe_node).
  void connection_lost(const std::string& job_id, const std::string& node_id, uint64_t hold);
  // Asks the node's host whether its agent lives (liveness_probe.h), as if
  // its connection had closed: a successor asks so of its predecessor.
  void probe_node(const std::string& job_id, const std::string& node_id);
  // News for a job's agents sooner than their next keep-alive: `nudge` runs
  // (never under the registry's lock) each time the job's view changes in a
  // way its nodes act on at once: a round opens or closes, a heal
  // generation is named, a node starts to wait, the job ends. Returns a
  // ticket for unwatch_news.
  using Nudge = std::function<void()>;
  uint64_t watch_news(const std::string& job_id, Nudge nudge);
  void unwatch_news(uint64_t ticket);
  // Whether the job has this node (for Hold to refuse strangers; throws
  // NotThisNode for a wrong key).
  bool holds(const std::string& job_id, const std::string& node_id, const std::string& lease_key);
  // The job's training progress (from the node of global rank 0) and a
  // node's collectives (from every node), from a node in the job
  // (RendezvousError for a node that is not; UnknownJob for a job nobody
  // joined). The newest report replaces the one before.
  void report_progress(const std::string& job_id, const std::string& node_id, const std::string& lease_key,
                       const std::optional<ProgressInfo>& progress,
                       const std::optional<NodeCollectives>& collectives = std::nullopt);
  // Where the job stands (UnknownJob when nobody joined it); progress.age
  // is how old the report is now.
  JobStatus status(const std::string& job_id);
  // Nodes (not left, not lost) in any job this registry serves, and nodes a
  // job that is over lost in its last moments (within two leases of now)
  // and could not tell yet that it is over: a node on a flapping link comes
  // back to hear it, if the rendezvous is still there.
  size_t nodes_in_all_jobs();

  // The job's store. Refuses a job no agent joined (UnknownJob), a job that
  // is over and has no node left (JobEnded) and, with a round, a round
  // that is over (RendezvousError).
  std::shared_ptr<MemoryStore> store(const std::string& job_id,
                                     std::optional<int64_t> round = std::nullopt);
  size_t num_jobs();

  // The job's state as a successor needs it (job_state.h), or nullopt for
  // a job nobody joined.
  // leader_node_id, term: the control plane's leader that saves it.
  std::optional<std::string> save_job(const std::string& job_id, const std::string& leader_node_id = "",
                                      int64_t term = 0);
  // Serves a job from the state a predecessor saved (decode_job_state):
  // its nodes' leases start now, so the agents that still live renew them
  // here and the rest are lost after one lease. Returns the job's id (and
  // in *saved_by the node of the leader that saved it); throws
  // JobStateError for bad bytes or a job this registry already serves.
  std::string restore_job(std::string_view saved, std::string* saved_by = nullptr);
  // Counts the job's changes that its agents may hear of (a round opens or
  // closes, a node joins, waits, leaves or is lost, a heal generation is
  // named): what a successor's saved state must have caught up with
  // (serving_gate.h). 0 for a job nobody joined.
  uint64_t revision(const std::string& job_id);
  // Drops a node at once, as if its lease had run out (for a node known to
  // be gone). False when the job does not have it.
  bool drop_node(const std::string& job_id, const std::string& node_id, const std::string& why);
  // Stops serving the job (its control plane moved): parked joins and
  // store waits fail with NotServedHere, and it is forgotten here.
  void drop_job(const std::string& job_id);

  // Fails every parked join and store wait; later calls fail.
  void close();

 private:
  // One round's NCCL id, made at most once, outside the registry's lock:
  // ncclGetUniqueId opens a socket and starts NCCL's bootstrap thread, and
  // every other job's calls must not wait for that.
  struct RoundNcclId {
    std::once_flag once;
    std::string id;
    std::string error;
    std::atomic<bool> made{false};  // id and error are set (save_job reads them)
  };
  struct Parked {
    uint64_t ticket = 0;
    std::string node_id;
    std::chrono::steady_clock::time_point deadline;
    std::chrono::milliseconds timeout{0};
    JoinDone done;
  };
  // What a job's nodes act on at once (watch_news): a change is news.
  struct NewsKey {
    int64_t round = -1;
    bool closed = false;
    JobPhase phase = JobPhase::kActive;
    uint32_t heal_generation = 0;
    size_t waiting = 0;
    bool operator==(const NewsKey&) const = default;
  };
  struct Job {
    std::string id;
    NewsKey news;  // as the watchers were last nudged
    uint64_t revision = 0;  // see JobRegistry::revision
    uint64_t revised_at = 0;  // the rounds' generation it last counted
    std::optional<RoundState> rounds;
    std::shared_ptr<MemoryStore> store;
    std::unordered_map<std::string, Parked> parked;  // by node id: one join per node
    // No parked join times out before this.
    std::chrono::steady_clock::time_point next_due = std::chrono::steady_clock::time_point::max();
    uint64_t settled_generation = ~uint64_t{0};
    int64_t store_round = 0;  // keys of earlier rounds are gone
    int64_t store_heal_generation = 1;  // and of the round's heal generations before this one
    int64_t nccl_round = -1;
    std::shared_ptr<RoundNcclId> nccl;  // null: nobody in the round asked
    std::unordered_map<std::string, uint64_t> holds;  // each node's newest Hold call
    std::set<std::string> told_end;  // node ids that heard the job is over
    std::optional<ProgressInfo> progress;    // last reported
    std::chrono::steady_clock::time_point progress_at;  // when the worker made that report
    // Each node's newest collectives report and when it was made.
    struct Collectives {
      NodeCollectives report;
      std::chrono::steady_clock::time_point at;
    };
    std::unordered_map<std::string, Collectives> collectives;
    // The nodes' job-wide straggler scores (node_scores.h), made at most once
    // a second (keep-alives read them: each node's own).
    std::unordered_map<std::string, NodeScore> scores;
    StragglerStreaks streaks;  // a straggler stays one for seconds before it is named
    std::chrono::steady_clock::time_point scored_at{};
  };
  // A join to finish outside the lock; with `nccl`, its result gets that
  // round's NCCL id first.
  struct Completion {
    JoinDone done;
    JoinOutcome outcome;
    std::shared_ptr<RoundNcclId> nccl = nullptr;
  };

  // Refreshes job.scores when they are a second old: over the members of the
  // running round that reported.
  static void score_nodes_locked(Job& job, std::chrono::steady_clock::time_point now);

  // Finds the job or creates it within max_jobs, making room by dropping
  // jobs nobody is in any more; throws TooManyJobs.
  Job& job_locked(const std::string& job_id);
  // Whether a job is over, or abandoned: no node and no join in it.
  static bool idle(const Job& job);
  Job* find_locked(const std::string& job_id);
  // After any change to a job: hands out assignments, fails joins that
  // timed out or can no longer succeed, drops old rounds' keys.
  // Leases run out only when the timer thread settles (expire_leases).
  void settle_locked(Job& job, std::chrono::steady_clock::time_point now,
                     std::vector<Completion>& out, bool expire_leases = false);
  // The current round's NCCL id holder (made lazily by run()), or null
  // when no member of the round asked for one.
  std::shared_ptr<RoundNcclId> round_nccl_id_locked(Job& job);
  std::string timeout_message_locked(const Job& job, const Parked& p) const;
  // Nudges the job's news watchers (as completions, run outside the lock)
  // if its NewsKey changed.
  void news_locked(Job& job, std::vector<Completion>& out);
  void timer_loop();
  // Calls the completions' done (never under the lock), making a round's
  // NCCL id first where one is due.
  void run(std::vector<Completion>& done);

  IdSource id_source_;
  const ServiceLimits limits_;
  std::mutex mu_;
  std::condition_variable wake_timer_;
  std::map<std::string, std::unique_ptr<Job>> jobs_;
  std::map<uint64_t, std::pair<std::string, std::string>> tickets_;  // → job id, node id
  uint64_t next_ticket_ = 1;
  uint64_t next_hold_ = 1;
  std::map<uint64_t, std::pair<std::string, Nudge>> news_watchers_;  // ticket → job id, nudge
  bool closed_ = false;
  std::thread timer_;
  // Last: it stops (and its callbacks with it) before the rest goes.
  std::unique_ptr<LivenessProbe> probe_;
};

}  // namespace ddprun
