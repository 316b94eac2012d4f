// argparse-like handling of long option names before CLI11 sees them:
// '-' and '_' are the same letter, an unambiguous prefix stands for the
// whole name (`--nproc_per` → --nproc-per-node), an ambiguous one and an
// unknown one are one-line errors (the unknown one with the nearest name).
#pragma once

#include <string>
#include <vector>

namespace ddprun {

struct FlagSpec {
  std::vector<std::string> long_names;  // without "--"; the first is the canonical one
  std::vector<char> short_names;        // 'm' for -m
  bool takes_value = false;
};

// Rewrites the options before the entrypoint in args: every long option is
// given its canonical name ("--nproc_per=2" → "--nproc-per-node=2"). Stops
// at "--" or at the first argument that is not an option. Throws UsageError.
// `canonical_given`, when not null, receives the canonical names ("--x")
// of the options found, in order.
std::vector<std::string> canonicalize_flags(const std::vector<std::string>& args,
                                            const std::vector<FlagSpec>& flags,
                                            std::vector<std::string>* canonical_given = nullptr);

// Levenshtein distance (insertions, deletions, substitutions).
size_t edit_distance(const std::string& a, const std::string& b);

}  // namespace ddprun
