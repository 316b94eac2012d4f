#include "rendezvous/server/state_saver.h"

namespace ddprun {

StateSaver::StateSaver(JobRegistry& registry, ControlPlane& plane, std::string job_id, int64_t term,
                       std::string node_id)
    : registry_(registry), plane_(plane), job_id_(std::move(job_id)), term_(term), node_id_(std::move(node_id)) {
  thread_ = std::thread([this] { loop(); });
}

StateSaver::~StateSaver() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  wake_.notify_all();
  thread_.join();
}

uint64_t StateSaver::changed() {
  uint64_t n;
  {
    std::lock_guard lock(mu_);
    n = ++changes_;
  }
  wake_.notify_one();
  return n;
}

bool StateSaver::wait_saved(uint64_t n, std::chrono::milliseconds timeout) {
  std::unique_lock lock(mu_);
  saved_.wait_for(lock, timeout, [&] { return saved_up_to_ >= n || fenced_ || stop_; });
  return saved_up_to_ >= n && !fenced_;
}

bool StateSaver::fenced() const {
  std::lock_guard lock(mu_);
  return fenced_;
}

uint64_t StateSaver::saves() const {
  std::lock_guard lock(mu_);
  return saves_;
}

std::string StateSaver::last_error() const {
  std::lock_guard lock(mu_);
  return last_error_;
}

void StateSaver::loop() {
  std::unique_lock lock(mu_);
  for (;;) {
    // A failed save (etcd unreachable for a moment) is tried again within
    // a third of the leader's ttl, as long as changes wait.
    const auto retry = plane_.ttl() / 3;
    if (last_error_.empty()) {
      wake_.wait(lock, [&] { return stop_ || fenced_ || changes_ > saved_up_to_; });
    } else {
      wake_.wait_for(lock, retry, [&] { return stop_ || fenced_; });
    }
    if (stop_ || fenced_) return;
    if (changes_ <= saved_up_to_) continue;
    // Every change numbered up to here is in the state read below.
    const uint64_t upto = changes_;
    lock.unlock();
    bool ok = false, refused = false;
    std::string error;
    try {
      const std::optional<std::string> state = registry_.save_job(job_id_, node_id_, term_);
      ok = !state || plane_.save(term_, *state);  // no job yet: nothing to save
      refused = !ok;
    } catch (const std::exception& e) {
      error = e.what();
    }
    lock.lock();
    if (ok) {
      saved_up_to_ = upto;
      ++saves_;
      last_error_.clear();
    } else if (refused) {
      fenced_ = true;
      last_error_ = "term " + std::to_string(term_) + " is over: another agent leads the control plane";
    } else {
      last_error_ = error;
    }
    saved_.notify_all();
  }
}

}  // namespace ddprun
