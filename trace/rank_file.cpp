#include "trace/rank_file.h"

#include <cstring>
#include <fstream>
#include <iterator>

namespace ddprun::trace {
namespace {

bool known_phase(uint16_t phase) {
  return phase >= static_cast<uint16_t>(channel::TracePhase::kStep) &&
         phase <= static_cast<uint16_t>(channel::TracePhase::kHealTransfer);
}

bool known_track(uint8_t track) { return track <= static_cast<uint8_t>(channel::TraceTrack::kCheckpoint); }

}  // namespace

std::optional<RankTrace> read_rank_file(const std::string& path, std::string* error) {
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    *error = path + ": cannot open";
    return std::nullopt;
  }
  std::string bytes((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  RankTrace t;
  t.path = path;
  if (bytes.size() < sizeof(channel::TraceHeader)) {
    *error = path + ": shorter than a trace header (" + std::to_string(bytes.size()) + " bytes)";
    return std::nullopt;
  }
  std::memcpy(&t.header, bytes.data(), sizeof t.header);
  if (t.header.magic != channel::kTraceMagic) {
    *error = path + ": not a ddprun trace file (bad magic)";
    return std::nullopt;
  }
  if (t.header.version != channel::kTraceVersion) {
    *error = path + ": trace version " + std::to_string(t.header.version) + ", expected " +
             std::to_string(channel::kTraceVersion);
    return std::nullopt;
  }
  if (t.header.record_bytes != sizeof(channel::TraceRecord)) {
    *error = path + ": records of " + std::to_string(t.header.record_bytes) + " bytes, expected " +
             std::to_string(sizeof(channel::TraceRecord));
    return std::nullopt;
  }

  // Records taken: next, at most capacity; of those, what the file holds.
  uint64_t taken = t.header.next < t.header.capacity ? t.header.next : t.header.capacity;
  t.dropped = t.header.next - taken;
  uint64_t in_file = (bytes.size() - sizeof(channel::TraceHeader)) / sizeof(channel::TraceRecord);
  if (in_file < taken) {
    t.truncated = true;
    taken = in_file;
  }
  t.records.reserve(taken);
  const char* p = bytes.data() + sizeof(channel::TraceHeader);
  for (uint64_t i = 0; i < taken; ++i, p += sizeof(channel::TraceRecord)) {
    channel::TraceRecord r;
    std::memcpy(&r, p, sizeof r);
    if (!r.valid || r.end_ns < r.begin_ns || !known_phase(r.phase) || !known_track(r.track)) {
      ++t.invalid;
      continue;
    }
    t.records.push_back(r);
  }
  return t;
}

}  // namespace ddprun::trace
