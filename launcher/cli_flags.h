// ddprun's flags as CLI11 sees them: the help text, the groups `ddprun
// --help` shows (the same as the guides': workers, nodes and rendezvous,
// supervision, output), each flag's names in both spellings, and where its
// value lands. Values that need checking land as text in FlagValues;
// launcher/cli.cpp checks and converts them (launcher/cli_values.h).
#pragma once

#include <CLI/CLI.hpp>
#include <memory>
#include <string>
#include <vector>

#include "launcher/cli.h"
#include "launcher/flag_matching.h"

namespace ddprun {

// The flags whose values are checked after parsing, as given.
struct FlagValues {
  std::string completion_shell;
  std::string nnodes = "1", node_rank, endpoint, rdzv_conf, rdzv_host;
  std::string tee, redirects, local_ranks_filter, dup_stdout, dup_stderr;
  std::string max_restarts = "0", max_heals = std::to_string(kDefaultMaxHeals), monitor = "0.1", stop_timeout = "10";
  std::string verify_every = std::to_string(kDefaultVerifyEvery);
  std::string shutdown_timeout, hang_timeout = "auto", progress_interval = "10", signals;
  std::string master_port = "0";
  std::string metrics_port;
};

// `ddprun`'s parser: plain values go straight into o, the others into v
// (both must outlive the parser).
std::unique_ptr<CLI::App> make_ddprun_app(CliOptions& o, FlagValues& v);

// The options of app, as flag_matching sees them.
std::vector<FlagSpec> flag_specs(const CLI::App& app);

}  // namespace ddprun
