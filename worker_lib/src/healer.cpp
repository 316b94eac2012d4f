#include "ddp/healer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <stdexcept>

#include "ddp/collective_error.h"
#include "ddp/training_state.h"

namespace ddp {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The sampler's epoch and position and the counters, as one int64 tensor:
// [epoch, position, counters...] (-1 for a sampler that is not there).
at::Tensor pack_counters(const Healable& s) {
  at::Tensor t = at::empty({static_cast<int64_t>(2 + s.counters.size())}, at::kLong);
  auto* v = t.data_ptr<int64_t>();
  v[0] = s.sampler ? s.sampler->epoch() : -1;
  v[1] = s.sampler ? s.sampler->position() : -1;
  for (size_t i = 0; i < s.counters.size(); ++i) v[2 + i] = *s.counters[i];
  return t;
}

void unpack_counters(const at::Tensor& t, Healable& s) {
  const auto* v = t.data_ptr<int64_t>();
  if (s.sampler) {
    s.sampler->set_epoch(v[0]);
    s.sampler->set_position(v[1]);
  }
  for (size_t i = 0; i < s.counters.size(); ++i) *s.counters[i] = v[2 + i];
}

}  // namespace

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
  if (world_.replacement()) {
    // The survivors wait in their heal for this: take the newest state. If
    // a peer fails meanwhile, in the next generation.
    joined_ = true;
    const auto begin = Clock::now();
    while (true) {
      try {
        sync_state(/*have_state=*/false);
        break;
      } catch (const CollectiveError& e) {
        next_generation(e.what());  // a peer failed while this process joined
      }
    }
    report_.transfer_seconds = seconds_since(begin);
    report_.heals = 1;
    report_.generation = world_.generation();
  }
  if (world_.info().heals) world_.heartbeat_handle()->set_heal_ready(true);
}

Healer::~Healer() { world_.heartbeat_handle()->set_heal_ready(false); }

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
  Snapshot before;
  take_snapshot(before);
  const int64_t start = *state_.step;
  while (true) {
    try {
      body();
      return;
    } catch (const CollectiveError& e) {
      if (!world_.info().heals) throw;
      // Before the commit the step's changes are put back; after it they
      // are the newest state, which the heal sends to the ranks behind.
      const bool committed = *state_.step > start;
      if (!committed) put_back(before);
      heal(e.what());
      if (*state_.step > start) return;  // done here, or by the peers (the heal brought it)
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
    const uint32_t generation = world_.heartbeat_handle()->wait_heal_generation(seen, options_.wait_timeout);
    report_.wait_seconds += seconds_since(wait_begin);
    if (generation == seen) {
      throw CollectiveError(why + " (no replacement came to heal the group within " +
                            std::to_string(options_.wait_timeout.count() / 1000.0) +
                            " s: ddprun stops the group instead; see --max-heals)");
    }
    const auto connect_begin = Clock::now();
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
  report_.wait_seconds = report_.connect_seconds = report_.transfer_seconds = 0;
  std::string cause = why;
  while (true) {
    next_generation(cause);
    const auto transfer_begin = Clock::now();
    try {
      sync_state(/*have_state=*/true);
      report_.transfer_seconds += seconds_since(transfer_begin);
      break;
    } catch (const CollectiveError& e) {
      // A peer (the sender, the replacement) failed during the heal itself.
      report_.transfer_seconds += seconds_since(transfer_begin);
      cause = e.what();
    }
  }
  ++report_.heals;
  report_.generation = world_.generation();
  if (world_.rank() == 0) {
    std::fprintf(stderr, "ddp: healed in generation %u after a peer failed (%s): %.3f s waiting, %.3f s connecting, "
                 "%.3f s sending %lld bytes of state\n",
                 report_.generation, why.c_str(), report_.wait_seconds, report_.connect_seconds, report_.transfer_seconds,
                 static_cast<long long>(report_.bytes));
  }
}

// Every rank tells its step; a replacement has none (-1). The lowest rank
// with the highest step sends its state; every rank behind takes it.
void Healer::sync_state(bool have_state) {
  Communicator& comm = world_.cpu();
  const int64_t mine = have_state ? *state_.step : -1;
  at::Tensor steps = comm.all_gather(at::full({1}, mine, at::kLong)).reshape({-1});
  const int64_t newest = steps.max().item<int64_t>();
  if (newest < 0) throw CollectiveError("ddp: heal: no rank holds the training state (every rank is new)");
  const int source = static_cast<int>(steps.eq(newest).nonzero()[0][0].item<int64_t>());
  if (steps.eq(newest).all().item<bool>()) {
    report_.bytes = 0;
    return;  // every rank has the newest state (a failure before anyone stepped, no replacement)
  }
  // The state as bytes (the checkpoint format: it carries optimizer state
  // that a replacement has not made yet), then the counters.
  std::vector<char> bytes;
  at::Tensor counters;
  if (comm.rank() == source) {
    bytes = encode_state(capture_state(*state_.module, *state_.optimizer, *state_.step,
                                       state_.sampler ? state_.sampler->epoch() : 0,
                                       state_.sampler ? state_.sampler->position() : 0));
    counters = pack_counters(state_);
  } else {
    counters = at::empty({static_cast<int64_t>(2 + state_.counters.size())}, at::kLong);
  }
  at::Tensor size = at::full({1}, static_cast<int64_t>(bytes.size()), at::kLong);
  comm.broadcast(size, source);
  at::Tensor payload = at::empty({size.item<int64_t>()}, at::kByte);
  if (comm.rank() == source) std::memcpy(payload.data_ptr(), bytes.data(), bytes.size());
  comm.broadcast(payload, source);
  comm.broadcast(counters, source);
  report_.bytes = payload.numel();
  if (mine == newest) return;
  bytes.assign(static_cast<const char*>(payload.data_ptr()), static_cast<const char*>(payload.data_ptr()) + payload.numel());
  const TrainingState received = decode_state(bytes);
  apply_state(received, *state_.module, *state_.optimizer);
  *state_.step = received.step;
  unpack_counters(counters, state_);
}

}  // namespace ddp
