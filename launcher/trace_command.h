// Merging a --trace folder: at the end of a traced job (by the ddprun that
// hosts the rendezvous), and `ddprun trace-merge DIR` for folders copied
// together from several hosts by hand.
#pragma once

#include <filesystem>
#include <string>
#include <vector>

namespace ddprun {

struct TraceMergeOutcome {
  bool merged = false;
  std::string error;                  // why not, when !merged
  std::vector<std::string> warnings;  // files missing, damaged, records dropped
  std::string summary;                // the table (also in DIR/summary.txt)
};

// Merges every node folder under dir into dir/trace.json and
// dir/summary.txt. steps: the --trace-steps window ("" for all), already
// checked. since: leave out node folders last written before it (a job's
// own merge skips what earlier runs left in the same folder).
TraceMergeOutcome merge_trace_folder(
    const std::string& dir, const std::string& steps,
    std::filesystem::file_time_type since = std::filesystem::file_time_type::min());

// args: what follows "trace-merge" on the command line. Returns the exit
// code: 0 merged, 1 nothing to merge, 2 a bad command line.
int run_trace_merge_command(const std::vector<std::string>& args);

}  // namespace ddprun
