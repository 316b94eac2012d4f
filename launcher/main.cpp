// ddprun: parse the command line, host the rendezvous, run this node's agent.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <cstdio>

#include "agent/agent.h"
#include "launcher/cli.h"
#include "launcher/plan.h"
#include "rendezvous/nccl_unique_id.h"
#include "rendezvous/server.h"

int main(int argc, char** argv) {
  using namespace ddprun;
  // Before any thread exists, so that every thread inherits the blocked mask.
  SignalChannel signals;

  CliResult cli;
  LaunchPlan plan;
  try {
    cli = parse_command_line(std::vector<std::string>(argv + 1, argv + argc));
    if (cli.kind != CliResult::kRun) {
      std::fputs((cli.text + "\n").c_str(), stdout);
      return kExitOk;
    }
    plan = make_launch_plan(cli.options, gather_host_facts());
  } catch (const UsageError& e) {
    std::fprintf(stderr, "ddprun: error: %s\n", e.what());
    return kExitUsage;
  }

  auto logger = spdlog::stderr_color_mt("ddprun");
  logger->set_pattern("[ddprun %H:%M:%S.%e] %^%l%$: %v");
  spdlog::set_default_logger(logger);
  spdlog::set_level(cli.options.verbose ? spdlog::level::debug
                    : cli.options.quiet ? spdlog::level::err
                                        : spdlog::level::info);

  try {
    if (plan.agent.master_port == 0) plan.agent.master_port = pick_free_port();
    RendezvousServer server(plan.rdzv_listen_host, plan.rdzv_listen_port, make_nccl_unique_id);
    plan.agent.rdzv_address = server.address();
    spdlog::debug("rendezvous listening on {}; run id {}", server.address(), plan.agent.run_id);
    RendezvousClient client(server.address());
    Agent agent(plan.agent, client, signals);
    return agent.run();
  } catch (const std::exception& e) {
    spdlog::error("{}", e.what());
    return kExitWorkerFailed;
  }
}
