// One agent's part in its job's control plane (control_plane.h), for jobs
// that have one (--rdzv-backend etcd or embedded): every agent runs a
// rendezvous service and campaigns. The leader
//   1. serves the job from the state its predecessor saved, every node's
//      lease started afresh. The predecessor's node stays in the job: a
//      term also ends when its leader was only slow (a loaded machine, a
//      pause, a blip), and that agent goes on as a member whose service
//      sends its calls here. If it is gone, its lease runs out like any
//      node's, or sooner if its host refuses a connect where it listened
//      (JobRegistry::probe_node);
//   2. saves each change before anyone hears of it (commit(), StateSaver);
//   3. renews its term every ttl/3 and stops serving as soon as a ttl has
//      passed since the last renewal that succeeded - by its own clock,
//      checked before every answer, so a process that was paused past its
//      term answers nothing from it - or when the control plane says the
//      term is over, or refuses a save. It then campaigns again, and its
//      node is a member like any other.
// Every other agent's service answers with the leader's address
// (serving_gate.h), and clients follow it there.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <optional>
#include <string>
#include <thread>

#include "rendezvous/control_plane/control_plane.h"
#include "rendezvous/server/registry.h"
#include "rendezvous/server/serving_gate.h"
#include "rendezvous/server/state_saver.h"

namespace ddprun {

// What happened to this agent's part, for its log and event log.
struct ControlPlaneEvent {
  enum class Kind {
    kLeads,     // this agent serves the job from now on (term)
    kStopped,   // it stopped serving (term, why)
    kError,     // the control plane could not be reached (why); it tries again
  };
  Kind kind = Kind::kError;
  int64_t term = 0;
  std::string detail;
  std::string predecessor;  // kLeads: the node whose state it took over ("": none)
};

class ControlPlaneHost final : public ServingGate {
 public:
  using OnEvent = std::function<void(const ControlPlaneEvent&)>;
  // on_event runs on the host's thread.
  ControlPlaneHost(ControlPlane& plane, std::string job_id, std::string node_id, OnEvent on_event);
  ~ControlPlaneHost() override;  // stop()
  ControlPlaneHost(const ControlPlaneHost&) = delete;
  ControlPlaneHost& operator=(const ControlPlaneHost&) = delete;

  // Starts campaigning: `registry` is the one this agent's service serves
  // from, `address` where that service listens (host:port).
  void start(JobRegistry& registry, std::string address);
  // Stops campaigning; a leader stops serving and resigns, so that the next
  // candidate leads at once.
  void stop();
  // The term this agent leads and serves now (0: none).
  int64_t term() const;
  // Why this agent's last term ended while it still ran ("" if none did):
  // for its log. The node is still in the job.
  std::string last_term_end() const;
  // Why the control plane could not be reached the last time it was tried
  // (its campaign failed: etcd out of reach), "" once it answered again.
  std::string last_error() const;
  // Who leads, never waiting on the control plane but the first time: the
  // last answer, asked again (on a thread of its own) once it is older
  // than kLeaderFresh.
  std::optional<ControlLeader> leader();
  static constexpr std::chrono::milliseconds kLeaderFresh{100};

  std::optional<std::string> leader_elsewhere(const std::string& job_id) override;
  bool commit(const std::string& job_id, bool force) override;
  std::pair<std::string, int64_t> serving_as() const override;
  std::vector<std::string> candidates() override { return plane_.candidates(); }
  std::string job() const override { return job_id_; }

 private:
  using Clock = std::chrono::steady_clock;
  void loop();
  // Serves term `term` until it ends or stop().
  void lead(int64_t term);
  bool serving_locked(Clock::time_point now) const { return term_ != 0 && now < valid_until_; }
  // Hands the term on at once (or, out of reach, at its lease's end).
  void resign(int64_t term);
  // Waits up to `d`; true when stop() came.
  bool wait_stop(std::chrono::milliseconds d);

  ControlPlane& plane_;
  const std::string job_id_;
  const std::string node_id_;
  OnEvent on_event_;
  JobRegistry* registry_ = nullptr;
  std::string address_;

  mutable std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  int64_t term_ = 0;               // leading and serving (0: not)
  Clock::time_point valid_until_;  // serving only before this
  std::shared_ptr<StateSaver> saver_;
  uint64_t committed_revision_ = 0;  // the registry's revision known saved
  std::string last_term_end_;  // see last_term_end()
  std::string last_error_;     // see last_error()

  std::mutex cache_mu_;  // guards the cache and its refresher
  std::optional<ControlLeader> cached_leader_;
  Clock::time_point cached_at_{};
  bool asked_once_ = false;
  bool refreshing_ = false;   // the refresher asks now
  bool refresh_stop_ = false;  // stop(): no more refreshes
  std::thread refresher_;

  std::thread thread_;
};

}  // namespace ddprun
