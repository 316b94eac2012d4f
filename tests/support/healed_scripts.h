// Tests of scripts that heal (python_heal_test, framework_heal_test): the
// checksum a run ends with, and the lines a healed script changes against
// its plain twin, which the guide's diff must show.
#pragma once

#include <stdio.h>

#include <fstream>
#include <iterator>
#include <regex>
#include <string>
#include <vector>

#include "support/process.h"
#include "support/shared_result.h"

namespace ddptest {

// "final loss 1.234567; checksum 0123456789abcdef" as rank 0 printed it at
// the end; empty if none.
inline std::string checksum_of(const std::string& out) {
  std::smatch m;
  if (!std::regex_search(out, m, std::regex(R"(final loss [0-9.]+; checksum ([0-9a-f]{16}))"))) return "";
  return m[0];
}

// The lines of `diff plain healed`: "< old" and "> new" (the rest dropped).
inline std::vector<std::string> changed_lines(const std::string& plain, const std::string& healed) {
  const std::string cmd = "diff " + plain + " " + healed;
  std::vector<std::string> changed;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char line[4096];
    while (fgets(line, sizeof(line), p)) {
      std::string l(line);
      if (!l.empty() && l.back() == '\n') l.pop_back();
      if (l.rfind("< ", 0) == 0 || l.rfind("> ", 0) == 0) changed.push_back(l);
    }
    pclose(p);
  }
  return changed;
}

inline long added_lines(const std::vector<std::string>& changed) {
  long n = 0;
  for (const auto& l : changed) n += l[0] == '>';
  return n;
}

// The changed lines docs/fault-tolerance.md's diffs lack ("-old" / "+new"
// lines of a diff block); `script` is an examples/ path of the repository.
inline std::vector<std::string> missing_from_guide(const std::vector<std::string>& changed,
                                                   const std::string& script) {
  const std::string guide_path = script.substr(0, script.rfind("/examples/")) + "/docs/fault-tolerance.md";
  std::ifstream in(guide_path);
  const std::string guide((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  if (guide.empty()) return {"(cannot read " + guide_path + ")"};
  std::vector<std::string> missing;
  for (const std::string& l : changed) {
    if (guide.find("\n" + std::string(l[0] == '>' ? "+" : "-") + l.substr(2) + "\n") == std::string::npos) {
      missing.push_back(l);
    }
  }
  return missing;
}

#if defined(DDPRUN_BIN) && defined(HEAL_SCRIPT) && defined(PYTHON_BIN)
// examples/python/ddp_heal.py under this lane's Python, one epoch: 16,000
// samples (125 steps on 4 ranks), 6,400 on 2 (100 steps).
inline const EnvChanges& heal_script_env() {
  static const EnvChanges env{std::string("PYTHON_EXEC=") + PYTHON_BIN};
  return env;
}

inline std::vector<std::string> heal_job(int nproc, const std::vector<std::string>& launcher_flags = {},
                                         const std::vector<std::string>& script_flags = {}) {
  std::vector<std::string> argv{DDPRUN_BIN, "--nproc", std::to_string(nproc)};
  argv.insert(argv.end(), launcher_flags.begin(), launcher_flags.end());
  for (const char* a : {HEAL_SCRIPT, "--epochs", "1", "--print-steps"}) argv.push_back(a);
  argv.insert(argv.end(), {"--samples", nproc == 2 ? "6400" : "16000"});
  argv.insert(argv.end(), script_flags.begin(), script_flags.end());
  return argv;
}

// The final loss and checksum of an uninterrupted run, once per world size
// and script flags in a ctest run (shared_result.h).
inline std::string heal_reference(int nproc, const std::vector<std::string>& script_flags = {}) {
  std::string key = "python_heal reference " + std::to_string(nproc);
  for (const auto& f : script_flags) key += " " + f;
  return shared_result(key, [&] {
    // Nothing fails in it: no standby waits for a heal (one interpreter less).
    Finished f = run(heal_job(nproc, {"--no-standby"}, script_flags), heal_script_env());
    if (f.exit_code != 0) return std::string();
    return checksum_of(f.out);
  });
}
#endif

}  // namespace ddptest
