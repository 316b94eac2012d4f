#include "agent/output/worker_output.h"

#include <errno.h>
#include <fcntl.h>
#include <string.h>
#include <unistd.h>

#include <algorithm>
#include <stdexcept>

#include <spdlog/spdlog.h>

#include "channel/output_file.h"

namespace ddprun {

void write_all(int fd, std::string_view data) {
  while (!data.empty()) {
    ssize_t n = ::write(fd, data.data(), data.size());
    if (n < 0) {
      if (errno == EINTR) continue;
      return;
    }
    data.remove_prefix(static_cast<size_t>(n));
  }
}

namespace {

int open_log(const std::string& path, bool append) {
  int fd = channel::open_output_file(path, append ? O_APPEND : O_TRUNC);
  if (fd < 0) throw std::runtime_error("cannot open log file " + path + ": " + channel::open_error_text(errno));
  return fd;
}

}  // namespace

WorkerOutput::WorkerOutput(int global_rank, OutputOptions options, bool append)
    : rank_(global_rank),
      prefix_(options.console_prefix.empty() ? "[rank" + std::to_string(global_rank) + "]:"
                                             : options.console_prefix),
      options_(std::move(options)) {
  const int masks[2] = {kStdout, kStderr};
  Console* console[2] = {options_.console_out, options_.console_err};
  const std::string* paths[2] = {&options_.stdout_path, &options_.stderr_path};
  for (int i = 0; i < 2; ++i) {
    if (options_.console_mask & masks[i]) streams_[i].console = console[i];
    if (options_.file_mask & masks[i]) {
      streams_[i].file_fd = open_log(*paths[i], append);
      streams_[i].file_path = *paths[i];
    }
  }
}

WorkerOutput::~WorkerOutput() {
  for (auto& s : streams_) {
    if (s.console) s.console->forget(this);
    if (s.file_fd >= 0) close(s.file_fd);
  }
}

void WorkerOutput::on_line(int idx, std::string_view line) {
  Stream& s = streams_[idx];
  if (s.console) {
    // Whole lines only, and no more than the backlog: the rest is counted.
    // PyTorch 2.x prefixes an uncaught exception's lines with the rank as
    // ddprun does ("[rank1]: Traceback ..."): such a line gets no second one.
    const bool own_prefix = options_.console_prefix.empty() && line.substr(0, prefix_.size()) == prefix_;
    if (s.pending_console.size() + prefix_.size() + line.size() + 1 > kConsoleBacklog) {
      ++s.dropped;
    } else {
      if (!own_prefix) s.pending_console.append(prefix_);
      s.pending_console.append(line);
      s.pending_console.push_back('\n');
    }
  }
  if (s.file_fd >= 0) {
    s.pending_file.append(line);
    s.pending_file.push_back('\n');
  }
  if (options_.duplicate_fd[idx] >= 0) {
    for (const auto& word : options_.duplicate_filters[idx]) {
      if (line.find(word) != std::string_view::npos) {
        write_all(options_.duplicate_fd[idx], prefix_ + std::string(line) + "\n");
        break;
      }
    }
  }
  if (idx == 1 && options_.tail_lines > 0) {
    tail_.emplace_back(line);
    if (tail_.size() > options_.tail_lines) tail_.pop_front();
  }
}

// Complete lines of one read go out in one write each: a line is never split
// between writes, so nothing interleaves mid-line.
void WorkerOutput::flush_pending(Stream& s) {
  flush_console(s);
  if (!s.pending_file.empty()) {
    write_file(s);
    s.pending_file.clear();
  }
}

// What the console takes now; once it has taken everything, the lines
// dropped meanwhile are announced (they are told in order: after the lines
// before them, before those after).
void WorkerOutput::flush_console(Stream& s) {
  if (!s.console) return;
  while (true) {
    while (s.console_sent < s.pending_console.size()) {
      const size_t n = s.console->write_some(
          this, std::string_view(s.pending_console).substr(s.console_sent));
      if (n == 0) break;
      s.console_sent += n;
    }
    if (s.console_sent < s.pending_console.size()) {
      // Keep the buffer from growing with what is already out.
      if (s.console_sent > kConsoleBacklog / 2) {
        s.pending_console.erase(0, s.console_sent);
        s.console_sent = 0;
      }
      return;
    }
    s.pending_console.clear();
    s.console_sent = 0;
    if (s.dropped == 0) return;
    s.pending_console = prefix_ + " ... " + std::to_string(s.dropped) +
                        " lines dropped: console not reading\n";
    s.dropped = 0;
  }
}

// Whole lines to the log file. What a failed write did not store is
// counted (a line cut short counts as lost); later writes are still tried,
// as space may come back.
void WorkerOutput::write_file(Stream& s) {
  std::string_view data = s.pending_file;
  while (!data.empty()) {
    const ssize_t n = ::write(s.file_fd, data.data(), data.size());
    if (n < 0 && errno == EINTR) continue;
    if (n > 0) {
      data.remove_prefix(static_cast<size_t>(n));
      continue;
    }
    const std::string why = strerror(n < 0 ? errno : ENOSPC);
    if (s.file_error.empty()) {
      s.file_error = why;
      spdlog::warn("rank {}: cannot write {} ({}); what it cannot take is counted as lost", rank_,
                   s.file_path, why);
    }
    s.lost_bytes += data.size();
    s.lost_lines += static_cast<uint64_t>(std::count(data.begin(), data.end(), '\n'));
    return;
  }
}

std::vector<LogLoss> WorkerOutput::log_losses() const {
  std::vector<LogLoss> out;
  for (const auto& s : streams_) {
    if (!s.file_error.empty()) out.push_back({rank_, s.file_path, s.file_error, s.lost_lines, s.lost_bytes});
  }
  return out;
}

void WorkerOutput::flush_console() {
  for (auto& s : streams_) flush_console(s);
}

std::vector<Console*> WorkerOutput::waiting_consoles() const {
  std::vector<Console*> out;
  for (const auto& s : streams_) {
    if (s.console && (s.console_sent < s.pending_console.size() || s.dropped > 0)) out.push_back(s.console);
  }
  return out;
}

size_t WorkerOutput::console_backlog() const {
  size_t n = 0;
  for (const auto& s : streams_) {
    if (s.console) n += s.pending_console.size() - s.console_sent;
  }
  return n;
}

uint64_t WorkerOutput::abandon_console() {
  uint64_t dropped = 0;
  for (auto& s : streams_) {
    if (!s.console) continue;
    flush_console(s);
    const std::string_view left = std::string_view(s.pending_console).substr(s.console_sent);
    for (char c : left) dropped += c == '\n';
    dropped += s.dropped;
    s.pending_console.clear();
    s.console_sent = 0;
    s.dropped = 0;
    s.console->forget(this);
  }
  return dropped;
}

void WorkerOutput::set_rank(int global_rank) {
  rank_ = global_rank;
  if (options_.console_prefix.empty()) prefix_ = "[rank" + std::to_string(global_rank) + "]:";
}

void WorkerOutput::write(int stream, std::string_view bytes) {
  const int idx = stream == kStderr ? 1 : 0;
  Stream& s = streams_[idx];
  s.splitter.feed(bytes, [&](std::string_view line) { on_line(idx, line); });
  flush_pending(s);
}

void WorkerOutput::finish() {
  for (int idx = 0; idx < 2; ++idx) {
    Stream& s = streams_[idx];
    s.splitter.flush([&](std::string_view line) { on_line(idx, line); });
    flush_pending(s);
  }
}

std::string expand_line_prefix(const std::string& tmpl, const std::string& role, int rank,
                               int local_rank, const std::string& hostname) {
  const std::pair<std::string, std::string> keys[] = {
      {"${role_name}", role}, {"${rank}", std::to_string(rank)},
      {"${local_rank}", std::to_string(local_rank)}, {"${hostname}", hostname}};
  std::string out;
  for (size_t i = 0; i < tmpl.size();) {
    bool replaced = false;
    for (const auto& [key, value] : keys) {
      if (tmpl.compare(i, key.size(), key) == 0) {
        out += value;
        i += key.size();
        replaced = true;
        break;
      }
    }
    if (!replaced) out += tmpl[i++];
  }
  return out;
}

}  // namespace ddprun
