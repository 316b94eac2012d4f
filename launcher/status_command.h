// `ddprun status`: where a running job stands — its phase, round, restarts,
// nodes and ranks, and rank 0's last step and checkpoint — asked of its
// rendezvous (--rdzv-endpoint, --rdzv-id and the job's token), or, with no
// endpoint, of the jobs this user runs on this machine (launcher/job_file).
#pragma once

#include <string>
#include <vector>

#include "rendezvous/client/client.h"
#include "rendezvous/store/types.h"

namespace ddprun {

// args: what follows "status" on the command line. Prints the report to
// stdout (--json: JSON); returns the exit code: 0, 1 when a job could not
// be asked (unreachable, wrong token, unknown job), 2 for a bad command line.
int run_status_command(const std::vector<std::string>& args);

// One line for a Status call that failed: what the user should check (a
// job whose rendezvous is shutting down is ending, not unreachable).
std::string status_call_failure(const std::string& job_id, const std::string& endpoint,
                                const RendezvousCallError& e);

// The report of one job, in words (tests read it).
std::string format_status(const std::string& job_id, const std::string& endpoint,
                          const JobStatus& s, long pid = 0);
std::string format_status_json(const std::string& job_id, const std::string& endpoint,
                               const JobStatus& s, long pid = 0);

}  // namespace ddprun
