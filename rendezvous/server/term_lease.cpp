#include "rendezvous/server/term_lease.h"

#include <cstdio>

namespace ddprun {
namespace {

std::string seconds_text(std::chrono::milliseconds d) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%.1f s", static_cast<double>(d.count()) / 1000.0);
  return buf;
}

}  // namespace

TermLease::TermLease(int64_t term, std::chrono::milliseconds ttl, Clock::time_point sent)
    : term_(term), ttl_(ttl), valid_until_(sent + ttl) {}

std::string TermLease::after_renewal(Renewal r, Clock::time_point sent, Clock::time_point now,
                                     const std::string& error, bool fenced, const std::string& fence_error) {
  if (r == Renewal::kRefused) return "the control plane says " + term_text() + " is over";
  if (r == Renewal::kGranted) {
    valid_until_ = sent + ttl_;
  } else if (now >= valid_until_) {
    return "no renewal of " + term_text() + " for " + seconds_text(ttl_) + " (" + error + ")";
  }
  if (fenced) return fence_error;
  return "";
}

}  // namespace ddprun
