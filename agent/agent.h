// The per-node agent: joins a rendezvous round, runs the node's workers as a
// WorkerGroup, and on failure restarts them in a new round until
// --max-restarts is used up.
#pragma once

#include "agent/agent_config.h"
#include "agent/signals.h"
#include "rendezvous/client.h"

namespace ddprun {

// Exit codes of ddprun.
constexpr int kExitOk = 0;
constexpr int kExitWorkerFailed = 1;
constexpr int kExitUsage = 2;
// Stopped by signal s: 128 + s, as a shell reports it.

class Agent {
 public:
  Agent(AgentConfig config, RendezvousClient& rdzv, SignalChannel& signals);
  // Runs the job; returns ddprun's exit code. Failure summaries go to the
  // console's stderr.
  int run();

 private:
  // A stop signal that arrived while no workers ran (0 if none).
  int pending_stop_signal();
  std::string attempt_dir(int attempt) const;

  AgentConfig cfg_;
  RendezvousClient& rdzv_;
  SignalChannel& signals_;
  std::string files_dir_;  // log dir, or a temporary folder for error files
  bool files_dir_is_temp_ = false;
};

}  // namespace ddprun
