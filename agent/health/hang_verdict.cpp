#include "agent/health/hang_verdict.h"

#include <algorithm>
#include <cstdio>
#include <optional>

namespace ddprun {
namespace {

using channel::FlightEntry;
using channel::FlightState;

std::string size_text(uint64_t bytes) {
  char buf[32];
  if (bytes >= (uint64_t{1} << 20)) std::snprintf(buf, sizeof(buf), "%.1f MB", bytes / 1048576.0);
  else if (bytes >= 1024) std::snprintf(buf, sizeof(buf), "%.1f KB", bytes / 1024.0);
  else std::snprintf(buf, sizeof(buf), "%llu B", static_cast<unsigned long long>(bytes));
  return buf;
}

std::string seconds_text(int64_t ns) {
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.1f s", std::max<int64_t>(0, ns) / 1e9);
  return buf;
}

std::string name_of(const FlightEntry& e) {
  std::string s = std::string(channel::flight_op_name(static_cast<channel::FlightOp>(e.op))) + " #" +
                  std::to_string(e.seq);
  if (e.comm == 1) s += " (CUDA)";
  return s;
}

std::string ranks_word(const std::vector<int>& r) { return (r.size() == 1 ? "rank " : "ranks ") + rank_list(r); }

// "rank 2 waits", "ranks 0,1 wait"
std::string ranks_do(const std::vector<int>& r, const std::string& verb) {
  return ranks_word(r) + " " + verb + (r.size() == 1 ? "s" : "");
}

// A rank's newest record on communicator `comm` (none: on any).
std::optional<FlightEntry> latest(const RankView& v, std::optional<uint32_t> comm) {
  std::optional<FlightEntry> best;
  for (const auto& e : v.flight) {
    if ((!comm || e.comm == *comm) && (!best || e.id > best->id)) best = e;
  }
  return best;
}

// Where a rank is; for one that gave no stacks, where its flight record
// last saw it (unless the verdict said so already: last_said).
std::string where_line(const RankView& v, int64_t now_ns, bool last_said) {
  if (v.stacks.state != StackReport::kAnswered) {
    std::string s = "rank " + std::to_string(v.rank) + " " + describe_state(v.stacks.state);
    const auto last = latest(v, std::nullopt);
    if (last && !last_said) {
      s += "; its flight record last saw it " +
           (last->state == static_cast<uint32_t>(FlightState::kStarted)
                ? "inside " + name_of(*last) + " since " + seconds_text(now_ns - last->started_ns)
                : "after " + name_of(*last) + ", finished " + seconds_text(now_ns - last->finished_ns) + " ago");
    }
    return s;
  }
  if (v.stacks.where.empty()) return "";
  return "rank " + std::to_string(v.rank) + " is in: " + v.stacks.where;
}

}  // namespace

std::vector<int64_t> awaited_ns(const std::vector<std::vector<channel::FlightEntry>>& flights, int64_t now_ns) {
  std::vector<int64_t> out(flights.size(), 0);
  for (size_t p = 0; p < flights.size(); ++p) {
    if (flights[p].empty()) continue;
    const channel::FlightEntry& waiting = flights[p].back();
    if (waiting.state != static_cast<uint32_t>(channel::FlightState::kStarted)) continue;
    for (size_t w = 0; w < flights.size(); ++w) {
      if (w == p) continue;
      // w's newest number in the collective's communicator and generation.
      uint64_t entered = 0;
      for (const auto& e : flights[w]) {
        if (e.comm == waiting.comm && e.generation == waiting.generation) entered = std::max(entered, e.seq);
      }
      if (entered < waiting.seq) out[w] = std::max(out[w], now_ns - waiting.started_ns);
    }
  }
  return out;
}

std::string rank_list(const std::vector<int>& ranks) {
  std::string s;
  for (int r : ranks) s += (s.empty() ? "" : ",") + std::to_string(r);
  return s;
}

HangVerdict judge_hang(const std::vector<RankView>& ranks, int64_t now_ns) {
  std::vector<std::string> parts;
  std::vector<const RankView*> suspects;
  std::vector<int> last_said;  // ranks whose last collective the verdict names

  // The CPU communicator's records, else the CUDA one's.
  uint32_t comm = 0;
  bool any = false;
  for (uint32_t c : {0u, 1u}) {
    for (const auto& v : ranks) any = any || latest(v, c).has_value();
    if (any) {
      comm = c;
      break;
    }
  }
  if (!any) {
    // No flight record (a Python script): its stacks say which ranks are
    // inside torch.distributed.
    std::vector<int> inside;
    std::string op;
    for (const auto& v : ranks) {
      const std::string& w = v.stacks.where;
      if (v.stacks.state == StackReport::kAnswered && w.find("/torch/distributed/") != std::string::npos) {
        inside.push_back(v.rank);
        if (const auto in = w.rfind(" in "); in != std::string::npos && op.empty()) op = w.substr(in + 4);
      }
    }
    if (!inside.empty() && inside.size() < ranks.size()) {
      parts.push_back(ranks_do(inside, "wait") + " in torch.distributed (" + op + ")");
      for (const auto& v : ranks) {
        if (std::find(inside.begin(), inside.end(), v.rank) == inside.end()) {
          parts.push_back("rank " + std::to_string(v.rank) + " is not in it");
          suspects.push_back(&v);
        }
      }
    } else {
      parts.push_back("no rank recorded a collective");
      for (const auto& v : ranks) {
        if (v.hung) suspects.push_back(&v);
      }
    }
  } else {
    // The newest collective any rank reached (of the newest heal generation).
    uint32_t gen = 0;
    for (const auto& v : ranks) {
      if (auto e = latest(v, comm)) gen = std::max(gen, e->generation);
    }
    uint64_t top = 0;
    const FlightEntry* top_entry = nullptr;
    std::vector<std::optional<FlightEntry>> last;
    for (const auto& v : ranks) {
      auto e = latest(v, comm);
      if (e && e->generation != gen) e.reset();
      last.push_back(e);
    }
    for (const auto& e : last) {
      if (e && e->seq >= top) {
        top = e->seq;
        top_entry = &*e;
      }
    }
    std::vector<int> waiting, done, behind;
    int64_t waiting_since = now_ns;
    for (size_t i = 0; i < ranks.size(); ++i) {
      const auto& e = last[i];
      if (e && e->seq == top && e->state == static_cast<uint32_t>(FlightState::kStarted)) {
        waiting.push_back(ranks[i].rank);
        waiting_since = std::min(waiting_since, e->started_ns);
      } else if (e && e->seq == top) {
        done.push_back(ranks[i].rank);
      } else {
        behind.push_back(ranks[i].rank);
      }
    }
    const std::string what = name_of(*top_entry);
    const std::string size = top_entry->bytes ? " (" + size_text(top_entry->bytes) + ")" : "";
    if (!waiting.empty()) {
      parts.push_back(ranks_do(waiting, "wait") + " in " + what + size + " since " +
                      seconds_text(now_ns - waiting_since));
      if (!done.empty()) parts.push_back(ranks_word(done) + " finished it");
      for (size_t i = 0; i < ranks.size(); ++i) {
        if (std::find(behind.begin(), behind.end(), ranks[i].rank) == behind.end()) continue;
        std::string s = "rank " + std::to_string(ranks[i].rank) + " never entered it";
        if (auto own = latest(ranks[i], comm)) {
          s += " (its last: " + name_of(*own) +
               (own->finished_ns ? ", finished " + seconds_text(now_ns - own->finished_ns) + " ago" : "") + ")";
        }
        parts.push_back(s);
        suspects.push_back(&ranks[i]);
        last_said.push_back(ranks[i].rank);
      }
      if (behind.empty()) {
        // Everyone is inside it here: the one it waits for is elsewhere.
        parts.push_back("every local rank is inside it (the one they wait for is on another node, or it is slow)");
        for (const auto& v : ranks) {
          if (v.hung) suspects.push_back(&v);
        }
      }
    } else {
      parts.push_back("no rank is inside a collective (the newest, " + what + ", finished on " +
                      ranks_word(done) + ")");
      for (const auto& v : ranks) {
        if (v.hung) suspects.push_back(&v);
      }
    }
  }
  for (const RankView* v : suspects) {
    const bool said = std::find(last_said.begin(), last_said.end(), v->rank) != last_said.end();
    if (std::string w = where_line(*v, now_ns, said); !w.empty()) parts.push_back(w);
  }
  HangVerdict out;
  for (const auto& p : parts) out.text += (out.text.empty() ? "" : "; ") + p;
  for (const RankView* v : suspects) {
    if (std::find(out.suspects.begin(), out.suspects.end(), v->rank) == out.suspects.end()) {
      out.suspects.push_back(v->rank);
    }
  }
  return out;
}

}  // namespace ddprun
