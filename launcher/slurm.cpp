#include "launcher/slurm.h"

#include <charconv>
#include <cstdint>

#include "launcher/cli.h"

extern char** environ;

namespace ddprun {
namespace {

constexpr size_t kMaxHosts = 1 << 20;  // a typo like node[1-999999999] must not eat memory

[[noreturn]] void bad_list(const std::string& list, const std::string& why) {
  throw UsageError("SLURM_JOB_NODELIST: " + why + " in '" + list + "' (set DDPRUN_NO_SLURM=1 to ignore Slurm)");
}

bool all_digits(const std::string& s) {
  if (s.empty()) return false;
  for (char c : s) {
    if (c < '0' || c > '9') return false;
  }
  return true;
}

uint64_t to_number(const std::string& s, const std::string& list) {
  uint64_t v = 0;
  auto [ptr, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || ptr != s.data() + s.size() || v > 999999999) bad_list(list, "number '" + s + "' too large");
  return v;
}

// "01-03,7" → 01 02 03 7 (zero padding kept: the width of the low end).
std::vector<std::string> expand_ranges(const std::string& ranges, const std::string& list) {
  std::vector<std::string> out;
  size_t start = 0;
  while (start <= ranges.size()) {
    size_t end = ranges.find(',', start);
    if (end == std::string::npos) end = ranges.size();
    const std::string item = ranges.substr(start, end - start);
    start = end + 1;
    const auto dash = item.find('-');
    const std::string lo = item.substr(0, dash);
    const std::string hi = dash == std::string::npos ? lo : item.substr(dash + 1);
    if (!all_digits(lo) || !all_digits(hi)) bad_list(list, "bad range '" + item + "'");
    const uint64_t a = to_number(lo, list), b = to_number(hi, list);
    if (a > b) bad_list(list, "range '" + item + "' runs backwards");
    if (b - a >= kMaxHosts || out.size() + (b - a) >= kMaxHosts) bad_list(list, "more than 1048576 hosts");
    for (uint64_t n = a; n <= b; ++n) {
      std::string digits = std::to_string(n);
      if (digits.size() < lo.size()) digits.insert(0, lo.size() - digits.size(), '0');
      out.push_back(std::move(digits));
    }
  }
  return out;
}

// One host expression: text with bracketed range groups, e.g. rack[1-2]-n[01-02].
void expand_one(const std::string& expr, const std::string& list, std::vector<std::string>& out) {
  std::vector<std::string> names{""};
  size_t i = 0;
  while (i < expr.size()) {
    const size_t open = expr.find('[', i);
    const std::string text = expr.substr(i, open == std::string::npos ? std::string::npos : open - i);
    if (text.find(']') != std::string::npos) bad_list(list, "unmatched ']'");
    for (auto& n : names) n += text;
    if (open == std::string::npos) break;
    const size_t close = expr.find(']', open);
    if (close == std::string::npos) bad_list(list, "unclosed '['");
    const auto numbers = expand_ranges(expr.substr(open + 1, close - open - 1), list);
    if (names.size() * numbers.size() + out.size() > kMaxHosts) bad_list(list, "more than 1048576 hosts");
    std::vector<std::string> next;
    next.reserve(names.size() * numbers.size());
    for (const auto& n : names) {
      for (const auto& num : numbers) next.push_back(n + num);
    }
    names = std::move(next);
    i = close + 1;
  }
  if (names.size() == 1 && names.front().empty()) bad_list(list, "empty host name");
  out.insert(out.end(), names.begin(), names.end());
}

std::string get(const std::map<std::string, std::string>& env, const char* name) {
  auto it = env.find(name);
  return it == env.end() ? "" : it->second;
}

// The first of these variables that is set.
std::string first_of(const std::map<std::string, std::string>& env, std::initializer_list<const char*> names,
                     const char** which = nullptr) {
  for (const char* n : names) {
    if (std::string v = get(env, n); !v.empty()) {
      if (which) *which = n;
      return v;
    }
  }
  return "";
}

int count(const std::string& name, const std::string& value) {
  int v = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size() || value.empty() || v < 0) {
    throw UsageError(name + ": expected a number, got '" + value + "' (set DDPRUN_NO_SLURM=1 to ignore Slurm)");
  }
  return v;
}

// Whether the user's own arguments hold this flag (--flag or --flag=VALUE),
// before a "--". Program arguments are scanned too: a program flag spelled
// like one of ddprun's would count, which is harmless for the two asked about.
bool has_flag(const std::vector<std::string>& args, std::initializer_list<const char*> names) {
  for (const auto& a : args) {
    if (a == "--") return false;
    for (const char* n : names) {
      const std::string name = n;
      if (a == name || a.rfind(name + "=", 0) == 0) return true;
    }
  }
  return false;
}

}  // namespace

std::vector<std::string> expand_slurm_hostlist(const std::string& list) {
  std::vector<std::string> out;
  int depth = 0;
  size_t start = 0;
  for (size_t i = 0; i <= list.size(); ++i) {
    const char c = i < list.size() ? list[i] : ',';
    if (c == '[') ++depth;
    if (c == ']') --depth;
    if (depth < 0) bad_list(list, "unmatched ']'");
    if (depth > 1) bad_list(list, "nested '['");
    if (c == ',' && depth == 0) {
      if (i == start) bad_list(list, "empty host name");
      expand_one(list.substr(start, i - start), list, out);
      start = i + 1;
    }
  }
  if (depth != 0) bad_list(list, "unclosed '['");
  return out;
}

int slurm_rdzv_port(const std::string& job_id) {
  if (!all_digits(job_id) || job_id.size() > 18) return 29400;
  return 29400 + static_cast<int>(std::stoull(job_id) % 1000);
}

SlurmDefaults slurm_defaults(const std::map<std::string, std::string>& env,
                             const std::vector<std::string>& user_args) {
  SlurmDefaults d;
  const std::string off = get(env, "DDPRUN_NO_SLURM");
  if (!off.empty() && off != "0") return d;
  const std::string job_id = get(env, "SLURM_JOB_ID");
  const std::string node_id = first_of(env, {"SLURM_NODEID", "SLURM_PROCID"});
  if (job_id.empty() || node_id.empty()) return d;  // not inside a job step
  const std::string pet_standalone = get(env, "PET_STANDALONE");
  if (has_flag(user_args, {"--standalone"}) || (!pet_standalone.empty() && pet_standalone != "0")) return d;

  const bool in_srun_step = !get(env, "SLURM_STEP_NUM_NODES").empty();
  const char* nodes_var = "SLURM_NNODES";
  const std::string nodes_text =
      in_srun_step ? first_of(env, {"SLURM_STEP_NUM_NODES"}, &nodes_var)
                   : first_of(env, {"SLURM_NNODES", "SLURM_JOB_NUM_NODES"}, &nodes_var);
  const int nnodes = nodes_text.empty() ? 1 : count(nodes_var, nodes_text);
  if (!in_srun_step && nnodes > 1) {
    // An sbatch script runs on the first node only: a multi-node rendezvous
    // would wait for nodes that never come.
    d.warning = "Slurm: this is the batch script of a " + std::to_string(nnodes) +
                "-node job, running on one node; nothing taken from Slurm. To use every node: "
                "srun --ntasks-per-node=1 ddprun ...";
    return d;
  }
  if (in_srun_step) {
    const char* tasks_var = "SLURM_STEP_NUM_TASKS";
    const std::string tasks_text = first_of(env, {"SLURM_STEP_NUM_TASKS", "SLURM_NTASKS"}, &tasks_var);
    const std::string per_node = get(env, "SLURM_NTASKS_PER_NODE");
    const int tasks = tasks_text.empty() ? nnodes : count(tasks_var, tasks_text);
    if ((!per_node.empty() && count("SLURM_NTASKS_PER_NODE", per_node) > 1) || tasks > nnodes) {
      throw UsageError("Slurm started " + std::to_string(tasks) + " tasks on " + std::to_string(nnodes) +
                       " node(s), but ddprun runs once per node and starts the workers itself: use srun "
                       "--ntasks-per-node=1 (or set DDPRUN_NO_SLURM=1)");
    }
  }
  const int node_rank = count("SLURM_NODEID", node_id);

  if (!has_flag(user_args, {"--nnodes"}) && get(env, "PET_NNODES").empty()) {
    d.args.push_back({"--nnodes", std::to_string(nnodes), nodes_var});
    d.args.push_back({"--node-rank", std::to_string(node_rank), "SLURM_NODEID"});
  }
  if (nnodes > 1) {
    // One node needs no endpoint: its private rendezvous takes a free port.
    const char* list_var = "SLURM_JOB_NODELIST";
    const std::string list =
        in_srun_step ? first_of(env, {"SLURM_STEP_NODELIST", "SLURM_JOB_NODELIST", "SLURM_NODELIST"}, &list_var)
                     : first_of(env, {"SLURM_JOB_NODELIST", "SLURM_NODELIST"}, &list_var);
    if (list.empty()) throw UsageError("SLURM_JOB_NODELIST: not set in a " + std::to_string(nnodes) + "-node Slurm step (set DDPRUN_NO_SLURM=1 to ignore Slurm)");
    std::vector<std::string> hosts;
    try {
      hosts = expand_slurm_hostlist(list);
    } catch (const UsageError& e) {
      // Name the variable the list came from.
      const std::string msg = e.what();
      throw UsageError(list_var + msg.substr(msg.find(':')));
    }
    d.args.push_back({"--rdzv-endpoint", hosts.front() + ":" + std::to_string(slurm_rdzv_port(job_id)), list_var});
  }
  d.args.push_back({"--rdzv-id", job_id, "SLURM_JOB_ID"});

  d.summary = "from Slurm (flags given override; DDPRUN_NO_SLURM=1 turns this off):";
  for (const auto& a : d.args) d.summary += " " + a.flag + " " + a.value;
  return d;
}

std::map<std::string, std::string> environment_map() {
  std::map<std::string, std::string> env;
  for (char** e = environ; e && *e; ++e) {
    const std::string kv = *e;
    const auto eq = kv.find('=');
    if (eq != std::string::npos) env.emplace(kv.substr(0, eq), kv.substr(eq + 1));
  }
  return env;
}

}  // namespace ddprun
