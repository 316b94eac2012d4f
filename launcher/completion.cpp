#include "launcher/completion.h"

#include <sstream>

namespace ddprun {
namespace {

// Subcommands that take the place of ENTRYPOINT (launcher/main.cpp).
const char* const kSubcommands = "status trace-merge report";

std::string joined(const std::vector<std::string>& words) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : " ") + w;
  return out;
}

}  // namespace

bool is_completion_shell(const std::string& shell) {
  return shell == "bash" || shell == "zsh" || shell == "tcsh";
}

std::string completion_script(const std::string& shell, const std::vector<std::string>& flags) {
  std::ostringstream s;
  const std::string all = joined(flags);
  if (shell == "bash") {
    // Flags where the word starts with '-', subcommands as the first word,
    // file names everywhere else (ENTRYPOINT and its arguments).
    s << "# bash completion for ddprun: eval \"$(ddprun --print-completion bash)\"\n"
      << "_ddprun() {\n"
      << "  local cur=\"${COMP_WORDS[COMP_CWORD]}\"\n"
      << "  if [[ \"$cur\" == -* ]]; then\n"
      << "    COMPREPLY=($(compgen -W \"" << all << "\" -- \"$cur\"))\n"
      << "  elif [[ $COMP_CWORD -eq 1 ]]; then\n"
      << "    COMPREPLY=($(compgen -W \"" << kSubcommands << "\" -- \"$cur\") $(compgen -f -- \"$cur\"))\n"
      << "  else\n"
      << "    COMPREPLY=($(compgen -f -- \"$cur\"))\n"
      << "  fi\n"
      << "}\n"
      << "complete -o filenames -F _ddprun ddprun\n";
  } else if (shell == "zsh") {
    s << "#compdef ddprun\n"
      << "# zsh completion for ddprun: ddprun --print-completion zsh > ~/.zsh/completions/_ddprun\n"
      << "# (a folder on $fpath), or source <(ddprun --print-completion zsh) after compinit\n"
      << "_ddprun() {\n"
      << "  if [[ $PREFIX == -* ]]; then\n"
      << "    compadd -- " << all << "\n"
      << "  else\n"
      << "    (( CURRENT == 2 )) && compadd -- " << kSubcommands << "\n"
      << "    _files\n"
      << "  fi\n"
      << "}\n"
      << "# autoloaded from fpath: complete now; sourced: register\n"
      << "if [[ $funcstack[1] == _ddprun ]]; then _ddprun \"$@\"; else compdef _ddprun ddprun; fi\n";
  } else {
    s << "# tcsh completion for ddprun: eval `ddprun --print-completion tcsh`\n"
      << "complete ddprun 'c/--/(";
    for (const auto& f : flags) s << (&f == &flags.front() ? "" : " ") << f.substr(2);
    s << ")/' 'p/*/f/'\n";
  }
  return s.str();
}

}  // namespace ddprun
