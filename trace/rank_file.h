// One worker's trace file (channel/trace_format.h), read and checked.
#pragma once

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "channel/trace_format.h"

namespace ddprun::trace {

struct RankTrace {
  std::string path;
  channel::TraceHeader header{};
  std::vector<channel::TraceRecord> records;  // the valid ones, in file order
  uint64_t dropped = 0;    // taken past capacity (the writer ran out of room)
  uint64_t invalid = 0;    // not marked valid, or not making sense (end < begin, unknown phase)
  bool truncated = false;  // the file is shorter than its header says
};

// nullopt (and *error) when the file cannot be read or its header is not
// a trace header of this version and record size.
std::optional<RankTrace> read_rank_file(const std::string& path, std::string* error);

}  // namespace ddprun::trace
