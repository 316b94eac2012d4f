#include "ddp/progress.h"

#include <unistd.h>

#include <cmath>

namespace ddp {
namespace {

namespace ch = ddprun::channel;

int64_t monotonic_ns() {
  return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
      .count();
}

std::string duration_text(double s) {
  const auto total = static_cast<long long>(s + 0.5);
  char buf[48];
  if (total >= 3600) {
    std::snprintf(buf, sizeof buf, "%lldh%02lldm", total / 3600, total % 3600 / 60);
  } else if (total >= 60) {
    std::snprintf(buf, sizeof buf, "%lldm%02llds", total / 60, total % 60);
  } else {
    std::snprintf(buf, sizeof buf, "%llds", total);
  }
  return buf;
}

}  // namespace

ProgressReporter::ProgressReporter(ch::ProgressBlock* block, ProgressPrintOptions print)
    : block_(block), print_(print) {
  if (!print_.out) print_.out = stderr;
  if (print_.is_tty < 0) print_.is_tty = ::isatty(::fileno(print_.out)) ? 1 : 0;
}

ProgressReporter::~ProgressReporter() {
  std::lock_guard lock(mu_);
  if (line_open_) {
    std::fputc('\n', print_.out);
    std::fflush(print_.out);
  }
}

void ProgressReporter::report(const ProgressReport& r) {
  std::lock_guard lock(mu_);
  // Keep only the checkpoint fields of what was there; the rest is this report.
  const uint32_t kept = p_.flags & (ch::Progress::kHasSaved | ch::Progress::kHasRestored);
  p_.flags = kept;
  if (r.step >= 0) {
    p_.step = r.step;
    p_.flags |= ch::Progress::kHasStep;
  }
  if (r.total_steps >= 0) {
    p_.total_steps = r.total_steps;
    p_.flags |= ch::Progress::kHasTotalSteps;
  }
  if (r.epoch >= 0) {
    p_.epoch = r.epoch;
    p_.flags |= ch::Progress::kHasEpoch;
  }
  if (!std::isnan(r.loss)) {
    p_.loss = r.loss;
    p_.flags |= ch::Progress::kHasLoss;
  }
  p_.samples = r.samples >= 0 ? r.samples : 0;
  publish_locked();
  if (print_.enabled) maybe_print_locked();
}

void ProgressReporter::saved(int64_t step) {
  std::lock_guard lock(mu_);
  p_.saved_step = step;
  p_.flags |= ch::Progress::kHasSaved;
  publish_locked();
}

void ProgressReporter::restored(int64_t step) {
  std::lock_guard lock(mu_);
  p_.restored_step = step;
  p_.flags |= ch::Progress::kHasRestored;
  publish_locked();
}

ch::Progress ProgressReporter::last() const {
  std::lock_guard lock(mu_);
  return p_;
}

void ProgressReporter::publish_locked() {
  p_.updated_ns = monotonic_ns();
  if (block_) ch::write_progress(block_, p_);
}

std::string ProgressReporter::format_line(const ch::Progress& p, double samples_per_s, double eta_s) {
  std::string line = "ddp: step " + std::to_string(p.step);
  if (p.flags & ch::Progress::kHasTotalSteps) line += "/" + std::to_string(p.total_steps);
  if (p.flags & ch::Progress::kHasEpoch) line += " epoch " + std::to_string(p.epoch + 1);  // from 1, for people
  char buf[64];
  if (p.flags & ch::Progress::kHasLoss) {
    std::snprintf(buf, sizeof buf, " loss %.4g", p.loss);
    line += buf;
  }
  if (samples_per_s > 0) {
    std::snprintf(buf, sizeof buf, " %.0f samples/s", samples_per_s);
    line += buf;
  }
  if (eta_s >= 0) line += " ETA " + duration_text(eta_s);
  return line;
}

void ProgressReporter::maybe_print_locked() {
  if (!(p_.flags & ch::Progress::kHasStep)) return;
  const auto now = std::chrono::steady_clock::now();
  if (first_step_ < 0) {
    // The first report starts the clocks; nothing to rate yet.
    first_at_ = printed_at_ = now;
    first_step_ = p_.step;
    printed_samples_ = p_.samples;
    return;
  }
  const double since = std::chrono::duration<double>(now - printed_at_).count();
  if (since < (print_.is_tty ? 0.25 : print_.interval_seconds)) return;
  const double rate = since > 0 && p_.samples > printed_samples_ ? (p_.samples - printed_samples_) / since : 0;
  double eta = -1;
  const int64_t done = p_.step - first_step_;
  if ((p_.flags & ch::Progress::kHasTotalSteps) && done > 0 && p_.total_steps > p_.step) {
    const double per_step = std::chrono::duration<double>(now - first_at_).count() / static_cast<double>(done);
    eta = per_step * static_cast<double>(p_.total_steps - p_.step);
  }
  const std::string line = format_line(p_, rate, eta);
  if (print_.is_tty) {
    std::fprintf(print_.out, "\r%s\033[K", line.c_str());  // rewrite the line in place
    line_open_ = true;
  } else {
    std::fprintf(print_.out, "%s\n", line.c_str());
  }
  std::fflush(print_.out);
  printed_at_ = now;
  printed_samples_ = p_.samples;
}

}  // namespace ddp
