// The agent's event log (channel/event_log.h): one JSON object per line, in
// any number of files (--log-dir's <run dir>/events.jsonl, --trace's
// <dir>/<node>/events.jsonl). Each line goes out in one write() to files
// opened O_APPEND, so a reader (or another writer) never sees half a line.
// With no file added and no observer, write() does nothing.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include <nlohmann/json.hpp>

namespace ddprun {

class EventLog {
 public:
  explicit EventLog(std::string node_id);
  ~EventLog();
  EventLog(const EventLog&) = delete;
  EventLog& operator=(const EventLog&) = delete;

  // Appends to path (created if need be). Throws std::runtime_error naming
  // the file when it cannot be opened.
  void add_file(const std::string& path);
  bool enabled() const { return !fds_.empty(); }

  // One line: time, mono_ns, node, event, then `fields`. A failed write is
  // said once (spdlog warning) and never stops the job.
  void write(const char* event, nlohmann::json fields = nlohmann::json::object());

  // Hands every event to `observer` too, before its line, with files or
  // without (the job's metrics, job_metrics.h, are folded from them).
  using Observer = std::function<void(const char* event, const nlohmann::json& fields)>;
  void observe(Observer observer) { observer_ = std::move(observer); }

  // The line write() would make (for tests): fields over the common ones.
  static std::string format_line(const std::string& node, const char* event,
                                 const nlohmann::json& fields, std::string_view time_utc,
                                 int64_t mono_ns);
  // UTC ISO 8601 with microseconds: "2026-11-22T13:48:44.123456Z".
  static std::string utc_now();

 private:
  std::string node_;
  std::vector<std::pair<int, std::string>> fds_;  // fd, path
  bool told_failure_ = false;
  Observer observer_;
};

}  // namespace ddprun
