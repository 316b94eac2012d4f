// Reducer, replicas: at the start, every rank the same model and the same
// parameters (checked, or broadcast from rank 0); then DistributedDataParallel's
// comparison of the ranks' parameters for a program without a ddp::Healer
// (DdpOptions::verify_every).
// Nothing here can repair a replica apart (the optimizer's state is the
// program's): every rank stops alike with ReplicasDiffer, the World's
// Checkpointer sets aside what it wrote since the replicas last agreed (when
// rank 0's was apart, or no majority says), and a restart resumes from a
// checkpoint they agreed on. A program with a Healer compares there, with
// repairs, and this stays quiet.
#include "ddp/reducer.h"

#include <torch/torch.h>

#include <algorithm>
#include <functional>
#include <sstream>
#include <stdexcept>
#include <string>

#include "ddp/launch_info.h"
#include "ddp/replicas.h"
#include "verify/hardware_kind.h"
#include "verify/replica_check.h"
#include "verify/replica_report.h"

namespace ddp {
namespace {

// The small tensors the Reducer's own checks exchange live where its
// communicator takes tensors: the parameters' device (NCCL refuses CPU
// tensors). Gathered results come back to the CPU for reading.
at::Tensor on_params_device(const std::vector<NamedTensor>& params, const at::Tensor& t) {
  return params.empty() ? t : t.to(params.front().tensor.device());
}

}  // namespace

// Every rank must hold the same parameters in the same order, or the
// Reducer's collectives would pair up the wrong tensors (or hang).
void Reducer::check_same_model() {
  std::ostringstream sig;
  for (const auto* list : {&params_, &buffers_}) {
    for (const auto& t : *list) {
      sig << t.name << ':' << t.tensor.sizes() << ':' << t.tensor.scalar_type() << ';';
    }
  }
  const int64_t mine = static_cast<int64_t>(std::hash<std::string>{}(sig.str()) >> 1);
  const at::Tensor all = comm_.all_gather(on_params_device(params_, at::full({1}, mine, at::kLong))).cpu();
  for (int r = 0; r < comm_.size(); ++r) {
    if (all[r].item<int64_t>() != all[0].item<int64_t>()) {
      throw std::runtime_error("ddp: rank " + std::to_string(r) +
                               " has a model of different structure (parameter and buffer names, "
                               "shapes or dtypes) than rank 0; every rank must build the same model");
    }
  }
}

void Reducer::broadcast_state(const std::vector<NamedTensor>& tensors) {
  at::NoGradGuard no_grad;
  for (const auto& t : tensors) {
    at::Tensor data = t.tensor.detach();
    comm_.broadcast(data, 0);
  }
}

// Compares every parameter with rank 0's and, if any differs anywhere,
// throws on every rank with the same message.
void Reducer::verify_params() {
  at::NoGradGuard no_grad;
  int64_t first_bad = -1;
  double max_diff = 0;
  for (size_t i = 0; i < params_.size(); ++i) {
    at::Tensor mine = params_[i].tensor.detach();
    at::Tensor rank0 = mine.clone();
    comm_.broadcast(rank0, 0);
    if (first_bad < 0 && !at::equal(mine, rank0)) {
      first_bad = static_cast<int64_t>(i);
      max_diff = (mine.to(at::kDouble) - rank0.to(at::kDouble)).abs().max().item<double>();
    }
  }
  const at::Tensor report = at::tensor({static_cast<double>(first_bad), max_diff}, at::kDouble);
  const at::Tensor all = comm_.all_gather(on_params_device(params_, report)).cpu();  // [ranks, 2]
  int64_t worst = -1;  // the lowest parameter index that differs anywhere
  for (int r = 0; r < comm_.size(); ++r) {
    const auto idx = static_cast<int64_t>(all[r][0].item<double>());
    if (idx >= 0 && (worst < 0 || idx < worst)) worst = idx;
  }
  if (worst < 0) return;
  std::string ranks;
  double diff = 0;
  for (int r = 0; r < comm_.size(); ++r) {
    if (static_cast<int64_t>(all[r][0].item<double>()) == worst) {
      ranks += (ranks.empty() ? "" : ", ") + std::to_string(r);
      diff = std::max(diff, all[r][1].item<double>());
    }
  }
  std::ostringstream msg;
  msg << "ddp: parameter '" << params_[worst].name << "' differs between rank 0 and rank(s) "
      << ranks << " (max difference " << diff
      << "); seed every rank the same (torch::manual_seed) before building the model, or "
         "construct DistributedDataParallel with InitSync::kBroadcast";
  throw std::runtime_error(msg.str());
}


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
