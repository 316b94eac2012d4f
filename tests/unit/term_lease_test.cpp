// How long a control-plane leader serves on its renewals (term_lease.h),
// with a fake clock.
#include <gtest/gtest.h>

#include "rendezvous/server/term_lease.h"

namespace ddprun {
namespace {

using namespace std::chrono_literals;
using Renewal = TermLease::Renewal;
const TermLease::Clock::time_point kSent{};

// Valid for a ttl from when the granted renewal was sent, not from when its
// answer came: a leader paused after sending serves nothing it should not.
TEST(TermLease, ATermIsValidForATtlFromWhenItsRenewalWasSent) {
  TermLease lease(7, 3s, kSent);
  EXPECT_TRUE(lease.valid(kSent + 2999ms));
  EXPECT_FALSE(lease.valid(kSent + 3s));
  EXPECT_EQ(lease.renew_every(), 1s);
  EXPECT_EQ(lease.after_renewal(Renewal::kGranted, kSent + 1s, kSent + 2500ms, ""), "");
  EXPECT_EQ(lease.valid_until(), kSent + 4s) << "from the send, not the answer";
}

// Unanswered renewals: the term goes on until a ttl has passed since the
// last one granted, then ends naming why.
TEST(TermLease, UnansweredRenewalsEndTheTermOnceATtlPassed) {
  TermLease lease(7, 3s, kSent);
  EXPECT_EQ(lease.after_renewal(Renewal::kUnanswered, kSent + 1s, kSent + 1s, "unreachable"), "");
  EXPECT_EQ(lease.after_renewal(Renewal::kUnanswered, kSent + 2s, kSent + 2999ms, "unreachable"), "");
  EXPECT_EQ(lease.after_renewal(Renewal::kUnanswered, kSent + 3s, kSent + 3s, "unreachable"),
            "no renewal of term 7 for 3.0 s (unreachable)");
  TermLease renewed(7, 3s, kSent);
  EXPECT_EQ(renewed.after_renewal(Renewal::kGranted, kSent + 2s, kSent + 2s, ""), "");
  EXPECT_EQ(renewed.after_renewal(Renewal::kUnanswered, kSent + 3s, kSent + 4s, "unreachable"), "")
      << "granted at 2 s: valid until 5 s";
}

// A refusal ends the term at once (another leads); so does a refused save,
// while the renewals still succeed.
TEST(TermLease, ARefusedRenewalOrARefusedSaveEndsTheTermAtOnce) {
  TermLease lease(7, 3s, kSent);
  EXPECT_EQ(lease.after_renewal(Renewal::kRefused, kSent + 1s, kSent + 1s, ""), "the control plane says term 7 is over");
  TermLease fenced(7, 3s, kSent);
  EXPECT_EQ(fenced.after_renewal(Renewal::kGranted, kSent + 1s, kSent + 1s, "", true, "a save was refused: fenced"),
            "a save was refused: fenced");
}

}  // namespace
}  // namespace ddprun
