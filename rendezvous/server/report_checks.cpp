#include "rendezvous/server/report_checks.h"

#include <cmath>
#include <string>
#include <utility>

namespace ddprun {
namespace {

// A replica verdict's line, as a worker's heartbeat slot holds it
// (channel::kReplicaTextBytes, less its NUL).
constexpr size_t kMaxReplicaVerdictBytes = 399;
// The most ranks a node's collectives report may name.
constexpr int kMaxReportedRanks = 4096;

}  // namespace

MaybeStatus check_progress(const v1::Progress& p) {
  auto negative = [](const char* field, int64_t v) -> MaybeStatus {
    if (v < 0) return invalid_argument(std::string("progress ") + field + " " + std::to_string(v) + " is negative");
    return std::nullopt;
  };
  for (auto [field, v] : {std::pair<const char*, int64_t>{"step", p.step()},
                          {"total_steps", p.total_steps()},
                          {"epoch", p.epoch()},
                          {"samples", p.samples()},
                          {"saved_step", p.saved_step()},
                          {"restored_step", p.restored_step()},
                          {"global_rank", p.global_rank()},
                          {"slowest_rank", p.slowest_rank()},
                          {"verify_every", p.verify_every()},
                          {"replicas_agreed_step", p.replicas_agreed_step()},
                          {"round", p.round()}}) {
    if (auto bad = negative(field, v)) return bad;
  }
  if (!std::isfinite(p.samples_per_sec()) || p.samples_per_sec() < 0) {
    return invalid_argument("progress samples_per_sec " + std::to_string(p.samples_per_sec()) +
                            " is not a rate");
  }
  if (!std::isfinite(p.slowest_score()) || p.slowest_score() < 0 || p.slowest_score() > 1) {
    return invalid_argument("progress slowest_score " + std::to_string(p.slowest_score()) + " is not in [0, 1]");
  }
  if (auto bad = check_duration("progress age_ms", p.age_ms())) return bad;
  if (p.replica_verdict().size() > kMaxReplicaVerdictBytes) {
    return invalid_argument("progress replica_verdict is " + std::to_string(p.replica_verdict().size()) +
                            " bytes; at most " + std::to_string(kMaxReplicaVerdictBytes));
  }
  return std::nullopt;
}


MaybeStatus check_collectives(const v1::NodeCollectives& c) {
  if (c.ranks_size() > kMaxReportedRanks) {
    return invalid_argument("collectives name " + std::to_string(c.ranks_size()) + " ranks; at most " +
                            std::to_string(kMaxReportedRanks));
  }
  if (auto bad = check_duration("collectives age_ms", c.age_ms())) return bad;
  for (const auto& r : c.ranks()) {
    if (r.global_rank() < 0) return invalid_argument("collectives global_rank " + std::to_string(r.global_rank()) + " is negative");
    if (r.comm() > 1) return invalid_argument("collectives comm " + std::to_string(r.comm()) + " is not 0 or 1");
    if (auto bad = check_duration("collectives rank age_ms", r.age_ms())) return bad;
  }
  for (auto [field, v] : {std::pair<const char*, double>{"wait_ms", c.wait_ms()}, {"period_ms", c.period_ms()}}) {
    if (!std::isfinite(v) || v < 0 || v > 8.64e7) {
      return invalid_argument(std::string("collectives ") + field + " " + std::to_string(v) + " is not a duration");
    }
  }
  if (c.samples() < 0) return invalid_argument("collectives samples " + std::to_string(c.samples()) + " is negative");
  if (c.slowest_rank() < 0) return invalid_argument("collectives slowest_rank " + std::to_string(c.slowest_rank()) + " is negative");
  if (!std::isfinite(c.slowest_score()) || c.slowest_score() < 0 || c.slowest_score() > 1) {
    return invalid_argument("collectives slowest_score " + std::to_string(c.slowest_score()) + " is not in [0, 1]");
  }
  return std::nullopt;
}

}  // namespace ddprun
