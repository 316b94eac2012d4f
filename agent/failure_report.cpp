#include "agent/failure_report.h"

#include <algorithm>
#include <ctime>
#include <fstream>
#include "channel/error_file.h"
#include <sstream>

#include "agent/signals.h"

namespace ddprun {
namespace {

std::string format_time(std::chrono::system_clock::time_point t) {
  const auto secs = std::chrono::system_clock::to_time_t(t);
  const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(t.time_since_epoch()) % 1000;
  std::tm tm{};
  localtime_r(&secs, &tm);
  char buf[64];
  std::strftime(buf, sizeof(buf), "%Y-%m-%d %H:%M:%S", &tm);
  char out[80];
  std::snprintf(out, sizeof(out), "%s.%03d", buf, static_cast<int>(ms.count()));
  return out;
}

void describe_worker(std::ostringstream& os, const WorkerExit& e, const char* indent) {
  os << "rank " << e.rank << " (local rank " << e.local_rank << ", pid " << e.pid << ", host "
     << e.host << "): " << describe_exit(e) << " at " << format_time(e.time) << "\n";
  if (!e.error_message.empty()) {
    // The first line of the message on the same line, the rest indented.
    std::istringstream lines(e.error_message);
    std::string line;
    bool first = true;
    while (std::getline(lines, line)) {
      os << indent << (first ? "error: " : "       ") << line << "\n";
      first = false;
    }
  }
  if (!e.stderr_tail.empty()) {
    os << indent << "last " << e.stderr_tail.size() << " line(s) of stderr:\n";
    for (const auto& l : e.stderr_tail) os << indent << "  " << l << "\n";
  }
}

}  // namespace

std::string describe_exit(const WorkerExit& e) {
  if (!e.reason.empty()) return e.reason;
  if (e.signal != 0) return "killed by " + signal_name(e.signal);
  return "exit code " + std::to_string(e.exit_code);
}

std::string read_error_file(const std::string& path) {
  std::ifstream in(path);
  if (!in) return "";
  std::stringstream buf;
  buf << in.rdbuf();
  try {
    return channel::error_file_message(buf.str());
  } catch (const std::exception& e) {
    return "(error file " + path + " is not torchrun's JSON format: " + e.what() + ")";
  }
}

std::string format_failure_summary(std::vector<WorkerExit> failures, const SummaryContext& ctx) {
  std::stable_sort(failures.begin(), failures.end(),
                   [](const WorkerExit& a, const WorkerExit& b) { return a.time < b.time; });
  std::ostringstream os;
  os << "ddprun: job " << ctx.run_id << (failures.empty() ? "" : " failed");
  if (!ctx.stop_reason.empty()) os << (failures.empty() ? " " : " (") << ctx.stop_reason
                                   << (failures.empty() ? "" : ")");
  os << " on attempt " << (ctx.attempt + 1) << " of " << (ctx.max_restarts + 1) << "\n";
  if (failures.empty()) {
    os << "  no worker failed on its own\n";
  } else {
    os << "  root cause (earliest failure): ";
    describe_worker(os, failures.front(), "    ");
    for (size_t i = 1; i < failures.size(); ++i) {
      os << "  also failed: ";
      describe_worker(os, failures[i], "    ");
    }
  }
  if (ctx.stopped_count > 0) {
    os << "  " << ctx.stopped_count << (failures.empty() ? "" : " other") << " worker(s) stopped by ddprun\n";
  }
  return os.str();
}

}  // namespace ddprun
