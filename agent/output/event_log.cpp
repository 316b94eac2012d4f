#include "agent/output/event_log.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <chrono>
#include <ctime>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "agent/base/monotonic_clock.h"
#include "channel/event_log.h"
#include "channel/output_file.h"

namespace ddprun {

namespace ev = channel::events;

EventLog::EventLog(std::string node_id) : node_(std::move(node_id)) {}

EventLog::~EventLog() {
  for (auto& f : fds_) close(f.first);
}

void EventLog::add_file(const std::string& path) {
  const int fd = channel::open_output_file(path, O_APPEND);
  if (fd < 0) throw std::runtime_error("cannot open the event log " + path + ": " + channel::open_error_text(errno));
  fds_.emplace_back(fd, path);
}

std::string EventLog::utc_now() {
  const auto now = std::chrono::system_clock::now();
  const auto us = std::chrono::duration_cast<std::chrono::microseconds>(now.time_since_epoch());
  const std::time_t secs = static_cast<std::time_t>(us.count() / 1000000);
  std::tm tm{};
  gmtime_r(&secs, &tm);
  char date[32];
  std::strftime(date, sizeof(date), "%Y-%m-%dT%H:%M:%S", &tm);
  char out[48];
  std::snprintf(out, sizeof(out), "%s.%06lldZ", date, static_cast<long long>(us.count() % 1000000));
  return out;
}

std::string EventLog::format_line(const std::string& node, const char* event,
                                  const nlohmann::json& fields, std::string_view time_utc,
                                  int64_t mono_ns) {
  // nlohmann's default object keeps keys sorted; the common ones are
  // looked up by name, so their place in the line does not matter.
  nlohmann::json line = fields.is_object() ? fields : nlohmann::json::object();
  line[ev::kTime] = time_utc;
  line[ev::kMonoNs] = mono_ns;
  line[ev::kNode] = node;
  line[ev::kEvent] = event;
  // Worker-given text (error messages) may hold anything: invalid UTF-8
  // is replaced rather than thrown on.
  return line.dump(-1, ' ', false, nlohmann::json::error_handler_t::replace) + "\n";
}

void EventLog::write(const char* event, nlohmann::json fields) {
  if (observer_) observer_(event, fields);
  if (fds_.empty()) return;
  const std::string line = format_line(node_, event, fields, utc_now(), monotonic_ns());
  for (auto& [fd, path] : fds_) {
    ssize_t n;
    do {
      n = ::write(fd, line.data(), line.size());
    } while (n < 0 && errno == EINTR);
    if ((n < 0 || static_cast<size_t>(n) != line.size()) && !told_failure_) {
      spdlog::warn("the event log {} is incomplete: {}", path,
                   n < 0 ? strerror(errno) : "short write");
      told_failure_ = true;
    }
  }
}

}  // namespace ddprun
