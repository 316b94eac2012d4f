#include "rendezvous/server/registry.h"

#include <algorithm>
#include <ctime>
#include <future>

#include "rendezvous/server/job_state.h"
#include "rendezvous/server/node_scores.h"

namespace ddprun {
namespace {

using Clock = std::chrono::steady_clock;

// The timer thread wakes at least this often, and a wake-up later than
// asked by more than kLateWake is taken as a stall of this process.
constexpr auto kStallProbe = std::chrono::milliseconds(250);
constexpr auto kLateWake = std::chrono::milliseconds(50);
// The newest heal generations whose store keys a round keeps.
constexpr int64_t kKeptHealGenerations = 4;

// "12:00:01.234" (local time) for a steady-clock instant in the past.
std::string wall_time(Clock::time_point t) {
  const auto ago = Clock::now() - t;
  const auto wall = std::chrono::system_clock::now() -
                    std::chrono::duration_cast<std::chrono::system_clock::duration>(ago);
  const std::time_t secs = std::chrono::system_clock::to_time_t(wall);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(wall.time_since_epoch()).count() % 1000;
  std::tm tm{};
  localtime_r(&secs, &tm);
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%02d:%02d:%02d.%03d", tm.tm_hour, tm.tm_min, tm.tm_sec,
                static_cast<int>(ms));
  return buf;
}

template <typename E>
JoinOutcome failure(const std::string& message) {
  return JoinOutcome{std::nullopt, std::make_exception_ptr(E(message))};
}

}  // namespace

JobRegistry::JobRegistry(IdSource id_source, ServiceLimits limits)
    : id_source_(std::move(id_source)), limits_(limits) {
  timer_ = std::thread([this] { timer_loop(); });
  probe_ = std::make_unique<LivenessProbe>([this](const std::string& job, const std::string& node,
                                                  const std::string& address) {
    // The host refused: nothing listens where the agent did. Gone - unless
    // it spoke again meanwhile (then the refusal was of another process).
    std::vector<Completion> completions;
    {
      std::lock_guard lock(mu_);
      if (closed_) return;
      Job* j = find_locked(job);
      if (!j || !j->rounds || !j->rounds->silent_since_closed(node)) return;
      const auto now = Clock::now();
      j->rounds->lose(node, "its host refused connections at " + address + " where its agent listened (the "
                                "agent is gone), after its connection to the rendezvous closed",
                      now);
      settle_locked(*j, now, completions);
    }
    wake_timer_.notify_all();
    run(completions);
  }, [this](const std::string& job, const std::string& node) {
    std::lock_guard lock(mu_);
    Job* j = closed_ ? nullptr : find_locked(job);
    return j && j->rounds && j->rounds->silent_since_closed(node);
  });
}

JobRegistry::~JobRegistry() {
  probe_.reset();
  close();
  if (timer_.joinable()) timer_.join();
}

bool JobRegistry::idle(const Job& job) {
  if (!job.parked.empty()) return false;
  return !job.rounds || job.rounds->num_nodes() == 0;
}

JobRegistry::Job& JobRegistry::job_locked(const std::string& job_id) {
  if (Job* job = find_locked(job_id)) return *job;
  if (jobs_.size() >= limits_.max_jobs) {
    // Make room: jobs that are over or abandoned are forgotten (a late
    // node of a forgotten job starts it afresh).
    std::erase_if(jobs_, [](const auto& kv) {
      if (!idle(*kv.second)) return false;
      kv.second->store->close();
      return true;
    });
  }
  if (jobs_.size() >= limits_.max_jobs) {
    throw TooManyJobs("rendezvous: cannot start job '" + job_id + "': this rendezvous serves " +
                      std::to_string(jobs_.size()) + " jobs already, at most " +
                      std::to_string(limits_.max_jobs) + " (raise --rdzv-conf max_jobs)");
  }
  auto job = std::make_unique<Job>();
  job->id = job_id;
  job->store = std::make_shared<MemoryStore>(
      StoreQuota{limits_.max_job_keys, limits_.max_job_bytes, "--rdzv-conf max_job_keys",
                 "--rdzv-conf max_job_bytes"});
  return *jobs_.emplace(job_id, std::move(job)).first->second;
}

JobRegistry::Job* JobRegistry::find_locked(const std::string& job_id) {
  auto it = jobs_.find(job_id);
  return it == jobs_.end() ? nullptr : it->second.get();
}

void JobRegistry::run(std::vector<Completion>& done) {
  for (auto& c : done) {
    if (c.nccl && c.outcome.result) {
      // The first join of the round to get here makes the id; the others
      // of that round wait for it in call_once (only they, not the registry).
      RoundNcclId& n = *c.nccl;
      std::call_once(n.once, [&] {
        try {
          n.id = id_source_();
        } catch (const std::exception& e) {
          n.error = e.what();
        }
      });
      n.made.store(true, std::memory_order_release);
      c.outcome.result->nccl_id = n.id;
      c.outcome.result->nccl_id_error = n.error;
    }
    c.done(std::move(c.outcome));
  }
  done.clear();
}

std::shared_ptr<MemoryStore> JobRegistry::store(const std::string& job_id,
                                               std::optional<int64_t> round) {
  std::lock_guard lock(mu_);
  if (closed_) throw RegistryClosed("rendezvous: shutting down");
  Job* found = find_locked(job_id);
  if (!found) {
    throw UnknownJob("rendezvous: no job '" + job_id +
                     "' here (a job starts when its first agent joins; is the job id right?)");
  }
  Job& job = *found;
  if (job.rounds && job.rounds->phase() != JobPhase::kActive && idle(job)) {
    throw JobEnded("rendezvous: " + job.rounds->end_message());
  }
  if (round && job.rounds && *round != job.rounds->current_round()) {
    throw RendezvousError("rendezvous: round " + std::to_string(*round) + " of job '" + job_id +
                          "' is over; the job is in round " +
                          std::to_string(job.rounds->current_round()));
  }
  return job.store;
}

bool JobRegistry::drop_node(const std::string& job_id, const std::string& node_id, const std::string& why) {
  std::vector<Completion> completions;
  {
    std::lock_guard lock(mu_);
    Job* job = find_locked(job_id);
    if (!job || !job->rounds || !job->rounds->knows(node_id)) return false;
    const auto now = Clock::now();
    job->rounds->lose(node_id, why, now);
    job->holds.erase(node_id);
    settle_locked(*job, now, completions);
  }
  wake_timer_.notify_all();
  run(completions);
  return true;
}

void JobRegistry::drop_job(const std::string& job_id) {
  std::vector<Completion> completions;
  std::unique_ptr<Job> gone;
  {
    std::lock_guard lock(mu_);
    auto it = jobs_.find(job_id);
    if (it == jobs_.end()) return;
    gone = std::move(it->second);
    jobs_.erase(it);
    // Store waits fail (the store is closed); so do parked joins: their
    // clients ask their own agent's rendezvous where the job went.
    gone->store->close();
    for (auto& [node, p] : gone->parked) {
      tickets_.erase(p.ticket);
      completions.push_back(Completion{std::move(p.done),
                                       failure<NotServedHere>("control plane: job '" + job_id +
                                                              "' is no longer served here")});
    }
    gone->parked.clear();
  }
  run(completions);
}

size_t JobRegistry::num_jobs() {
  std::lock_guard lock(mu_);
  return jobs_.size();
}

std::shared_ptr<JobRegistry::RoundNcclId> JobRegistry::round_nccl_id_locked(Job& job) {
  const RoundState& rounds = *job.rounds;
  if (job.nccl_round != rounds.current_round()) {
    job.nccl_round = rounds.current_round();
    job.nccl = rounds.wants_nccl_id() ? std::make_shared<RoundNcclId>() : nullptr;
  }
  return job.nccl;
}

std::string JobRegistry::timeout_message_locked(const Job& job, const Parked& p) const {
  const RoundState& r = *job.rounds;
  const RoundSettings& s = r.settings();
  std::string m = "rendezvous: round " + std::to_string(r.current_round()) + " of job '" +
                  job.id + "' did not close within " +
                  std::to_string(p.timeout.count() / 1000.0).substr(0, 6) + " s: ";
  if (r.closed() || r.num_members() >= static_cast<size_t>(s.max_nodes)) {
    m += "the job already runs its " + std::to_string(s.max_nodes) +
         " node(s) (--nnodes max), so node '" + p.node_id + "' waited for a free place";
  } else {
    m += std::to_string(r.num_members()) + " of the " + std::to_string(s.min_nodes) +
         " node(s) needed joined (--nnodes " + std::to_string(s.min_nodes) + ":" +
         std::to_string(s.max_nodes) + ")";
  }
  if (!r.lost().empty()) {
    m += "; lost:";
    for (const auto& l : r.lost()) {
      m += " '" + l.node_id + "' (" + l.host + ", last seen " + wall_time(l.last_seen) + ")";
    }
  }
  return m + "; to wait longer raise --rdzv-conf join_timeout=SECONDS";
}

void JobRegistry::news_locked(Job& job, std::vector<Completion>& out) {
  const RoundState& r = *job.rounds;
  const NewsKey now{r.current_round(), r.closed(), r.phase(), r.heal_generation(), r.num_waiting()};
  if (!(now == job.news) || r.generation() != job.revised_at) {
    ++job.revision;
    job.revised_at = r.generation();
  }
  if (now == job.news) return;
  job.news = now;
  for (const auto& [ticket, watcher] : news_watchers_) {
    if (watcher.first != job.id) continue;
    // A completion with no join behind it: run() calls it outside the lock.
    out.push_back(Completion{[nudge = watcher.second](JoinOutcome) { nudge(); }, JoinOutcome{}});
  }
}

uint64_t JobRegistry::watch_news(const std::string& job_id, Nudge nudge) {
  std::lock_guard lock(mu_);
  const uint64_t ticket = next_ticket_++;
  news_watchers_[ticket] = {job_id, std::move(nudge)};
  return ticket;
}

void JobRegistry::unwatch_news(uint64_t ticket) {
  std::lock_guard lock(mu_);
  news_watchers_.erase(ticket);
}

void JobRegistry::settle_locked(Job& job, Clock::time_point now, std::vector<Completion>& out, bool expire_leases) {
  RoundState& rounds = *job.rounds;
  rounds.advance(now, expire_leases);
  news_locked(job, out);
  // A node that left or was lost: the end of a Hold it opened before says
  // nothing about it if it comes back (its agent opens another).
  std::erase_if(job.holds, [&](const auto& h) { return !rounds.knows(h.first); });
  // Keys of rounds that are over are never read again: free them.
  if (rounds.current_round() > job.store_round) {
    for (int64_t r = job.store_round; r < rounds.current_round(); ++r) {
      job.store->erase_prefix(round_key_prefix(r) + "/");
    }
    job.store_round = rounds.current_round();
    job.store_heal_generation = 1;
  }
  // So are those of heal generations long past (world.cpp's "heal<G>/"
  // keys: each generation's vote and Gloo addresses, a few KB): every rank
  // of a generation has connected or given it up before its peers go
  // several generations further. Without this the serving node's memory
  // grew with every heal of a long round.
  const int64_t keep_from = static_cast<int64_t>(rounds.heal_generation()) - kKeptHealGenerations + 1;
  for (; job.store_heal_generation < keep_from; ++job.store_heal_generation) {
    job.store->erase_prefix(round_key_prefix(rounds.current_round()) + "/heal" +
                            std::to_string(job.store_heal_generation) + "/");
  }
  // A job that is over and that every node has left keeps no keys.
  auto free_if_over = [&] {
    if (rounds.phase() != JobPhase::kActive && idle(job)) job.store->close();
  };
  // Parked joins can only move when the rounds changed or one is due.
  if (now < job.next_due && job.settled_generation == rounds.generation()) return free_if_over();
  job.settled_generation = rounds.generation();
  job.next_due = Clock::time_point::max();

  for (auto it = job.parked.begin(); it != job.parked.end();) {
    Parked& p = it->second;
    JoinOutcome outcome;
    bool finished = true;
    std::shared_ptr<RoundNcclId> nccl;
    if (rounds.phase() != JobPhase::kActive) {
      job.told_end.insert(p.node_id);
      outcome = failure<JobEnded>("rendezvous: " + rounds.end_message());
    } else if (auto a = rounds.assignment(p.node_id)) {
      nccl = round_nccl_id_locked(job);  // the id itself is made by run()
      outcome.result = JoinResult{*a, {}, {}, rounds.lease_key(p.node_id)};
    } else if (!rounds.knows(p.node_id)) {
      outcome = failure<RendezvousError>("rendezvous: node '" + p.node_id +
                                         "' was dropped from job '" + job.id +
                                         "': its lease ran out; join again");
    } else if (now >= p.deadline) {
      outcome = failure<JoinTimeout>(timeout_message_locked(job, p));
    } else {
      finished = false;
    }
    if (finished) {
      tickets_.erase(p.ticket);
      out.push_back(Completion{std::move(p.done), std::move(outcome), std::move(nccl)});
      it = job.parked.erase(it);
    } else {
      job.next_due = std::min(job.next_due, p.deadline);
      ++it;
    }
  }
  free_if_over();
}

uint64_t JobRegistry::join_async(JoinCall call, JoinDone done) {
  std::vector<Completion> completions;
  uint64_t ticket = 0;
  {
    std::lock_guard lock(mu_);
    try {
      if (closed_) throw RegistryClosed("rendezvous: shutting down");
      Job& job = job_locked(call.job_id);
      if (!job.rounds) job.rounds.emplace(call.settings);
      if (job.rounds->phase() != JobPhase::kActive) job.told_end.insert(call.node.node_id);  // its join says so
      const auto now = Clock::now();
      job.rounds->check_lease(call.node.node_id, call.lease_key);  // nobody joins as another node
      job.rounds->join(call.node, call.settings, call.intent, call.lease, now, call.lease_key);
      // A node has one join in flight: a newer one replaces an older one.
      const std::string& node_id = call.node.node_id;
      if (auto old = job.parked.find(node_id); old != job.parked.end()) {
        tickets_.erase(old->second.ticket);
        completions.push_back(Completion{std::move(old->second.done),
                                         failure<RendezvousError>("rendezvous: node '" + node_id +
                                                                  "' joined again; this join is void")});
        job.parked.erase(old);
      }
      ticket = next_ticket_++;
      const auto deadline = now + call.timeout;
      job.parked[node_id] = Parked{ticket, node_id, deadline, call.timeout, std::move(done)};
      job.next_due = std::min(job.next_due, deadline);
      tickets_[ticket] = {call.job_id, node_id};
      // Its join may have closed the round (or superseded a running one).
      settle_locked(job, now, completions);
    } catch (...) {
      completions.push_back(Completion{std::move(done), JoinOutcome{std::nullopt, std::current_exception()}});
    }
  }
  wake_timer_.notify_all();
  run(completions);
  return ticket;
}

bool JobRegistry::cancel(uint64_t ticket) {
  std::vector<Completion> completions;
  {
    std::lock_guard lock(mu_);
    auto it = tickets_.find(ticket);
    if (it == tickets_.end()) return false;
    const auto [job_id, node_id] = it->second;
    tickets_.erase(it);
    if (Job* job = find_locked(job_id)) {
      job->parked.erase(node_id);
      // A node that stops waiting for its round is not in it any more.
      const auto now = Clock::now();
      job->rounds->leave(node_id, LeaveKind::kStopped, "", now);
      settle_locked(*job, now, completions);
    }
  }
  run(completions);
  return true;
}

JoinResult JobRegistry::join(JoinCall call) {
  std::promise<JoinOutcome> promise;
  auto future = promise.get_future();
  join_async(std::move(call), [&promise](JoinOutcome o) { promise.set_value(std::move(o)); });
  JoinOutcome o = future.get();
  if (o.error) std::rethrow_exception(o.error);
  return std::move(*o.result);
}

NodeView JobRegistry::keep_alive(const std::string& job_id, const std::string& node_id,
                                 const std::string& lease_key, int64_t workers_heal_round,
                                 const HealRequest& heal) {
  std::vector<Completion> completions;
  NodeView v;
  {
    std::lock_guard lock(mu_);
    if (closed_) throw RegistryClosed("rendezvous: shutting down");
    Job* job = find_locked(job_id);
    if (!job || !job->rounds) {
      v.known = false;
      return v;
    }
    job->rounds->check_lease(node_id, lease_key);
    const auto now = Clock::now();
    settle_locked(*job, now, completions);
    v = job->rounds->keep_alive(node_id, now, workers_heal_round, heal);
    score_nodes_locked(*job, now);
    if (auto sc = job->scores.find(node_id); sc != job->scores.end() && sc->second.straggler) {
      v.straggler_score = sc->second.score;
    }
    if (v.phase != JobPhase::kActive) job->told_end.insert(node_id);
    news_locked(*job, completions);  // a heal generation named for this node
  }
  run(completions);
  return v;
}

void JobRegistry::leave(const std::string& job_id, const std::string& node_id, const std::string& lease_key,
                        LeaveKind kind, const std::string& message, std::optional<int64_t> round) {
  std::vector<Completion> completions;
  {
    std::lock_guard lock(mu_);
    if (closed_) throw RegistryClosed("rendezvous: shutting down");
    Job* job = find_locked(job_id);
    if (!job || !job->rounds) return;
    job->rounds->check_lease(node_id, lease_key);
    const auto now = Clock::now();
    job->rounds->leave(node_id, kind, message, now, round);
    settle_locked(*job, now, completions);
  }
  wake_timer_.notify_all();
  run(completions);
}

uint64_t JobRegistry::hold_opened(const std::string& job_id, const std::string& node_id) {
  std::lock_guard lock(mu_);
  const uint64_t id = next_hold_++;
  if (Job* job = find_locked(job_id)) job->holds[node_id] = id;
  return id;
}

void JobRegistry::connection_lost(const std::string& job_id, const std::string& node_id, uint64_t hold) {
  std::vector<Completion> completions;
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    Job* job = find_locked(job_id);
    if (!job || !job->rounds) return;
    // Only the node's newest Hold speaks for its agent.
    auto newest = job->holds.find(node_id);
    if (newest == job->holds.end() || newest->second != hold) return;
    job->holds.erase(newest);
    job->rounds->connection_closed(node_id, Clock::now());
    probe_->ask(job_id, node_id, job->rounds->probe_address(node_id));
  }
  wake_timer_.notify_all();
  run(completions);
}

void JobRegistry::probe_node(const std::string& job_id, const std::string& node_id) {
  std::lock_guard lock(mu_);
  Job* job = find_locked(job_id);
  if (!job || !job->rounds) return;
  job->rounds->connection_closed(node_id, Clock::now());
  probe_->ask(job_id, node_id, job->rounds->probe_address(node_id));
}

bool JobRegistry::holds(const std::string& job_id, const std::string& node_id, const std::string& lease_key) {
  std::lock_guard lock(mu_);
  Job* job = find_locked(job_id);
  if (!job || !job->rounds || !job->rounds->knows(node_id)) return false;
  job->rounds->check_lease(node_id, lease_key);
  return true;
}

size_t JobRegistry::nodes_in_all_jobs() {
  std::lock_guard lock(mu_);
  const auto now = Clock::now();
  size_t n = 0;
  for (const auto& [id, job] : jobs_) {
    if (!job->rounds) continue;
    n += job->rounds->num_nodes();
    if (job->rounds->phase() == JobPhase::kActive) continue;
    std::set<std::string> waiting;  // each node once, however often it was lost
    for (const LostNode& l : job->rounds->lost()) {
      if (l.lease.count() > 0 && now < l.dropped_at + 2 * l.lease && !job->told_end.count(l.node_id) &&
          !job->rounds->knows(l.node_id)) {
        waiting.insert(l.node_id);
      }
    }
    n += waiting.size();
  }
  return n;
}

// Ends last-call windows, leases and join timeouts: sleeps until the
// earliest of them (or until a call changes the picture), then settles.
void JobRegistry::timer_loop() {
  std::unique_lock lock(mu_);
  std::vector<Completion> completions;
  std::optional<Clock::time_point> asked;  // the wake-up the last wait asked for
  while (!closed_) {
    const auto now = Clock::now();
    // Woken past the time it asked for: this process did not run meanwhile
    // (a loaded machine, a pause). Leases would run out for the silence of
    // nodes whose keep-alives wait, unread, in our sockets: excuse it.
    if (asked && now > *asked + kLateWake) {
      const auto late = std::chrono::duration_cast<std::chrono::milliseconds>(now - *asked);
      for (auto& [id, job] : jobs_) {
        if (job->rounds) job->rounds->excuse(late, now);
      }
    }
    asked.reset();
    std::optional<Clock::time_point> wake;
    auto consider = [&](Clock::time_point t) {
      if (!wake || t < *wake) wake = t;
    };
    for (auto& [id, job] : jobs_) {
      if (!job->rounds) continue;
      settle_locked(*job, now, completions, /*expire_leases=*/true);
      if (auto d = job->rounds->next_deadline()) consider(*d);
      if (!job->parked.empty()) consider(job->next_due);
    }
    if (!completions.empty()) {
      lock.unlock();
      run(completions);
      lock.lock();
      continue;
    }
    // Never longer than kStallProbe, so a stall is measured while it ends.
    consider(now + kStallProbe);
    asked = *wake;
    wake_timer_.wait_until(lock, *wake);
  }
}

void JobRegistry::close() {
  std::vector<Completion> completions;
  {
    std::lock_guard lock(mu_);
    if (closed_) return;
    closed_ = true;
    for (auto& [id, job] : jobs_) {
      job->store->close();
      for (auto& [node, p] : job->parked) {
        completions.push_back(Completion{std::move(p.done),
                                         failure<RegistryClosed>("rendezvous: shutting down")});
      }
      job->parked.clear();
    }
    tickets_.clear();
  }
  wake_timer_.notify_all();
  run(completions);
}

}  // namespace ddprun
