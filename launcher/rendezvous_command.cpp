#include "launcher/rendezvous_command.h"

#include <poll.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <sstream>
#include <spdlog/spdlog.h>

#include "agent/agent.h"
#include "agent/base/signals.h"
#include "channel/env_names.h"
#include "launcher/auth_options.h"
#include "launcher/cli.h"
#include "launcher/subcommand_parse.h"
#include "rendezvous/server/nccl_unique_id.h"
#include "rendezvous/server/server.h"

namespace ddprun {

int run_rendezvous_command(const std::vector<std::string>& args, SignalChannel& signals) {
  CLI::App app{
      "ddprun rendezvous: serves the rendezvous of multi-node jobs on its own, so it outlives\n"
      "every node. Nodes join it with --rdzv-endpoint HOST:PORT --rdzv-host off.",
      "ddprun rendezvous"};
  std::string host = "0.0.0.0";
  int port = 29400;
  app.add_option("--host", host, "Address to listen on [default: 0.0.0.0, every interface]");
  app.add_option("--port", port, "Port to listen on; 0 picks a free one [default: 29400]")
      ->check(CLI::Range(0, 65535));
  AuthFlags auth_flags;
  std::string conf;
  app.add_option("--rdzv-token,--rdzv_token", auth_flags.token,
                 "Secret every call must carry (better: DDPRUN_RDZV_TOKEN or --rdzv-token-file)");
  app.add_option("--rdzv-token-file,--rdzv_token_file", auth_flags.token_file,
                 "File holding the token (one line)");
  app.add_option("--rdzv-tls-cert,--rdzv_tls_cert", auth_flags.tls.cert, "PEM certificate");
  app.add_option("--rdzv-tls-key,--rdzv_tls_key", auth_flags.tls.key, "PEM private key");
  app.add_option("--rdzv-tls-ca,--rdzv_tls_ca", auth_flags.tls.ca,
                 "PEM CA: clients must present a certificate it signed (mutual TLS)");
  app.add_option("--rdzv-conf,--rdzv_conf", conf,
                 "Limits: max_value_bytes, max_job_keys, max_job_bytes, max_jobs, "
                 "max_waits_per_client, idle_timeout (K=V,...)");
  if (auto done = parse_subcommand(app, args, "rendezvous")) return *done;
  ServerOptions options{host, port, {}, {}};
  std::vector<std::string> warnings;
  try {
    const char* env_token = getenv(channel::kRdzvToken);
    options.auth = resolve_auth(auth_flags, env_token ? env_token : "", warnings);
    std::stringstream items(conf);
    for (std::string item; std::getline(items, item, ',');) {
      if (item.empty()) continue;
      const auto eq = item.find('=');
      if (eq == std::string::npos ||
          !parse_limit_conf(item.substr(0, eq), item.substr(eq + 1), options.limits)) {
        throw UsageError("--rdzv-conf: expected one of max_value_bytes, max_job_keys, "
                         "max_job_bytes, max_jobs, max_waits_per_client, idle_timeout =VALUE, "
                         "got '" + item + "'");
      }
    }
  } catch (const UsageError& e) {
    std::fprintf(stderr, "ddprun: error: rendezvous: %s\n", e.what());
    return kExitUsage;
  }
  try {
    RendezvousServer server(options, make_nccl_unique_id);
    for (const auto& w : warnings) spdlog::warn("{}", w);
    if (options.auth.token.empty()) {
      spdlog::warn("the rendezvous takes calls from anyone who reaches {}: give it and every "
                   "node the same --rdzv-token (or DDPRUN_RDZV_TOKEN, --rdzv-token-file)",
                   server.address());
    }
    std::printf("ddprun rendezvous: listening on %s\n", server.address().c_str());
    std::fflush(stdout);
    while (true) {
      pollfd fd{signals.fd(), POLLIN, 0};
      if (poll(&fd, 1, -1) < 0 && errno != EINTR) break;
      while (auto sig = signals.next()) {
        if (*sig == SIGINT || *sig == SIGTERM) {
          spdlog::info("received {}: shutting the rendezvous down", signal_name(*sig));
          return kExitOk;
        }
      }
    }
  } catch (const AuthConfigError& e) {
    std::fprintf(stderr, "ddprun: error: rendezvous: --rdzv-tls-*: %s\n", e.what());
    return kExitUsage;
  } catch (const ListenError& e) {
    std::fprintf(stderr, "ddprun: error: %s\n", e.what());
    return kExitUsage;
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return kExitWorkerFailed;
  }
  return kExitOk;
}

}  // namespace ddprun
