// The worker's side of --standby: a standby worker starts early, loads its
// libraries, and waits here for the agent to say which worker it is. No
// LibTorch here.
#pragma once

namespace ddp {

// When this process is a standby (DDPRUN_STANDBY_FD is set), blocks until
// the agent sends the worker's variables, sets them in the environment and
// returns true; otherwise returns false at once. ddp::init() calls it first.
// Throws std::runtime_error when the pipe closes without a message.
bool wait_if_standby();

}  // namespace ddp
