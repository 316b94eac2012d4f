// The values the rendezvous hands around: settings, node specs, assignments,
// what a keep-alive learns. Plain data shared by the round logic, the
// service and its clients (no gRPC, no threads).
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddprun {

struct RoundSettings {
  int min_nodes = 1;
  int max_nodes = 1;
  std::chrono::milliseconds last_call{0};
  // Restarts the whole job may spend on failures (--max-restarts).
  int max_restarts = 0;

  bool operator==(const RoundSettings&) const = default;
};

struct NodeSpec {
  std::string node_id;
  std::string host;
  int local_world_size = 1;
  std::string local_addr;
  int node_rank_hint = -1;  // -1: assigned by the rendezvous
  bool wants_nccl_id = false;
  // The port this node's rank 0 would serve MASTER_PORT on, were it node 0.
  int master_port = 0;
  // Its workers can heal in place (--max-heals above 0): waiting, it may
  // take over a lost member's ranks in a running round (RoundState::drop).
  // Members say whether theirs do in each keep-alive instead.
  bool heals = false;
  // What its workers run: the program's name and its arguments. A node that
  // arrives while a round runs must run what the members run ("" from
  // older agents: not checked).
  std::string program;
  // The embedded control plane: where its agent takes Raft messages
  // (raft_control_plane.h); "": not a candidate to vote.
  std::string control_address;
  // host:port its agent listens on while it lives (liveness_probe.h): when
  // its connection closes, a refused connect there says it is gone. "":
  // none; the lease decides.
  std::string probe_address;
};
inline constexpr size_t kMaxProgramBytes = 4096;

// Why a round was opened; followers of a round change learn it.
enum class RoundReason { kFirst, kWorkerFailure, kNodeLost, kNodeLeft, kAdmit };

// What named the running round's newest heal generation (proto HealReason).
enum class HealReason { kNone, kTakeover, kShrink, kWorker, kGrow };

// Whether the job still runs, and how it ended.
enum class JobPhase { kActive, kSucceeded, kFailed };

// Where a member's workers stand in its round: their node's rank, the
// number of nodes, the world size and the global rank of local rank 0. A
// shrink changes it while the round runs.
struct Placement {
  int node_rank = -1;
  int num_nodes = 0;
  int world_size = 0;
  int first_global_rank = 0;
  bool operator==(const Placement&) const = default;
};

// A member asks for the running round's next heal generation: one of its
// workers failed and its agent replaces it while every other worker of the
// job heals (checkpointless recovery across nodes). id counts the agent's
// requests (0: none); the rendezvous answers each id once, and a repeated
// id (a keep-alive whose answer was lost) gets the same answer again.
struct HealRequest {
  uint64_t id = 0;
  std::string detail;  // what failed, in words
};
inline constexpr size_t kMaxHealDetailBytes = 1024;

struct Assignment {
  int64_t round = 0;
  int node_rank = 0;
  int num_nodes = 0;
  int world_size = 0;
  int first_global_rank = 0;
  // Node rank 0's address and MASTER_PORT, as every node reaches it.
  std::string master_addr;
  int master_port = 0;
  // Restarts the job has spent so far (TORCHELASTIC_RESTART_COUNT).
  int restart_count = 0;
  // Nodes lost since the previous round closed, as "'node id' (host): why".
  std::vector<std::string> lost_since_last_round;
  // > 0: this node took over a lost member's ranks in the running round (or
  // joined it, the world growing: then lost_since_last_round is empty); its
  // workers start as replacements in this heal generation.
  uint32_t heal_generation = 0;
  // A round opened by workers' failures: the failures, as every node that
  // reported one told them ("node 'id''s workers failed: rank 1 hung: ...";
  // ...), so a node whose worker failed only because of another node's hears
  // the root cause too. Empty for other rounds.
  std::string opened_because;

  Placement placement() const { return {node_rank, num_nodes, world_size, first_global_rank}; }
};

struct JoinResult {
  Assignment assignment;
  std::string nccl_id;        // empty when not asked for or unavailable
  std::string nccl_id_error;  // why it is empty although asked for
  // What the node's later calls must show to speak for it (RoundState::check_lease).
  std::string lease_key;
};
inline constexpr size_t kMaxLeaseKeyBytes = 64;
// 128 random bits as hex: a fresh lease key.
std::string random_lease_key();

// What an agent says when it joins: the round its workers last ran in
// (-1: none yet) and whether they failed there.
struct JoinIntent {
  JoinIntent() = default;
  JoinIntent(int64_t last, bool failed, std::string why = "")
      : last_round(last), workers_failed(failed), failure(std::move(why)) {}
  int64_t last_round = -1;
  bool workers_failed = false;
  std::string failure;  // with workers_failed: the root cause (a hang's verdict too)
};
inline constexpr size_t kMaxFailureBytes = 2048;
// A round's detail names at most this much (several nodes' failures).
inline constexpr size_t kMaxRoundDetailBytes = 4 * kMaxFailureBytes;

// How a node leaves the job.
enum class LeaveKind { kSucceeded, kStopped, kFailed, kHandedOver };

// A node dropped because its lease ran out.
struct LostNode {
  std::string node_id;
  std::string host;
  std::chrono::steady_clock::time_point last_seen;
  std::string why;  // "no keep-alive for 3000 ms", "its agent's connection ... closed"
  std::chrono::steady_clock::time_point dropped_at;
  std::chrono::milliseconds lease{0};  // the lease it held
};

// What a keep-alive tells a node about the job.
struct NodeView {
  bool known = true;  // false: the node was dropped (or never joined)
  int64_t round = 0;  // the current round
  bool closed = false;
  JobPhase phase = JobPhase::kActive;
  RoundReason reason = RoundReason::kFirst;  // why the current round opened
  std::string detail;                        // e.g. "node 'b' was lost"
  int nodes_waiting = 0;                     // late nodes waiting for a round
  int restart_count = 0;
  // The rendezvous host's CLOCK_MONOTONIC (ns) when it answered a keep-alive;
  // 0 when unknown (an older service).
  int64_t server_mono_ns = 0;
  // The running round's heal generation (0: no takeover yet): members tell
  // their workers to heal in it.
  uint32_t heal_generation = 0;
  // Every member's workers heal in place in the running round: a waiting
  // node would take over a lost one's ranks (and warms its workers up).
  bool takeover_ready = false;
  // The node's place in the running round (node_rank -1: not a member of a
  // closed round).
  Placement placement;
  // The node's last answered HealRequest (0: none) and the generation named
  // for it (0: refused).
  uint64_t heal_request_id = 0;
  uint32_t heal_request_generation = 0;
  HealReason heal_reason = HealReason::kNone;  // what named heal_generation
  // This node is the job's straggler (rendezvous/server/node_scores.h): its
  // job-wide score, 0 when it is not one.
  double straggler_score = 0;
  // Nodes refused for running another program than the running round's,
  // or admitted with other arguments (so far), and the newest in words
  // ("refused node ...", "admitted node ..."): members say so once each.
  uint32_t refusals = 0;
  std::string refusal;
  // The embedded control plane's voters' services (KeepAliveResponse).
  std::vector<std::string> control_candidates;
  // Who serves the job's rendezvous now, and its term (a control plane's;
  // empty and 0 without one).
  std::string control_node;
  int64_t control_term = 0;
};

// Training progress as the agent of global rank 0 reports it (from the
// worker's channel::Progress); optional fields are unknown when empty.
struct ProgressInfo {
  int global_rank = 0;
  int64_t round = 0;
  std::optional<int64_t> step;
  std::optional<int64_t> total_steps;
  std::optional<int> epoch;
  std::optional<double> loss;
  int64_t samples = 0;           // 0: unknown
  double samples_per_sec = 0;    // 0: unknown
  std::optional<int64_t> saved_step;
  std::optional<int64_t> restored_step;
  std::chrono::milliseconds age{0};  // how old the worker's report is
  uint32_t heal_generation = 0;      // the one the worker runs in (one node: named by its agent)
  // The reporting node's slowest rank (straggler scores), once scored.
  std::optional<int> slowest_rank;
  double slowest_score = 0;
  bool slowest_is_straggler = false;
  // The comparisons of the replicas (--verify-every; 0: off), as rank 0
  // last told them: the newest step they agreed at, the verdicts so far
  // (ranks found apart), the newest verdict's line.
  int64_t verify_every = 0;
  std::optional<int64_t> replicas_agreed_step;
  uint32_t replica_verdicts = 0;
  std::string replica_verdict;
};

// A rank's newest collective as its node's agent last saw it (its flight
// record): what another node's hang verdict needs of it.
struct RankCollective {
  int global_rank = 0;
  uint32_t op = 0;  // channel::FlightOp
  uint64_t seq = 0;
  uint32_t generation = 0;
  uint32_t comm = 0;   // 0 the CPU communicator, 1 the CUDA one
  uint64_t bytes = 0;
  bool inside = false;  // started and not finished
  std::chrono::milliseconds age{0};  // since it started (inside) or finished
};

// How a node's ranks fare at collectives (agent/health/straggler_scores.h), as its
// agent reports them about once a second: the job-wide straggler scores of
// nodes (rendezvous/server/node_scores.h) and other nodes' hang verdicts use them.
struct NodeCollectives {
  std::chrono::milliseconds age{0};  // how old the report is
  std::vector<RankCollective> ranks;
  uint32_t generation = 0;  // the heal generation the timings are of
  double wait_ms = 0;       // smoothed: how long its ranks spend inside a collective (their mean)
  double period_ms = 0;     // smoothed: the time from one collective to the next
  int64_t samples = 0;      // collectives those are of
  // Its slowest local rank (its agent's scores), once scored.
  std::optional<int> slowest_rank;
  double slowest_score = 0;
  bool slowest_is_straggler = false;
};

// A node's job-wide straggler score: how much of each collective's time the
// other nodes wait for it, 0-1.
struct NodeScore {
  double score = 0;
  bool straggler = false;
};

// One node of a job, for `ddprun status`.
struct NodeStatus {
  std::string node_id;
  std::string host;
  int node_rank = -1;          // -1: not in the closed current round
  int local_world_size = 0;
  int first_global_rank = -1;  // -1: not in the closed current round
  bool waiting = false;        // arrived while the round ran full
  std::chrono::milliseconds last_seen_ago{0};  // -1: it holds no lease (one-node jobs)
  bool heals = false;  // its workers all heal in place in the current round (its keep-alives say)
  std::string control_address;  // NodeSpec's
  std::optional<NodeCollectives> collectives;  // its last report (age: now)
  std::optional<NodeScore> score;              // job-wide, once scored
};

// Where a job stands, for `ddprun status`.
struct JobStatus {
  JobPhase phase = JobPhase::kActive;
  int64_t round = 0;
  bool round_closed = false;
  RoundReason reason = RoundReason::kFirst;
  std::string detail;
  int restart_count = 0;
  RoundSettings settings;
  int world_size = 0;
  std::vector<NodeStatus> nodes;  // members by node rank, then the others
  int nodes_waiting = 0;
  uint32_t heal_generation = 0;  // takeovers and shrinks in the running round
  std::optional<ProgressInfo> progress;
  // The control plane's leader serving it, and its term ("", 0: none).
  std::string control_node;
  int64_t control_term = 0;
};

// Bad input to the rendezvous (inconsistent settings, bad node spec, a
// request for a round that is over).
class RendezvousError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

// A node that would join a running round but runs another program than its
// members: it is refused, and told why.
class ProgramMismatch : public RendezvousError {
 public:
  using RendezvousError::RendezvousError;
};

// A call for a node that did not carry the node's lease key: someone (with
// the job's token) speaking for a node it is not.
class NotThisNode : public RendezvousError {
 public:
  using RendezvousError::RendezvousError;
};

// The job is over (finished or failed): nothing more can join it.
class JobEnded : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

const char* to_string(RoundReason r);

// Every store key of round r lives under this prefix (worker_lib's World
// puts them there; the service drops them once the round is over), so one
// round never reads another's.
inline std::string round_key_prefix(int64_t round) { return "round/" + std::to_string(round); }

}  // namespace ddprun
