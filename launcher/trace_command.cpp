#include "launcher/trace_command.h"

#include <cstdio>
#include <exception>
#include <filesystem>

#include "trace/merge.h"
#include "trace/step_window.h"

namespace ddprun {

TraceMergeOutcome merge_trace_folder(const std::string& dir, const std::string& steps,
                                     std::filesystem::file_time_type since) {
  TraceMergeOutcome out;
  trace::StepWindow window;
  if (!steps.empty()) {
    auto w = trace::parse_step_window(steps);
    if (!w) {
      out.error = "--trace-steps: expected A:B, got '" + steps + "'";
      return out;
    }
    window = *w;
  }
  try {
    trace::MergeResult r = trace::merge_trace_dir(dir, window, since);
    out.merged = true;
    out.warnings = std::move(r.warnings);
    out.summary = trace::format_summary(r.summary);
  } catch (const std::exception& e) {
    out.error = e.what();
  }
  return out;
}

namespace {

constexpr const char* kUsage =
    "usage: ddprun trace-merge DIR [--trace-steps A:B]\n"
    "Merges the node folders under DIR (what `ddprun --trace DIR` left on each host, copied\n"
    "together) into DIR/trace.json, for Perfetto or chrome://tracing, and DIR/summary.txt.\n";

}  // namespace

int run_trace_merge_command(const std::vector<std::string>& args) {
  std::string dir, steps;
  for (size_t i = 0; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "-h" || a == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    }
    if (a == "--trace-steps" || a == "--trace_steps") {
      if (i + 1 == args.size()) {
        std::fprintf(stderr, "ddprun trace-merge: error: --trace-steps: expected A:B\n");
        return 2;
      }
      steps = args[++i];
    } else if (a.rfind("--trace-steps=", 0) == 0) {
      steps = a.substr(a.find('=') + 1);
    } else if (!a.empty() && a[0] == '-') {
      std::fprintf(stderr, "ddprun trace-merge: error: unknown option '%s' (see ddprun trace-merge --help)\n",
                   a.c_str());
      return 2;
    } else if (dir.empty()) {
      dir = a;
    } else {
      std::fprintf(stderr, "ddprun trace-merge: error: one DIR only, got '%s' and '%s'\n", dir.c_str(), a.c_str());
      return 2;
    }
  }
  if (dir.empty()) {
    std::fprintf(stderr, "ddprun trace-merge: error: missing DIR, the --trace folder to merge\n");
    return 2;
  }
  std::error_code ec;
  if (!std::filesystem::is_directory(dir, ec)) {
    std::fprintf(stderr, "ddprun trace-merge: error: DIR: '%s' is not a folder\n", dir.c_str());
    return 2;
  }
  if (!steps.empty() && !trace::parse_step_window(steps)) {
    std::fprintf(stderr,
                 "ddprun trace-merge: error: --trace-steps: expected A:B, steps A to B-1 with A < B "
                 "(either side may be empty), got '%s'\n",
                 steps.c_str());
    return 2;
  }
  TraceMergeOutcome out = merge_trace_folder(dir, steps);
  for (const auto& w : out.warnings) std::fprintf(stderr, "ddprun trace-merge: warning: %s\n", w.c_str());
  if (!out.merged) {
    std::fprintf(stderr, "ddprun trace-merge: error: %s\n", out.error.c_str());
    return 1;
  }
  std::fputs(out.summary.c_str(), stdout);
  std::fprintf(stderr, "ddprun trace-merge: wrote %s/trace.json\n", dir.c_str());
  return 0;
}

}  // namespace ddprun
