#include "comm/gloo_communicator.h"

// What Gloo's headers include, declared first with the usual visibility.
#include <netinet/in.h>
#include <sys/stat.h>
#include <pthread.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <cstring>
#include <filesystem>
#include <functional>
#include <iostream>
#include <list>
#include <memory>
#include <mutex>
#include <sstream>
#include <stdexcept>
#include <string>
#include <thread>
#include <unordered_map>
#include <vector>

// With a private Gloo (cmake/Gloo.cmake: LibTorch exports a Gloo of another
// layout), every Gloo name this file uses is hidden: it can only bind to the
// static Gloo linked into the same program, never to libtorch_cpu's, and a
// link order that would let it is a link error, not a silent mix.
#if DDPRUN_PRIVATE_GLOO
#pragma GCC visibility push(hidden)
#endif
#include <gloo/allgather.h>
#include <gloo/barrier.h>
#include <gloo/broadcast.h>
#include <gloo/common/error.h>
#include <gloo/common/logging.h>
#include <gloo/math.h>
#include <gloo/rendezvous/context.h>
#include <gloo/rendezvous/store.h>
#include <gloo/transport/tcp/address.h>
#include <gloo/transport/tcp/device.h>
#include <gloo/types.h>
#if DDPRUN_PRIVATE_GLOO
#pragma GCC visibility pop
#endif

#include "comm/gloo_failure.h"
#include "base/local_addr.h"

namespace ddp {
namespace {

// Gloo's rendezvous reads and writes through this view of a ddprun Store.
class GlooStoreAdapter final : public gloo::rendezvous::Store {
 public:
  GlooStoreAdapter(ddprun::Store& store, std::chrono::milliseconds timeout)
      : store_(store), timeout_(timeout) {}
  void set(const std::string& key, const std::vector<char>& data) override {
    store_.set(key, std::string_view(data.data(), data.size()));
  }
  std::vector<char> get(const std::string& key) override {
    std::string v = store_.get(key, timeout_);
    return std::vector<char>(v.begin(), v.end());
  }
  void wait(const std::vector<std::string>& keys) override { store_.wait(keys, timeout_); }
  void wait(const std::vector<std::string>& keys, const std::chrono::milliseconds& t) override {
    store_.wait(keys, t);
  }

 private:
  ddprun::Store& store_;
  std::chrono::milliseconds timeout_;
};

using ReduceFn = void (*)(void*, const void*, const void*, size_t);

// all_reduce's messages (Gloo's own collectives use 0x01 to 0x08).
constexpr uint8_t kRingAllReduceSlotPrefix = 0x70;

template <typename T>
ReduceFn reduce_fn(ReduceOp op) {
  switch (op) {
    case ReduceOp::kSum:
    case ReduceOp::kAvg:
      return static_cast<ReduceFn>(&gloo::sum<T>);
    case ReduceOp::kMax:
      return static_cast<ReduceFn>(&gloo::max<T>);
    case ReduceOp::kMin:
      return static_cast<ReduceFn>(&gloo::min<T>);
  }
  throw std::invalid_argument("ddp: unknown ReduceOp");
}

// Whether two socket addresses are the same IP address and port.
bool same_endpoint(const sockaddr_storage& a, const sockaddr_storage& b) {
  if (a.ss_family != b.ss_family) return false;
  if (a.ss_family == AF_INET) {
    const auto& x = reinterpret_cast<const sockaddr_in&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in&>(b);
    return x.sin_port == y.sin_port && x.sin_addr.s_addr == y.sin_addr.s_addr;
  }
  if (a.ss_family == AF_INET6) {
    const auto& x = reinterpret_cast<const sockaddr_in6&>(a);
    const auto& y = reinterpret_cast<const sockaddr_in6&>(b);
    return x.sin6_port == y.sin6_port && std::memcmp(&x.sin6_addr, &y.sin6_addr, sizeof(x.sin6_addr)) == 0;
  }
  return false;
}

void check_cpu(const at::Tensor& t, const char* op) {
  if (!t.defined()) throw std::invalid_argument(std::string("ddp: ") + op + ": undefined tensor");
  if (!t.device().is_cpu()) {
    throw std::invalid_argument(std::string("ddp: ") + op + ": the Gloo communicator takes CPU " +
                                "tensors, got one on " + t.device().str());
  }
}

}  // namespace

template <typename Fn>
void GlooCommunicator::run(const char* op, Timeout timeout, Fn&& fn) {
  if (options_.heartbeat) options_.heartbeat->beat();
  // Gloo throws gloo::Exception (I/O, timeouts) and, from its checks,
  // gloo::EnforceNotMet, which is no gloo::Exception: both get the context.
  auto failed = [&](const char* what) {
    if (aborted_.load()) return aborted_error(op, what);
    return CollectiveError(gloo_failure_message(op, options_.rank, options_.size, timeout, what, peer_endpoints_));
  };
  try {
    fn();
    // A wait the abort woke returns as if it had completed: whatever the
    // collective left in its buffers is not a result.
    if (aborted_.load()) throw aborted_error(op, "woken by the abort");
    if (options_.heartbeat) options_.heartbeat->beat();
  } catch (const gloo::Exception& e) {
    throw failed(e.what());
  } catch (const gloo::EnforceNotMet& e) {
    throw failed(e.what());
  }
}

GlooCommunicator::GlooCommunicator(ddprun::Store& store, const GlooOptions& options)
    : options_(options) {
  if (options.size < 1 || options.rank < 0 || options.rank >= options.size) {
    throw std::invalid_argument("ddp: Gloo rank " + std::to_string(options.rank) +
                                " is not in [0, " + std::to_string(options.size) + ")");
  }
  // Gloo crashes on a name that does not resolve: refuse it first.
  check_local_addr(options.local_addr, "GlooOptions::local_addr");
  gloo::transport::tcp::attr attr;
  attr.hostname = options.local_addr;
  auto setup_failed = [&](const char* what) {
    return CollectiveError("ddp: Gloo setup on rank " + std::to_string(options.rank) + " (binding to " +
                           options.local_addr + ", set by --local-addr) failed: " + what);
  };
  try {
    auto device = gloo::transport::tcp::CreateDevice(attr);
    auto ctx = std::make_shared<gloo::rendezvous::Context>(options.rank, options.size);
    ctx->setTimeout(options.timeout);
    GlooStoreAdapter adapter(store, options.timeout);
    ctx->connectFullMesh(adapter, device);
    context_ = std::move(ctx);
    // connectFullMesh can return on one rank while a peer still completes
    // its side of their pair; a rank that then closed its sockets (a
    // communicator made and dropped at once) would break the peer's setup.
    // A barrier returns only once every pair works.
    gloo::BarrierOptions opts(context_);
    opts.setTimeout(options.timeout);
    gloo::barrier(opts);
    learn_peer_endpoints(store);
  } catch (const ddprun::StoreTimeout& e) {
    throw CollectiveError("ddp: rank " + std::to_string(options.rank) + " of " +
                          std::to_string(options.size) + " could not connect to its peers within " +
                          std::to_string(options.timeout.count()) + " ms (" + e.what() + ")");
  } catch (const gloo::Exception& e) {
    throw setup_failed(e.what());
  } catch (const gloo::EnforceNotMet& e) {
    throw setup_failed(e.what());
  } catch (const std::exception& e) {
    // Gloo's own parsing lets standard errors through: Gloo of 2023 throws
    // std::length_error on a peer address it cannot read.
    throw setup_failed((std::string(e.what()) + " (from Gloo's setup)").c_str());
  }
}

// Gloo names the peer of a failed socket by its address, the far end of our
// socket. That is the near end of the peer's socket of the same pair, which
// only the peer knows: once every pair works, each rank publishes its own
// ends, one line per rank, and keeps the ends its peers have towards it.
void GlooCommunicator::learn_peer_endpoints(ddprun::Store& store) {
  std::string mine;
  for (int r = 0; r < options_.size; ++r) {
    if (r != options_.rank) mine += context_->getPair(r)->address().str();
    mine += "\n";
  }
  store.set("endpoints/" + std::to_string(options_.rank), mine);
  peer_endpoints_.assign(static_cast<size_t>(options_.size), "");
  for (int r = 0; r < options_.size; ++r) {
    if (r == options_.rank) continue;
    std::istringstream lines(store.get("endpoints/" + std::to_string(r), options_.timeout));
    std::string line;
    for (int i = 0; std::getline(lines, line); ++i) {
      if (i == options_.rank) peer_endpoints_[static_cast<size_t>(r)] = line;
    }
  }
}

GlooCommunicator::~GlooCommunicator() {
  if (releaser_.joinable()) releaser_.join();  // done once the last collective unlisted its buffers
}

// Gloo has no cancel, but its transport fails everything waiting on a pair
// whose socket reaches its end, which is how a peer that dies is seen.
// Shutting the reading side of every pair's socket down takes that path:
// the device's loop reads end-of-file, the pair signals the failure to
// every buffer waiting on it, and the blocked collective throws. Only the
// reading side: a write to a socket shut for writing raises SIGPIPE, which
// kills the worker (Gloo's writes do not ask for MSG_NOSIGNAL); the peers
// learn of the abort when the heal closes this context. And only
// shutdown(): the descriptors stay Gloo's to close when the context goes.
//
// Gloo keeps a pair's socket to itself, but names its near end (the
// pair's address once connected: what learn_peer_endpoints publishes). So
// the sockets are found among this process's descriptors by that end; the
// device (and its listening address) is this communicator's own, so no
// other connection shares it.
//
// One wait that path never ends: a send Gloo had begun writing when its
// pair failed (the socket was full: the peer was slow, stopped, or had
// closed its end with our bytes unread). Gloo tells a pair's posted
// receives and not-yet-asked sends, not the send it is writing, whose
// waitSend then blocked until Gloo's timeout, 5 minutes by default (seen: a
// heal stuck when the peer that healed first closed its end on a bucket
// half sent); and so is a receive caught half read. Every buffer a
// collective sends from or receives into is made here and listed while it
// runs (Flight); release_waits() wakes them.
void GlooCommunicator::abort(const std::string& why) {
  {
    std::lock_guard lock(flight_mu_);
    if (abort_why_.empty()) abort_why_ = why;
    aborted_.store(true);  // under the lock: no collective lists a buffer after this
  }
  if (!context_) return;
  std::vector<sockaddr_storage> ends;
  for (int r = 0; r < options_.size; ++r) {
    if (r == options_.rank) continue;
    const auto* end = dynamic_cast<const gloo::transport::tcp::Address*>(&context_->getPair(r)->address());
    if (end) ends.push_back(end->getSockaddr());
  }
  std::error_code ec;
  for (const auto& entry : std::filesystem::directory_iterator("/proc/self/fd", ec)) {
    int fd = -1;
    try {
      fd = std::stoi(entry.path().filename().string());
    } catch (const std::exception&) {
      continue;
    }
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    sockaddr_storage near {};
    socklen_t len = sizeof(near);
    if (::getsockname(fd, reinterpret_cast<sockaddr*>(&near), &len) != 0) continue;
    // The device's listening socket has the near end of the pairs it
    // accepted: it stays (the loop must not see accept() fail).
    int listening = 0;
    socklen_t flag_len = sizeof(listening);
    if (::getsockopt(fd, SOL_SOCKET, SO_ACCEPTCONN, &listening, &flag_len) != 0 || listening) continue;
    for (const auto& end : ends) {
      if (same_endpoint(near, end)) {
        ::shutdown(fd, SHUT_RD);
        break;
      }
    }
  }
  release_waits();
}

// The collective's waits, woken until it has ended: abortWaitSend (and
// abortWaitRecv) makes a buffer's current or next wait return, and Gloo's
// algorithm goes on to its next send or receive, which throws once the
// pair has failed. Again and again, on a thread of its own: the pairs fail
// on Gloo's loop a moment after the shutdown, and a send written in that
// moment can be caught as the first was. Gloo gives no event for "a send
// of mine is stuck", so the thread wakes on each buffer a collective
// unlists (flight_cv_) and otherwise every kReleaseEvery. (Gloo's barrier,
// broadcast and all-gather wait on no buffer but these; its all-reduce did,
// hence all_reduce_as.)
void GlooCommunicator::release_waits() {
  std::lock_guard lock(flight_mu_);
  if (in_flight_.empty() || releaser_.joinable()) return;
  releaser_ = std::thread([this] {
    constexpr auto kReleaseEvery = std::chrono::milliseconds(10);
    std::unique_lock lock(flight_mu_);
    while (!in_flight_.empty()) {
      // A listed buffer lives until its collective unlists it (under the lock).
      for (gloo::transport::UnboundBuffer* b : in_flight_) {
        b->abortWaitSend();
        b->abortWaitRecv();
      }
      flight_cv_.wait_for(lock, kReleaseEvery);
    }
  });
}

// The buffers of one collective, listed as in flight from when they are
// made until it ends (declare it after the Gloo options that own them).
class GlooCommunicator::Flight {
 public:
  Flight(GlooCommunicator& comm, const char* op) : comm_(comm), op_(op) {}
  ~Flight() {
    {
      std::lock_guard lock(comm_.flight_mu_);
      for (gloo::transport::UnboundBuffer* b : mine_) {
        comm_.in_flight_.erase(std::find(comm_.in_flight_.begin(), comm_.in_flight_.end(), b));
      }
    }
    comm_.flight_cv_.notify_all();
  }
  Flight(const Flight&) = delete;
  Flight& operator=(const Flight&) = delete;

  // A buffer over [ptr, ptr + bytes), listed.
  std::unique_ptr<gloo::transport::UnboundBuffer> buffer(void* ptr, size_t bytes) {
    auto b = comm_.context_->createUnboundBuffer(ptr, bytes);
    list(b.get());
    return b;
  }
  // Lists a buffer the collective's options made (it must outlive this).
  void list(gloo::transport::UnboundBuffer* b) {
    std::unique_lock lock(comm_.flight_mu_);
    if (comm_.aborted_.load()) {
      lock.unlock();
      throw comm_.aborted_error(op_, "aborted before it began");
    }
    comm_.in_flight_.push_back(b);
    mine_.push_back(b);
  }

 private:
  GlooCommunicator& comm_;
  const char* op_;
  std::vector<gloo::transport::UnboundBuffer*> mine_;
};

// A barrier's buffer is Gloo's own (protected in its options).
struct GlooCommunicator::BarrierOptions : gloo::BarrierOptions {
  using gloo::BarrierOptions::BarrierOptions;
  gloo::transport::UnboundBuffer* own_buffer() { return buffer.get(); }
};

CollectiveError GlooCommunicator::aborted_error(const char* op, const std::string& what) {
  std::lock_guard lock(flight_mu_);
  return CollectiveError(abort_why_ + " (Gloo " + op + " on rank " + std::to_string(options_.rank) + " of " +
                         std::to_string(options_.size) + " aborted: " + what + ")");
}

// A ring all-reduce as Gloo's, over buffers made here: Gloo's own receives
// into a buffer it makes inside, which an abort cannot wake (a receive
// caught half read when its pair failed waited for Gloo's timeout; seen
// after the send above was fixed). The ring of P ranks, the tensor cut in P
// chunks: in P - 1 steps each rank sends a chunk to the next rank and adds
// the chunk the previous rank sent to its own (own + received, as Gloo
// adds), so that each chunk ends summed on one rank; then P - 1 steps pass
// the summed chunks on. Every rank ends with the same bits.
template <typename T>
void GlooCommunicator::all_reduce_as(at::Tensor& t, ReduceOp op, Timeout timeout) {
  const int size = options_.size, rank = options_.rank;
  if (size == 1) return;
  const size_t n = static_cast<size_t>(t.numel());
  T* data = t.data_ptr<T>();
  auto first = [&](int c) { return n * static_cast<size_t>(c) / static_cast<size_t>(size); };  // chunk c's first element
  auto count = [&](int c) { return first(c + 1) - first(c); };
  size_t most = 0;
  for (int c = 0; c < size; ++c) most = std::max(most, count(c));
  std::unique_ptr<T[]> scratch(new T[most]);
  const auto out = context_->createUnboundBuffer(data, n * sizeof(T));
  const auto in = context_->createUnboundBuffer(scratch.get(), most * sizeof(T));
  Flight flight(*this, "all_reduce");  // after the buffers: unlists them before they go
  flight.list(out.get());
  flight.list(in.get());
  const int right = (rank + 1) % size, left = (rank + size - 1) % size;
  const uint64_t slot = gloo::Slot::build(kRingAllReduceSlotPrefix, 0);
  const ReduceFn reduce = reduce_fn<T>(op);
  // 1. Reduce-scatter: at step s, send chunk rank - s, add chunk rank - s - 1.
  for (int s = 0; s + 1 < size; ++s) {
    const int send = (rank - s + size) % size, recv = (rank - s - 1 + 2 * size) % size;
    if (count(recv) > 0) in->recv(left, slot, 0, count(recv) * sizeof(T));
    if (count(send) > 0) out->send(right, slot, first(send) * sizeof(T), count(send) * sizeof(T));
    if (count(recv) > 0) {
      in->waitRecv(timeout);
      reduce(data + first(recv), data + first(recv), scratch.get(), count(recv));
    }
    if (count(send) > 0) out->waitSend(timeout);
  }
  // 2. All-gather: at step s, pass chunk rank + 1 - s on, take chunk rank - s.
  for (int s = 0; s + 1 < size; ++s) {
    const int send = (rank + 1 - s + size) % size, recv = (rank - s + size) % size;
    if (count(recv) > 0) out->recv(left, slot, first(recv) * sizeof(T), count(recv) * sizeof(T));
    if (count(send) > 0) out->send(right, slot, first(send) * sizeof(T), count(send) * sizeof(T));
    if (count(recv) > 0) out->waitRecv(timeout);
    if (count(send) > 0) out->waitSend(timeout);
  }
}

void GlooCommunicator::all_reduce(at::Tensor& tensor, ReduceOp op, Timeout timeout) {
  check_cpu(tensor, "all_reduce");
  const bool floating = at::isFloatingType(tensor.scalar_type());
  if (op == ReduceOp::kAvg && !floating) {
    throw std::invalid_argument("ddp: all_reduce avg needs a floating-point tensor, got " +
                                std::string(c10::toString(tensor.scalar_type())));
  }
  if (tensor.numel() == 0) return;
  // Gloo reduces contiguous float/double/int types; others go through a copy.
  const auto type = tensor.scalar_type();
  const bool low_precision = type == at::kHalf || type == at::kBFloat16;
  at::Tensor work = low_precision ? tensor.to(at::kFloat) : tensor.contiguous();
  run("all_reduce", timeout, [&] {
    switch (work.scalar_type()) {
      case at::kFloat: all_reduce_as<float>(work, op, timeout); break;
      case at::kDouble: all_reduce_as<double>(work, op, timeout); break;
      case at::kInt: all_reduce_as<int32_t>(work, op, timeout); break;
      case at::kLong: all_reduce_as<int64_t>(work, op, timeout); break;
      case at::kChar: all_reduce_as<int8_t>(work, op, timeout); break;
      case at::kByte: all_reduce_as<uint8_t>(work, op, timeout); break;
      default:
        throw std::invalid_argument("ddp: all_reduce does not support dtype " +
                                    std::string(c10::toString(work.scalar_type())));
    }
  });
  if (op == ReduceOp::kAvg) work.div_(options_.size);
  if (!work.is_same(tensor)) tensor.copy_(work);
}

void GlooCommunicator::broadcast(at::Tensor& tensor, int root, Timeout timeout) {
  check_cpu(tensor, "broadcast");
  if (root < 0 || root >= options_.size) {
    throw std::invalid_argument("ddp: broadcast root " + std::to_string(root) + " is not in [0, " +
                                std::to_string(options_.size) + ")");
  }
  if (tensor.numel() == 0) return;
  at::Tensor work = tensor.contiguous();
  run("broadcast", timeout, [&] {
    gloo::BroadcastOptions opts(context_);
    Flight flight(*this, "broadcast");
    // Broadcast moves bytes, whatever their type.
    opts.setOutput<uint8_t>(flight.buffer(work.data_ptr(), work.nbytes()));
    opts.setRoot(root);
    opts.setTimeout(timeout);
    gloo::broadcast(opts);
  });
  if (!work.is_same(tensor)) tensor.copy_(work);
}

at::Tensor GlooCommunicator::all_gather(const at::Tensor& input, Timeout timeout) {
  check_cpu(input, "all_gather");
  std::vector<int64_t> shape{options_.size};
  shape.insert(shape.end(), input.sizes().begin(), input.sizes().end());
  at::Tensor out = at::empty(shape, input.options());
  if (input.numel() == 0) return out;
  at::Tensor in = input.contiguous();
  run("all_gather", timeout, [&] {
    gloo::AllgatherOptions opts(context_);
    Flight flight(*this, "all_gather");
    opts.setInput<uint8_t>(flight.buffer(in.data_ptr(), in.nbytes()));
    opts.setOutput<uint8_t>(flight.buffer(out.data_ptr(), out.nbytes()));
    opts.setTimeout(timeout);
    gloo::allgather(opts);
  });
  return out;
}

void GlooCommunicator::barrier(Timeout timeout) {
  run("barrier", timeout, [&] {
    BarrierOptions opts(context_);
    Flight flight(*this, "barrier");
    flight.list(opts.own_buffer());
    opts.setTimeout(timeout);
    gloo::barrier(opts);
  });
}

}  // namespace ddp
