#include "verify/replica_check.h"

#include <algorithm>
#include <cstring>
#include <map>
#include <set>

#include "base/fingerprint.h"
#include "verify/tensor_fingerprint.h"

namespace ddp {
namespace {

// What each rank tells: its fingerprint, its hardware kind's, its step, its
// number of tensors, its node.
enum Column { kFingerprint = 0, kKind, kStep, kTensors, kNode, kColumns };
constexpr int64_t kKindNameBytes = 96;

std::string ranks_text(const std::vector<int>& ranks) {
  return (ranks.size() == 1 ? "rank " : "ranks ") + rank_list(ranks);
}

// The ranks of one hardware kind, by fingerprint (groups in the order of
// their lowest rank).
struct KindGroup {
  uint64_t kind = 0;
  std::vector<int> ranks;
  std::vector<std::vector<int>> by_fingerprint;
  std::vector<uint64_t> fingerprints;  // one per group of by_fingerprint
  int majority = -1;                   // the index in by_fingerprint of a strict majority, or -1
};

std::vector<KindGroup> group(const at::Tensor& rows) {
  std::vector<KindGroup> kinds;
  const auto* v = rows.data_ptr<int64_t>();
  for (int r = 0; r < rows.size(0); ++r) {
    const auto kind = static_cast<uint64_t>(v[r * kColumns + kKind]);
    const auto fp = static_cast<uint64_t>(v[r * kColumns + kFingerprint]);
    auto k = std::find_if(kinds.begin(), kinds.end(), [&](const KindGroup& g) { return g.kind == kind; });
    if (k == kinds.end()) k = kinds.insert(kinds.end(), KindGroup{kind, {}, {}, {}, -1});
    k->ranks.push_back(r);
    auto f = std::find(k->fingerprints.begin(), k->fingerprints.end(), fp);
    if (f == k->fingerprints.end()) {
      k->fingerprints.push_back(fp);
      k->by_fingerprint.push_back({r});
    } else {
      k->by_fingerprint[static_cast<size_t>(f - k->fingerprints.begin())].push_back(r);
    }
  }
  for (KindGroup& k : kinds) {
    for (size_t g = 0; g < k.by_fingerprint.size(); ++g) {
      if (2 * k.by_fingerprint[g].size() > k.ranks.size()) k.majority = static_cast<int>(g);
    }
  }
  return kinds;
}

std::vector<int> apart_from(const KindGroup& k) {
  std::vector<int> apart;
  for (size_t g = 0; g < k.by_fingerprint.size(); ++g) {
    if (static_cast<int>(g) != k.majority) apart.insert(apart.end(), k.by_fingerprint[g].begin(), k.by_fingerprint[g].end());
  }
  std::sort(apart.begin(), apart.end());
  return apart;
}

// The name of the first tensor whose fingerprints differ between ranks a
// and b (per_tensor: [world, tensors]).
std::string first_difference(const at::Tensor& per_tensor, int a, int b, const std::vector<NamedTensor>& tensors) {
  const int64_t n = per_tensor.size(1);
  const auto* v = per_tensor.data_ptr<int64_t>();
  for (int64_t i = 0; i < n; ++i) {
    if (v[a * n + i] != v[b * n + i]) return tensors[static_cast<size_t>(i)].name;
  }
  return "none: the tensors agree, their number or order differs";
}

std::string nodes_of(const at::Tensor& rows, const std::vector<int>& ranks) {
  std::set<int64_t> nodes;
  for (int r : ranks) nodes.insert(rows.data_ptr<int64_t>()[r * kColumns + kNode]);
  std::vector<int> list(nodes.begin(), nodes.end());
  return (list.size() == 1 ? "node " : "nodes ") + rank_list(list);
}

}  // namespace

std::string rank_list(std::vector<int> ranks) {
  std::sort(ranks.begin(), ranks.end());
  ranks.erase(std::unique(ranks.begin(), ranks.end()), ranks.end());
  std::string out;
  for (size_t i = 0; i < ranks.size();) {
    size_t j = i;
    while (j + 1 < ranks.size() && ranks[j + 1] == ranks[j] + 1) ++j;
    if (!out.empty()) out += ", ";
    if (j - i >= 2) {
      out += std::to_string(ranks[i]) + "-" + std::to_string(ranks[j]);
    } else {
      for (size_t k = i; k <= j; ++k) out += (k > i ? ", " : "") + std::to_string(ranks[k]);
    }
    i = j + 1;
  }
  return out;
}

ReplicaComparison compare_replicas(Communicator& comm, const ReplicaCheckInput& input) {
  ReplicaComparison out;
  std::vector<at::Tensor> tensors;
  tensors.reserve(input.tensors.size());
  for (const auto& t : input.tensors) tensors.push_back(t.tensor);
  const std::vector<uint64_t> fps = fingerprints_of(tensors);
  out.fingerprint = fingerprint_of_all(fps);
  const int world = comm.size();
  if (world == 1) return out;

  // 1. Every rank tells its row.
  at::Tensor row = at::empty({kColumns}, at::kLong);
  auto* r = row.data_ptr<int64_t>();
  r[kFingerprint] = static_cast<int64_t>(out.fingerprint);
  r[kKind] = static_cast<int64_t>(fingerprint_bytes(input.hardware_kind.data(), input.hardware_kind.size()));
  r[kStep] = input.step;
  r[kTensors] = static_cast<int64_t>(fps.size());
  r[kNode] = input.node_rank;
  const at::Tensor rows = comm.all_gather(row).reshape({world, kColumns}).contiguous();
  const auto* v = rows.data_ptr<int64_t>();
  const std::string at_step = " at " + input.unit + " " + std::to_string(input.step);

  // A model of another structure cannot be compared (nor repaired).
  for (int q = 1; q < world; ++q) {
    if (v[q * kColumns + kTensors] != v[kTensors]) {
      out.outcome = ReplicaComparison::Outcome::kNoMajority;
      out.text = "rank " + std::to_string(q) + "'s model has " + std::to_string(v[q * kColumns + kTensors]) +
                 " tensors, rank 0's " + std::to_string(v[kTensors]) + at_step +
                 " (is every rank running the same program, with the same model?)";
      return out;
    }
  }

  // 2. Within each hardware kind, who agrees with whom.
  const std::vector<KindGroup> kinds = group(rows);
  bool all_agree = true;
  for (const auto& k : kinds) all_agree = all_agree && k.by_fingerprint.size() == 1;
  std::set<uint64_t> kind_fingerprints;  // each kind's majority's
  for (const auto& k : kinds) {
    if (k.majority >= 0) kind_fingerprints.insert(k.fingerprints[static_cast<size_t>(k.majority)]);
  }
  const bool kinds_differ = kinds.size() > 1 && kind_fingerprints.size() > 1;
  if (all_agree && !kinds_differ) return out;

  // 3. Someone differs: each rank's fingerprint of each tensor, to name the
  //    first that differs.
  at::Tensor mine = at::empty({static_cast<int64_t>(fps.size())}, at::kLong);
  std::memcpy(mine.data_ptr(), fps.data(), fps.size() * sizeof(uint64_t));
  const at::Tensor per_tensor = fps.empty() ? at::empty({world, 0}, at::kLong)
                                            : comm.all_gather(mine).reshape({world, -1}).contiguous();
  std::vector<std::string> lines;
  for (const KindGroup& k : kinds) {
    if (k.by_fingerprint.size() == 1) continue;
    if (k.majority < 0) {
      out.outcome = ReplicaComparison::Outcome::kNoMajority;
      std::string groups;
      for (const auto& g : k.by_fingerprint) groups += (groups.empty() ? "" : " | ") + ranks_text(g);
      lines.push_back("the ranks' " + input.what + " differ with no majority" + at_step + ": " + groups +
                      " (first differing tensor: " +
                      first_difference(per_tensor, k.by_fingerprint[0][0], k.by_fingerprint[1][0], input.tensors) + ")");
      continue;
    }
    ReplicaComparison::Repair repair;
    const std::vector<int>& majority = k.by_fingerprint[static_cast<size_t>(k.majority)];
    repair.source = majority.front();
    repair.apart = apart_from(k);
    if (std::find(repair.apart.begin(), repair.apart.end(), comm.rank()) != repair.apart.end()) out.self_apart = true;
    const std::string first = first_difference(per_tensor, repair.apart.front(), repair.source, input.tensors);
    lines.push_back((repair.apart.size() == 1 ? "rank " + std::to_string(repair.apart.front()) + "'s " + input.what
                                              : "the " + input.what + " of " + ranks_text(repair.apart)) +
                    " differ from " + ranks_text(majority) + at_step + " (first differing tensor: " + first + ")");
    out.repairs.push_back(std::move(repair));
  }
  if (out.outcome != ReplicaComparison::Outcome::kNoMajority && !out.repairs.empty()) {
    out.outcome = ReplicaComparison::Outcome::kApart;
  }
  if (out.outcome == ReplicaComparison::Outcome::kNoMajority) out.repairs.clear(), out.self_apart = false;
  for (const auto& l : lines) out.text += (out.text.empty() ? "" : "; ") + l;

  // 4. Kinds that differ from each other: named, with their nodes.
  if (kinds_differ) {
    out.by_design = true;
    at::Tensor name = at::zeros({kKindNameBytes}, at::kByte);
    std::memcpy(name.data_ptr(), input.hardware_kind.data(),
                std::min<size_t>(input.hardware_kind.size(), kKindNameBytes - 1));
    const at::Tensor names = comm.all_gather(name).reshape({world, kKindNameBytes}).contiguous();
    std::string sides;
    for (const KindGroup& k : kinds) {
      const int first = k.ranks.front();
      const char* n = reinterpret_cast<const char*>(names.data_ptr<uint8_t>() + first * kKindNameBytes);
      sides += (sides.empty() ? "" : " and ") + ranks_text(k.ranks) + " (" + nodes_of(rows, k.ranks) + ": " +
               std::string(n, strnlen(n, kKindNameBytes)) + ")";
    }
    const int a = kinds[0].ranks.front(), b = kinds[1].ranks.front();
    out.by_design_text = sides + " hold different " + input.what + at_step +
                         " while each kind agrees within itself (first differing tensor: " +
                         first_difference(per_tensor, a, b, input.tensors) +
                         "): hardware of different kinds may round differently; ddprun compares each kind within "
                         "itself and repairs nothing between them";
  }
  return out;
}

}  // namespace ddp
