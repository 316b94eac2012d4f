// Where a job's control plane (its rendezvous: rounds, leases, heal
// generations, store) is elected and keeps its state, so that losing the
// agent that hosts it costs what losing any node costs.
//
// Contract of every backend:
//   - campaign() returns a term to at most one candidate at a time, and a
//     later leader's term is higher than every earlier one's;
//   - save(term, ...) writes only while `term` leads (a fence: a leader that
//     was paused or cut off past its lease writes nothing once another
//     leads), and load() returns what the newest leader saved;
//   - leadership lasts while renew() succeeds at least once a ttl; a leader
//     that cannot renew for a ttl must stop serving (it is fenced: another
//     may lead by then).
// The replication and the election come from a proven consensus system
// (etcd: etcd_control_plane.h), never from a protocol of our own.
#pragma once

#include <chrono>
#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <vector>

namespace ddprun {

struct ControlLeader {
  std::string address;  // where it serves the rendezvous, host:port
  std::string node_id;  // the node whose agent hosts it
  int64_t term = 0;
};

class ControlPlane {
 public:
  virtual ~ControlPlane() = default;
  // Blocks until this candidate leads (its term) or stop() says to give up
  // (nullopt); stop is asked at least every few hundred milliseconds.
  virtual std::optional<int64_t> campaign(const std::string& address, const std::string& node_id,
                                          const std::function<bool()>& stop) = 0;
  // Who leads now (nullopt: nobody).
  virtual std::optional<ControlLeader> leader() = 0;
  // Blocks until the leader of `term` is gone (true) or timeout passes.
  virtual bool wait_leader_gone(int64_t term, std::chrono::milliseconds timeout) = 0;
  // Keeps the leadership of `term`; false once it is lost.
  virtual bool renew(int64_t term) = 0;
  // Steps down (a clean exit): the next candidate leads at once.
  virtual void resign(int64_t term) = 0;
  // The job's state, written by the leader of `term`; false (nothing
  // written) once another leads.
  virtual bool save(int64_t term, const std::string& state) = 0;
  // What the newest leader saved (nullopt: nothing yet).
  virtual std::optional<std::string> load() = 0;
  // How long a leader lasts without a renewal.
  virtual std::chrono::milliseconds ttl() const = 0;
  // Services that may know the leader when this member does not (the
  // embedded plane's voters); empty where every member can ask the backend.
  virtual std::vector<std::string> candidates() { return {}; }
};

}  // namespace ddprun
