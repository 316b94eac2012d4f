// The per-node agent: joins a rendezvous round, runs the node's workers as a
// WorkerGroup, and on failure restarts them in a new round until
// --max-restarts is used up. With --standby it keeps a warm set of workers
// ready for the next restart.
#pragma once

#include <memory>
#include <vector>

#include "agent/agent_config.h"
#include "agent/heartbeat_table.h"
#include "agent/signals.h"
#include "agent/standby.h"
#include "agent/worker_group.h"
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
  ~Agent();  // dismisses unused standby workers
  // Runs the job; returns ddprun's exit code. Failure summaries go to the
  // console's stderr.
  int run();

 private:
  // A stop signal that arrived while no workers ran (0 if none).
  int pending_stop_signal();
  std::string attempt_dir(int attempt) const;
  void prepare_files();
  // The workers of one attempt (standbys, if any, are attached by the caller).
  std::vector<WorkerLaunch> make_launches(int attempt, const JoinResult& joined);
  // Starts the standby set for attempt (their variables come at release).
  void spawn_standbys(int attempt, const JoinResult& guess);
  void dismiss_standbys();

  AgentConfig cfg_;
  RendezvousClient& rdzv_;
  SignalChannel& signals_;
  std::string files_dir_;  // log dir, or a temporary folder for error files
  bool files_dir_is_temp_ = false;
  bool wants_files_ = false;
  std::unique_ptr<HeartbeatTable> heartbeats_;
  std::vector<Standby> standbys_;  // for the next attempt
};

}  // namespace ddprun
