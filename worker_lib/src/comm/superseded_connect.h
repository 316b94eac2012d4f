// A heal generation's connect that a newer generation leaves behind.
//
// Why: Gloo's set-up has no cancel. A rank whose generation's vote said
// "connect" (connect_vote.h) and which is then cut off (its node's link
// down, its process stopped) leaves its peers inside that set-up, in a
// store wait or a TCP connect, until the full timeout: a heal that took 60 s
// (seen: a flapping link, the agent naming the next generation a second
// after the cut). No store watch can end a wait inside Gloo.
//
// So the connect runs on a thread of its own and the caller waits for it in
// pulses. Once the agent names a newer generation, the caller leaves it
// behind: it throws GenerationSuperseded at once and goes on to the newer
// generation, while the thread goes on with the old connect, serving the
// peers' side of it as if nothing happened, until it connects (its
// communicator is then dropped, which fails the peers' first collective:
// they heal into the newer generation too) or its timeout ends it. Nobody
// is left waiting on this rank, and this rank waits on nobody.
//
// `connect` must own everything it touches (shared pointers, copies): the
// caller, the World included, may be gone before it ends.
#pragma once

#include <chrono>
#include <exception>
#include <functional>
#include <future>
#include <memory>
#include <thread>

#include "comm/connect_vote.h"

namespace ddp {

// Runs `connect` and returns what it returns (or throws what it throws),
// unless `superseded()` turns true first, checked every `pulse`: then
// throws GenerationSuperseded, `connect` still running.
template <typename Connection>
std::unique_ptr<Connection> connect_unless_superseded(std::function<std::unique_ptr<Connection>()> connect,
                                                      const std::function<bool()>& superseded,
                                                      std::chrono::milliseconds pulse) {
  // The promise and the function live on the thread: a connect left behind
  // ends there, and drops its connection there.
  std::promise<std::unique_ptr<Connection>> done;
  std::future<std::unique_ptr<Connection>> result = done.get_future();
  std::thread([done = std::move(done), connect = std::move(connect)]() mutable {
    try {
      done.set_value(connect());
    } catch (...) {
      done.set_exception(std::current_exception());
    }
  }).detach();
  while (result.wait_for(pulse) != std::future_status::ready) {
    if (superseded()) {
      throw GenerationSuperseded(
          "ddp: a newer heal generation began while this one connected (a peer failed or was cut off "
          "meanwhile); its connect is left to finish or time out on its own");
    }
  }
  return result.get();
}

}  // namespace ddp
