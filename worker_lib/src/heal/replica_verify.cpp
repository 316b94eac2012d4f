// The Healer's replicas compared (ddp/healer.h, ddp/replicas.h): when a
// comparison is due, what is compared, the repair of a rank apart, the stop
// when no majority agrees.
#include <torch/torch.h>

#include <algorithm>
#include <map>
#include <stdexcept>

#include "base/heartbeat.h"
#include "ddp/healer.h"
#include "ddp/training_state.h"
#include "heal/healer_parts.h"
#include "verify/hardware_kind.h"
#include "verify/replica_check.h"
#include "verify/replica_report.h"

namespace ddp {

using healer_parts::Clock;
using healer_parts::pack_counters;
using healer_parts::seconds_since;
using healer_parts::unpack_counters;

void Healer::verify_if_due(int64_t start) {
  const int64_t step = *state_.step;
  if (verify_every_ <= 0 || step <= start) return;  // off, or no optimizer step in this call
  const bool periodic = step % verify_every_ == 0;
  const bool after_heal = verify_after_ >= 0 && step > verify_after_;
  if (!periodic && !after_heal) return;
  verify_after_ = -1;
  verify(/*whole_state=*/false, /*with_buffers=*/false);
}

// Every rank of a heal comes here alike (the survivors in heal(), a
// replacement in its constructor): the state that went across is compared
// whole, and the parameters again after the next step, where a heal that
// left the ranks' steps apart in any other way (DDP's buckets, a generator)
// shows first.
void Healer::verify_after_heal(bool sent) {
  if (verify_every_ <= 0) return;
  verify(/*whole_state=*/true, /*with_buffers=*/sent);
  verify_after_ = *state_.step;
}

// The tensors compared, in an order every rank derives alike: the
// parameters by name, the buffers, then the optimizer's state, named after
// the parameter it belongs to.
std::vector<NamedTensor> Healer::replica_tensors(bool whole_state, bool with_buffers) const {
  std::vector<NamedTensor> out;
  std::map<const c10::TensorImpl*, std::string> name_of;
  for (const auto& p : state_.module->named_parameters(/*recurse=*/true)) {
    out.push_back({p.key(), p.value()});
    name_of[p.value().unsafeGetTensorImpl()] = p.key();
  }
  if (with_buffers) {
    for (const auto& b : state_.module->named_buffers(/*recurse=*/true)) out.push_back({b.key(), b.value()});
  }
  if (!whole_state) return out;
  const TrainingState state =
      capture_state(*state_.module, *state_.optimizer, *state_.step, 0, 0, nullptr, StateTensors::kShare);
  std::vector<std::string> param_names;
  for (const auto& group : state_.optimizer->param_groups()) {
    for (const auto& p : group.params()) {
      auto n = name_of.find(p.unsafeGetTensorImpl());
      param_names.push_back(n != name_of.end() ? n->second : "parameter " + std::to_string(param_names.size()));
    }
  }
  for (size_t i = 0; i < state.optimizer.params.size(); ++i) {
    const std::string& param = i < param_names.size() ? param_names[i] : "parameter " + std::to_string(i);
    for (const auto& [key, t] : state.optimizer.params[i]) out.push_back({"optimizer state of " + param + " (" + key + ")", t});
  }
  if (!state.optimizer.archive.empty()) {
    const auto& a = state.optimizer.archive;
    out.push_back({"optimizer state (" + state.optimizer.kind + ")",
                   at::from_blob(const_cast<char*>(a.data()), {static_cast<int64_t>(a.size())}, at::kByte).clone()});
  }
  at::Tensor lr = at::tensor(state.optimizer.lr, at::kDouble);
  out.push_back({"optimizer learning rates", lr});
  return out;
}

void Healer::verify(bool whole_state, bool with_buffers) {
  const auto begin = Clock::now();
  struct Timed {
    Clock::time_point begin;
    double& total;
    ~Timed() { total += seconds_since(begin); }
  } timed{begin, report_.verify_seconds};
  ReplicaCheckInput in;
  in.tensors = replica_tensors(whole_state, with_buffers);
  in.what = !whole_state ? "parameters" : with_buffers ? "state" : "parameters and optimizer state";
  in.step = *state_.step;
  in.hardware_kind = hardware_kind_;
  in.node_rank = world_.info().group_rank;
  const ReplicaComparison found = compare_replicas(world_.cpu(), in);
  ++report_.checks;
  if (found.by_design && !told_by_design_) {
    told_by_design_ = true;
    reporter_->verdict(ddprun::channel::ReplicaVerdict::kByDesign, ddprun::channel::ReplicaSelf::kAgrees, in.step,
                       found.by_design_text);
  }
  switch (found.outcome) {
    case ReplicaComparison::Outcome::kNoMajority:
      stop_apart(found.text);
    case ReplicaComparison::Outcome::kApart:
      repair(found);
      break;
    case ReplicaComparison::Outcome::kAgree:
      break;
  }
  world_.replicas().agreed(in.step);
  report_.verified_step = in.step;
  reporter_->compared(/*agreed=*/true, in.step);
}

// Each kind's ranks apart take the state of the lowest rank of its
// majority, as a replacement takes a survivor's; the majority keeps its
// own. Then the state is compared again: it must agree now.
void Healer::repair(const ReplicaComparison& found) {
  const int me = world_.rank();
  if (found.self_apart) ++apart_;
  const bool replace = found.self_apart && apart_ >= 2;
  std::string action;
  for (const auto& r : found.repairs) {
    action += (action.empty() ? "" : ", ") + std::string(r.apart.size() == 1 ? "rank " : "ranks ") + rank_list(r.apart) +
              (r.apart.size() == 1 ? " takes" : " take") + " rank " + std::to_string(r.source) + "'s state";
  }
  std::string text = found.text + "; repaired: " + action;
  if (replace) {
    text += "; rank " + std::to_string(me) + " was apart before, so ddprun replaces its process (it cannot be trusted)";
  }
  std::vector<int> apart;
  for (const auto& r : found.repairs) apart.insert(apart.end(), r.apart.begin(), r.apart.end());
  world_.replicas().found_apart(*state_.step, apart);  // a checkpoint of a rank apart is set aside
  {
    // A repair may write this rank's tensors: a checkpoint still copying
    // them in the background finishes first.
    world_.state_fence().wait();
    // The ranks apart take the majority's tensors; where their loop stands
    // and their generator are their own (the same as the majority's in a
    // loop that draws alike on every rank; a rank's own stream otherwise).
    const int64_t heal_bytes = report_.bytes;
    const at::Tensor own_counters = pack_counters(state_);
    const at::Tensor own_rng = at::detail::getDefaultCPUGenerator().get_state();
    for (const auto& r : found.repairs) {
      const bool behind = std::find(r.apart.begin(), r.apart.end(), me) != r.apart.end();
      send_state(r.source, behind, /*fresh=*/false, /*keep_own=*/true, nullptr);
    }
    unpack_counters(own_counters, state_);
    {
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(own_rng);
    }
    rng_next_step_ = at::Tensor();
    report_.bytes = heal_bytes;
    ++report_.repairs;
  }
  ReplicaCheckInput again;
  again.tensors = replica_tensors(/*whole_state=*/true, /*with_buffers=*/false);
  again.what = "parameters and optimizer state";
  again.step = *state_.step;
  again.hardware_kind = hardware_kind_;
  again.node_rank = world_.info().group_rank;
  const ReplicaComparison confirmed = compare_replicas(world_.cpu(), again);
  ++report_.checks;
  if (confirmed.outcome != ReplicaComparison::Outcome::kAgree) {
    stop_apart(confirmed.text + " right after a repair (the state a rank received does not hold there)");
  }
  // Told once the ranks agree again: a rank to be replaced is killed after
  // the comparison, not in the middle of it.
  using ddprun::channel::ReplicaSelf;
  reporter_->verdict(ddprun::channel::ReplicaVerdict::kRepaired,
                     replace ? ReplicaSelf::kReplace : found.self_apart ? ReplicaSelf::kApart : ReplicaSelf::kAgrees,
                     *state_.step, text);
}

// No majority to repair from: every rank stops alike. The checkpoints
// written since the replicas last agreed are set aside (the World's
// Checkpointer listens), and the failure is no peer's to heal around.
void Healer::stop_apart(const std::string& found) {
  const int64_t agreed = world_.replicas().agreed_step();
  const std::string text =
      found + "; no majority to repair from: every rank stops, and a restart (--max-restarts) resumes from the "
              "newest checkpoint written when the replicas last agreed" +
      (agreed >= 0 ? " (step " + std::to_string(agreed) + " or before)" : "");
  reporter_->verdict(ddprun::channel::ReplicaVerdict::kNoMajority, ddprun::channel::ReplicaSelf::kAgrees, *state_.step,
                     text);
  world_.replicas().found_apart(*state_.step, {});
  world_.heartbeat_handle()->set_heal_ready(false);
  throw ReplicasDiffer("ddp: " + text, *state_.step, agreed);
}

}  // namespace ddp
