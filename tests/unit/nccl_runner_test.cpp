// NcclRunner over a fake NcclBackend: no GPU needed. The fake's stream
// completes when the test says so, and its communicator can stay "in
// progress" forever or fail.
#include <gtest/gtest.h>

#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <condition_variable>
#include <future>
#include <map>
#include <mutex>
#include <thread>
#include <vector>

#include "comm/nccl_runner.h"
#include "ddp/collective_error.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

// Handles are small integers cast to pointers; names make the call log
// readable ("record before-event on caller").
class FakeNcclBackend final : public NcclBackend {
 public:
  NcclStreamHandle caller = reinterpret_cast<void*>(0x100);

  // -1: init never finishes; n: ready after n polls of comm_state.
  int init_polls = 0;
  // Set: comm_state reports this failure once a host function is pending.
  std::string fail_while_running;

  void set_device(int device) override { log("set_device " + std::to_string(device)); }
  NcclStreamHandle create_stream() override { return named("nccl-stream"); }
  void destroy_stream(NcclStreamHandle s) override { log("destroy " + name(s)); }
  NcclEventHandle create_event() override { return named("event" + std::to_string(++events_)); }
  void destroy_event(NcclEventHandle e) override { log("destroy " + name(e)); }
  void record_event(NcclEventHandle e, NcclStreamHandle s) override {
    log("record " + name(e) + " on " + name(s));
  }
  void stream_wait_event(NcclStreamHandle s, NcclEventHandle e) override {
    log(name(s) + " waits " + name(e));
  }
  // Set: the caller's stream is being captured into a CUDA graph.
  bool capturing = false;
  bool is_capturing(NcclStreamHandle s) override { return capturing && s == caller; }
  void launch_host_func(NcclStreamHandle s, void (*fn)(void*), void* arg) override {
    {
      std::lock_guard lock(mu_);
      pending_.emplace_back(fn, arg);
    }
    log("host_func on " + name(s));
    cv_.notify_all();
  }
  NcclCommHandle start_comm_init(const std::string& id, int size, int rank) override {
    log("init " + std::to_string(rank) + "/" + std::to_string(size));
    return named("comm");
  }
  NcclCommState comm_state(NcclCommHandle) override {
    std::lock_guard lock(mu_);
    ++polls_;
    cv_.notify_all();
    if (!fail_while_running.empty() && !pending_.empty()) {
      return {NcclCommState::kFailed, fail_while_running};
    }
    if (init_polls < 0 || polls_ <= init_polls) return {NcclCommState::kInProgress, {}};
    return {NcclCommState::kReady, {}};
  }
  void abort_comm(NcclCommHandle c) override { log("abort " + name(c)); }
  void destroy_comm(NcclCommHandle c) override { log("destroy " + name(c)); }

  // Blocks until a host function is pending (the caller is about to wait).
  void wait_for_host_func() {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return !pending_.empty(); });
  }
  // Blocks until comm_state has been asked n times in all.
  void wait_for_polls(int n) {
    std::unique_lock lock(mu_);
    cv_.wait(lock, [&] { return polls_ >= n; });
  }
  int polls() {
    std::lock_guard lock(mu_);
    return polls_;
  }
  // From now on the communicator stays "in progress" (a non-blocking call
  // that never finishes enqueuing: a peer is gone).
  void stall() {
    std::lock_guard lock(mu_);
    init_polls = -1;
  }
  // The stream reaches its host functions: run them, as CUDA's thread does.
  void complete() {
    std::vector<std::pair<void (*)(void*), void*>> run;
    {
      std::lock_guard lock(mu_);
      run.swap(pending_);
    }
    for (auto& [fn, arg] : run) fn(arg);
  }
  std::vector<std::string> calls() {
    std::lock_guard lock(mu_);
    return log_;
  }
  bool called(const std::string& call) {
    auto c = calls();
    return std::find(c.begin(), c.end(), call) != c.end();
  }

 private:
  void* named(const std::string& n) {
    std::lock_guard lock(mu_);
    void* h = reinterpret_cast<void*>(0x1000 + names_.size());
    names_[h] = n;
    return h;
  }
  std::string name(void* h) {
    std::lock_guard lock(mu_);
    if (h == caller) return "caller";
    auto it = names_.find(h);
    return it == names_.end() ? "?" : it->second;
  }
  void log(const std::string& s) {
    std::lock_guard lock(mu_);
    log_.push_back(s);
  }

  std::mutex mu_;
  std::condition_variable cv_;
  std::map<void*, std::string> names_;
  std::vector<std::string> log_;
  std::vector<std::pair<void (*)(void*), void*>> pending_;
  int events_ = 0;
  int polls_ = 0;
};

NcclRunnerOptions options(std::chrono::milliseconds init_timeout = 10s) {
  NcclRunnerOptions o;
  o.unique_id = std::string(128, 'x');
  o.rank = 0;
  o.size = 1;
  o.init_timeout = init_timeout;
  o.check_every = 1ms;
  return o;
}

auto noop_collective(FakeNcclBackend& fake) {
  return [&fake](NcclCommHandle, NcclStreamHandle) { fake.calls(); };
}

TEST(NcclRunner, InitPollsUntilReady) {
  FakeNcclBackend fake;
  fake.init_polls = 3;
  NcclRunner runner(fake, options());
  EXPECT_FALSE(runner.aborted());
  EXPECT_FALSE(fake.called("abort comm"));
}

TEST(NcclRunner, InitTimeoutAbortsAndNamesTheSetting) {
  FakeNcclBackend fake;
  fake.init_polls = -1;  // a rank that never comes
  try {
    NcclRunner runner(fake, options(30ms));
    FAIL() << "init did not time out";
  } catch (const CollectiveError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("ncclCommInitRank timed out"), std::string::npos) << m;
    EXPECT_NE(m.find("DDPRUN_TIMEOUT_S"), std::string::npos) << m;
    EXPECT_NE(m.find("ddp::InitOptions::timeout"), std::string::npos) << m;
  }
  EXPECT_TRUE(fake.called("abort comm"));
  // What was made is freed, the aborted communicator is not destroyed again.
  EXPECT_TRUE(fake.called("destroy nccl-stream"));
  EXPECT_FALSE(fake.called("destroy comm"));
}

TEST(NcclRunner, CompletionWakesTheWaiter) {
  FakeNcclBackend fake;
  NcclRunner runner(fake, options());
  auto done = std::async(std::launch::async, [&] {
    runner.run("all_reduce", fake.caller, noop_collective(fake), 60s);
  });
  fake.wait_for_host_func();
  // Not done before the stream completes...
  EXPECT_EQ(done.wait_for(0s), std::future_status::timeout);
  const auto t0 = std::chrono::steady_clock::now();
  fake.complete();
  // ...and woken by completion, not by the 60 s deadline.
  ASSERT_EQ(done.wait_for(10s), std::future_status::ready);
  done.get();
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 10s);
  EXPECT_FALSE(fake.called("abort comm"));
}

TEST(NcclRunner, StreamOrderingAroundTheCollective) {
  FakeNcclBackend fake;
  NcclRunner runner(fake, options());
  // run() is these three; called one by one, the caller's wait is sure to
  // come before the stream completes (a done collective needs no wait).
  auto ticket = runner.enqueue("all_reduce", fake.caller,
                               [&](NcclCommHandle, NcclStreamHandle) { fake.set_device(99); /* marks the call */ },
                               60s);
  runner.order_after(ticket, fake.caller);
  fake.complete();
  runner.synchronize(ticket);
  std::vector<std::string> calls = fake.calls();
  auto at = [&](const std::string& c) {
    auto it = std::find(calls.begin(), calls.end(), c);
    EXPECT_NE(it, calls.end()) << "no call " << c;
    return it - calls.begin();
  };
  const auto before = at("record event1 on caller");
  const auto nccl_waits = at("nccl-stream waits event1");
  const auto collective = at("set_device 99");
  const auto after = at("record event2 on nccl-stream");
  const auto caller_waits = at("caller waits event2");
  const auto host = at("host_func on nccl-stream");
  EXPECT_LT(before, nccl_waits);
  EXPECT_LT(nccl_waits, collective);
  EXPECT_LT(collective, after);
  EXPECT_LT(after, caller_waits);
  EXPECT_LT(collective, host);
}

TEST(NcclRunner, HangTimesOutAbortsAndNamesTheSetting) {
  FakeNcclBackend fake;
  NcclRunner runner(fake, options());
  try {
    runner.run("all_reduce", fake.caller, noop_collective(fake), 30ms);  // never completed
    FAIL() << "a hung collective did not time out";
  } catch (const CollectiveError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("all_reduce timed out"), std::string::npos) << m;
    EXPECT_NE(m.find("DDPRUN_TIMEOUT_S"), std::string::npos) << m;
  }
  // The waiter hears of the failure before the watchdog aborts (on purpose:
  // see fail_locked); aborted() takes the lock the watchdog holds from
  // before the failure is visible until after the abort, so ask it first.
  EXPECT_TRUE(runner.aborted());
  EXPECT_TRUE(fake.called("abort comm"));
  // The stream finishing after the caller gave up is harmless.
  fake.complete();
  EXPECT_THROW(runner.run("broadcast", fake.caller, noop_collective(fake), 1s), CollectiveError);
}

TEST(NcclRunner, AsyncErrorIsReportedAndAborts) {
  FakeNcclBackend fake;
  NcclRunner runner(fake, options());
  fake.fail_while_running = "remote process exited or there was a network error";
  try {
    runner.run("broadcast", fake.caller, noop_collective(fake), 60s);
    FAIL() << "the NCCL error was not reported";
  } catch (const CollectiveError& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("broadcast failed on rank 0"), std::string::npos) << m;
    EXPECT_NE(m.find("network error"), std::string::npos) << m;
  }
  EXPECT_TRUE(runner.aborted());  // first: it waits for the watchdog's abort (above)
  EXPECT_TRUE(fake.called("abort comm"));
  fake.complete();
}

TEST(NcclRunner, HeartbeatBeatsWhileWaiting) {
  FakeNcclBackend fake;
  auto o = options();
  char path[] = "/tmp/ddprun-nccl-beat-XXXXXX";
  int fd = mkstemp(path);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  close(fd);
  o.heartbeat = std::make_shared<Heartbeat>(path, 0);
  NcclRunner runner(fake, o);
  const uint64_t start = o.heartbeat->count();
  try {
    runner.run("all_reduce", fake.caller, noop_collective(fake), 50ms);
  } catch (const CollectiveError&) {
  }
  // Every check_every (1 ms) of a 50 ms wait beats.
  EXPECT_GT(o.heartbeat->count(), start + 5);
  unlink(path);
  fake.complete();
}

TEST(NcclRunner, EnqueueReturnsWithoutWaitingAndOrdersOnTheDevice) {
  FakeNcclBackend fake;
  NcclRunner runner(fake, options());
  // Two collectives in flight, neither completed: the host never waited.
  auto first = runner.enqueue("all_reduce", fake.caller, noop_collective(fake), 60s);
  auto second = runner.enqueue("all_reduce", fake.caller, noop_collective(fake), 60s);
  EXPECT_EQ(runner.in_flight(), 2u);
  EXPECT_FALSE(fake.called("caller waits event2"));
  // Each has its own end event: ordering after the first waits on the
  // first's event only, not on the later collective.
  runner.order_after(first, fake.caller);
  EXPECT_TRUE(fake.called("record event2 on nccl-stream"));
  EXPECT_TRUE(fake.called("record event3 on nccl-stream"));
  EXPECT_TRUE(fake.called("caller waits event2"));
  EXPECT_FALSE(fake.called("caller waits event3"));
  fake.complete();
}

TEST(NcclRunner, OrderingAfterADoneCollectiveWaitsOnNothing) {
  FakeNcclBackend fake;
  NcclRunner runner(fake, options());
  auto t = runner.enqueue("all_reduce", fake.caller, noop_collective(fake), 60s);
  fake.complete();
  runner.synchronize(t);
  runner.order_after(t, fake.caller);
  EXPECT_FALSE(fake.called("caller waits event2"));
}

TEST(NcclRunner, EndEventsAndTensorsAreReleasedOnceDone) {
  FakeNcclBackend fake;
  NcclRunner runner(fake, options());
  std::weak_ptr<void> tensor;
  for (int i = 0; i < 50; ++i) {
    auto keep = std::make_shared<int>(i);
    if (i == 49) tensor = keep;
    auto t = runner.enqueue("all_reduce", fake.caller, noop_collective(fake), 60s, std::move(keep));
    fake.complete();
    runner.synchronize(t);
    // The watchdog reaps asynchronously: wait (bounded) for it.
    for (int k = 0; k < 5000 && runner.in_flight() > 0; ++k) std::this_thread::sleep_for(1ms);
    ASSERT_EQ(runner.in_flight(), 0u);
  }
  EXPECT_TRUE(tensor.expired()) << "the last collective's tensor is still held";
  // One end event, made once and reused, not one per call.
  EXPECT_EQ(runner.events_made(), 1u);
}

TEST(NcclRunner, WatchdogTimesOutACollectiveNobodyWaitsFor) {
  FakeNcclBackend fake;
  NcclRunner runner(fake, options());
  auto t = runner.enqueue("all_reduce", fake.caller, noop_collective(fake), 30ms);  // never completes
  // Nobody synchronizes: the watchdog alone notices, and aborts.
  for (int i = 0; i < 5000 && !runner.aborted(); ++i) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(runner.aborted());
  EXPECT_TRUE(fake.called("abort comm"));
  try {
    runner.order_after(t, fake.caller);
    FAIL() << "ordering after a timed-out collective did not throw";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("all_reduce timed out"), std::string::npos) << e.what();
  }
  EXPECT_THROW(runner.enqueue("broadcast", fake.caller, noop_collective(fake), 1s), CollectiveError);
  fake.complete();
}

// A captured step (ddp/captured_step.h): a collective enqueued while the
// caller's stream is captured goes into the graph with its ordering events
// only. A host function would be called at every replay with a ticket long
// gone; the tensors live in the graph's pool.
TEST(NcclRunner, ACollectiveEnqueuedDuringACaptureLaunchesNoHostFunctionAndJoinsTheCaller) {
  FakeNcclBackend fake;
  NcclRunner runner(fake, options());
  fake.capturing = true;
  auto tensor = std::make_shared<int>(7);
  std::weak_ptr<int> held = tensor;
  auto t = runner.enqueue("all_reduce", fake.caller,
                          [&](NcclCommHandle, NcclStreamHandle) { fake.set_device(99); /* marks the call */ }, 60s,
                          std::move(tensor));
  EXPECT_TRUE(held.expired()) << "a captured collective's tensor is still held";
  EXPECT_EQ(runner.in_flight(), 0u) << "a captured collective is watched as if it ran now";
  runner.order_after(t, fake.caller);
  const std::vector<std::string> calls = fake.calls();
  auto at = [&](const std::string& c) {
    auto it = std::find(calls.begin(), calls.end(), c);
    EXPECT_NE(it, calls.end()) << "no call " << c;
    return it - calls.begin();
  };
  EXPECT_LT(at("record event1 on caller"), at("nccl-stream waits event1"));
  EXPECT_LT(at("nccl-stream waits event1"), at("set_device 99"));
  EXPECT_LT(at("set_device 99"), at("record event2 on nccl-stream"));
  EXPECT_LT(at("record event2 on nccl-stream"), at("caller waits event2"));
  EXPECT_FALSE(fake.called("host_func on nccl-stream"));
  // The host cannot wait for what runs only at a replay.
  try {
    runner.synchronize(t);
    FAIL() << "synchronize on a captured collective returned";
  } catch (const std::logic_error& e) {  // a usage error: no peer failed, nothing to heal
    EXPECT_NE(std::string(e.what()).find("cannot be captured"), std::string::npos) << e.what();
  }
  // Nor watch a replay from inside a capture: a usage error as well.
  try {
    runner.enqueue("captured step", fake.caller, nullptr, 60s);
    FAIL() << "a watch enqueued during a capture returned";
  } catch (const std::logic_error& e) {
    EXPECT_NE(std::string(e.what()).find("inside a CUDA graph's capture"), std::string::npos) << e.what();
  }
  // The end event went back to the pool: the next collective reuses it.
  auto again = runner.enqueue("all_reduce", fake.caller, noop_collective(fake), 60s);
  runner.order_after(again, fake.caller);
  EXPECT_EQ(runner.events_made(), 1u);
  EXPECT_FALSE(runner.aborted());
}

// After a replay its collectives are watched as one: an empty enqueue is
// done when NCCL's stream gets past them, and times out as a collective.
TEST(NcclRunner, AnEmptyEnqueueWatchesTheStreamAndTimesOutAsACollective) {
  FakeNcclBackend fake;
  NcclRunner runner(fake, options());
  auto done = runner.enqueue("captured step", fake.caller, nullptr, 60s);
  EXPECT_TRUE(fake.called("host_func on nccl-stream"));
  fake.complete();
  runner.synchronize(done);
  auto hung = runner.enqueue("captured step", fake.caller, nullptr, 30ms);  // never completes
  for (int i = 0; i < 5000 && !runner.aborted(); ++i) std::this_thread::sleep_for(1ms);
  EXPECT_TRUE(runner.aborted());
  try {
    runner.order_after(hung, fake.caller);
    FAIL() << "ordering after a hung replay did not throw";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("captured step timed out"), std::string::npos) << e.what();
  }
  fake.complete();
}

// A heal: the agent named a new generation while a collective waits on a
// dead peer. abort() from another thread fails the waiter now, with its
// words, and aborts NCCL's communicator; later calls fail the same way.
TEST(NcclRunner, AbortFromAnotherThreadFailsTheWaiterAtOnceWithItsWords) {
  FakeNcclBackend fake;
  NcclRunner runner(fake, options());
  auto waiter = std::async(std::launch::async, [&] {
    runner.run("all_reduce", fake.caller, noop_collective(fake), 60s);  // never completed
  });
  fake.wait_for_host_func();
  runner.abort("ddp: the group heals in generation 1");
  try {
    waiter.get();
    FAIL() << "the waiter was not failed by the abort";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("heals in generation 1"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(runner.aborted());
  EXPECT_TRUE(fake.called("abort comm"));
  runner.abort("a second abort");  // harmless; the first words stay
  try {
    runner.run("broadcast", fake.caller, noop_collective(fake), 1s);
    FAIL() << "a collective ran on an aborted communicator";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("heals in generation 1"), std::string::npos) << e.what();
  }
  fake.complete();
}

// An enqueue that NCCL keeps "in progress" (a non-blocking call waiting on
// a dead peer) holds the communicator's lock while it polls: abort() must
// still get through, at the next poll, not at the enqueue's deadline.
TEST(NcclRunner, AbortReleasesAnEnqueueStuckInProgress) {
  FakeNcclBackend fake;
  NcclRunner runner(fake, options());
  fake.stall();
  const int polls = fake.polls();
  // Its deadline is far away: an abort() that waited for the lock would
  // hang the test (ctest's timeout fails it) instead of returning at once.
  auto stuck = std::async(std::launch::async, [&] {
    runner.enqueue("all_reduce", fake.caller, noop_collective(fake), 1h);
  });
  fake.wait_for_polls(polls + 2);  // polling in wait_ready, the lock held
  runner.abort("ddp: the group heals in generation 2");
  try {
    stuck.get();
    FAIL() << "the stuck enqueue went through";
  } catch (const CollectiveError& e) {
    // The abort's own words, not a timeout's.
    EXPECT_NE(std::string(e.what()).find("heals in generation 2"), std::string::npos) << e.what();
  }
  EXPECT_TRUE(runner.aborted());
  EXPECT_TRUE(fake.called("abort comm"));
}

TEST(NcclRunner, DestroyingWithCollectivesInFlightAbortsInsteadOfWaiting) {
  FakeNcclBackend fake;
  {
    NcclRunner runner(fake, options());
    runner.enqueue("all_reduce", fake.caller, noop_collective(fake), 60s);
  }
  EXPECT_TRUE(fake.called("abort comm"));
  EXPECT_FALSE(fake.called("destroy comm"));
  fake.complete();  // the host function runs after the runner is gone: harmless
  FakeNcclBackend quiet;
  {
    NcclRunner runner(quiet, options());
    auto t = runner.enqueue("all_reduce", quiet.caller, noop_collective(quiet), 60s);
    quiet.complete();
    runner.synchronize(t);
  }
  EXPECT_TRUE(quiet.called("destroy comm"));
  EXPECT_FALSE(quiet.called("abort comm"));
}

}  // namespace
}  // namespace ddp
