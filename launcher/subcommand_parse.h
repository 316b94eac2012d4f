// Parsing a subcommand's flags (`ddprun rendezvous ...`, `ddprun status ...`)
// with CLI11, the same way for each: --help prints and exits 0, a bad flag
// is one line naming the subcommand and exits 2.
#pragma once

#include <CLI/CLI.hpp>

#include <cstdio>
#include <optional>
#include <string>
#include <vector>

namespace ddprun {

// Empty when the flags parsed and the subcommand should run; else the exit
// code it should return at once.
inline std::optional<int> parse_subcommand(CLI::App& app, const std::vector<std::string>& args, const char* name) {
  std::vector<std::string> rev(args.rbegin(), args.rend());  // CLI11 takes them last first
  try {
    app.parse(rev);
  } catch (const CLI::CallForHelp&) {
    std::fputs((app.help() + "\n").c_str(), stdout);
    return 0;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "ddprun: error: %s: %s\n", name, e.what());
    return 2;
  }
  return std::nullopt;
}

}  // namespace ddprun
