// One job's rendezvous state as bytes, for the control plane's successor:
// when the agent that hosts the rendezvous is lost, the next leader reads
// what the last one wrote and serves the job from there (control_plane.h).
//
// Contract: decode(encode(x)) behaves as x does - the same rounds, members,
// ranks, lease keys, heal generation, restarts, store and NCCL id - except
// for time: every node's lease starts afresh at `now` of the decode (the
// successor cannot know when a node was last heard on another host's clock),
// and the ages of the last-call window and of lost nodes carry over.
// Parked joins, Hold calls, progress and collectives reports are not state:
// agents make them again against the new leader.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

#include "rendezvous/server/round.h"

namespace ddprun {

// Bytes that are not a job state this version can read.
class JobStateError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

using StoreEntries = std::vector<std::pair<std::string, std::string>>;

// What is saved of a job (by reference: the registry encodes under its lock).
struct JobStateParts {
  const std::string* job_id = nullptr;
  const RoundState* rounds = nullptr;  // null: no round yet
  StoreEntries store;
  int64_t store_round = 0;
  int64_t nccl_round = -1;  // the round whose NCCL id is saved (-1: none)
  std::string nccl_id;
  std::string nccl_id_error;
  std::string leader_node_id;  // who saves it, in which term ("", 0: none)
  int64_t term = 0;
};

struct RestoredJob {
  std::string job_id;
  std::optional<RoundState> rounds;
  StoreEntries store;
  int64_t store_round = 0;
  int64_t nccl_round = -1;
  std::string nccl_id;
  std::string nccl_id_error;
  std::string leader_node_id;
  int64_t term = 0;
};

std::string encode_job_state(const JobStateParts& parts, std::chrono::steady_clock::time_point now);
// Throws JobStateError for bytes that do not hold a consistent job state.
RestoredJob decode_job_state(std::string_view bytes, std::chrono::steady_clock::time_point now);

}  // namespace ddprun
