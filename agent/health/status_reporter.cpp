#include "agent/health/status_reporter.h"

#include <spdlog/spdlog.h>

#include <cmath>
#include <cstring>
#include <ctime>

#include "agent/base/monotonic_clock.h"

namespace ddprun {
namespace {

// The report of p, read at now_ns; `before` (if any) gives the rate.
ProgressInfo to_info(const channel::Progress& p, const channel::Progress* before, int64_t now_ns) {
  using P = channel::Progress;
  ProgressInfo i;
  if (p.flags & P::kHasStep) i.step = p.step;
  if (p.flags & P::kHasTotalSteps) i.total_steps = p.total_steps;
  if (p.flags & P::kHasEpoch) i.epoch = p.epoch;
  if (p.flags & P::kHasLoss) i.loss = p.loss;
  if (p.flags & P::kHasSaved) i.saved_step = p.saved_step;
  if (p.flags & P::kHasRestored) i.restored_step = p.restored_step;
  i.samples = p.samples > 0 ? p.samples : 0;
  if (before && p.samples > before->samples && before->samples > 0 &&
      p.updated_ns > before->updated_ns) {
    i.samples_per_sec = static_cast<double>(p.samples - before->samples) * 1e9 /
                        static_cast<double>(p.updated_ns - before->updated_ns);
  }
  // A worker's clock is this machine's: how old its report is now.
  if (p.updated_ns > 0 && p.updated_ns <= now_ns) {
    i.age = std::chrono::milliseconds((now_ns - p.updated_ns) / 1'000'000);
  }
  return i;
}

}  // namespace

StatusReporter::StatusReporter(RendezvousClient& client, const HeartbeatTable& table,
                               StatusReporterOptions options)
    : client_(client), table_(table), options_(std::move(options)) {
  thread_ = std::thread([this] { loop(); });
}

StatusReporter::~StatusReporter() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void StatusReporter::watch(int64_t round, int slot, int global_rank) {
  std::lock_guard lock(mu_);
  round_ = round;
  slot_ = global_rank == 0 ? slot : -1;
  global_rank_ = global_rank;
}

void StatusReporter::unwatch() {
  std::lock_guard lock(mu_);
  slot_ = -1;
  slowest_.reset();
  collectives_.reset();
}

void StatusReporter::set_collectives(NodeCollectives collectives) {
  std::lock_guard lock(mu_);
  collectives_ = std::move(collectives);
  collectives_at_ = std::chrono::steady_clock::now();
}

void StatusReporter::set_slowest(std::optional<StragglerScores::Slowest> slowest) {
  std::lock_guard lock(mu_);
  slowest_ = slowest;
}

namespace {

// Whether two views of the slowest rank differ enough to be news (a
// hundredth of the score, as `ddprun status` prints it).
bool differs(const std::optional<StragglerScores::Slowest>& a, const std::optional<StragglerScores::Slowest>& b) {
  if (a.has_value() != b.has_value()) return true;
  if (!a) return false;
  return a->rank != b->rank || a->straggler != b->straggler || std::lround(a->score * 100) != std::lround(b->score * 100);
}

}  // namespace

bool StatusReporter::changed(const channel::Progress& p, uint32_t g) const {
  if (p.flags == 0) return false;  // nothing reported (yet, or since the reset)
  return !sent_any_ || g != last_generation_ || std::memcmp(&p, &last_, sizeof(p)) != 0 || differs(slowest_, last_slowest_);
}

void StatusReporter::loop() {
  std::unique_lock lock(mu_);
  while (!stop_) {
    cv_.wait_for(lock, options_.interval, [this] { return stop_; });
    if (stop_) continue;
    channel::Progress p{};
    channel::ReplicaReport replicas{};
    std::optional<ProgressInfo> info;
    const uint32_t generation = slot_ >= 0 ? table_.heal_generation(slot_) : 0;
    if (slot_ >= 0) table_.replicas(slot_, &replicas);  // mid-write: as zeros, next time whole
    if (slot_ >= 0 && table_.progress(slot_, &p) &&
        (changed(p, generation) || replicas.verdicts != last_replica_verdicts_)) {
      info = to_info(p, sent_any_ ? &last_ : nullptr, monotonic_ns());
      info->round = round_;
      info->global_rank = global_rank_;
      info->heal_generation = generation;
      if (slowest_) {
        info->slowest_rank = slowest_->rank;
        info->slowest_score = slowest_->score;
        info->slowest_is_straggler = slowest_->straggler;
      }
      info->verify_every = replicas.every;
      if (replicas.agreed_step >= 0) info->replicas_agreed_step = replicas.agreed_step;
      info->replica_verdicts = replicas.verdicts;
      info->replica_verdict.assign(replicas.text, strnlen(replicas.text, sizeof(replicas.text)));
    }
    const auto slowest = slowest_;
    std::optional<NodeCollectives> collectives = std::move(collectives_);
    collectives_.reset();
    if (collectives) {
      collectives->age =
          std::chrono::duration_cast<std::chrono::milliseconds>(std::chrono::steady_clock::now() - collectives_at_);
    }
    if (!info && !collectives) continue;
    lock.unlock();
    bool sent = true;
    try {
      client_.report_progress(options_.job_id, options_.node_id, info, options_.call_timeout, collectives);
    } catch (const RendezvousCallError& e) {
      spdlog::debug("{}", e.what());  // tried again next interval (the collectives as they stand then)
      sent = false;
    }
    lock.lock();
    if (sent && info) {
      last_ = p;
      last_generation_ = generation;
      last_slowest_ = slowest;
      last_replica_verdicts_ = replicas.verdicts;
      sent_any_ = true;
    }
  }
}

}  // namespace ddprun
