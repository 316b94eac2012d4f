// Merges what every node left in the trace folder into one Chrome-trace
// JSON object ({"traceEvents": [...]}) that Perfetto and chrome://tracing
// open: one process per rank (threads main, comm, checkpoint; a restarted
// rank's attempts follow each other on the same tracks), one agent process
// per node with its event log as instant events. Each node's times are
// shifted by its clock offset, then re-based so the trace starts at 0.
#pragma once

#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trace/node_dir.h"
#include "trace/step_window.h"
#include "trace/summary.h"

namespace ddprun::trace {

// Chrome-trace ids: rank R is process R + 1 (some viewers hide process 0);
// node i's agent is process kAgentPidBase + i.
inline constexpr int kAgentPidBase = 1000000;
inline constexpr int kMainTid = 1, kCommTid = 2, kCheckpointTid = 3, kAgentTid = 1;

struct MergeResult {
  nlohmann::json trace;
  Summary summary;
  std::vector<std::string> warnings;  // the nodes', then the merge's own
};

MergeResult merge(const std::vector<NodeTrace>& nodes, const StepWindow& window);

// Reads every node folder under `dir` (written since `since`: a job's own
// merge leaves out what earlier runs left in the same DIR, with a warning),
// merges them, and writes dir/trace.json and dir/summary.txt. Throws
// std::runtime_error when `dir` holds no node folder or a file cannot be
// written.
MergeResult merge_trace_dir(const std::string& dir, const StepWindow& window,
                            std::filesystem::file_time_type since = std::filesystem::file_time_type::min());

}  // namespace ddprun::trace
