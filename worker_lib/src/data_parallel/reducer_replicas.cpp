// Reducer, replicas: DistributedDataParallel's comparison of the ranks'
// parameters for a program without a ddp::Healer (DdpOptions::verify_every).
// Nothing here can repair a replica apart (the optimizer's state is the
// program's): every rank stops alike with ReplicasDiffer, the World's
// Checkpointer sets aside what it wrote since the replicas last agreed (when
// rank 0's was apart, or no majority says), and a restart resumes from a
// checkpoint they agreed on. A program with a Healer compares there, with
// repairs, and this stays quiet.
#include "ddp/reducer.h"

#include "ddp/launch_info.h"
#include "ddp/replicas.h"
#include "verify/hardware_kind.h"
#include "verify/replica_check.h"
#include "verify/replica_report.h"

namespace ddp {

void Reducer::verify_if_due() {
  if (options_.verify_every <= 0 || !options_.verify_comm) return;
  if (options_.replicas && options_.replicas->compared_by_healer()) return;
  if (++forwards_ % options_.verify_every != 0) return;
  compare_replicas_now();
}

void Reducer::compare_replicas_now() {
  using ddprun::channel::ReplicaSelf;
  using ddprun::channel::ReplicaVerdict;
  Communicator& comm = *options_.verify_comm;
  if (!reporter_) {
    reporter_ = std::make_shared<ReplicaReporter>(options_.heartbeat.get(), comm.rank(), options_.verify_every);
    if (options_.launch) {
      hardware_kind_ = hardware_kind(*options_.launch, params_.empty() ? at::Device(at::kCPU) : params_[0].tensor.device());
    }
  }
  ReplicaCheckInput in;
  in.tensors = params_;
  in.what = "parameters";
  in.unit = "forward pass";
  in.step = forwards_;
  in.hardware_kind = hardware_kind_;
  in.node_rank = options_.launch ? options_.launch->group_rank : 0;
  const ReplicaComparison found = compare_replicas(comm, in);
  if (found.by_design && !told_by_design_) {
    told_by_design_ = true;
    reporter_->verdict(ReplicaVerdict::kByDesign, ReplicaSelf::kAgrees, -1, found.by_design_text);
  }
  if (found.outcome == ReplicaComparison::Outcome::kAgree) {
    if (options_.replicas) options_.replicas->agreed(-1);
    reporter_->compared(/*agreed=*/true, -1);
    return;
  }
  reporter_->compared(/*agreed=*/false, -1);
  std::vector<int> apart;
  for (const auto& r : found.repairs) apart.insert(apart.end(), r.apart.begin(), r.apart.end());
  const std::string text =
      found.text + "; without a ddp::Healer nothing repairs a replica here: every rank stops, and a restart "
                   "(--max-restarts) resumes from the newest checkpoint written when the replicas last agreed";
  reporter_->verdict(ReplicaVerdict::kStopped, found.self_apart ? ReplicaSelf::kApart : ReplicaSelf::kAgrees, -1, text);
  if (options_.replicas) options_.replicas->found_apart(-1, apart);  // its Checkpointer sets aside what it must
  throw ReplicasDiffer("ddp: " + text, -1, options_.replicas ? options_.replicas->agreed_step() : -1);
}

}  // namespace ddp
