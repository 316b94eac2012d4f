// `ddprun rendezvous`: the rendezvous service on its own, apart from any
// node, for jobs that want it to outlive every node.
#pragma once

#include <string>
#include <vector>

namespace ddprun {

class SignalChannel;

// args: what follows "rendezvous" on the command line. Serves until SIGINT
// or SIGTERM; returns the exit code (2 for a bad command line).
int run_rendezvous_command(const std::vector<std::string>& args, SignalChannel& signals);

}  // namespace ddprun
