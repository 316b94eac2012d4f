// The ranks compare their replicas: in data parallelism every rank must
// hold the same bits, so each tells the fingerprint of its tensors
// (tensor_fingerprint.h) and every rank learns who is apart. A rank apart
// from a strict majority is named and can take the majority's state; no
// majority (2 of 4 apart, 1 of 2) is named too, and nobody can say which
// side is right. Ranks on hardware of different kinds (DDPRUN_HARDWARE_KIND,
// else the CPU's and the GPU's names) may round differently: they are
// compared within their kind, and a difference between kinds whose ranks
// agree among themselves is by design, not a fault.
//
// Collective over comm; every rank returns the same comparison (but for
// self_apart). One all_gather of 40 bytes a rank when they agree; when
// they do not, one more of 8 bytes a tensor (to name the first tensor that
// differs), and of the kinds' names when kinds differ.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ddp/communicator.h"

namespace ddp {

struct ReplicaCheckInput {
  // In an order every rank derives alike (the model's by name, ...).
  std::vector<NamedTensor> tensors;
  std::string what = "parameters";  // said in the verdict: "parameters", "state"
  std::string unit = "step";        // what `step` counts: "step", "forward pass"
  int64_t step = 0;
  std::string hardware_kind;  // this rank's
  int node_rank = 0;
};

struct ReplicaComparison {
  enum class Outcome { kAgree, kApart, kNoMajority };
  Outcome outcome = Outcome::kAgree;
  // kApart: for each kind with ranks apart, the lowest rank of its
  // majority (the source of a repair) and the ranks apart from it.
  struct Repair {
    int source = 0;
    std::vector<int> apart;
  };
  std::vector<Repair> repairs;
  // Kinds of hardware that differ from each other, each agreeing within
  // itself (said in `by_design_text`; the outcome ignores it).
  bool by_design = false;
  std::string by_design_text;
  std::string text;  // the verdict's line, "" when every rank agrees
  bool self_apart = false;  // this rank is among a repair's ranks apart
  uint64_t fingerprint = 0;  // this rank's, of all its tensors
};

ReplicaComparison compare_replicas(Communicator& comm, const ReplicaCheckInput& input);

// "0, 1, 3", "0-3, 5": ranks in order, runs of three or more as ranges.
std::string rank_list(std::vector<int> ranks);

}  // namespace ddp
