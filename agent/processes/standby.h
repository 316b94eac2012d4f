// Standby workers (--standby): a warm set of worker processes started ahead
// of a restart. They have exec'd and loaded their libraries, then wait inside
// ddp::init() for their assignment on a control pipe (their fd 3, named by
// DDPRUN_STANDBY_FD). On a restart the agent sends each its variables and it
// carries on as a worker; restarting then costs no process start.
//
// Message on the pipe: "KEY=VALUE\0" entries, then one more "\0".
#pragma once

#include <map>
#include <string>

#include "agent/processes/spawn.h"

namespace ddprun {

struct Standby {
  SpawnedProcess process;
  int control = -1;  // write end of the control pipe; -1 once released
  // What ddprun set when it started it (for the assignment it guessed):
  // those the release does not set again are removed.
  std::map<std::string, std::string> vars;
};

// Starts req as a standby worker (adds DDPRUN_STANDBY_FD=3 to its env).
Standby spawn_standby(SpawnRequest req);

// Sends the worker its variables and closes the pipe. Throws SpawnError when
// the standby is gone.
void release_standby(Standby& s, const std::map<std::string, std::string>& vars);

// Kills an unused standby (and its process group), reaps it, closes its pipes.
void dismiss_standby(Standby& s);

// The message for vars (exposed for tests).

}  // namespace ddprun
