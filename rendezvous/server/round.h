// The round state machine of one job's rendezvous: pure logic, no I/O, driven
// by a time the caller passes in (so tests can fake the clock).
//
// A round is open while nodes join it. It closes when max_nodes have joined,
// or when at least min_nodes have joined and the last-call window has passed
// since the min-th node arrived. A closed round hands every member its node
// rank and the global ranks of its workers, and its workers run.
//
// A round that follows a running one does not wait out a last-call window:
// it closes as soon as every node of the running round that is still in the
// job has come back (or max_nodes have joined), so nodes that take a while
// to stop their workers are not left behind.
//
// A running (closed) round is superseded by the next one when
//   - a member's workers fail and it joins again (costs one restart),
//   - a member misses its lease (lost; costs one restart),
//   - a member leaves without finishing (stopped, e.g. SIGTERM),
//   - a new node arrives while there is room for it (admission).
// Every member must then join the new round. A node that arrives while the
// running round is full waits, and is taken into the next round that opens.
//
// Takeover (checkpointless recovery across nodes): when a member of the
// running round is lost, every other member's workers heal in place (their
// keep-alives say so for this round) and a waiting node that heals has the
// same number of workers, the waiting node takes the lost member's place in
// the running round: same node rank, same global ranks, the round's heal
// generation one higher. No new round opens and no restart is spent; the
// members' workers keep running and heal with the newcomer's in that
// generation.
//
// Shrink: when no node waits, the members left all heal in place and there
// are still at least min_nodes of them, the running round goes on without
// the lost member: the survivors close ranks (node ranks 0.., global ranks
// in that order), the world shrinks by the lost node's workers, and the heal
// generation goes one higher. The members' workers keep running, learn their
// new ranks (the view's placement) and heal among themselves.
// Otherwise a lost member supersedes the round as above.
//
// Grow: a node that arrives while the running round has room joins it in
// place when every member's workers heal and so will the newcomer's: it
// takes the next node rank and the global ranks after everyone's, the world
// grows by its workers, and the heal generation goes one higher. The
// members' workers keep running, learn the bigger world (the view's
// placement) and heal with the newcomer's, which start as replacements.
// Otherwise the arrival supersedes the round (admission, above).
//
// Worker heal: when one worker of a member fails, its agent asks (HealRequest
// on its keep-alive) for the next heal generation. While the round runs and
// every other member's workers heal, the generation goes one higher: the
// agent starts a replacement in it and every other member's workers heal
// with it. Otherwise the request is refused and the member's failure ends
// the round as above.
//
// Identity: a node new to the job brings a lease key (a random secret its
// agent made) with its first join. Its agent's later calls show it
// (check_lease), its keep-alives while that join waits too: with
// the job's token anyone can call, but only a node's own agent speaks for
// it, joins as it again, renews its lease, asks for its heals or leaves for
// it. Heal requests are bounded per node: a burst of kHealBurst, then one
// per kHealRefill; a request over the bound waits (its keep-alives repeat
// it) instead of naming a generation, so no member can make the job heal
// without end.
//
// A node that arrives while a round runs (to take a lost node's place, to
// grow the round, to wait, or to be admitted) must run the program the
// members run, with the same arguments: a spare's or a newcomer's workers
// start as replacements that take the others' state, and another program
// (another model) deadlocks or fails the job. It is refused (ProgramMismatch)
// and the members learn it (the view's refusal). A round that is forming
// takes what it is given, as torchrun does.
//
// Node ranks stay where they were when the same nodes return, so node 0
// keeps rank 0 while it lives. Once a node reports success the job is
// finished; once restarts are used up it has failed; either way nothing more
// can join.
#pragma once

#include <functional>
#include <map>
#include <optional>
#include <set>
#include <string>
#include <unordered_map>
#include <vector>

#include "rendezvous/store/types.h"

namespace ddprun {

class RoundState {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;
  using Duration = std::chrono::milliseconds;

  // key_source makes lease keys (random_lease_key unless a test gives one).
  explicit RoundState(RoundSettings settings, std::function<std::string()> key_source = nullptr);

  // Heal requests a node may make at once, and how often after that.
  static constexpr int kHealBurst = 4;
  static constexpr std::chrono::milliseconds kHealRefill{1000};

  // A node joins: the open round, the next one (superseding a running round
  // it belongs to, or admitting it when there is room), or the waiting list.
  // lease: how long it may stay silent before it counts as lost (0: never).
  // Throws RendezvousError for bad input, JobEnded once the job is over.
  // lease_key: the key the node brings; it becomes the node's when the
  // node is new to the job (empty: one is made), and must be the node's
  // when it is not (the caller checks that first: check_lease).
  void join(const NodeSpec& node, const RoundSettings& settings, const JoinIntent& intent,
            Duration lease, TimePoint now, const std::string& lease_key = "");

  // Closes the open round when its conditions hold and, with
  // expire_leases, drops nodes whose lease ran out; true if anything
  // changed. (The registry expires leases only on its timer thread, after
  // it excused its own lateness: a call served first after a stall must
  // not drop the nodes whose keep-alives wait behind it.)
  bool advance(TimePoint now, bool expire_leases = true);

  // A sign of life from a node; what it should know about the job.
  // workers_heal_round: the round in which all of the node's workers heal in
  // place (-1: none); a member may be taken over from only while this is the
  // current round. heal: the node's heal request (id 0: none), answered in
  // the view (heal_request_id, heal_request_generation).
  NodeView keep_alive(const std::string& node_id, TimePoint now, int64_t workers_heal_round = -1,
                      const HealRequest& heal = {});
  NodeView view(const std::string& node_id) const;
  // The whole job as `ddprun status` shows it (progress is the registry's).
  JobStatus status(TimePoint now) const;

  // The node is gone for certain (its host said so, or a successor knows
  // it): dropped now as if its lease had run out. Unknown nodes are ignored.
  void lose(const std::string& node_id, const std::string& why, TimePoint now);
  // The node's agent's connection (its Hold call) closed. That is no proof
  // of death: a link blip, a reconnect or a move to a new leader closes one
  // too. The node stays until its lease runs out, as for any silent node;
  // the note only goes into the words of its loss if that comes.
  void connection_closed(const std::string& node_id, TimePoint now);
  // Whether the node's connection closed and it gave no sign of life since.
  bool silent_since_closed(const std::string& node_id) const;
  // The node's probe address ("" when unknown or none).
  std::string probe_address(const std::string& node_id) const;
  // This process was not running for `stalled` (its timer woke that late:
  // the machine is loaded, or the process was paused): nobody's silence
  // over that stretch is held against them. Every lease moves on by it,
  // never past `now` (memberlist's Lifeguard: a node that was slow itself
  // suspects nobody for it).
  void excuse(Duration stalled, TimePoint now);

  // A node leaves the job (see LeaveKind; kHandedOver: as lose(), with the
  // message as why). Unknown nodes are ignored, except
  // that a success naming the round it happened in (`round`) counts only
  // for the running round the node is a member of: otherwise it throws
  // RendezvousError and changes nothing (the caller leaves another way).
  void leave(const std::string& node_id, LeaveKind kind, const std::string& message,
             TimePoint now, std::optional<int64_t> round = std::nullopt);

  // The node's assignment in the current round once it has closed with the
  // node in it; nullopt while the node waits for that.
  std::optional<Assignment> assignment(const std::string& node_id) const;
  // Whether the node is known (a member, waiting, or running).
  bool knows(const std::string& node_id) const { return nodes_.count(node_id) > 0; }
  // Throws NotThisNode when the node is known and `key` is not its lease
  // key (a stranger speaking for it); an unknown node passes (its calls
  // change nothing, or, for a join, make it new to the job).
  void check_lease(const std::string& node_id, const std::string& key) const;
  // The node's lease key ("" when unknown).
  std::string lease_key(const std::string& node_id) const;

  // When advance() may next change something by time alone (the end of the
  // last-call window, a lease running out); nullopt when only a call can.
  std::optional<TimePoint> next_deadline() const;

  int64_t current_round() const { return round_; }
  bool closed() const { return closed_; }
  JobPhase phase() const { return phase_; }
  const std::string& end_message() const { return end_message_; }
  int restart_count() const { return restarts_; }
  // Changes whenever a round opens or closes, a node is dropped, whether a
  // node's workers heal changes, a placed node joins again, or the job
  // ends: callers re-check their waiters only then.
  uint64_t generation() const { return generation_; }
  // Whether any member of the current round asked for a NCCL id.
  bool wants_nccl_id() const;
  size_t num_members() const { return members_.size(); }
  size_t num_waiting() const { return waiting_.size(); }
  // Nodes still in the job (not left, not lost).
  size_t num_nodes() const { return nodes_.size(); }
  // Nodes dropped for missed leases, oldest first.
  const std::vector<LostNode>& lost() const { return lost_; }
  const RoundSettings& settings() const { return settings_; }
  RoundReason reason() const { return reason_; }
  // Takeovers, shrinks and worker heals in the running round so far (its
  // heal generation).
  uint32_t heal_generation() const { return heal_generation_; }

 private:
  // Saves and restores the whole state for a successor (job_state.cpp).
  friend struct RoundStateCodec;
  struct Node {
    NodeSpec spec;
    Duration lease{0};
    TimePoint last_seen;
    // When its agent's connection last closed, if since then it was not
    // seen (connection_closed); only for the words of its loss.
    std::optional<TimePoint> closed_at;
    int64_t workers_heal_round = -1;  // see keep_alive
    uint64_t heal_request_id = 0;     // its last answered HealRequest
    uint32_t heal_request_generation = 0;  // named for it (0: refused)
    std::string lease_key;            // what its calls show (check_lease)
    // Heal requests it may still make now (a token bucket: kHealBurst, one
    // more each kHealRefill), as of heal_credit_at.
    double heal_credit = kHealBurst;
    TimePoint heal_credit_at{};
  };
  // Takes one heal request's credit from n (refilled to now); false when
  // it has none left (the request waits).
  static bool take_heal_credit(Node& n, TimePoint now);
  void validate_join(const NodeSpec& node, const RoundSettings& settings) const;
  // Throws ProgramMismatch (counting the refusal) when `node` arrives while
  // a round runs with another program than its members'.
  void check_program(const NodeSpec& node, bool waiting);
  void add_member(const std::string& id, TimePoint now);
  void remove_member(const std::string& id);
  void open_next_round(RoundReason reason, std::string detail, TimePoint now);
  void close_round();
  void end_job(JobPhase phase, std::string message);
  // A running member is gone or failed: a new round, maybe a restart spent.
  void supersede(RoundReason reason, std::string detail, bool costs_restart, TimePoint now);
  // Drops a node that is gone; why: how we know ("" for a lease that ran out).
  void drop(const std::string& id, TimePoint now, const std::string& why = "");
  // A waiting node takes the place of `lost` (a member of the running round,
  // already out of nodes_) if the takeover rules hold; false if not.
  bool take_over(const std::string& lost, const Node& gone, const std::string& how);
  // The node `id` (known, not a member) joins the running round if the grow
  // rules hold; false if not. any_rank: its node rank hint does not count.
  bool grow(const std::string& id, TimePoint now, bool any_rank = false);
  // The running round goes on without `lost` if the shrink rules hold;
  // false if not.
  bool shrink(const std::string& lost, const Node& gone, const std::string& how);
  // The heal generation named for a member's failed worker (HealRequest),
  // or 0 when the worker heal rules do not hold.
  uint32_t name_worker_heal(const std::string& id, const std::string& detail);
  // The nodes lost since the last assignments went out, as "'id' (host):
  // why", now counted as told.
  std::vector<std::string> take_unreported_losses();
  // Whether every member but `except` said its workers heal in the current round.
  bool members_heal(const std::string& except = "") const;
  bool is_member(const std::string& id) const { return member_set_.count(id) > 0; }

  RoundSettings settings_;
  std::function<std::string()> key_source_;
  int64_t round_ = 0;
  bool closed_ = false;
  JobPhase phase_ = JobPhase::kActive;
  std::string end_message_;
  int restarts_ = 0;
  uint64_t generation_ = 0;
  RoundReason reason_ = RoundReason::kFirst;
  std::string detail_;
  uint32_t heal_generation_ = 0;  // takeovers, shrinks and worker heals in the current round
  uint32_t refusals_ = 0;         // nodes refused for another program (ProgramMismatch)
  std::string refusal_;           // the newest, in words
  HealReason heal_reason_ = HealReason::kNone;  // of the newest

  std::unordered_map<std::string, Node> nodes_;  // every node in the job
  std::vector<std::string> members_;             // of the current round, join order
  std::set<std::string> member_set_;
  std::vector<std::string> waiting_;             // arrived while the round ran full
  std::optional<TimePoint> min_reached_at_;      // when min_nodes was reached
  // In a round that follows a running one: the nodes of that round still
  // expected back (they leave this set when they join, leave or are lost).
  bool follows_running_round_ = false;
  std::set<std::string> expected_;
  // No lease runs out before this (a lower bound: keep-alives only push
  // leases later), so advance() scans the nodes only from then on.
  std::optional<TimePoint> lease_check_at_;
  std::map<std::string, Assignment> assignments_;  // of the closed current round
  std::map<std::string, int> last_ranks_;          // node ranks of the last closed round
  std::vector<LostNode> lost_;
  size_t lost_reported_ = 0;  // lost_[0, this) went out with an earlier round
};

}  // namespace ddprun
