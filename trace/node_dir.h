// What one node's agent and workers left in the trace folder
// (DIR/<node>/, layout in channel/trace_format.h).
#pragma once

#include <cstdint>
#include <optional>
#include <filesystem>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

#include "trace/rank_file.h"

namespace ddprun::trace {

struct NodeTrace {
  std::string name;                  // the folder's name
  std::optional<int64_t> offset_ns;  // clock.json: reference = local + offset
  std::optional<int64_t> rtt_ns;
  std::vector<RankTrace> ranks;        // one per attempt_<A>/rank<R>.trace
  std::vector<nlohmann::json> events;  // events.jsonl, lines that parsed
  bool has_event_log = false;
  std::vector<std::string> warnings;   // files missing or unreadable
};

NodeTrace read_node_dir(const std::string& path);

// Every node folder under `dir` (a folder holding clock.json, events.jsonl
// or attempt_* folders), in name order.
// `since`: node folders last written before it (by an earlier run into the
// same DIR) are left out and counted in *left_out.
std::vector<NodeTrace> read_trace_dir(const std::string& dir,
                                      std::filesystem::file_time_type since = std::filesystem::file_time_type::min(),
                                      int* left_out = nullptr);

}  // namespace ddprun::trace
