// Whether this process serves a job's rendezvous now, for a handler whose
// jobs have a control plane (control_plane.h): every agent runs a
// rendezvous service, and only the elected leader's serves the job. The
// others answer each call with where the leader is (UNAVAILABLE, the
// leader's address in the "ddprun-leader" trailer), and clients follow.
//
// Contract: a handler with a gate asks serving() before it touches a job,
// and commit() after a change and before it answers anything that names it
// (an assignment, a heal generation, a store write): a successor never
// serves an older state than some agent has heard. commit() false means
// this process no longer leads: the caller answers as serving() would.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ddprun {

class ServingGate {
 public:
  virtual ~ServingGate() = default;
  // nullopt when this process serves the job now; else where the leader
  // serves it ("" while nobody leads).
  virtual std::optional<std::string> leader_elsewhere(const std::string& job_id) = 0;
  // Blocks until the job's state as it is now is saved where a successor
  // finds it. force: the change is one the registry's revision does not
  // show (a store write).
  virtual bool commit(const std::string& job_id, bool force) = 0;
  // This process's node and term while it serves (`ddprun status` shows
  // them); {"", 0} otherwise.
  virtual std::pair<std::string, int64_t> serving_as() const = 0;
  // Services that can answer for the job when this one cannot reach its
  // leader (the embedded control plane's voters); agents learn them in
  // their keep-alives. Empty by default.
  virtual std::vector<std::string> candidates() { return {}; }
  // The one job this service's control plane runs ("": any). Calls for
  // another job are refused outright (the caller's endpoint is another
  // job's), not redirected nor served.
  virtual std::string job() const { return ""; }
};

}  // namespace ddprun
