#include "rendezvous/server/control_plane_host.h"

#include <algorithm>

#include "rendezvous/server/job_state.h"
#include "rendezvous/server/term_lease.h"

namespace ddprun {

ControlPlaneHost::ControlPlaneHost(ControlPlane& plane, std::string job_id, std::string node_id, OnEvent on_event)
    : plane_(plane), job_id_(std::move(job_id)), node_id_(std::move(node_id)), on_event_(std::move(on_event)) {}

ControlPlaneHost::~ControlPlaneHost() { stop(); }

void ControlPlaneHost::start(JobRegistry& registry, std::string address) {
  {
    // The service is up already: its calls may ask meanwhile.
    std::lock_guard lock(mu_);
    registry_ = &registry;
    address_ = std::move(address);
  }
  thread_ = std::thread([this] { loop(); });
}

void ControlPlaneHost::stop() {
  {
    std::lock_guard lock(mu_);
    stop_ = true;
  }
  stop_cv_.notify_all();
  if (thread_.joinable()) thread_.join();
  std::thread refresher;
  {
    std::lock_guard lock(cache_mu_);
    refresh_stop_ = true;
    refresher = std::move(refresher_);
  }
  if (refresher.joinable()) refresher.join();
}

int64_t ControlPlaneHost::term() const {
  std::lock_guard lock(mu_);
  return serving_locked(Clock::now()) ? term_ : 0;
}

std::pair<std::string, int64_t> ControlPlaneHost::serving_as() const {
  std::lock_guard lock(mu_);
  if (!serving_locked(Clock::now())) return {"", 0};
  return {node_id_, term_};
}

std::string ControlPlaneHost::last_term_end() const {
  std::lock_guard lock(mu_);
  return last_term_end_;
}

std::string ControlPlaneHost::last_error() const {
  std::lock_guard lock(mu_);
  return last_error_;
}

bool ControlPlaneHost::wait_stop(std::chrono::milliseconds d) {
  std::unique_lock lock(mu_);
  return stop_cv_.wait_for(lock, d, [this] { return stop_; });
}

std::optional<ControlLeader> ControlPlaneHost::leader() {
  std::unique_lock lock(cache_mu_);
  if (!asked_once_) {
    // The first answer is waited for: there is nothing else to give.
    asked_once_ = true;
    try {
      cached_leader_ = plane_.leader();
    } catch (const std::exception&) {
      // Out of reach: no leader known yet; the next call asks again.
    }
    cached_at_ = Clock::now();
    return cached_leader_;
  }
  // After that the last answer is given at once, and a stale one is asked
  // again on a thread of its own: the service's handlers never wait on the
  // control plane (etcd out of reach waits out its call timeout, and every
  // call to this service would wait with it).
  if (Clock::now() - cached_at_ >= kLeaderFresh && !refreshing_ && !refresh_stop_) {
    refreshing_ = true;
    if (refresher_.joinable()) refresher_.join();  // done: refreshing_ was false
    refresher_ = std::thread([this] {
      std::optional<ControlLeader> l;
      bool answered = true;
      try {
        l = plane_.leader();
      } catch (const std::exception&) {
        answered = false;  // out of reach for now: the last answer stands
      }
      std::lock_guard done(cache_mu_);
      if (answered) cached_leader_ = l;
      cached_at_ = Clock::now();
      refreshing_ = false;
    });
  }
  return cached_leader_;
}

std::optional<std::string> ControlPlaneHost::leader_elsewhere(const std::string& job_id) {
  if (job_id != job_id_) return std::string();  // this service is its own job's only
  std::string own;
  {
    std::lock_guard lock(mu_);
    if (serving_locked(Clock::now())) return std::nullopt;
    own = address_;
  }
  const std::optional<ControlLeader> l = leader();
  // Itself while it does not serve (its term lapsed, the key has not
  // expired yet): nobody to send the client to.
  if (!l || l->address == own) return std::string();
  return l->address;
}

bool ControlPlaneHost::commit(const std::string& job_id, bool force) {
  std::shared_ptr<StateSaver> saver;
  {
    std::lock_guard lock(mu_);
    if (job_id != job_id_ || !serving_locked(Clock::now())) return false;
    saver = saver_;
  }
  // The revision is read before the change is numbered: the save that
  // includes the change reads the state after it, at this revision or later.
  const uint64_t revision = registry_->revision(job_id);
  {
    std::lock_guard lock(mu_);
    if (!force && revision <= committed_revision_) return true;  // saved already
  }
  if (!saver->wait_saved(saver->changed(), plane_.ttl())) return false;
  std::lock_guard lock(mu_);
  committed_revision_ = std::max(committed_revision_, revision);
  return serving_locked(Clock::now());
}

void ControlPlaneHost::resign(int64_t term) {
  try {
    plane_.resign(term);
  } catch (const std::exception&) {
    // The control plane is out of reach: the term's lease runs out by itself.
  }
}

void ControlPlaneHost::loop() {
  while (true) {
    std::optional<int64_t> term;
    try {
      term = plane_.campaign(address_, node_id_, [this] {
        std::lock_guard lock(mu_);
        return stop_;
      });
    } catch (const std::exception& e) {
      {
        std::lock_guard lock(mu_);
        last_error_ = e.what();
      }
      on_event_(ControlPlaneEvent{ControlPlaneEvent::Kind::kError, 0, e.what(), ""});
      if (wait_stop(plane_.ttl() / 3)) return;
      continue;
    }
    {
      std::lock_guard lock(mu_);
      last_error_.clear();
    }
    if (!term) return;
    lead(*term);
    std::lock_guard lock(mu_);
    if (stop_) return;
  }
}

void ControlPlaneHost::lead(int64_t term) {
  const auto ttl = plane_.ttl();
  const std::string term_text = "term " + std::to_string(term);
  // 1. The term is valid for a ttl from a renewal sent now (etcd counts
  //    from when it gets it, which is later).
  auto sent = Clock::now();
  std::string why;
  std::string predecessor;
  try {
    if (!plane_.renew(term)) why = term_text + " ended as it began";
    // 2. The job as the last leader saved it (its node stays: see the top).
    if (why.empty()) {
      if (const std::optional<std::string> saved = plane_.load()) {
        registry_->drop_job(job_id_);  // anything left from an earlier term of ours
        registry_->restore_job(*saved, &predecessor);
      }
    }
  } catch (const std::exception& e) {
    why = std::string("cannot take over: ") + e.what();
  }
  if (!why.empty()) {
    resign(term);
    on_event_(ControlPlaneEvent{ControlPlaneEvent::Kind::kStopped, term, why, ""});
    wait_stop(ttl / 3);
    return;
  }
  auto saver = std::make_shared<StateSaver>(*registry_, plane_, job_id_, term, node_id_);
  TermLease lease(term, ttl, sent);
  {
    std::lock_guard lock(mu_);
    term_ = term;
    valid_until_ = lease.valid_until();
    saver_ = saver;
    committed_revision_ = registry_->revision(job_id_);  // what was restored is saved
  }
  // The predecessor's node stays (see the top), but its host may say at
  // once that its agent is gone: then waiting out its lease buys nothing.
  if (!predecessor.empty() && predecessor != node_id_) registry_->probe_node(job_id_, predecessor);
  on_event_(ControlPlaneEvent{ControlPlaneEvent::Kind::kLeads, term, "", predecessor});

  // 3. Renew every third of a ttl; stop serving once a ttl passed without
  //    a renewal (serving_locked checks the clock on every call too).
  bool stopping = false;
  while (why.empty()) {
    if (wait_stop(lease.renew_every())) {
      stopping = true;
      why = "the agent stops";
      break;
    }
    sent = Clock::now();
    auto renewal = TermLease::Renewal::kUnanswered;
    std::string error;
    try {
      renewal = plane_.renew(term) ? TermLease::Renewal::kGranted : TermLease::Renewal::kRefused;
    } catch (const std::exception& e) {
      error = e.what();
    }
    const bool fenced = saver->fenced();
    why = lease.after_renewal(renewal, sent, Clock::now(), error, fenced, fenced ? saver->last_error() : "");
    std::lock_guard lock(mu_);
    valid_until_ = lease.valid_until();
  }
  {
    std::lock_guard lock(mu_);
    term_ = 0;
    saver_.reset();
    if (!stopping) last_term_end_ = term_text + " ended: " + why;
  }
  saver.reset();  // a save in flight ends first
  registry_->drop_job(job_id_);  // its parked calls go to the next leader
  if (stopping) resign(term);
  on_event_(ControlPlaneEvent{ControlPlaneEvent::Kind::kStopped, term, why, ""});
}

}  // namespace ddprun
