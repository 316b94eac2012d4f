// The Healer's state sent to the ranks behind (ddp/healer.h): who sends,
// the skeleton and the shapes, then each tensor by its own broadcast into
// memory made ahead of it.
#include <ATen/CPUGeneratorImpl.h>
#include <sys/mman.h>
#include <torch/torch.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <future>
#include <map>
#include <stdexcept>
#include <thread>

#include "base/heartbeat.h"
#include "ddp/collective_error.h"
#include "ddp/healer.h"
#include "ddp/training_state.h"
#include "heal/healer_parts.h"
#include "heal/receive_pool.h"

namespace ddp {

using healer_parts::Clock;
using healer_parts::pack_counters;
using healer_parts::seconds_since;
using healer_parts::unpack_counters;

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

}  // namespace ddp
