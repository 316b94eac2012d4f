#include "launcher/flag_matching.h"

#include <algorithm>
#include <set>

#include "launcher/cli.h"

namespace ddprun {
namespace {

std::string normalized(std::string s) {
  std::replace(s.begin(), s.end(), '_', '-');
  return s;
}

std::string quote(const std::string& s) { return "'" + s + "'"; }

// The flag `name` (without "--") stands for. Throws UsageError.
const FlagSpec& find_long(const std::string& name, const std::vector<FlagSpec>& flags) {
  const std::string n = normalized(name);
  for (const auto& f : flags) {
    for (const auto& l : f.long_names) {
      if (normalized(l) == n) return f;
    }
  }
  std::vector<const FlagSpec*> candidates;
  for (const auto& f : flags) {
    for (const auto& l : f.long_names) {
      if (!n.empty() && normalized(l).rfind(n, 0) == 0) {
        candidates.push_back(&f);
        break;
      }
    }
  }
  if (candidates.size() == 1) return *candidates.front();
  if (candidates.size() > 1) {
    std::string list;
    for (const auto* f : candidates) list += (list.empty() ? "--" : ", --") + f->long_names.front();
    throw UsageError("ambiguous option " + quote("--" + name) + " could match " + list);
  }
  // The nearest name, if near enough to be a slip of the fingers.
  const FlagSpec* nearest = nullptr;
  size_t best = std::string::npos;
  for (const auto& f : flags) {
    for (const auto& l : f.long_names) {
      const size_t d = edit_distance(n, normalized(l));
      if (d < best) {
        best = d;
        nearest = &f;
      }
    }
  }
  std::string msg = "unknown option " + quote("--" + name);
  if (nearest && best <= std::max<size_t>(2, n.size() / 3)) {
    msg += " (did you mean --" + nearest->long_names.front() + "?)";
  } else {
    msg += " (see ddprun --help)";
  }
  throw UsageError(msg);
}

}  // namespace

size_t edit_distance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diag = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      const size_t up = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diag + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diag = up;
    }
  }
  return row[b.size()];
}

std::vector<std::string> canonicalize_flags(const std::vector<std::string>& args,
                                            const std::vector<FlagSpec>& flags,
                                            std::vector<std::string>* canonical_given) {
  std::vector<std::string> out;
  size_t i = 0;
  for (; i < args.size(); ++i) {
    const std::string& a = args[i];
    if (a == "--" || a.size() < 2 || a[0] != '-') break;  // the entrypoint comes
    const FlagSpec* spec = nullptr;
    bool inline_value = false;
    if (a[1] != '-') {
      for (const auto& f : flags) {
        if (std::find(f.short_names.begin(), f.short_names.end(), a[1]) != f.short_names.end()) {
          spec = &f;
        }
      }
      if (!spec) throw UsageError("unknown option " + quote(a.substr(0, 2)) + " (see ddprun --help)");
      inline_value = a.size() > 2;  // -r3, or bundled flags (-mv): CLI11 takes them apart
      out.push_back(a);
    } else {
      const auto eq = a.find('=');
      const std::string name = a.substr(2, eq == std::string::npos ? std::string::npos : eq - 2);
      spec = &find_long(name, flags);
      inline_value = eq != std::string::npos;
      out.push_back("--" + spec->long_names.front() + (inline_value ? a.substr(eq) : ""));
    }
    if (canonical_given) canonical_given->push_back("--" + spec->long_names.front());
    if (spec->takes_value && !inline_value && i + 1 < args.size()) out.push_back(args[++i]);
  }
  out.insert(out.end(), args.begin() + static_cast<long>(i), args.end());
  return out;
}

}  // namespace ddprun
