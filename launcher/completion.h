// Shell completion scripts for ddprun's flags (torchrun 2.x's
// --print-completion {bash,zsh,tcsh}). The script is made from the parser's
// own flag list, so it cannot name a flag that does not exist.
#pragma once

#include <string>
#include <vector>

namespace ddprun {

// The shells --print-completion knows.
bool is_completion_shell(const std::string& shell);

// A completion script for `ddprun` in shell: it completes the long flags
// (flags) and the subcommands, and file names after them.
std::string completion_script(const std::string& shell, const std::vector<std::string>& flags);

}  // namespace ddprun
