#include "launcher/status_command.h"

#include <poll.h>
#include <signal.h>
#include <sys/inotify.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <fstream>
#include <sstream>

#include <grpcpp/grpcpp.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <nlohmann/json.hpp>

#include "agent/agent.h"
#include "channel/env_names.h"
#include "launcher/auth_options.h"
#include "launcher/cli.h"
#include "launcher/subcommand_parse.h"
#include "launcher/job_file.h"
#include "channel/stack_dump.h"
#include "rendezvous/client/client.h"
#include "rendezvous/store/host_port.h"

namespace ddprun {
namespace {

const char* phase_name(JobPhase p) {
  switch (p) {
    case JobPhase::kActive: return "running";
    case JobPhase::kSucceeded: return "succeeded";
    case JobPhase::kFailed: return "failed";
  }
  return "?";
}

// "0.3 s", "4 min 2 s", "2 h 5 min".
std::string age_text(std::chrono::milliseconds age) {
  const int64_t ms = age.count();
  char buf[48];
  if (ms < 60'000) {
    std::snprintf(buf, sizeof(buf), "%.1f s", ms / 1000.0);
  } else if (ms < 3'600'000) {
    std::snprintf(buf, sizeof(buf), "%lld min %lld s", static_cast<long long>(ms / 60'000),
                  static_cast<long long>(ms / 1000 % 60));
  } else {
    std::snprintf(buf, sizeof(buf), "%lld h %lld min", static_cast<long long>(ms / 3'600'000),
                  static_cast<long long>(ms / 60'000 % 60));
  }
  return buf;
}

std::string ranks_text(const NodeStatus& n) {
  if (n.first_global_rank < 0) return n.waiting ? "(waiting)" : "(joining)";
  return std::to_string(n.first_global_rank) + ".." +
         std::to_string(n.first_global_rank + n.local_world_size - 1);
}

// host, host:port or [v6]:port, as --rdzv-endpoint takes it for ddprun.
std::string checked_endpoint(const std::string& value) {
  HostPort hp;
  if (split_host_port(value, hp) != HostPortError::kNone) {
    throw UsageError("--rdzv-endpoint: expected HOST:PORT, got '" + value + "'");
  }
  if (!hp.port.empty() && !parse_port(hp.port)) {
    throw UsageError("--rdzv-endpoint: port '" + hp.port + "' is not a port (1..65535)");
  }
  return hp.text(29400);
}

}  // namespace

std::string status_call_failure(const std::string& job_id, const std::string& endpoint,
                                const RendezvousCallError& e) {
  const std::string where = "job '" + job_id + "' at " + endpoint + ": ";
  switch (e.code()) {
    case grpc::StatusCode::UNAVAILABLE:
      // The service itself said so: its job is over and ddprun is exiting.
      if (std::string(e.what()).find("rendezvous: shutting down") != std::string::npos) {
        return where + "the job is ending (its rendezvous is shutting down)";
      }
      [[fallthrough]];
    case grpc::StatusCode::DEADLINE_EXCEEDED:
      return where + "the rendezvous does not answer (is the job running, and the endpoint "
                     "and TLS settings right?)";
    case grpc::StatusCode::UNAUTHENTICATED:
      return where + "wrong or missing token (give the job's --rdzv-token, DDPRUN_RDZV_TOKEN "
                     "or --rdzv-token-file)";
    case grpc::StatusCode::NOT_FOUND:
      return where + "no such job at this rendezvous (check --rdzv-id; has it ended?)";
    default:
      return where + e.what();
  }
}

namespace {

struct Target {
  std::string job_id;
  std::string endpoint;
  RendezvousAuth auth;
  long pid = 0;
};

}  // namespace

namespace {

// "0.33 straggler", "0.02", "-" (not scored yet).
std::string score_text(const std::optional<NodeScore>& s) {
  if (!s) return "-";
  char buf[32];
  std::snprintf(buf, sizeof(buf), "%.2f%s", s->score, s->straggler ? " straggler" : "");
  return buf;
}

// "3 (0.41)", "3 (0.41) straggler", "-".
std::string slowest_text(const std::optional<NodeCollectives>& c) {
  if (!c || !c->slowest_rank) return "-";
  char buf[48];
  std::snprintf(buf, sizeof(buf), "%d (%.2f)%s", *c->slowest_rank, c->slowest_score,
                c->slowest_is_straggler ? " straggler" : "");
  return buf;
}

}  // namespace

std::string format_status(const std::string& job_id, const std::string& endpoint,
                          const JobStatus& s, long pid) {
  std::string out = "job " + job_id;
  out += pid > 0 ? " (ddprun pid " + std::to_string(pid) + ", rendezvous " + endpoint + ")\n"
                 : " (rendezvous " + endpoint + ")\n";
  char line[512];
  // The detail may be long (a failure's root cause, a hang's verdict): whole.
  out += std::string("  phase       ") + phase_name(s.phase) + (s.detail.empty() ? "" : ": " + s.detail) + "\n";
  std::snprintf(line, sizeof(line), "  round       %lld (%s, opened for: %s)\n",
                static_cast<long long>(s.round), s.round_closed ? "running" : "gathering nodes",
                to_string(s.reason));
  out += line;
  std::snprintf(line, sizeof(line), "  restarts    %d of %d\n", s.restart_count,
                s.settings.max_restarts);
  out += line;
  if (!s.control_node.empty()) {
    out += "  control     node " + s.control_node + " serves the rendezvous (term " +
           std::to_string(s.control_term) + "; another takes over if it is lost)\n";
  }
  if (s.heal_generation > 0) {
    std::snprintf(line, sizeof(line),
                  "  heals       %u in this round (failed workers replaced, lost nodes taken over or shrunk "
                  "past, nodes that joined the running round)\n",
                  s.heal_generation);
    out += line;
  }
  int members = 0;
  for (const auto& n : s.nodes) members += n.waiting ? 0 : 1;
  std::snprintf(line, sizeof(line), "  world size  %d (%d node%s, --nnodes %d:%d)%s\n",
                s.world_size, members, members == 1 ? "" : "s", s.settings.min_nodes,
                s.settings.max_nodes,
                s.nodes_waiting > 0 ? (", " + std::to_string(s.nodes_waiting) + " waiting").c_str()
                                    : "");
  out += line;
  out += "  nodes\n";
  // Across nodes: each node's job-wide straggler score, and its slowest
  // rank by its own agent's scores.
  bool scored = false;
  for (const auto& n : s.nodes) scored = scored || n.score || (n.collectives && n.collectives->slowest_rank);
  std::snprintf(line, sizeof(line), "    %-9s %-13s %-24s %-28s %-6s %s\n", "NODE RANK", "GLOBAL RANKS",
                "HOST", "NODE ID", "HEALS", scored ? "LAST SEEN  SCORE            SLOWEST RANK" : "LAST SEEN");
  out += line;
  for (const auto& n : s.nodes) {
    const bool leased = n.last_seen_ago.count() >= 0;
    const std::string seen = leased ? age_text(n.last_seen_ago) + " ago" : "- (no lease)";
    // Whether all its workers heal in place in this round (its keep-alives
    // say so; a node without a lease sends none).
    const char* heals = !leased ? "-" : n.heals ? "yes" : "no";
    std::string score_cols;
    if (scored) {
      char cols[96];
      std::snprintf(cols, sizeof(cols), "%-10s %-16s %s", seen.c_str(), score_text(n.score).c_str(),
                    slowest_text(n.collectives).c_str());
      score_cols = cols;
    }
    std::snprintf(line, sizeof(line), "    %-9s %-13s %-24s %-28s %-6s %s\n",
                  n.node_rank < 0 ? "-" : std::to_string(n.node_rank).c_str(),
                  ranks_text(n).c_str(), n.host.substr(0, 24).c_str(),
                  n.node_id.substr(0, 28).c_str(), heals, scored ? score_cols.c_str() : seen.c_str());
    out += line;
  }
  if (!s.progress || !s.progress->step) {
    out += "  last step   none reported yet\n";
  } else {
    const ProgressInfo& p = *s.progress;
    std::string step = std::to_string(*p.step);
    if (p.total_steps) step += " of " + std::to_string(*p.total_steps);
    std::string extra;
    if (p.epoch) extra += "epoch " + std::to_string(*p.epoch + 1);  // counted from 1 for people
    if (p.loss) {
      std::snprintf(line, sizeof(line), "loss %.4g", *p.loss);
      extra += (extra.empty() ? "" : ", ") + std::string(line);
    }
    if (p.samples_per_sec > 0) {
      std::snprintf(line, sizeof(line), "%.1f samples/s", p.samples_per_sec);
      extra += (extra.empty() ? "" : ", ") + std::string(line);
    }
    out += "  last step   " + step + (extra.empty() ? "" : " (" + extra + ")") + ", " +
           age_text(p.age) + " ago (rank " + std::to_string(p.global_rank) + ", round " +
           std::to_string(p.round) + ")\n";
  }
  if (s.progress && s.progress->slowest_rank) {
    std::snprintf(line, sizeof(line), "  slowest     rank %d, score %.2f%s (rank %d's node)\n", *s.progress->slowest_rank,
                  s.progress->slowest_score, s.progress->slowest_is_straggler ? ", a straggler" : "",
                  s.progress->global_rank);
    out += line;
  }
  std::string ckpt;
  if (s.progress && s.progress->saved_step) ckpt = "saved at step " + std::to_string(*s.progress->saved_step);
  if (s.progress && s.progress->restored_step) {
    ckpt += (ckpt.empty() ? "" : "; ") + std::string("resumed from step ") +
            std::to_string(*s.progress->restored_step);
  }
  out += "  checkpoint  " + (ckpt.empty() ? std::string("none reported") : ckpt) + "\n";
  if (s.progress && s.progress->verify_every > 0) {
    const ProgressInfo& p = *s.progress;
    std::string replicas = p.replicas_agreed_step ? "agree at step " + std::to_string(*p.replicas_agreed_step)
                                                  : std::string("not compared yet");
    replicas += " (compared every " + std::to_string(p.verify_every) + " steps)";
    if (p.replica_verdicts > 0) {
      replicas += "; found apart " + std::to_string(p.replica_verdicts) + (p.replica_verdicts == 1 ? " time" : " times") +
                  ", the last: " + p.replica_verdict;
    }
    out += "  replicas    " + replicas + "\n";
  } else if (s.progress) {
    out += "  replicas    not compared (--verify-every 0, or a program without a Healer)\n";
  }
  return out;
}

std::string format_status_json(const std::string& job_id, const std::string& endpoint,
                               const JobStatus& s, long pid) {
  using nlohmann::json;
  json j;
  j["job_id"] = job_id;
  j["endpoint"] = endpoint;
  if (pid > 0) j["pid"] = pid;
  j["phase"] = phase_name(s.phase);
  j["detail"] = s.detail;
  j["round"] = s.round;
  j["round_closed"] = s.round_closed;
  j["round_reason"] = to_string(s.reason);
  j["restart_count"] = s.restart_count;
  j["max_restarts"] = s.settings.max_restarts;
  j["world_size"] = s.world_size;
  j["min_nodes"] = s.settings.min_nodes;
  j["max_nodes"] = s.settings.max_nodes;
  j["nodes_waiting"] = s.nodes_waiting;
  j["heals"] = s.heal_generation;
  if (!s.control_node.empty()) j["control_plane"] = {{"node", s.control_node}, {"term", s.control_term}};
  j["nodes"] = json::array();
  for (const auto& n : s.nodes) {
    json jn{{"node_id", n.node_id},
            {"host", n.host},
            {"node_rank", n.node_rank},
            {"local_world_size", n.local_world_size},
            {"first_global_rank", n.first_global_rank},
            {"waiting", n.waiting},
            {"last_seen_ms_ago", n.last_seen_ago.count()},
            {"heals", n.last_seen_ago.count() < 0 ? nlohmann::json(nullptr) : nlohmann::json(n.heals)},
            // Job-wide straggler score of the node (null: not scored yet).
            {"score", n.score ? json(n.score->score) : json(nullptr)},
            {"straggler", n.score && n.score->straggler}};
    if (n.collectives && n.collectives->slowest_rank) {
      jn["slowest_rank"] = *n.collectives->slowest_rank;
      jn["slowest_score"] = n.collectives->slowest_score;
      jn["slowest_is_straggler"] = n.collectives->slowest_is_straggler;
    } else {
      jn["slowest_rank"] = nullptr;
    }
    j["nodes"].push_back(jn);
  }
  if (s.progress) {
    const ProgressInfo& p = *s.progress;
    auto opt = [](const auto& v) { return v ? json(*v) : json(nullptr); };
    json jp{{"global_rank", p.global_rank},
            {"round", p.round},
            {"step", opt(p.step)},
            {"total_steps", opt(p.total_steps)},
            {"epoch", opt(p.epoch)},
            // JSON has no NaN: a loss that is not finite is given as text.
            {"loss", p.loss ? (std::isfinite(*p.loss) ? json(*p.loss) : json(std::to_string(*p.loss)))
                            : json(nullptr)},
            {"samples", p.samples},
            {"samples_per_sec", p.samples_per_sec},
            {"saved_step", opt(p.saved_step)},
            {"restored_step", opt(p.restored_step)},
            {"age_ms", p.age.count()},
            {"slowest_rank", opt(p.slowest_rank)},
            {"slowest_score", p.slowest_score},
            {"slowest_is_straggler", p.slowest_is_straggler},
            // --verify-every (0: not compared), the newest step every
            // rank's replica agreed at, and the times they were found apart.
            {"verify_every", p.verify_every},
            {"replicas_agreed_step", opt(p.replicas_agreed_step)},
            {"replica_verdicts", p.replica_verdicts},
            {"replica_verdict", p.replica_verdict.empty() ? json(nullptr) : json(p.replica_verdict)}};
    j["progress"] = jp;
  } else {
    j["progress"] = nullptr;
  }
  return j.dump(2);
}

namespace {

// `ddprun status --stacks`: signals the ddprun of each local job (each of
// its agents on this machine) and prints the stacks it copies to the job
// folder, waiting for each copy's rename with inotify.
int print_asked_stacks(const std::vector<JobFileEntry>& jobs, const std::string& dir, double timeout_s) {
  const int in = inotify_init1(IN_CLOEXEC);
  if (in < 0 || inotify_add_watch(in, dir.c_str(), IN_MOVED_TO) < 0) {
    std::fprintf(stderr, "ddprun: error: status: --stacks: cannot watch %s: %s\n", dir.c_str(), std::strerror(errno));
    if (in >= 0) close(in);
    return kExitWorkerFailed;
  }
  int exit_code = kExitOk;
  for (const auto& j : jobs) {
    const std::string path = asked_stacks_path(dir, j.pid);
    const std::string name = path.substr(path.rfind('/') + 1);
    if (process_start_time(j.pid) != j.start_time || kill(static_cast<pid_t>(j.pid), channel::stack_dump_signal()) != 0) {
      std::fprintf(stderr, "ddprun: error: status: --stacks: job '%s' (ddprun pid %ld) has ended\n", j.run_id.c_str(), j.pid);
      exit_code = kExitWorkerFailed;
      continue;
    }
    // The workers answer within 3 s (or are named as unable to).
    const auto deadline = std::chrono::steady_clock::now() + std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000));
    // Or its line saying why it could not write them (the copy's name + ".err").
    const std::string err_name = name + ".err";
    bool got = false, failed = false;
    while (!got && !failed) {
      const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(deadline - std::chrono::steady_clock::now());
      if (left.count() <= 0) break;
      pollfd p{in, POLLIN, 0};
      if (poll(&p, 1, static_cast<int>(left.count())) <= 0) continue;
      alignas(inotify_event) char buf[4096];
      const ssize_t n = read(in, buf, sizeof(buf));
      for (ssize_t at = 0; at < n;) {
        const auto* e = reinterpret_cast<const inotify_event*>(buf + at);
        if (e->len && name == e->name) got = true;
        if (e->len && err_name == e->name) failed = true;
        at += static_cast<ssize_t>(sizeof(inotify_event) + e->len);
      }
    }
    if (failed && !got) {
      std::ifstream f(path + ".err");
      std::string why;
      std::getline(f, why);
      std::fprintf(stderr, "ddprun: error: status: --stacks: job '%s' (ddprun pid %ld): %s\n", j.run_id.c_str(), j.pid,
                   why.c_str());
      std::remove((path + ".err").c_str());
      exit_code = kExitWorkerFailed;
      continue;
    }
    if (!got) {
      std::fprintf(stderr, "ddprun: error: status: --stacks: job '%s' (ddprun pid %ld) gave no stacks within %g s "
                   "(its workers may not run now; raise --timeout)\n", j.run_id.c_str(), j.pid, timeout_s);
      exit_code = kExitWorkerFailed;
      continue;
    }
    std::ifstream f(path);
    std::stringstream text;
    text << f.rdbuf();
    std::printf("job %s (ddprun pid %ld)\n%s\n", j.run_id.c_str(), j.pid, text.str().c_str());
  }
  close(in);
  return exit_code;
}

}  // namespace

int run_status_command(const std::vector<std::string>& args) {
  CLI::App app{
      "ddprun status: where a running job stands (round, restarts, nodes and ranks, last step\n"
      "and checkpoint). With no --rdzv-endpoint: the jobs this user runs on this machine.",
      "ddprun status"};
  std::string endpoint, job_id;
  bool json = false;
  double timeout_s = 5;
  AuthFlags auth_flags;
  app.add_option("--rdzv-endpoint,--rdzv_endpoint", endpoint,
                 "HOST:PORT of the job's rendezvous [default: this user's jobs on this machine]");
  app.add_option("--rdzv-id,--rdzv_id", job_id, "The job's id (--rdzv-id it was started with)");
  app.add_option("--rdzv-token,--rdzv_token", auth_flags.token,
                 "The job's token (better: DDPRUN_RDZV_TOKEN or --rdzv-token-file)");
  app.add_option("--rdzv-token-file,--rdzv_token_file", auth_flags.token_file,
                 "File holding the token (one line)");
  app.add_option("--rdzv-tls-cert,--rdzv_tls_cert", auth_flags.tls.cert, "PEM client certificate");
  app.add_option("--rdzv-tls-key,--rdzv_tls_key", auth_flags.tls.key, "PEM private key");
  app.add_option("--rdzv-tls-ca,--rdzv_tls_ca", auth_flags.tls.ca, "PEM CA of the rendezvous");
  app.add_option("--timeout", timeout_s, "Seconds to wait for an answer [default: 5]")
      ->check(CLI::Range(0.1, 3600.0));
  app.add_flag("--json", json, "Print JSON (an array when several jobs are shown)");
  bool stacks = false;
  app.add_flag("--stacks", stacks,
               "Print every worker's stacks and who waits for whom; the job goes on (this user's jobs on "
               "this machine)");
  if (auto done = parse_subcommand(app, args, "status")) return *done;
  bool timeout_given = app.count("--timeout") > 0;

  std::vector<Target> targets;
  try {
    if (stacks && !endpoint.empty()) {
      throw UsageError("--stacks: only for this user's jobs on this machine (it signals their ddprun); "
                       "run it on the job's nodes without --rdzv-endpoint");
    }
    if (stacks && json) throw UsageError("--stacks: prints text, not --json");
    if (!endpoint.empty()) {
      if (job_id.empty()) throw UsageError("--rdzv-id: needed with --rdzv-endpoint (the job's id)");
      std::vector<std::string> warnings;  // a token on the command line is the user's choice here
      const char* env_token = getenv(channel::kRdzvToken);
      targets.push_back(Target{job_id, checked_endpoint(endpoint),
                               resolve_auth(auth_flags, env_token ? env_token : "", warnings), 0});
    } else {
      if (!auth_flags.token.empty() || !auth_flags.token_file.empty()) {
        throw UsageError("--rdzv-token: only with --rdzv-endpoint (this user's local jobs carry "
                         "their own)");
      }
      std::vector<std::string> warnings;
      std::vector<JobFileEntry> jobs;
      const std::string dir = job_dir();
      try {
        jobs = running_jobs(warnings, dir);
      } catch (const std::runtime_error& e) {
        std::fprintf(stderr, "ddprun: error: status: %s\n", e.what());
        return kExitWorkerFailed;
      }
      for (const auto& w : warnings) std::fprintf(stderr, "ddprun: warning: status: %s\n", w.c_str());
      if (stacks) {
        std::vector<JobFileEntry> mine;
        for (const auto& j : jobs) {
          if (job_id.empty() || j.run_id == job_id) mine.push_back(j);
        }
        if (!mine.empty()) return print_asked_stacks(mine, dir, timeout_given ? timeout_s : 10.0);
      }
      std::vector<std::pair<std::string, std::string>> passed;  // jobs not contacted, and why
      for (auto& j : jobs) {
        if (!job_id.empty() && j.run_id != job_id) continue;
        // Several agents of one job on this machine: the job once.
        const bool seen = std::any_of(targets.begin(), targets.end(), [&](const Target& t) {
          return t.job_id == j.run_id && t.endpoint == j.endpoint;
        });
        if (seen) continue;
        // The token goes only where this user's own ddprun listens, here.
        if (const std::string why = why_not_contacted(j); !why.empty()) {
          passed.emplace_back(j.run_id, why);
          continue;
        }
        targets.push_back(Target{j.run_id, j.endpoint, j.auth, j.pid});
      }
      for (const auto& [id, why] : passed) {
        // Said only for a job no other agent of this machine shows.
        const bool shown = std::any_of(targets.begin(), targets.end(), [&, &id = id](const Target& t) {
          return t.job_id == id;
        });
        if (!shown) std::fprintf(stderr, "ddprun: warning: status: job %s: %s\n", id.c_str(), why.c_str());
      }
      if (targets.empty()) {
        std::fprintf(stderr, "ddprun: error: status: %s (looked in %s; for a job elsewhere give "
                     "--rdzv-endpoint and --rdzv-id)\n",
                     job_id.empty() ? "no ddprun job of this user runs on this machine"
                                    : ("no job '" + job_id + "' of this user runs on this machine").c_str(),
                     dir.c_str());
        return kExitWorkerFailed;
      }
    }
  } catch (const UsageError& e) {
    std::fprintf(stderr, "ddprun: error: status: %s\n", e.what());
    return kExitUsage;
  }

  int exit_code = kExitOk;
  std::vector<std::string> reports;
  for (const Target& t : targets) {
    try {
      RendezvousClient client(t.endpoint, t.auth);
      const JobStatus s = client.status(
          t.job_id, std::chrono::milliseconds(static_cast<int64_t>(timeout_s * 1000)));
      reports.push_back(json ? format_status_json(t.job_id, t.endpoint, s, t.pid)
                             : format_status(t.job_id, t.endpoint, s, t.pid));
    } catch (const RendezvousCallError& e) {
      std::fprintf(stderr, "ddprun: error: status: %s\n", status_call_failure(t.job_id, t.endpoint, e).c_str());
      exit_code = kExitWorkerFailed;
    } catch (const AuthConfigError& e) {
      std::fprintf(stderr, "ddprun: error: status: --rdzv-tls-*: %s\n", e.what());
      return kExitUsage;
    }
  }
  std::string out;
  if (json && targets.size() > 1) {
    out = "[";
    for (size_t i = 0; i < reports.size(); ++i) out += (i ? ",\n" : "\n") + reports[i];
    out += "\n]\n";
  } else {
    for (size_t i = 0; i < reports.size(); ++i) out += (i ? "\n" : "") + reports[i] + (json ? "\n" : "");
  }
  std::fputs(out.c_str(), stdout);
  return exit_code;
}

}  // namespace ddprun
