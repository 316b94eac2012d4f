// Asks a node's host whether its agent still lives, when the node's
// connection to the rendezvous closed: one TCP connect to the address the
// agent listens on (NodeSpec::probe_address: its own rendezvous service, or
// a socket it keeps for this). A closed connection proves nothing (a blip,
// a reconnect, a new leader), and the node stays until its lease runs out;
// but a refused connect is the host's own word that nothing listens there
// any more - the agent's process is gone - and then waiting out the lease
// buys nothing. No answer (the host is down, the link cut) and an accepted
// connect (the agent lives) change nothing: the lease decides.
//
// A process that dies closes its connections and its listening socket in
// no fixed order: a probe right after the connection closed may still find
// the socket there, and on a loaded machine a dying process may take
// seconds to let go of it. An accepted probe is asked again after 50 ms,
// 0.25 s and then every second (kRetries) for as long as the node stays
// silent (still_silent): until its socket is gone, it speaks, or its lease
// runs out.
//
// One thread of its own: the asker (a gRPC handler) never waits; at most one
// probe per node is pending.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <set>
#include <string>
#include <thread>

namespace ddprun {

enum class Liveness { kRefused, kAccepted, kNoAnswer };

// One connect to "host:port" (numeric IPv4 or IPv6 host), waiting up to timeout.
Liveness probe_address(const std::string& address, std::chrono::milliseconds timeout);

class LivenessProbe {
 public:
  // on_refused(job, node, address) runs on the probe's thread for every
  // probe whose connect the host refused.
  using OnRefused = std::function<void(const std::string&, const std::string&, const std::string&)>;
  // still_silent(job, node): whether asking again is still worth it.
  using StillSilent = std::function<bool(const std::string&, const std::string&)>;
  explicit LivenessProbe(OnRefused on_refused, StillSilent still_silent,
                         std::chrono::milliseconds timeout = std::chrono::milliseconds(1000));
  static constexpr std::chrono::milliseconds kRetries[] = {
      std::chrono::milliseconds(50), std::chrono::milliseconds(250), std::chrono::milliseconds(1000)};
  ~LivenessProbe();  // stops the thread; pending probes are dropped
  LivenessProbe(const LivenessProbe&) = delete;
  LivenessProbe& operator=(const LivenessProbe&) = delete;

  void ask(const std::string& job_id, const std::string& node_id, const std::string& address);

 private:
  using Clock = std::chrono::steady_clock;
  struct Ask {
    std::string job, node, address;
    Clock::time_point not_before{};
    size_t tries = 0;
  };
  void loop();
  OnRefused on_refused_;
  StillSilent still_silent_;
  std::chrono::milliseconds timeout_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Ask> queue_;
  std::set<std::pair<std::string, std::string>> pending_;  // (job, node)
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ddprun
