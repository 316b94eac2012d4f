#include "trace/node_dir.h"

#include <algorithm>
#include <filesystem>
#include <fstream>

#include "channel/event_log.h"

namespace ddprun::trace {
namespace fs = std::filesystem;

namespace {

bool is_node_dir(const fs::path& p) {
  std::error_code ec;
  if (!fs::is_directory(p, ec)) return false;
  if (fs::exists(p / "clock.json", ec) || fs::exists(p / channel::events::kFileName, ec)) return true;
  for (const auto& e : fs::directory_iterator(p, ec)) {
    if (e.is_directory() && e.path().filename().string().rfind("attempt_", 0) == 0) return true;
  }
  return false;
}

void read_clock(const fs::path& file, NodeTrace& node) {
  std::ifstream in(file);
  if (!in) {
    node.warnings.push_back(node.name + ": clock.json missing; its times are taken as they are");
    return;
  }
  auto j = nlohmann::json::parse(in, nullptr, false);
  if (j.is_discarded() || !j.is_object() || !j.contains("offset_ns") || !j["offset_ns"].is_number_integer()) {
    node.warnings.push_back(node.name + ": clock.json unreadable; its times are taken as they are");
    return;
  }
  node.offset_ns = j["offset_ns"].get<int64_t>();
  if (j.contains("rtt_ns") && j["rtt_ns"].is_number_integer()) node.rtt_ns = j["rtt_ns"].get<int64_t>();
  if (node.rtt_ns && *node.rtt_ns < 0) {
    node.warnings.push_back(node.name + ": its clock offset is unknown (no keep-alive answered); its times are "
                                        "taken as they are");
  }
}

void read_events(const fs::path& file, NodeTrace& node) {
  std::ifstream in(file);
  if (!in) return;  // no event log (yet): no agent track
  node.has_event_log = true;
  std::string line;
  size_t bad = 0;
  while (std::getline(in, line)) {
    if (line.empty()) continue;
    auto j = nlohmann::json::parse(line, nullptr, false);
    // A line cut short by a crash, or without the fields every line has.
    if (j.is_discarded() || !j.is_object() || !j.contains(channel::events::kMonoNs) ||
        !j[channel::events::kMonoNs].is_number_integer() || !j.contains(channel::events::kEvent) ||
        !j[channel::events::kEvent].is_string()) {
      ++bad;
      continue;
    }
    node.events.push_back(std::move(j));
  }
  if (bad) node.warnings.push_back(node.name + ": " + std::to_string(bad) + " unreadable line(s) in events.jsonl");
}

}  // namespace

NodeTrace read_node_dir(const std::string& path) {
  fs::path dir(path);
  NodeTrace node;
  node.name = dir.filename().string();
  read_clock(dir / "clock.json", node);
  read_events(dir / channel::events::kFileName, node);

  std::vector<fs::path> files;
  std::error_code ec;
  for (const auto& a : fs::directory_iterator(dir, ec)) {
    if (!a.is_directory() || a.path().filename().string().rfind("attempt_", 0) != 0) continue;
    for (const auto& f : fs::directory_iterator(a.path(), ec)) {
      if (f.is_regular_file() && f.path().extension() == ".trace") files.push_back(f.path());
    }
  }
  std::sort(files.begin(), files.end());
  for (const auto& f : files) {
    std::string error;
    auto t = read_rank_file(f.string(), &error);
    if (!t) {
      node.warnings.push_back(error);
      continue;
    }
    if (t->truncated) node.warnings.push_back(f.string() + ": truncated; read what it holds");
    if (t->dropped) {
      node.warnings.push_back(f.string() + ": " + std::to_string(t->dropped) +
                              " record(s) dropped (out of room; raise DDPRUN_TRACE_CAPACITY)");
    }
    if (t->invalid) node.warnings.push_back(f.string() + ": " + std::to_string(t->invalid) + " invalid record(s) skipped");
    node.ranks.push_back(std::move(*t));
  }
  if (node.ranks.empty()) node.warnings.push_back(node.name + ": no worker trace files");
  return node;
}

namespace {

// When a node folder was last written: the newest of itself and what it
// holds directly (events.jsonl grows with every event, clock.json is
// written as the node leaves).
fs::file_time_type last_written(const fs::path& d) {
  std::error_code ec;
  fs::file_time_type newest = fs::last_write_time(d, ec);
  for (const auto& e : fs::directory_iterator(d, ec)) {
    const auto t = fs::last_write_time(e.path(), ec);
    if (!ec && t > newest) newest = t;
  }
  return newest;
}

}  // namespace

std::vector<NodeTrace> read_trace_dir(const std::string& dir, fs::file_time_type since, int* left_out) {
  std::vector<fs::path> dirs;
  std::error_code ec;
  if (left_out) *left_out = 0;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    if (!is_node_dir(e.path())) continue;
    if (since != fs::file_time_type::min() && last_written(e.path()) < since) {
      if (left_out) ++*left_out;
      continue;
    }
    dirs.push_back(e.path());
  }
  std::sort(dirs.begin(), dirs.end());
  std::vector<NodeTrace> nodes;
  for (const auto& d : dirs) nodes.push_back(read_node_dir(d.string()));
  return nodes;
}

}  // namespace ddprun::trace
