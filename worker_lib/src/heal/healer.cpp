#include "ddp/healer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "ddp/collective_error.h"
#include "ddp/training_state.h"
#include "base/heartbeat.h"
#include "heal/healer_parts.h"
#include "heal/receive_pool.h"
#include "verify/hardware_kind.h"
#include "verify/replica_check.h"
#include "verify/replica_report.h"

namespace ddp {

namespace healer_parts {

at::Tensor pack_counters(const Healable& s) {
  at::Tensor t = at::empty({static_cast<int64_t>(2 + s.counters.size())}, at::kLong);
  auto* v = t.data_ptr<int64_t>();
  v[0] = s.sampler ? s.sampler->epoch() : -1;
  v[1] = s.sampler ? s.sampler->global_position() : -1;
  for (size_t i = 0; i < s.counters.size(); ++i) v[2 + i] = *s.counters[i];
  return t;
}

void unpack_counters(const at::Tensor& t, Healable& s) {
  const auto* v = t.data_ptr<int64_t>();
  if (s.sampler) {
    s.sampler->set_epoch(v[0]);
    s.sampler->set_global_position(v[1]);
  }
  for (size_t i = 0; i < s.counters.size(); ++i) *s.counters[i] = v[2 + i];
}

}  // namespace healer_parts

using healer_parts::Clock;
using healer_parts::pack_counters;
using healer_parts::seconds_since;
using healer_parts::unpack_counters;

// What a step may change before its optimizer step, kept to put back when
// the step is abandoned: the sampler and counters, the CPU generator
// (dropout), and the module's buffers (batch-norm statistics move in
// forward).
struct Healer::Snapshot {
  at::Tensor counters;
  at::Tensor rng;
  std::vector<at::Tensor> buffers;
};

Healer::Healer(World& world, Healable state, HealOptions options)
    : world_(world), state_(std::move(state)), options_(options) {
  if (!state_.module || !state_.optimizer || !state_.step) {
    throw std::invalid_argument("ddp::Healer: module, optimizer and step are required");
  }
  for (int64_t* c : state_.counters) {
    if (!c) throw std::invalid_argument("ddp::Healer: a counter is null");
  }
  if (options_.wait_timeout.count() == 0) options_.wait_timeout = world_.timeout();
  verify_every_ = options_.verify_every >= 0 ? options_.verify_every : world_.info().verify_every;
  reporter_ = std::make_unique<ReplicaReporter>(world_.heartbeat_handle().get(), world_.rank(), verify_every_);
  world_.replicas().set_compared_by_healer(verify_every_ > 0);
  if (verify_every_ > 0) {
    const auto params = state_.module->parameters();
    hardware_kind_ = hardware_kind(world_.info(), params.empty() ? at::Device(at::kCPU) : params.front().device());
  }
  report_.world_size = world_.size();
  if (world_.replacement()) {
    // The survivors wait in their heal for this: take the newest state. If
    // a peer fails meanwhile, in the next generation. (The heartbeat has
    // beaten for this process since its World connected: set_joining.)
    joined_ = true;
    // Memory for the optimizer's state, made while this process started.
    const std::shared_ptr<ReceivePool> pool = world_.take_receive_pool();
    const auto begin = Clock::now();
    while (true) {
      try {
        verify_after_heal(sync_state(/*have_state=*/false, pool.get()));
        break;
      } catch (const CollectiveError& e) {
        next_generation(e.what());  // a peer failed while this process joined
      }
    }
    if (world_.info().heals) world_.heartbeat_handle()->set_joining(false);
    report_.transfer_seconds = seconds_since(begin);
    if (pool) {
      report_.prepared_bytes = static_cast<int64_t>(pool->taken());
      pool->release_rest();
    }
    report_.heals = 1;
    report_.generation = world_.generation();
    report_.step = *state_.step;
  } else if (verify_every_ > 0) {
    // The start: every rank holds the same parameters and optimizer state
    // (DDP's broadcast, a checkpoint's restore); the comparison makes that
    // the first point they agreed at. (Not the buffers: a forward before
    // the Healer moved each rank's batch-norm statistics its own way.)
    verify(/*whole_state=*/true, /*with_buffers=*/false);
  }
  if (world_.info().heals) world_.heartbeat_handle()->set_heal_ready(true);
}

Healer::~Healer() {
  world_.heartbeat_handle()->set_heal_ready(false);
  world_.replicas().set_compared_by_healer(false);
}

void Healer::take_snapshot(Snapshot& s) {
  s.counters = pack_counters(state_);
  s.rng = at::detail::getDefaultCPUGenerator().get_state();
  const auto buffers = state_.module->buffers();
  s.buffers.resize(buffers.size());
  for (size_t i = 0; i < buffers.size(); ++i) {
    if (!s.buffers[i].defined() || !s.buffers[i].sizes().equals(buffers[i].sizes())) {
      s.buffers[i] = at::empty_like(buffers[i]);
    }
    s.buffers[i].copy_(buffers[i]);
  }
}

void Healer::put_back(const Snapshot& s) {
  unpack_counters(s.counters, state_);
  at::Generator gen = at::detail::getDefaultCPUGenerator();
  std::lock_guard<std::mutex> lock(gen.mutex());
  gen.set_state(s.rng);
  at::NoGradGuard no_grad;
  const auto buffers = state_.module->buffers();
  for (size_t i = 0; i < buffers.size() && i < s.buffers.size(); ++i) buffers[i].copy_(s.buffers[i]);
}

void Healer::step(const std::function<void()>& body) {
  // Inside a step from here (a grow named now aborts the connection; one
  // named before, outside a step, is healed into first).
  world_.set_in_step(true);
  struct Outside {
    World& w;
    ~Outside() { w.set_in_step(false); }
  } outside{world_};
  if (world_.info().heals && world_.heartbeat_handle()->heal_generation() > world_.generation()) {
    heal("the world changed in generation " + std::to_string(world_.heartbeat_handle()->heal_generation()) +
         " while this rank was outside a step");
  }
  if (rng_next_step_.defined()) {
    at::Generator gen = at::detail::getDefaultCPUGenerator();
    std::lock_guard<std::mutex> lock(gen.mutex());
    gen.set_state(rng_next_step_);
    rng_next_step_ = at::Tensor();
  }
  Snapshot before;
  take_snapshot(before);
  const int64_t start = *state_.step;
  for (bool first = true;; first = false) {
    // After a heal the state is the agreed one (and the sampler may be
    // sharded over another world): that is what a second failure puts back.
    if (!first) take_snapshot(before);
    try {
      body();
      if (!told_receive_bytes_) tell_receive_bytes();
      verify_if_due(start);  // collective: a peer that fails in it is healed around as in the body
      return;
    } catch (const CollectiveError& e) {
      // No heal comes (across nodes, no spare waits, the job may not shrink,
      // and none was named already): fail now, and ddprun restarts the round, instead of
      // waiting to be stopped. (The agent names a generation before it
      // says no more will come.)
      const auto& hb = world_.heartbeat_handle();
      if (!world_.info().heals || (hb->no_heal_coming() && hb->heal_generation() <= world_.generation())) throw;
      // Before the commit the step's changes are put back; after it they
      // are the newest state, which the heal sends to the ranks behind.
      const bool committed = *state_.step > start;
      if (!committed) put_back(before);
      heal(e.what());
      if (*state_.step > start) return;  // done here, or by the peers (the heal brought it)
      rng_next_step_ = at::Tensor();    // the step runs again now, from the generator the heal set
      ++report_.steps_redone;
    }
  }
}

// Closes this generation's communicator, waits for the agent to name a
// newer one, and connects in it (again, if a peer fails while connecting).
// Adds the time spent to the report's wait and connect seconds.
void Healer::next_generation(const std::string& why) {
  while (true) {
    const uint32_t seen = world_.generation();
    // Peers still blocked in a collective with this rank fail now: the
    // failure reaches every survivor, and all of them come here.
    world_.disconnect();
    const auto wait_begin = Clock::now();
    TraceSpan wait_span(world_.tracer(), TracePhase::kHealWait, TraceTrack::kMain, seen);
    const uint32_t generation = world_.heartbeat_handle()->wait_heal_generation(seen, options_.wait_timeout);
    wait_span.finish();
    report_.wait_seconds += seconds_since(wait_begin);
    if (generation == seen) {
      throw CollectiveError(why + " (no replacement came to heal the group within " +
                            std::to_string(options_.wait_timeout.count() / 1000.0) +
                            " s: ddprun stops the group instead; see --max-heals)");
    }
    const auto connect_begin = Clock::now();
    TraceSpan connect_span(world_.tracer(), TracePhase::kHealConnect, TraceTrack::kMain, generation);
    try {
      world_.reconnect(generation);
      report_.connect_seconds += seconds_since(connect_begin);
      return;
    } catch (const CollectiveError&) {
      // Another peer failed while this generation connected (or a newer one
      // began): the agent names the next.
      report_.connect_seconds += seconds_since(connect_begin);
    }
  }
}

void Healer::heal(const std::string& why) {
  // Waiting for the peers (the agent's generation, a replacement, the
  // state): beats go on, so the agent tells waiting from hanging.
  Heartbeat::WaitScope waiting(*world_.heartbeat_handle());
  // A heal may receive a state into this rank's tensors: a checkpoint still
  // copying them in the background finishes first.
  world_.state_fence().wait();
  report_.wait_seconds = report_.connect_seconds = report_.transfer_seconds = 0;
  std::string cause = why;
  while (true) {
    next_generation(cause);
    const auto transfer_begin = Clock::now();
    const int64_t transfer_begin_ns = Tracer::now_ns();
    try {
      verify_after_heal(sync_state(/*have_state=*/true));
      report_.transfer_seconds += seconds_since(transfer_begin);
      Tracer& tracer = world_.tracer();
      if (tracer.recording()) {
        tracer.record(TracePhase::kHealTransfer, TraceTrack::kMain, transfer_begin_ns, Tracer::now_ns(),
                      tracer.current_step(), world_.generation(), report_.bytes);
      }
      break;
    } catch (const CollectiveError& e) {
      // A peer (the sender, the replacement) failed during the heal itself.
      report_.transfer_seconds += seconds_since(transfer_begin);
      cause = e.what();
    }
  }
  ++report_.heals;
  report_.generation = world_.generation();
  report_.step = *state_.step;
  const int was = report_.world_size;
  report_.world_size = world_.size();
  // The job shrank (or this rank moved): the rest of the epoch is shared
  // out among the ranks there are now, from where the world stands.
  if (state_.sampler) state_.sampler->reshard(world_.rank(), world_.size());
  if (world_.rank() == 0) {
    const std::string resized =
        was == report_.world_size ? "" : "; the world goes on with " + std::to_string(report_.world_size) +
                                             " ranks instead of " + std::to_string(was);
    std::fprintf(stderr, "ddp: healed in generation %u (%s): %.3f s waiting, %.3f s connecting, "
                 "%.3f s sending %lld bytes of state%s\n",
                 report_.generation, why.c_str(), report_.wait_seconds, report_.connect_seconds, report_.transfer_seconds,
                 static_cast<long long>(report_.bytes), resized.c_str());
  }
}

}  // namespace ddp
