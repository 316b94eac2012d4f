// Who waits for whom when a worker hangs: from every local rank's flight
// record (channel/flight_record.h) and stacks (StackCollection), one
// paragraph such as
//   ranks 0,1,3 wait in all_reduce #1234 (25.0 MB) since 12.0 s; rank 2
//   never entered it (its last: all_reduce #1233, finished 12.1 s ago);
//   rank 2 is in: wait_for_input (loader.cpp:88)
// A pure function of its inputs, unit-tested without processes.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "agent/health/stack_collection.h"
#include "channel/flight_record.h"

namespace ddprun {

struct RankView {
  int rank = 0;
  bool hung = false;  // its heartbeat stopped for --hang-timeout
  std::vector<channel::FlightEntry> flight;
  StackReport stacks;  // state kGone with no text when none were asked for
};

// The verdict, and the ranks it blames: those the others wait for (or, with
// nothing to tell them apart, the hung ones).
struct HangVerdict {
  std::string text;
  std::vector<int> suspects;
};
HangVerdict judge_hang(const std::vector<RankView>& ranks, int64_t now_ns);
// judge_hang's text.
inline std::string hang_verdict(const std::vector<RankView>& ranks, int64_t now_ns) {
  return judge_hang(ranks, now_ns).text;
}

// "0,1,3"
std::string rank_list(const std::vector<int>& ranks);

// For each worker (its flight record, oldest first), how long (ns) its
// peers have waited for it: the longest wait of a peer inside a collective
// (newest record under way) that this worker never entered (its newest
// record of that communicator and generation has a lower number). 0: none.
std::vector<int64_t> awaited_ns(const std::vector<std::vector<channel::FlightEntry>>& flights, int64_t now_ns);

}  // namespace ddprun
