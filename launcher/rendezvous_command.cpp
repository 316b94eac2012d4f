#include "launcher/rendezvous_command.h"

#include <poll.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <spdlog/spdlog.h>

#include "agent/agent.h"
#include "agent/signals.h"
#include "rendezvous/nccl_unique_id.h"
#include "rendezvous/server.h"

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
  std::vector<std::string> rev(args.rbegin(), args.rend());
  try {
    app.parse(rev);
  } catch (const CLI::CallForHelp&) {
    std::fputs((app.help() + "\n").c_str(), stdout);
    return kExitOk;
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "ddprun: error: rendezvous: %s\n", e.what());
    return kExitUsage;
  }
  try {
    RendezvousServer server(host, port, make_nccl_unique_id);
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
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return kExitWorkerFailed;
  }
  return kExitOk;
}

}  // namespace ddprun
