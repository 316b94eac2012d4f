#include "ddp/healer.h"

#include <ATen/CPUGeneratorImpl.h>
#include <sys/mman.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <future>
#include <map>
#include <thread>
#include <stdexcept>

#include "ddp/collective_error.h"
#include "ddp/training_state.h"
#include "base/heartbeat.h"
#include "heal/receive_pool.h"
#include "verify/hardware_kind.h"
#include "verify/replica_check.h"
#include "verify/replica_report.h"

namespace ddp {
namespace {

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// The sampler's epoch and global position and the counters, as one int64
// tensor: [epoch, position, counters...] (-1 for a sampler that is not
// there). The global position holds in any sharding: a rank that takes it
// reads on where the sender's world stands, at any world size.
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

namespace {

// The big tensors of a state, in an order both sides derive from its
// structure alone: the model's by name, then each optimizer parameter's by
// key (std::map orders both). The generator stays in the skeleton.
std::vector<at::Tensor*> tensors_of(TrainingState& s) {
  std::vector<at::Tensor*> out;
  for (auto& [name, t] : s.model) out.push_back(&t);
  for (auto& per_param : s.optimizer.params) {
    for (auto& [key, t] : per_param) out.push_back(&t);
  }
  return out;
}

// The bytes a replacement makes afresh for a state: its optimizer's tensors
// (its module's it has), each as a ReceivePool holds it.
size_t receive_bytes_of(TrainingState& s) {
  size_t bytes = 0;
  for (auto& per_param : s.optimizer.params) {
    for (auto& [key, t] : per_param) bytes += ReceivePool::bytes_for(t.nbytes());
  }
  return bytes;
}

// [dtype, ndim, sizes...] for each tensor, in order.
at::Tensor shapes_of(const std::vector<at::Tensor*>& tensors) {
  std::vector<int64_t> v;
  for (const at::Tensor* t : tensors) {
    v.push_back(static_cast<int64_t>(t->scalar_type()));
    v.push_back(t->dim());
    for (int64_t d : t->sizes()) v.push_back(d);
  }
  return at::tensor(v, at::kLong);
}

// A tensor for state about to be received: fresh memory, which the
// broadcast's copy would fault in page by page (most of a replacement's time
// for optimizer state it has not made yet). Large ones are mapped with
// their pages populated at once, which costs the kernel's zeroing and not
// a trap per 4 KiB page. (Transparent huge pages were tried: with the
// kernel's default defrag, faults stalled in compaction and 100M
// parameters healed at 0.5 GB/s instead of 1.2.)
at::Tensor empty_for_receiving(const std::vector<int64_t>& sizes, at::ScalarType dtype) {
  int64_t numel = 1;
  for (int64_t d : sizes) numel *= d;
  const size_t bytes = static_cast<size_t>(numel) * at::elementSize(dtype);
  if (bytes < (size_t{1} << 20)) return at::empty(sizes, dtype);
  void* p = mmap(nullptr, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
  if (p == MAP_FAILED) return at::empty(sizes, dtype);
  return at::from_blob(p, sizes, [bytes](void* q) { munmap(q, bytes); }, at::TensorOptions().dtype(dtype));
}

// Makes the receive memory of a heal on a thread of its own, in the order
// the tensors are broadcast, so that populating the optimizer's (fresh
// pages the kernel zeroes: as long as the copy itself) overlaps the
// broadcast of the module's tensors ahead of them, which exist already.
class ReceiveMemory {
 public:
  // Tensors are carved out of `pool` while it has room (it may be null).
  explicit ReceiveMemory(ReceivePool* pool) : pool_(pool) {}
  void add(at::Tensor* slot, std::vector<int64_t> sizes, at::ScalarType dtype) {
    items_.push_back({slot, std::move(sizes), dtype, {}, {}});
  }
  void start() {
    if (items_.empty()) return;
    for (auto& item : items_) item.made = item.promise.get_future();
    maker_ = std::jthread([this](std::stop_token stop) {
      for (auto& item : items_) {
        if (stop.stop_requested()) {
          item.promise.set_exception(std::make_exception_ptr(std::runtime_error("ddp: heal abandoned")));
          continue;
        }
        try {
          at::Tensor t = pool_ ? pool_->take(item.sizes, item.dtype) : at::Tensor();
          item.promise.set_value(t.defined() ? t : empty_for_receiving(item.sizes, item.dtype));
        } catch (...) {
          item.promise.set_exception(std::current_exception());
        }
      }
    });
  }
  // Fills *slot with its tensor once made (if it was added; else nothing).
  // Slots come in the order they were added.
  void take(at::Tensor* slot) {
    if (next_ < items_.size() && items_[next_].slot == slot) *slot = items_[next_++].made.get();
  }

 private:
  struct Item {
    at::Tensor* slot;
    std::vector<int64_t> sizes;
    at::ScalarType dtype;
    std::promise<at::Tensor> promise;
    std::future<at::Tensor> made;
  };
  ReceivePool* pool_;
  std::vector<Item> items_;
  size_t next_ = 0;
  std::jthread maker_;  // last: stopped and joined first
};

// "[32, 784]".
std::string shape_text(const std::vector<int64_t>& sizes) {
  std::string out = "[";
  for (size_t i = 0; i < sizes.size(); ++i) out += (i ? ", " : "") + std::to_string(sizes[i]);
  return out + "]";
}

// Broadcasts root's 1-d tensor `t` (its length first: the others do not
// know it); returns it on every rank.
at::Tensor broadcast_sized(Communicator& comm, at::Tensor t, at::ScalarType dtype, int root) {
  at::Tensor size = at::full({1}, comm.rank() == root ? t.numel() : 0, at::kLong);
  comm.broadcast(size, root);
  if (comm.rank() != root) t = at::empty({size.item<int64_t>()}, dtype);
  comm.broadcast(t, root);
  return t;
}

}  // namespace

// Rank 0 tells the job, after its first step, how much of its optimizer's
// state a replacement would make afresh: a replacement prepares that memory
// while it starts (receive_pool.h). Once per Healer, so that no later step
// pays for it (an optimizer without state tells nothing). A hint: a store
// that fails it costs nothing.
void Healer::tell_receive_bytes() {
  told_receive_bytes_ = true;
  if (world_.rank() != 0) return;
  TrainingState state = capture_state(*state_.module, *state_.optimizer, *state_.step, 0, 0, nullptr, StateTensors::kShare);
  const size_t bytes = receive_bytes_of(state);
  if (bytes == 0) return;
  try {
    world_.tell_receive_bytes(static_cast<int64_t>(bytes));
  } catch (const ddprun::StoreError& e) {
    std::fprintf(stderr, "ddp: warning: could not tell the job the size of its optimizer state (%s): a replacement "
                 "will make that memory during its heal\n", e.what());
  }
}

// Every rank tells its step; a replacement has none (-1). The lowest rank
// with the highest step sends its state; every rank behind takes it. The
// state goes as a skeleton (the checkpoint format with every big tensor
// left empty: it carries optimizer state a replacement has not made yet,
// and the generator) and the shapes, then each tensor by its own
// broadcast, straight into the receiver's memory: no pickling of the bulk.
bool Healer::sync_state(bool have_state, ReceivePool* pool) {
  Communicator& comm = world_.cpu();
  const int64_t mine = have_state ? *state_.step : -1;
  at::Tensor steps = comm.all_gather(at::full({1}, mine, at::kLong)).reshape({-1});
  const int64_t newest = steps.max().item<int64_t>();
  if (newest < 0) {
    // Not a peer's failure to heal around: nobody can send the state.
    throw std::runtime_error("ddp: heal: no rank holds the training state (every rank is new)");
  }
  const int source = static_cast<int>(steps.eq(newest).nonzero()[0][0].item<int64_t>());
  if (steps.eq(newest).all().item<bool>()) {
    report_.bytes = 0;
    return false;  // every rank has the newest state (a failure before anyone stepped, no replacement)
  }
  send_state(source, mine != newest, mine < 0, /*keep_own=*/false, pool);
  return true;
}

// Rank `source` sends; every rank `behind` takes the state. The others
// take part in the broadcasts (they are collective): in a heal they hold
// the newest state, the same bytes, and receive into their own tensors; with
// `keep_own` (a repair: their buffers are their own) into memory they let go.
void Healer::send_state(int source, bool behind, bool fresh_process, bool keep_own, ReceivePool* pool) {
  Communicator& comm = world_.cpu();
  const bool sending = comm.rank() == source;
  TrainingState state;
  at::Tensor skeleton_bytes, counters, shapes;
  if (sending) {
    // The live tensors, no copies: nothing trains while the heal runs.
    state = capture_state(*state_.module, *state_.optimizer, *state_.step,
                          state_.sampler ? state_.sampler->epoch() : 0,
                          state_.sampler ? state_.sampler->position() : 0, nullptr, StateTensors::kShare);
    TrainingState skeleton = state;
    for (at::Tensor* t : tensors_of(skeleton)) *t = at::empty({0}, t->scalar_type());
    const std::vector<char> encoded = encode_state(skeleton);
    skeleton_bytes = at::empty({static_cast<int64_t>(encoded.size())}, at::kByte);
    std::memcpy(skeleton_bytes.data_ptr(), encoded.data(), encoded.size());
    shapes = shapes_of(tensors_of(state));
    counters = pack_counters(state_);
  }
  skeleton_bytes = broadcast_sized(comm, skeleton_bytes, at::kByte, source);
  shapes = broadcast_sized(comm, shapes, at::kLong, source);
  bool have_room = false;
  if (!sending && !behind && !keep_own) {
    // A rank with the newest state already holds these very bytes: it
    // receives them into its own tensors (the broadcasts are collective)
    // and allocates nothing.
    state = capture_state(*state_.module, *state_.optimizer, *state_.step, 0, 0, nullptr, StateTensors::kShare);
    have_room = shapes_of(tensors_of(state)).equal(shapes);
  }
  if (!sending) counters = at::empty({static_cast<int64_t>(2 + state_.counters.size())}, at::kLong);
  ReceiveMemory fresh(pool);
  if (!sending && !have_room) {
    // A rank behind makes room from the shapes.
    const auto* data = static_cast<const char*>(skeleton_bytes.data_ptr());
    state = decode_state(std::vector<char>(data, data + skeleton_bytes.numel()));
    // A replacement receives the module's tensors straight into its own
    // (they have their shapes; they hold nothing worth keeping); the
    // optimizer's, which it has not made yet, into new ones the optimizer
    // then adopts. A survivor behind receives into new memory only: if the
    // heal fails half-way, it still holds its own state, whole.
    std::map<std::string, at::Tensor> own;
    for (const auto& p : state_.module->named_parameters(true)) own[p.key()] = p.value();
    for (const auto& b : state_.module->named_buffers(true)) own[b.key()] = b.value();
    const auto* v = shapes.data_ptr<int64_t>();
    int64_t at_ = 0;
    std::map<const at::Tensor*, std::string> names;
    for (auto& [name, t] : state.model) names[&t] = name;
    size_t model_tensors = 0;
    for (at::Tensor* t : tensors_of(state)) {
      const auto dtype = static_cast<at::ScalarType>(v[at_]);
      const int64_t ndim = v[at_ + 1];
      std::vector<int64_t> sizes(v + at_ + 2, v + at_ + 2 + ndim);
      at_ += 2 + ndim;
      auto name = names.find(t);
      auto mine_t = name == names.end() ? own.end() : own.find(name->second);
      if (name != names.end()) {
        // Another program, or another model, on this rank: its state cannot
        // be this one's. Say so, rather than fail somewhere in apply_state.
        ++model_tensors;
        if (mine_t == own.end() || mine_t->second.sizes().vec() != sizes) {
          throw std::runtime_error("ddp: heal: this rank's model does not match the state rank " + std::to_string(source) +
                              " sends: '" + name->second + "' is " + shape_text(sizes) + " there, " +
                              (mine_t == own.end() ? "absent here" : shape_text(mine_t->second.sizes().vec()) + " here") +
                              " (is every node running the same program, with the same model?)");
        }
      }
      if (fresh_process && mine_t != own.end() && mine_t->second.scalar_type() == dtype &&
          mine_t->second.sizes().vec() == sizes && mine_t->second.is_contiguous() && mine_t->second.device().is_cpu()) {
        *t = mine_t->second.detach();
      } else {
        fresh.add(t, std::move(sizes), dtype);
      }
    }
    if (model_tensors != own.size()) {
      for (const auto& [name, t] : own) {
        if (!state.model.count(name)) {
          throw std::runtime_error("ddp: heal: this rank's model does not match the state rank " + std::to_string(source) +
                              " sends: '" + name + "' is here, not there (is every node running the same program, "
                              "with the same model?)");
        }
      }
    }
  }
  fresh.start();
  comm.broadcast(counters, source);
  int64_t bytes = skeleton_bytes.numel();
  {
    at::NoGradGuard no_grad;  // parameters are written in place
    for (at::Tensor* t : tensors_of(state)) {
      fresh.take(t);
      at::Tensor flat = t->reshape({-1});  // a view: every tensor here is contiguous
      if (flat.numel() > 0) comm.broadcast(flat, source);
      bytes += static_cast<int64_t>(t->nbytes());
    }
  }
  report_.bytes = bytes;
  if (!behind) return;
  apply_state(state, *state_.module, *state_.optimizer, StateTensors::kShare);
  *state_.step = state.step;
  unpack_counters(counters, state_);
  // The generator as the sender had it at its step's start: set again when
  // this rank's next step starts (the program may draw from it meanwhile:
  // a replacement's start, which its peers made long ago).
  rng_next_step_ = state.rng;
}

// ----- the replicas compared -----

void Healer::verify_if_due(int64_t start) {
  const int64_t step = *state_.step;
  if (verify_every_ <= 0 || step <= start) return;  // off, or no optimizer step in this call
  const bool periodic = step % verify_every_ == 0;
  const bool after_heal = verify_after_ >= 0 && step > verify_after_;
  if (!periodic && !after_heal) return;
  verify_after_ = -1;
  verify(/*whole_state=*/false, /*with_buffers=*/false);
}

// Every rank of a heal comes here alike (the survivors in heal(), a
// replacement in its constructor): the state that went across is compared
// whole, and the parameters again after the next step, where a heal that
// left the ranks' steps apart in any other way (DDP's buckets, a generator)
// shows first.
void Healer::verify_after_heal(bool sent) {
  if (verify_every_ <= 0) return;
  verify(/*whole_state=*/true, /*with_buffers=*/sent);
  verify_after_ = *state_.step;
}

// The tensors compared, in an order every rank derives alike: the
// parameters by name, the buffers, then the optimizer's state, named after
// the parameter it belongs to.
std::vector<NamedTensor> Healer::replica_tensors(bool whole_state, bool with_buffers) const {
  std::vector<NamedTensor> out;
  std::map<const c10::TensorImpl*, std::string> name_of;
  for (const auto& p : state_.module->named_parameters(/*recurse=*/true)) {
    out.push_back({p.key(), p.value()});
    name_of[p.value().unsafeGetTensorImpl()] = p.key();
  }
  if (with_buffers) {
    for (const auto& b : state_.module->named_buffers(/*recurse=*/true)) out.push_back({b.key(), b.value()});
  }
  if (!whole_state) return out;
  const TrainingState state =
      capture_state(*state_.module, *state_.optimizer, *state_.step, 0, 0, nullptr, StateTensors::kShare);
  std::vector<std::string> param_names;
  for (const auto& group : state_.optimizer->param_groups()) {
    for (const auto& p : group.params()) {
      auto n = name_of.find(p.unsafeGetTensorImpl());
      param_names.push_back(n != name_of.end() ? n->second : "parameter " + std::to_string(param_names.size()));
    }
  }
  for (size_t i = 0; i < state.optimizer.params.size(); ++i) {
    const std::string& param = i < param_names.size() ? param_names[i] : "parameter " + std::to_string(i);
    for (const auto& [key, t] : state.optimizer.params[i]) out.push_back({"optimizer state of " + param + " (" + key + ")", t});
  }
  if (!state.optimizer.archive.empty()) {
    const auto& a = state.optimizer.archive;
    out.push_back({"optimizer state (" + state.optimizer.kind + ")",
                   at::from_blob(const_cast<char*>(a.data()), {static_cast<int64_t>(a.size())}, at::kByte).clone()});
  }
  at::Tensor lr = at::tensor(state.optimizer.lr, at::kDouble);
  out.push_back({"optimizer learning rates", lr});
  return out;
}

void Healer::verify(bool whole_state, bool with_buffers) {
  const auto begin = Clock::now();
  struct Timed {
    Clock::time_point begin;
    double& total;
    ~Timed() { total += seconds_since(begin); }
  } timed{begin, report_.verify_seconds};
  ReplicaCheckInput in;
  in.tensors = replica_tensors(whole_state, with_buffers);
  in.what = !whole_state ? "parameters" : with_buffers ? "state" : "parameters and optimizer state";
  in.step = *state_.step;
  in.hardware_kind = hardware_kind_;
  in.node_rank = world_.info().group_rank;
  const ReplicaComparison found = compare_replicas(world_.cpu(), in);
  ++report_.checks;
  if (found.by_design && !told_by_design_) {
    told_by_design_ = true;
    reporter_->verdict(ddprun::channel::ReplicaVerdict::kByDesign, ddprun::channel::ReplicaSelf::kAgrees, in.step,
                       found.by_design_text);
  }
  switch (found.outcome) {
    case ReplicaComparison::Outcome::kNoMajority:
      stop_apart(found.text);
    case ReplicaComparison::Outcome::kApart:
      repair(found);
      break;
    case ReplicaComparison::Outcome::kAgree:
      break;
  }
  world_.replicas().agreed(in.step);
  report_.verified_step = in.step;
  reporter_->compared(/*agreed=*/true, in.step);
}

// Each kind's ranks apart take the state of the lowest rank of its
// majority, as a replacement takes a survivor's; the majority keeps its
// own. Then the state is compared again: it must agree now.
void Healer::repair(const ReplicaComparison& found) {
  const int me = world_.rank();
  if (found.self_apart) ++apart_;
  const bool replace = found.self_apart && apart_ >= 2;
  std::string action;
  for (const auto& r : found.repairs) {
    action += (action.empty() ? "" : ", ") + std::string(r.apart.size() == 1 ? "rank " : "ranks ") + rank_list(r.apart) +
              (r.apart.size() == 1 ? " takes" : " take") + " rank " + std::to_string(r.source) + "'s state";
  }
  std::string text = found.text + "; repaired: " + action;
  if (replace) {
    text += "; rank " + std::to_string(me) + " was apart before, so ddprun replaces its process (it cannot be trusted)";
  }
  std::vector<int> apart;
  for (const auto& r : found.repairs) apart.insert(apart.end(), r.apart.begin(), r.apart.end());
  world_.replicas().found_apart(*state_.step, apart);  // a checkpoint of a rank apart is set aside
  {
    // A repair may write this rank's tensors: a checkpoint still copying
    // them in the background finishes first.
    world_.state_fence().wait();
    // The ranks apart take the majority's tensors; where their loop stands
    // and their generator are their own (the same as the majority's in a
    // loop that draws alike on every rank; a rank's own stream otherwise).
    const int64_t heal_bytes = report_.bytes;
    const at::Tensor own_counters = pack_counters(state_);
    const at::Tensor own_rng = at::detail::getDefaultCPUGenerator().get_state();
    for (const auto& r : found.repairs) {
      const bool behind = std::find(r.apart.begin(), r.apart.end(), me) != r.apart.end();
      send_state(r.source, behind, /*fresh=*/false, /*keep_own=*/true, nullptr);
    }
    unpack_counters(own_counters, state_);
    {
      at::Generator gen = at::detail::getDefaultCPUGenerator();
      std::lock_guard<std::mutex> lock(gen.mutex());
      gen.set_state(own_rng);
    }
    rng_next_step_ = at::Tensor();
    report_.bytes = heal_bytes;
    ++report_.repairs;
  }
  ReplicaCheckInput again;
  again.tensors = replica_tensors(/*whole_state=*/true, /*with_buffers=*/false);
  again.what = "parameters and optimizer state";
  again.step = *state_.step;
  again.hardware_kind = hardware_kind_;
  again.node_rank = world_.info().group_rank;
  const ReplicaComparison confirmed = compare_replicas(world_.cpu(), again);
  ++report_.checks;
  if (confirmed.outcome != ReplicaComparison::Outcome::kAgree) {
    stop_apart(confirmed.text + " right after a repair (the state a rank received does not hold there)");
  }
  // Told once the ranks agree again: a rank to be replaced is killed after
  // the comparison, not in the middle of it.
  using ddprun::channel::ReplicaSelf;
  reporter_->verdict(ddprun::channel::ReplicaVerdict::kRepaired,
                     replace ? ReplicaSelf::kReplace : found.self_apart ? ReplicaSelf::kApart : ReplicaSelf::kAgrees,
                     *state_.step, text);
}

// No majority to repair from: every rank stops alike. The checkpoints
// written since the replicas last agreed are set aside (the World's
// Checkpointer listens), and the failure is no peer's to heal around.
void Healer::stop_apart(const std::string& found) {
  const int64_t agreed = world_.replicas().agreed_step();
  const std::string text =
      found + "; no majority to repair from: every rank stops, and a restart (--max-restarts) resumes from the "
              "newest checkpoint written when the replicas last agreed" +
      (agreed >= 0 ? " (step " + std::to_string(agreed) + " or before)" : "");
  reporter_->verdict(ddprun::channel::ReplicaVerdict::kNoMajority, ddprun::channel::ReplicaSelf::kAgrees, *state_.step,
                     text);
  world_.replicas().found_apart(*state_.step, {});
  world_.heartbeat_handle()->set_heal_ready(false);
  throw ReplicasDiffer("ddp: " + text, *state_.step, agreed);
}

}  // namespace ddp
