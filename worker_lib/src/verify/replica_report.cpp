#include "verify/replica_report.h"

#include <algorithm>
#include <cstdio>
#include <cstring>

#include "base/heartbeat.h"

namespace ddp {

ReplicaReporter::ReplicaReporter(Heartbeat* heartbeat, int rank, int64_t every) : heartbeat_(heartbeat), rank_(rank) {
  report_.every = static_cast<uint32_t>(std::clamp<int64_t>(every, 0, UINT32_MAX));
}

void ReplicaReporter::compared(bool agreed, int64_t step) {
  ++report_.checks;
  if (agreed && step >= 0) report_.agreed_step = std::max(report_.agreed_step, step);
  publish();
}

void ReplicaReporter::verdict(ddprun::channel::ReplicaVerdict verdict, ddprun::channel::ReplicaSelf self,
                              int64_t step, const std::string& text) {
  ++report_.verdicts;
  report_.verdict = static_cast<uint32_t>(verdict);
  report_.self = static_cast<uint32_t>(self);
  report_.verdict_step = step;
  std::memset(report_.text, 0, sizeof(report_.text));
  std::memcpy(report_.text, text.data(), std::min(text.size(), sizeof(report_.text) - 1));
  publish();
  // Under ddprun its agent says it (once for the job); without one, rank 0.
  if ((!heartbeat_ || !heartbeat_->has_slot()) && rank_ == 0) std::fprintf(stderr, "ddp: replicas: %s\n", text.c_str());
}

void ReplicaReporter::publish() {
  if (heartbeat_) heartbeat_->report_replicas(report_);
}

}  // namespace ddp
