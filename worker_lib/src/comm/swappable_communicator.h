// The communicator World::cpu() hands out: a stable object whose
// connection can be replaced underneath. DDP's Reducer, a Checkpointer and
// the user's code keep a Communicator& for the whole run; when a peer dies
// and the group heals (ddp::Healer), World::reconnect() swaps in a
// communicator of the new generation and every holder uses it at once.
//
// Not thread-safe against a swap: a swap happens between steps, on the
// training thread, while nothing else runs a collective (the Reducer's
// communication thread is idle once a step has failed and was waited for).
// abort_older_than() is the exception: any thread may call it (the heal
// watcher does), and it never aborts a connection of the generation it names.
#pragma once

#include <atomic>
#include <chrono>
#include <cstdint>
#include <functional>
#include <memory>
#include <mutex>
#include <string>
#include <utility>

#include "channel/flight_record.h"
#include "ddp/communicator.h"

namespace ddp {

class SwappableCommunicator final : public Communicator {
 public:
  explicit SwappableCommunicator(std::unique_ptr<Communicator> inner, uint32_t generation = 0) {
    replace(std::move(inner), generation);
  }
  // With `reopen`: a closed communicator connects again on its next use
  // (NCCL's, which World makes only when a CUDA collective needs it), in
  // the heal generation `reopen_generation` names then, so that a heal
  // watcher late to abort generation g's predecessors spares the fresh one.
  SwappableCommunicator(std::unique_ptr<Communicator> inner, uint32_t generation,
                        std::function<std::unique_ptr<Communicator>()> reopen,
                        std::function<uint32_t()> reopen_generation)
      : reopen_(std::move(reopen)), reopen_generation_(std::move(reopen_generation)) {
    replace(std::move(inner), generation);
  }

  // The old connection is closed first (its peers see it go), then the new
  // one (of heal generation `generation`) takes its place.
  void replace(std::unique_ptr<Communicator> next, uint32_t generation = 0) {
    close();
    std::lock_guard lock(mu_);
    inner_ = std::move(next);
    generation_ = generation;
    aborted_by_ = 0;
    seq_ = 0;  // numbered afresh in each generation, as on every other rank
    rank_ = inner_->rank();
    size_ = inner_->size();
    timeout_ = inner_->default_timeout();
    backend_ = inner_->backend();
  }
  // Closes the connection without a new one: collectives throw until replace().
  void close() {
    std::unique_ptr<Communicator> old;
    {
      std::lock_guard lock(mu_);
      old = std::move(inner_);
    }
  }
  // A newer heal generation began: a connection of an older one fails its
  // collectives now (Communicator::abort), waiting for no timeout.
  // Later collectives on it fail too, whatever the backend does with an
  // abort (a world of one blocks on nobody, and would never notice).
  void abort_older_than(uint32_t generation, const std::string& why) {
    std::lock_guard lock(mu_);
    if (inner_ && generation_ < generation) {
      inner_->abort(why);
      aborted_by_ = std::max(aborted_by_, generation);
      abort_why_ = why;
    }
  }

  // Known while closed too: a heal keeps the ranks.
  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Timeout default_timeout() const override { return timeout_; }
  std::string backend() const override { return backend_; }
  void all_reduce(at::Tensor& tensor, ReduceOp op, Timeout timeout) override {
    recorded(ddprun::channel::FlightOp::kAllReduce, bytes_of(tensor), [&] { get().all_reduce(tensor, op, timeout); });
  }
  // On a communicator that enqueues on device streams, "finished" in the
  // flight record means enqueued.
  std::unique_ptr<Work> all_reduce_async(at::Tensor tensor, ReduceOp op, Timeout timeout) override {
    std::unique_ptr<Work> work;
    recorded(ddprun::channel::FlightOp::kAllReduce, bytes_of(tensor),
             [&] { work = get().all_reduce_async(std::move(tensor), op, timeout); });
    return work;
  }
  bool enqueues_on_device() const override { return get().enqueues_on_device(); }
  bool overlap_pays() const override { return get().overlap_pays(); }
  std::unique_ptr<Work> watch_stream(const char* what, Timeout timeout) override {
    return get().watch_stream(what, timeout);
  }
  void broadcast(at::Tensor& tensor, int root, Timeout timeout) override {
    recorded(ddprun::channel::FlightOp::kBroadcast, bytes_of(tensor), [&] { get().broadcast(tensor, root, timeout); });
  }
  at::Tensor all_gather(const at::Tensor& input, Timeout timeout) override {
    at::Tensor out;
    recorded(ddprun::channel::FlightOp::kAllGather, bytes_of(input), [&] { out = get().all_gather(input, timeout); });
    return out;
  }
  void barrier(Timeout timeout) override {
    recorded(ddprun::channel::FlightOp::kBarrier, 0, [&] { get().barrier(timeout); });
  }

  // Every collective from now on goes into `ring` (the worker's flight
  // record, in its heartbeat slot) as communicator `comm` (0: CPU, 1: CUDA).
  void record_into(ddprun::channel::FlightRing* ring, uint32_t comm) {
    ring_ = ring;
    comm_ = comm;
  }
  void abort(const std::string& why) override {
    std::lock_guard lock(mu_);
    if (inner_) inner_->abort(why);
  }

 private:
  Communicator& get() {
    if (!inner_ && reopen_) replace(reopen_(), reopen_generation_());
    if (!inner_) throw CollectiveError("ddp: the communicator is closed while the group heals (a peer failed)");
    if (aborted_by_ > generation_) throw CollectiveError(abort_why_);
    return *inner_;
  }
  Communicator& get() const { return const_cast<SwappableCommunicator*>(this)->get(); }
  static uint64_t bytes_of(const at::Tensor& t) { return static_cast<uint64_t>(t.numel()) * t.element_size(); }
  static int64_t now_ns() {
    return std::chrono::duration_cast<std::chrono::nanoseconds>(std::chrono::steady_clock::now().time_since_epoch())
        .count();
  }
  // Runs one collective between its flight-record entries (a lock-free
  // write of a few words each side).
  template <class Call>
  void recorded(ddprun::channel::FlightOp op, uint64_t bytes, Call&& call) {
    const uint64_t id = ddprun::channel::flight_begin(ring_, op, seq_.fetch_add(1) + 1, bytes, generation_, comm_, now_ns());
    try {
      call();
    } catch (...) {
      ddprun::channel::flight_end(ring_, id, /*failed=*/true, now_ns());
      throw;
    }
    ddprun::channel::flight_end(ring_, id, /*failed=*/false, now_ns());
  }
  std::mutex mu_;  // inner_ and generation_ against abort_older_than()
  std::unique_ptr<Communicator> inner_;
  uint32_t generation_ = 0;
  uint32_t aborted_by_ = 0;  // a newer generation that aborted this connection (0: none)
  std::string abort_why_;
  std::function<std::unique_ptr<Communicator>()> reopen_;
  std::function<uint32_t()> reopen_generation_;
  int rank_ = 0, size_ = 1;
  Timeout timeout_{0};
  std::string backend_;
  ddprun::channel::FlightRing* ring_ = nullptr;
  uint32_t comm_ = 0;
  std::atomic<uint64_t> seq_{0};
};

}  // namespace ddp
