// The round state machine of one job's rendezvous: pure logic, no I/O, driven
// by a time the caller passes in (so tests can fake the clock).
//
// A round is open while nodes join it. It closes when max_nodes have joined,
// or when at least min_nodes have joined and the last-call window has passed
// since the min-th node arrived. A closed round hands every member its node
// rank and the global ranks of its workers. A member that joins again (after
// its workers failed) or a node that arrives late opens the next round, which
// every node must then join.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddprun {

struct RoundSettings {
  int min_nodes = 1;
  int max_nodes = 1;
  std::chrono::milliseconds last_call{0};

  bool operator==(const RoundSettings&) const = default;
};

struct NodeSpec {
  std::string node_id;
  std::string host;
  int local_world_size = 1;
  std::string local_addr;
  int node_rank_hint = -1;  // -1: assigned by join order
  bool wants_nccl_id = false;
};

struct Assignment {
  int64_t round = 0;
  int node_rank = 0;
  int num_nodes = 0;
  int world_size = 0;
  int first_global_rank = 0;
};

// Bad input to the rendezvous (inconsistent settings, bad node spec).
class RendezvousError : public std::invalid_argument {
 public:
  using std::invalid_argument::invalid_argument;
};

class RoundState {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  explicit RoundState(RoundSettings settings);

  // Adds the node to the open round (opening the next one first when the
  // current round is closed) and returns the round it joined. Throws
  // RendezvousError for bad specs or when the round is full.
  int64_t join(const NodeSpec& node, const RoundSettings& settings, TimePoint now);

  // Closes the open round when its conditions hold; true if it closed now.
  bool advance(TimePoint now);

  // The member's assignment once `round` has closed; nullopt while it is
  // still open. Throws RendezvousError when the round was superseded or the
  // node is not a member of it.
  std::optional<Assignment> assignment(int64_t round, const std::string& node_id) const;

  // When advance() may next change something by time alone (the end of the
  // last-call window); nullopt when only a join can.
  std::optional<TimePoint> next_deadline() const;

  int64_t current_round() const { return round_; }
  bool closed() const { return closed_; }
  // Whether any member of the closed current round asked for a NCCL id.
  bool wants_nccl_id() const;
  const std::vector<NodeSpec>& members() const { return members_; }
  const RoundSettings& settings() const { return settings_; }

 private:
  void open_next_round();
  void close_round();

  RoundSettings settings_;
  int64_t round_ = 0;
  bool closed_ = false;
  std::vector<NodeSpec> members_;                   // in join order
  std::optional<TimePoint> min_reached_at_;         // when min_nodes was first reached
  std::map<std::string, Assignment> assignments_;   // of the closed round
};

}  // namespace ddprun
