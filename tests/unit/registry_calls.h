// Calls to the job registry the rendezvous tests share: a node that heals
// ("a", "b", ... on hosts of their own), its join call (two nodes, a 5 s
// lease) and a join waited for.
#pragma once

#include <chrono>
#include <future>
#include <string>

#include "rendezvous/server/registry.h"
#include "rendezvous/server/round.h"

namespace ddprun::registry_calls {

using namespace std::chrono_literals;

inline NodeSpec healing(const std::string& id) {
  NodeSpec n;
  n.node_id = id;
  n.host = id + "-host";
  n.local_world_size = 2;
  n.local_addr = "10.0.0." + std::to_string(id[0] - 'a' + 1);
  n.master_port = 1000 + (id[0] - 'a');
  n.heals = true;
  n.program = "train --epochs 1";
  return n;
}

inline JoinCall join_call(const std::string& id) {
  JoinCall c;
  c.job_id = "job";
  c.node = healing(id);
  c.node.wants_nccl_id = true;
  c.settings = RoundSettings{2, 2, 0ms, 3};
  c.lease = 5s;
  c.lease_key = "key-" + id;
  c.timeout = 5s;
  return c;
}

inline JoinOutcome join_now(JobRegistry& reg, JoinCall c) {
  std::promise<JoinOutcome> done;
  reg.join_async(std::move(c), [&done](JoinOutcome o) { done.set_value(std::move(o)); });
  return done.get_future().get();
}

}  // namespace ddprun::registry_calls
