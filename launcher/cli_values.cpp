#include "launcher/cli_values.h"

#include <cctype>
#include <charconv>
#include <cmath>
#include <csignal>
#include <cstring>
#include <set>
#include <sstream>

#include "rendezvous/store/host_port.h"

namespace ddprun {

std::string quote(const std::string& s) { return "'" + s + "'"; }

int parse_int(const std::string& flag, const std::string& value, int min, int max) {
  int v = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size() || value.empty()) {
    throw UsageError(flag + ": expected an integer, got " + quote(value));
  }
  if (v < min || v > max) {
    throw UsageError(flag + ": " + value + " is out of range [" + std::to_string(min) + ", " +
                     std::to_string(max) + "]");
  }
  return v;
}

// A duration in seconds: 0 when allow_zero, else within [min, max]. Below
// a millisecond (our resolution) a poll loop would spin; past 30 days a
// value is a typo, and would overflow the clocks' arithmetic.
double parse_seconds(const std::string& flag, const std::string& value, bool allow_zero,
                     double min, double max) {
  size_t used = 0;
  double v = 0;
  try {
    v = std::stod(value, &used);
  } catch (const std::exception&) {
    used = 0;
  }
  if (used != value.size() || value.empty() || !std::isfinite(v)) {
    throw UsageError(flag + ": expected a number of seconds, got " + quote(value));
  }
  if (v < 0 || (!allow_zero && v == 0)) {
    throw UsageError(flag + ": must be " + (allow_zero ? "at least 0" : "greater than 0") +
                     ", got " + value);
  }
  if (v != 0 && (v < min || v > max)) {
    auto num = [](double d) {
      std::ostringstream s;
      s << d;
      return s.str();
    };
    throw UsageError(flag + ": " + value + " s is outside [" + num(min) + ", " + num(max) +
                     "] s" + (allow_zero ? " (0 turns it off)" : ""));
  }
  return v;
}

// --hang-timeout: "auto" (learned, at least 15 s), "auto:SECONDS" (learned,
// at least SECONDS), a number of seconds (fixed), or 0 (off).
void parse_hang_timeout(const std::string& value, CliOptions& o) {
  const std::string flag = "--hang-timeout";
  if (value == "auto") {
    o.hang_timeout_s = 0;
    o.hang_auto_floor_s = kDefaultHangFloorS;
    return;
  }
  if (value.rfind("auto:", 0) == 0) {
    o.hang_timeout_s = 0;
    o.hang_auto_floor_s = parse_seconds(flag + " auto:SECONDS", value.substr(5), false, 0.1, 30 * 86400.0);
    return;
  }
  if (value.find_first_not_of("0123456789.eE+-") != std::string::npos) {
    throw UsageError(flag + ": expected auto, auto:SECONDS or a number of seconds (0: off), got " + quote(value));
  }
  o.hang_timeout_s = parse_seconds(flag, value, true);
  o.hang_auto_floor_s = 0;
}

void check_nproc(const std::string& value) {
  if (value == "auto" || value == "gpu" || value == "cpu") return;
  if (value == "xpu") {
    throw UsageError("--nproc-per-node xpu: no XPU is visible here (ddprun runs workers on NVIDIA "
                     "GPUs or CPUs); use a number, auto, gpu or cpu");
  }
  int v = 0;
  auto [ptr, ec] = std::from_chars(value.data(), value.data() + value.size(), v);
  if (ec != std::errc() || ptr != value.data() + value.size() || value.empty() || v < 1) {
    throw UsageError("--nproc-per-node: expected a positive integer, auto, gpu or cpu, got " +
                     quote(value));
  }
  if (v > 4096) throw UsageError("--nproc-per-node: " + value + " workers is more than 4096");
}

void parse_nnodes(const std::string& value, CliOptions& o) {
  const auto colon = value.find(':');
  if (colon == std::string::npos) {
    o.min_nodes = o.max_nodes = parse_int("--nnodes", value, 1, 65536);
  } else {
    o.min_nodes = parse_int("--nnodes", value.substr(0, colon), 1, 65536);
    o.max_nodes = parse_int("--nnodes", value.substr(colon + 1), 1, 65536);
    if (o.min_nodes > o.max_nodes) {
      throw UsageError("--nnodes: MIN:MAX needs MIN <= MAX, got " + quote(value));
    }
  }
}

void parse_endpoint(const std::string& value, CliOptions& o) {
  HostPort hp;  // host, host:port or [v6addr]:port
  switch (split_host_port(value, hp)) {
    case HostPortError::kUnclosedBracket: throw UsageError("--rdzv-endpoint: unclosed '[' in " + quote(value));
    case HostPortError::kNotHostPort: throw UsageError("--rdzv-endpoint: expected HOST:PORT, got " + quote(value));
    case HostPortError::kNone: break;
  }
  o.rdzv_host = hp.host;
  o.rdzv_port = hp.port.empty() ? 29400 : parse_int("--rdzv-endpoint port", hp.port, 0, 65535);
}

// on/off/auto for --rdzv-host; torchrun's is_host takes true/false/1/0.
std::string parse_host_mode(const std::string& flag, const std::string& value) {
  std::string v;
  for (char c : value) v += static_cast<char>(std::tolower(static_cast<unsigned char>(c)));
  if (v == "auto") return "auto";
  if (v == "on" || v == "1" || v == "true" || v == "yes") return "on";
  if (v == "off" || v == "0" || v == "false" || v == "no") return "off";
  throw UsageError(flag + ": expected on, off or auto, got " + quote(value));
}


bool parse_limit_conf(const std::string& key, const std::string& val, ServiceLimits& limits) {
  const std::string flag = "--rdzv-conf " + key;
  constexpr int kMax = 2147483647;
  if (key == "max_value_bytes") {
    limits.max_value_bytes = parse_int(flag, val, 1, 64 << 20);
  } else if (key == "max_job_keys") {
    limits.max_job_keys = parse_int(flag, val, 1, kMax);
  } else if (key == "max_job_bytes") {
    limits.max_job_bytes = parse_int(flag, val, 1, kMax);
  } else if (key == "max_jobs") {
    limits.max_jobs = parse_int(flag, val, 1, 1000000);
  } else if (key == "max_waits_per_client") {
    limits.max_waits_per_client = parse_int(flag, val, 1, 1000000);
  } else if (key == "idle_timeout") {
    const double s = parse_seconds(flag, val, false);
    if (s < 1 || s > 86400) throw UsageError(flag + ": must be in [1, 86400] seconds, got " + val);
    limits.idle_timeout = std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
  } else {
    return false;
  }
  return true;
}


std::vector<std::string> split_list(const std::string& value) {
  std::vector<std::string> out;
  for (size_t start = 0; start <= value.size();) {
    size_t end = value.find(',', start);
    if (end == std::string::npos) end = value.size();
    out.push_back(value.substr(start, end - start));
    start = end + 1;
  }
  return out;
}

void parse_rdzv_conf(const std::string& value, CliOptions& o) {
  int max_attempts = 0;
  bool lease_given = false;
  for (const std::string& item : split_list(value)) {
    if (item.empty()) continue;
    const auto eq = item.find('=');
    if (eq == std::string::npos) {
      throw UsageError("--rdzv-conf: expected KEY=VALUE, got " + quote(item));
    }
    const std::string key = item.substr(0, eq), val = item.substr(eq + 1);
    if (key == "join_timeout") {
      o.join_timeout_s = parse_seconds("--rdzv-conf join_timeout", val, false);
    } else if (key == "last_call_timeout") {
      o.last_call_s = parse_seconds("--rdzv-conf last_call_timeout", val, true);
    } else if (key == "keep_alive_interval") {
      o.keep_alive_s = parse_seconds("--rdzv-conf keep_alive_interval", val, false);
    } else if (key == "lease_timeout") {
      o.lease_s = parse_seconds("--rdzv-conf lease_timeout", val, false);
      lease_given = true;
    } else if (key == "keep_alive_max_attempt") {
      max_attempts = parse_int("--rdzv-conf keep_alive_max_attempt", val, 1, 1000);
    } else if (key == "is_host") {
      o.rdzv_host_mode = parse_host_mode("--rdzv-conf is_host", val);
    } else if (parse_limit_conf(key, val, o.rdzv_limits)) {
    } else if (key == "close_timeout" || key == "timeout" || key == "read_timeout") {
      // torchrun keys with no meaning here; accepted so old commands still run.
    } else {
      throw UsageError("--rdzv-conf: unknown key " + quote(key) +
                       " (known: join_timeout, last_call_timeout, keep_alive_interval, "
                       "lease_timeout, keep_alive_max_attempt, is_host, max_value_bytes, "
                       "max_job_keys, max_job_bytes, max_jobs, max_waits_per_client, "
                       "idle_timeout)");
    }
  }
  // torchrun's way to say it: a node is lost after this many missed keep-alives.
  if (max_attempts > 0 && !lease_given) o.lease_s = o.keep_alive_s * max_attempts;
  if (o.lease_s < 2 * o.keep_alive_s) {
    throw UsageError("--rdzv-conf: lease_timeout (" + std::to_string(o.lease_s).substr(0, 5) +
                     " s) must be at least twice keep_alive_interval (" +
                     std::to_string(o.keep_alive_s).substr(0, 5) + " s)");
  }
}

// torchrun's --local-ranks-filter: "0,1,2".
std::vector<int> parse_local_ranks(const std::string& value) {
  std::vector<int> out;
  for (const std::string& item : split_list(value)) {
    int v = -1;
    auto [ptr, ec] = std::from_chars(item.data(), item.data() + item.size(), v);
    if (item.empty() || ec != std::errc() || ptr != item.data() + item.size() || v < 0) {
      throw UsageError("--local-ranks-filter: expected comma-separated local ranks (e.g. 0,1,2), got " +
                       quote(value));
    }
    out.push_back(v);
  }
  return out;
}

// torchrun's comma_separated_list: "a,b"; ",," is a comma inside an item.
std::vector<std::string> parse_filters(const std::string& value) {
  std::vector<std::string> out;
  if (value.empty()) return out;
  std::string item;
  for (size_t i = 0; i < value.size(); ++i) {
    if (value[i] == ',' && i + 1 < value.size() && value[i + 1] == ',') {
      item += ',';
      ++i;
    } else if (value[i] == ',') {
      out.push_back(item);
      item.clear();
    } else {
      item += value[i];
    }
  }
  out.push_back(item);
  return out;
}

// The signals ddprun handles; torchrun's --signals-to-handle picks among
// more, but ddprun always forwards these and handles no others.
std::vector<std::string> parse_signals(const std::string& value) {
  static const std::set<std::string> kHandled{"SIGTERM", "SIGINT", "SIGHUP",
                                              "SIGQUIT", "SIGUSR1", "SIGUSR2"};
  std::vector<std::string> out;
  for (const auto& name : parse_filters(value)) {
    if (!kHandled.count(name)) {
      throw UsageError("--signals-to-handle: " + quote(name) +
                       " is not one ddprun handles (it always forwards SIGTERM, SIGINT, SIGHUP, "
                       "SIGQUIT, SIGUSR1 and SIGUSR2 to the workers)");
    }
    out.push_back(name);
  }
  return out;
}


StdSelection parse_std_selection(const std::string& flag, const std::string& value) {
  StdSelection sel;
  auto mask = [&](const std::string& v) {
    if (v.size() != 1 || v[0] < '0' || v[0] > '3') {
      throw UsageError(flag + ": expected 0 (none), 1 (stdout), 2 (stderr), 3 (both) or " +
                       "LOCAL_RANK:MASK,..., got " + quote(value));
    }
    return v[0] - '0';
  };
  if (value.find(':') == std::string::npos) {
    sel.all = mask(value);
    return sel;
  }
  for (const std::string& item : split_list(value)) {
    const auto colon = item.find(':');
    if (colon == std::string::npos) {
      throw UsageError(flag + ": expected LOCAL_RANK:MASK in " + quote(value) + ", got " +
                       quote(item));
    }
    const int lr = parse_int(flag + " local rank", item.substr(0, colon), 0, 1 << 20);
    sel.by_local_rank[lr] = mask(item.substr(colon + 1));
  }
  return sel;
}

}  // namespace ddprun
