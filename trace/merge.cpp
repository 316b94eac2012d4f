#include "trace/merge.h"

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <limits>
#include <set>
#include <stdexcept>

#include "channel/event_log.h"
#include "channel/output_file.h"

namespace ddprun::trace {

using channel::TracePhase;
using channel::TraceTrack;
using nlohmann::json;

namespace {

int tid_of(uint8_t track) {
  switch (static_cast<TraceTrack>(track)) {
    case TraceTrack::kMain: return kMainTid;
    case TraceTrack::kComm: return kCommTid;
    case TraceTrack::kCheckpoint: return kCheckpointTid;
  }
  return kMainTid;
}

bool keep(const channel::TraceRecord& r, const StepWindow& window) {
  // Records outside any step (init, restore) stay only in an unlimited trace.
  return r.step < 0 ? !window.limited() : window.contains(r.step);
}

json metadata(const char* what, int pid, int tid, json args) {
  return json{{"ph", "M"}, {"name", what}, {"pid", pid}, {"tid", tid}, {"args", std::move(args)}};
}

// "round 3", "failure rank 1", ...: what the instant says at a glance.
std::string event_label(const json& e) {
  namespace ev = channel::events;
  std::string name = e[ev::kEvent].get<std::string>();
  auto num = [&](const char* k) -> std::string {
    return e.contains(k) && e[k].is_number_integer() ? std::to_string(e[k].get<int64_t>()) : "?";
  };
  if (name == ev::kRound) return name + " " + num("round");
  if (name == ev::kRestart) return name + " " + num("restart_count") + "/" + num("max_restarts");
  if (name == ev::kSpawn || name == ev::kExit || name == ev::kFailure || name == ev::kHang) {
    return name + " rank " + num("rank") + " (attempt " + num("attempt") + ")";
  }
  // Stragglers with their score: "straggler rank 1 (0.41)", "straggler node 1 (0.29)".
  auto score = [&]() -> std::string {
    if (!e.contains("score") || !e["score"].is_number()) return "";
    char buf[16];
    std::snprintf(buf, sizeof(buf), " (%.2f)", e["score"].get<double>());
    return buf;
  };
  if (name == ev::kStraggler) return "straggler rank " + num("rank") + score();
  if (name == ev::kStragglerNode) return "straggler node " + num("node_rank") + score();
  return name;
}

}  // namespace

MergeResult merge(const std::vector<NodeTrace>& nodes, const StepWindow& window) {
  MergeResult out;
  for (const auto& n : nodes) out.warnings.insert(out.warnings.end(), n.warnings.begin(), n.warnings.end());

  // Where the trace starts and ends on the reference clock: the records kept.
  int64_t t_min = std::numeric_limits<int64_t>::max(), t_max = std::numeric_limits<int64_t>::min();
  std::vector<const RankTrace*> traces;
  for (const auto& n : nodes) {
    int64_t off = n.offset_ns.value_or(0);
    for (const auto& t : n.ranks) {
      traces.push_back(&t);
      for (const auto& r : t.records) {
        if (!keep(r, window)) continue;
        t_min = std::min(t_min, r.begin_ns + off);
        t_max = std::max(t_max, r.end_ns + off);
      }
    }
  }
  // Events fall in that span when a window limits it; all count otherwise.
  auto event_kept = [&](int64_t t) { return !window.limited() || (t >= t_min && t <= t_max); };
  for (const auto& n : nodes) {
    int64_t off = n.offset_ns.value_or(0);
    for (const auto& e : n.events) {
      int64_t t = e[channel::events::kMonoNs].get<int64_t>() + off;
      if (window.limited()) continue;
      t_min = std::min(t_min, t);
      t_max = std::max(t_max, t);
    }
  }
  auto us = [&](int64_t ns) { return static_cast<double>(ns - t_min) / 1000.0; };

  json events = json::array();
  std::set<int> ranks;
  std::set<std::pair<int, int>> threads;  // (pid, tid) used
  for (const auto& n : nodes) {
    int64_t off = n.offset_ns.value_or(0);
    for (const auto& t : n.ranks) {
      int pid = t.header.rank + 1;
      bool any = false;
      for (const auto& r : t.records) {
        if (!keep(r, window)) continue;
        int tid = tid_of(r.track);
        json args{{"step", r.step}, {"attempt", t.header.attempt}};
        std::string name = phase_name(r.phase);
        if (r.phase == static_cast<uint16_t>(TracePhase::kAllReduce)) {
          args["bucket"] = r.arg;
          args["bytes"] = r.bytes;
        } else if (r.phase == static_cast<uint16_t>(TracePhase::kCollective)) {
          args["kind"] = r.arg;
          args["bytes"] = r.bytes;
        } else if (r.phase == static_cast<uint16_t>(TracePhase::kStep)) {
          name = "step " + std::to_string(r.step);
        } else if (r.phase == static_cast<uint16_t>(TracePhase::kHealWait)) {
          args["failed_in_generation"] = r.arg;
        } else if (r.phase == static_cast<uint16_t>(TracePhase::kHealConnect)) {
          args["generation"] = r.arg;
        } else if (r.phase == static_cast<uint16_t>(TracePhase::kHealTransfer)) {
          args["generation"] = r.arg;
          args["bytes"] = r.bytes;
        }
        // The first kept record of an attempt: mark where the attempt starts.
        if (!any) {
          events.push_back(json{{"ph", "i"}, {"s", "t"}, {"name", "attempt " + std::to_string(t.header.attempt)},
                                {"pid", pid}, {"tid", kMainTid}, {"ts", us(r.begin_ns + off)},
                                {"args", {{"attempt", t.header.attempt}, {"pid", t.header.pid}}}});
          threads.insert({pid, kMainTid});
          any = true;
        }
        events.push_back(json{{"ph", "X"}, {"name", name}, {"cat", phase_name(r.phase)}, {"pid", pid}, {"tid", tid},
                              {"ts", us(r.begin_ns + off)}, {"dur", static_cast<double>(r.end_ns - r.begin_ns) / 1000.0},
                              {"args", std::move(args)}});
        threads.insert({pid, tid});
      }
      if (any) ranks.insert(t.header.rank);
    }
  }
  for (size_t i = 0; i < nodes.size(); ++i) {
    const auto& n = nodes[i];
    if (!n.has_event_log) continue;
    int pid = kAgentPidBase + static_cast<int>(i);
    int64_t off = n.offset_ns.value_or(0);
    for (const auto& e : n.events) {
      int64_t t = e[channel::events::kMonoNs].get<int64_t>() + off;
      // Progress lines are the workers' own steps, which the trace shows already.
      if (!event_kept(t) || e.value(channel::events::kEvent, "") == channel::events::kProgress) continue;
      events.push_back(json{{"ph", "i"}, {"s", "p"}, {"name", event_label(e)}, {"cat", e[channel::events::kEvent]},
                            {"pid", pid}, {"tid", kAgentTid}, {"ts", us(t)}, {"args", e}});
    }
    events.push_back(metadata("process_name", pid, 0, {{"name", "agent " + n.name}}));
    events.push_back(metadata("process_sort_index", pid, 0, {{"sort_index", -1}}));
    events.push_back(metadata("thread_name", pid, kAgentTid, {{"name", "events"}}));
  }
  for (int r : ranks) {
    events.push_back(metadata("process_name", r + 1, 0, {{"name", "rank " + std::to_string(r)}}));
    events.push_back(metadata("process_sort_index", r + 1, 0, {{"sort_index", r}}));
  }
  for (const auto& [pid, tid] : threads) {
    const char* name = tid == kMainTid ? "main" : tid == kCommTid ? "comm" : "checkpoint";
    events.push_back(metadata("thread_name", pid, tid, {{"name", name}}));
    events.push_back(metadata("thread_sort_index", pid, tid, {{"sort_index", tid}}));
  }
  out.trace = json{{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  out.summary = summarize(traces, window);
  return out;
}

MergeResult merge_trace_dir(const std::string& dir, const StepWindow& window, std::filesystem::file_time_type since) {
  int left_out = 0;
  auto nodes = read_trace_dir(dir, since, &left_out);
  if (nodes.empty()) throw std::runtime_error(dir + ": no node folders to merge");
  MergeResult result = merge(nodes, window);
  if (left_out > 0) {
    result.warnings.push_back(dir + ": left out " + std::to_string(left_out) +
                              " node folder(s) of earlier runs (last written before this job started)");
  }
  auto write = [&](const std::string& path, const std::string& text) {
    if (const std::string err = channel::write_output_file(path, text); !err.empty()) {
      throw std::runtime_error("cannot write " + err);
    }
  };
  write(dir + "/trace.json", result.trace.dump());
  write(dir + "/summary.txt", format_summary(result.summary));
  return result;
}

}  // namespace ddprun::trace
