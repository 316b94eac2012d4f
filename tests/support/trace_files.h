// Writing trace files (channel/trace_format.h) by hand, for the merger's
// tests and the trace_writer worker: what worker_lib's recorder writes.
#pragma once

#include <cstdint>
#include <fstream>
#include <string>
#include <vector>

#include "channel/trace_format.h"

namespace ddptest {

inline ddprun::channel::TraceRecord trace_record(ddprun::channel::TracePhase phase, ddprun::channel::TraceTrack track,
                                                 int64_t step, int64_t begin_ns, int64_t end_ns, int64_t arg = 0,
                                                 int64_t bytes = 0) {
  ddprun::channel::TraceRecord r{};
  r.begin_ns = begin_ns;
  r.end_ns = end_ns;
  r.step = step;
  r.arg = arg;
  r.bytes = bytes;
  r.phase = static_cast<uint16_t>(phase);
  r.track = static_cast<uint8_t>(track);
  r.valid = 1;
  return r;
}

// A file with `records` and room for `capacity` (at least their count);
// `next` defaults to the count of records.
inline void write_trace_file(const std::string& path, int rank, int attempt,
                             const std::vector<ddprun::channel::TraceRecord>& records, uint64_t capacity = 0,
                             int64_t next = -1) {
  ddprun::channel::TraceHeader h{};
  h.magic = ddprun::channel::kTraceMagic;
  h.version = ddprun::channel::kTraceVersion;
  h.rank = rank;
  h.local_rank = rank;
  h.world_size = 0;
  h.attempt = attempt;
  h.pid = 0;
  h.record_bytes = sizeof(ddprun::channel::TraceRecord);
  h.capacity = capacity < records.size() ? records.size() : capacity;
  h.next = next < 0 ? records.size() : static_cast<uint64_t>(next);
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  f.write(reinterpret_cast<const char*>(&h), sizeof h);
  f.write(reinterpret_cast<const char*>(records.data()),
          static_cast<std::streamsize>(records.size() * sizeof(ddprun::channel::TraceRecord)));
  ddprun::channel::TraceRecord empty{};
  for (uint64_t i = records.size(); i < h.capacity; ++i) f.write(reinterpret_cast<const char*>(&empty), sizeof empty);
}

}  // namespace ddptest
