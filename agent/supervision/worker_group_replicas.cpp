// WorkerGroup, replicas: what the workers found comparing their replicas
// (--verify-every; the replicas block of their heartbeat slots), read on
// the monitor's beat. Every rank writes each verdict alike; it is told once
// (the console, the event log), and a worker found apart a second time,
// which its Healer repaired again but which cannot be trusted, is replaced
// through a heal, at a beat when every worker is inside a step (as a
// straggler is).
#include "agent/supervision/worker_group.h"
#include "agent/supervision/worker_group_worker.h"

#include <cstring>
#include <spdlog/spdlog.h>

#include "channel/event_log.h"

namespace ddprun {
namespace {

const char* verdict_name(uint32_t v) {
  switch (static_cast<channel::ReplicaVerdict>(v)) {
    case channel::ReplicaVerdict::kRepaired: return "repaired";
    case channel::ReplicaVerdict::kNoMajority: return "no_majority";
    case channel::ReplicaVerdict::kByDesign: return "by_design";
    case channel::ReplicaVerdict::kStopped: return "stopped";
    case channel::ReplicaVerdict::kNone: break;
  }
  return "none";
}

}  // namespace

void WorkerGroup::check_replicas() {
  if (!options_.heartbeats) return;
  for (size_t i = 0; i < workers_.size(); ++i) {
    Worker& w = *workers_[i];
    if (!policy_->alive(static_cast<int>(i))) continue;
    const int local_rank = w.launch->id.local_rank;
    channel::ReplicaReport r;
    if (!options_.heartbeats->replicas(local_rank, &r) || r.verdicts <= w.replica_verdicts) continue;
    w.replica_verdicts = r.verdicts;
    const std::string text(r.text, strnlen(r.text, sizeof(r.text)));
    // Told once: every rank of the job writes the same verdict (and ranks
    // of different kinds are told to differ once an attempt).
    const bool by_design = r.verdict == static_cast<uint32_t>(channel::ReplicaVerdict::kByDesign);
    const std::string key = by_design ? "by design" : std::to_string(r.verdict) + "@" + std::to_string(r.verdict_step);
    if (replica_verdicts_told_.insert(key).second) {
      if (r.verdict == static_cast<uint32_t>(channel::ReplicaVerdict::kNoMajority) ||
          r.verdict == static_cast<uint32_t>(channel::ReplicaVerdict::kStopped)) {
        spdlog::error("replicas: {}", text);
      } else {
        spdlog::warn("replicas: {}", text);
      }
      if (options_.events) {
        options_.events->write(channel::events::kReplicas, {{"attempt", options_.attempt},
                                                             {"step", r.verdict_step},
                                                             {"verdict", verdict_name(r.verdict)},
                                                             {"detail", text}});
      }
    }
    if (r.self == static_cast<uint32_t>(channel::ReplicaSelf::kReplace)) w.apart_to_replace = true;
  }
  // A worker apart twice: replaced at a beat when every worker is inside a
  // step (a heal is handled there), as a straggler is.
  for (size_t i = 0; i < workers_.size(); ++i) {
    Worker& w = *workers_[i];
    const int wi = static_cast<int>(i);
    if (!w.apart_to_replace || !policy_->alive(wi) || policy_->stopping()) continue;
    if (policy_->finishing_job()) {
      // Its state was repaired; past the last step there is nothing left
      // to train with it.
      w.apart_to_replace = false;
      spdlog::info("rank {} was apart from the other replicas twice; the job is finishing, so it is not replaced "
                   "(it holds the majority's state)", w.launch->id.rank);
      continue;
    }
    const auto action = policy_->straggler_action(wi, /*load_explains=*/false, /*replace=*/true,
                                                  options_.heartbeats->all_in_step());
    if (action == GroupPolicy::StragglerAction::kWait) continue;
    w.apart_to_replace = false;
    const std::string why = "apart from the other replicas a second time (its Healer took the majority's state "
                            "again, but the process cannot be trusted)";
    auto kill = policy_->step(group_event::Replace{wi, group_event::Replace::kApart, why},
                              std::chrono::steady_clock::now())
                    .commands;
    if (kill.empty()) {
      spdlog::warn("rank {} is {}; it is not replaced: {}", w.launch->id.rank, why,
                   policy_->heals_ran_out(wi)
                       ? "its heals ran out (--max-heals " + std::to_string(options_.max_heals) + ")"
                       : std::string("not every worker can heal around it now"));
    } else if (options_.events) {
      options_.events->write(channel::events::kReplicas, {{"attempt", options_.attempt},
                                                           {"verdict", "replace"},
                                                           {"rank", w.launch->id.rank},
                                                           {"local_rank", w.launch->id.local_rank},
                                                           {"detail", why}});
    }
    execute(kill);
  }
}

}  // namespace ddprun
