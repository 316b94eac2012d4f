// What a node's reports may hold, checked before the registry sees them:
// a progress report (ReportProgress) and a node's collectives (in its
// keep-alive). Each check returns the status to answer with, or nothing
// when the report is fine (call_checks.h's convention).
#pragma once

#include "ddprun/v1/rendezvous.pb.h"
#include "rendezvous/server/call_checks.h"

namespace ddprun {

// No negative step or count, no non-finite rate, a sane age and rank, a
// replica verdict no longer than a heartbeat slot holds. (A NaN loss is
// news, not an error.)
MaybeStatus check_progress(const v1::Progress& p);
// At most kMaxReportedRanks ranks, sane ages, finite non-negative timings
// and scores.
MaybeStatus check_collectives(const v1::NodeCollectives& c);

}  // namespace ddprun
