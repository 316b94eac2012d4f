// Parses ddprun command lines with ddprun's own parser, without running
// anything: what the doc test (scripts/check-docs.py) checks each command
// shown in the README and docs/ with. Reads one command per line on stdin,
// its arguments (after `ddprun`) separated by tabs; writes one line each:
//   ok<TAB>ENTRYPOINT<TAB>ARG...     the command parses
//   help                             --help, --version, --print-completion
//   error<TAB>MESSAGE                as ddprun would print it, after "ddprun: error: "
// No environment defaults (PET_*, Slurm) are applied: a command means the same everywhere.
#include <iostream>
#include <sstream>
#include <string>
#include <vector>

#include "launcher/cli.h"

int main() {
  std::string line;
  while (std::getline(std::cin, line)) {
    std::vector<std::string> args;
    std::stringstream in(line);
    for (std::string arg; std::getline(in, arg, '\t');) args.push_back(arg);
    try {
      const ddprun::CliResult r = ddprun::parse_command_line(args);
      if (r.kind != ddprun::CliResult::kRun) {
        std::cout << "help\n";
        continue;
      }
      std::cout << "ok\t" << r.options.entrypoint;
      for (const auto& a : r.options.args) std::cout << '\t' << a;
      std::cout << '\n';
    } catch (const ddprun::UsageError& e) {
      std::cout << "error\t" << e.what() << '\n';
    }
  }
  return 0;
}
