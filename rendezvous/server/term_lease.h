// How long a control-plane leader may serve on its renewals, as a pure
// state machine (ControlPlaneHost sends the renewals and reads the clock).
// A term is valid for a ttl from the moment a renewal that succeeded was
// *sent* (the control plane counts from when it got it, which is later), so
// a process paused past its term serves nothing from it; the term ends when
// the control plane refuses a renewal (another leader), when a ttl passed
// since the last renewal granted (the control plane is out of reach long
// enough that another may lead), or when a save was refused (fenced).
#pragma once

#include <chrono>
#include <cstdint>
#include <string>

namespace ddprun {

class TermLease {
 public:
  using Clock = std::chrono::steady_clock;
  enum class Renewal { kGranted, kRefused, kUnanswered };

  // The first renewal of term `term`, sent at `sent`, was granted.
  TermLease(int64_t term, std::chrono::milliseconds ttl, Clock::time_point sent);

  // A renewal sent at `sent` came back (`error`: why it went unanswered)
  // and it is `now`: why the term ends, or "" while it goes on. `fenced`:
  // a save was refused (`fence_error` says why).
  std::string after_renewal(Renewal r, Clock::time_point sent, Clock::time_point now, const std::string& error,
                            bool fenced = false, const std::string& fence_error = "");
  // Serving only before this (checked on every answer).
  Clock::time_point valid_until() const { return valid_until_; }
  bool valid(Clock::time_point now) const { return now < valid_until_; }
  std::string term_text() const { return "term " + std::to_string(term_); }
  // Renewals go out every third of a ttl.
  std::chrono::milliseconds renew_every() const { return ttl_ / 3; }

 private:
  int64_t term_;
  std::chrono::milliseconds ttl_;
  Clock::time_point valid_until_;
};

}  // namespace ddprun
