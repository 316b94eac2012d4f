#include "launcher/report_command.h"

#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "agent/job_metrics.h"
#include "channel/event_log.h"

namespace ddprun {
namespace {

namespace ev = channel::events;
namespace fs = std::filesystem;
using Clock = JobMetrics::Clock;

const char* kUsage =
    "usage: ddprun report LOG_DIR [--out FILE]\n"
    "  Draws one picture of a job from its event log: the step rate over time, heals, restarts,\n"
    "  hangs and lost nodes marked, goodput in the title. LOG_DIR: a run's folder under --log-dir\n"
    "  (holding events.jsonl), or the --log-dir itself (its newest run). FILE: .svg (the default,\n"
    "  LOG_DIR/report.svg) or .png.\n";

Clock::time_point at(int64_t mono_ns) { return Clock::time_point(std::chrono::nanoseconds(mono_ns)); }

// The events.jsonl of dir, or of its newest run folder; "" if none.
fs::path event_log_in(const fs::path& dir) {
  std::error_code ec;
  if (fs::is_regular_file(dir / ev::kFileName, ec)) return dir / ev::kFileName;
  fs::path newest;
  fs::file_time_type newest_time{};
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const fs::path f = e.path() / ev::kFileName;
    if (!fs::is_regular_file(f, ec)) continue;
    const auto t = fs::last_write_time(f, ec);
    if (newest.empty() || t > newest_time) {
      newest = f;
      newest_time = t;
    }
  }
  return newest;
}

}  // namespace

JobReport report_of(const std::vector<nlohmann::json>& events) {
  JobReport r;
  if (events.empty()) return r;
  const int64_t t0 = events.front().value(ev::kMonoNs, int64_t{0});
  JobMetrics m(events.front().value("run_id", std::string()), events.front().value(ev::kNode, std::string()), at(t0));
  std::optional<std::pair<double, int64_t>> last;  // (t, step) of the last progress
  double end = 0;
  for (const auto& e : events) {
    const std::string event = e.value(ev::kEvent, "");
    const int64_t ns = e.value(ev::kMonoNs, t0);
    const double t = static_cast<double>(ns - t0) / 1e9;
    end = std::max(end, t);
    if (event == ev::kJobStart) r.run_id = e.value("run_id", r.run_id);
    if (event == ev::kProgress) {
      channel::Progress p{};
      p.step = e.value("step", int64_t{0});
      p.samples = e.value("samples", int64_t{0});
      p.updated_ns = ns;
      p.flags = channel::Progress::kHasStep;
      m.on_progress(e.value("rank", 0), p, true, at(ns));
      // The rate between two readings of steps that moved on (a restart's
      // step back starts the line again).
      if (last && p.step > last->second && t > last->first) {
        r.rates.push_back({t, static_cast<double>(p.step - last->second) / (t - last->first)});
      }
      last = std::make_pair(t, p.step);
    } else {
      m.on_event(event, e, at(ns));
      if (event == ev::kHeal) r.marks.push_back({t, "heal"});
      if (event == ev::kRestart) r.marks.push_back({t, "restart"});
      if (event == ev::kHang) r.marks.push_back({t, "hang"});
      if (event == ev::kNodeLost) r.marks.push_back({t, "node lost"});
    }
    m.tick(at(ns));
  }
  const Metrics& mm = *m.metrics();
  r.good_s = mm.value("ddprun_goodput_seconds_total");
  r.wall_s = end;
  r.heals = static_cast<int>(mm.value("ddprun_heals_total"));
  r.restarts = static_cast<int>(mm.value("ddprun_restarts_total"));
  r.hangs = static_cast<int>(mm.value("ddprun_hang_verdicts_total"));
  r.nodes_lost = static_cast<int>(mm.value("ddprun_nodes_lost_total"));
  return r;
}

std::string gnuplot_script(const JobReport& r, const std::string& data, const std::string& out) {
  std::ostringstream s;
  const bool png = out.size() > 4 && out.compare(out.size() - 4, 4, ".png") == 0;
  char title[300];
  std::snprintf(title, sizeof title, "ddprun job %s: goodput %.1f%% (%.1f of %.1f s), %d heal(s), %d restart(s), %d hang(s), %d node(s) lost",
                r.run_id.c_str(), r.wall_s > 0 ? 100 * r.good_s / r.wall_s : 0.0, r.good_s, r.wall_s, r.heals,
                r.restarts, r.hangs, r.nodes_lost);
  s << (png ? "set terminal png size 1000,500 noenhanced\n" : "set terminal svg size 1000,500 noenhanced\n");
  s << "set output '" << out << "'\n";
  s << "set title '" << title << "'\n";
  s << "set xlabel 'seconds since the job began'\nset ylabel 'steps per second'\nset grid\nset key off\n";
  s << "set xrange [0:" << std::max(1.0, r.wall_s) << "]\nset yrange [0:*]\n";
  int i = 1;
  for (const auto& m : r.marks) {
    const char* color = m.what == "heal" ? "#2a9d2a" : m.what == "restart" ? "#d62728" : m.what == "hang" ? "#ff7f0e" : "#9467bd";
    s << "set arrow " << i << " from " << m.t << ", graph 0 to " << m.t << ", graph 1 nohead lc rgb '" << color
      << "' lw 2\n";
    s << "set label " << i << " '" << m.what << "' at " << m.t << ", graph 0.95 left offset 0.3,0 tc rgb '" << color
      << "'\n";
    ++i;
  }
  s << "plot '" << data << "' using 1:2 with linespoints lw 2 pt 7 ps 0.4 lc rgb '#1f77b4'\n";
  return s.str();
}

int run_report_command(const std::vector<std::string>& args) {
  std::string dir, out;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--out" || a == "-o") {
      if (i + 1 == args.size()) {
        std::fprintf(stderr, "ddprun report: error: --out: expected FILE (.svg or .png)\n");
        return 2;
      }
      out = args[++i];
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "ddprun report: error: unknown option '%s' (see ddprun report --help)\n", a.c_str());
      return 2;
    } else if (dir.empty()) {
      dir = a;
    } else {
      std::fprintf(stderr, "ddprun report: error: one LOG_DIR only, got '%s' and '%s'\n", dir.c_str(), a.c_str());
      return 2;
    }
  }
  if (dir.empty()) {
    std::fprintf(stderr, "ddprun report: error: missing LOG_DIR, a run's folder under --log-dir\n");
    return 2;
  }
  std::error_code ec;
  if (!fs::is_directory(dir, ec)) {
    std::fprintf(stderr, "ddprun report: error: LOG_DIR: '%s' is not a folder\n", dir.c_str());
    return 2;
  }
  if (!out.empty() && !(out.size() > 4 && (out.compare(out.size() - 4, 4, ".svg") == 0 ||
                                           out.compare(out.size() - 4, 4, ".png") == 0))) {
    std::fprintf(stderr, "ddprun report: error: --out: '%s' is neither .svg nor .png\n", out.c_str());
    return 2;
  }
  const fs::path log = event_log_in(dir);
  if (log.empty()) {
    std::fprintf(stderr, "ddprun report: error: no %s in '%s' or its run folders (was the job run with --log-dir?)\n",
                 ev::kFileName, dir.c_str());
    return 1;
  }
  std::vector<nlohmann::json> events;
  std::ifstream in(log);
  for (std::string line; std::getline(in, line);) {
    auto e = nlohmann::json::parse(line, nullptr, false);
    if (!e.is_discarded() && e.is_object() && e.contains(ev::kMonoNs)) events.push_back(std::move(e));
  }
  const JobReport r = report_of(events);
  if (r.rates.empty()) {
    std::fprintf(stderr, "ddprun report: error: %s holds no progress (a worker_lib program or ddprun.Healer reports it)\n",
                 log.c_str());
    return 1;
  }
  if (out.empty()) out = (log.parent_path() / "report.svg").string();
  const std::string data = (log.parent_path() / "report.dat").string();
  {
    std::ofstream d(data);
    d << "# seconds since the job began, steps per second (ddprun report, from " << log.filename().string() << ")\n";
    for (const auto& p : r.rates) d << p.t << " " << p.steps_per_s << "\n";
  }
  const std::string script = gnuplot_script(r, data, out);
  // gnuplot reads the script on its stdin.
  FILE* g = ::popen("gnuplot", "w");
  if (!g) {
    std::fprintf(stderr, "ddprun report: error: cannot run gnuplot (apt-get install gnuplot-nox)\n");
    return 1;
  }
  std::fputs(script.c_str(), g);
  const int status = ::pclose(g);
  if (status != 0) {
    std::fprintf(stderr, "ddprun report: error: gnuplot failed (exit %d); is it installed (gnuplot-nox)?\n",
                 WIFEXITED(status) ? WEXITSTATUS(status) : -1);
    return 1;
  }
  std::printf("goodput %.1f%% (%.1f of %.1f s); %d heal(s), %d restart(s), %d hang(s), %d node(s) lost\n",
              r.wall_s > 0 ? 100 * r.good_s / r.wall_s : 0.0, r.good_s, r.wall_s, r.heals, r.restarts, r.hangs,
              r.nodes_lost);
  std::fprintf(stderr, "ddprun report: wrote %s\n", out.c_str());
  return 0;
}

}  // namespace ddprun
