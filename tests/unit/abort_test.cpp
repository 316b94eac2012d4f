// Releasing a collective blocked on a peer that never answers: the peer is
// connected and alive but silent (as behind a cut link), so only an abort
// can end the wait before the timeout. Communicator::abort() from another
// thread, and the heal watcher that calls it when the agent names a newer
// heal generation in the worker's heartbeat slot. Over shared memory, and
// over Gloo (which has no cancel: its pairs' sockets are shut down, and
// the waits Gloo forgets then are woken one by one).
#include <gtest/gtest.h>
#include <fcntl.h>
#include <linux/futex.h>
#include <linux/sockios.h>
#include <signal.h>
#include <sys/ioctl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <atomic>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <future>
#include <map>
#include <mutex>
#include <string>
#include <thread>

#include "channel/env_names.h"
#include "channel/heartbeat_layout.h"
#include "comm/connect_vote.h"
#include "ddp/collective_error.h"
#include "ddp/world.h"
#include "support/process.h"
#include "support/thread_ranks.h"
#include "tcpstore/server.h"

namespace {

using namespace std::chrono_literals;
namespace fs = std::filesystem;

// Variables a rank gets beside its launch environment.
using ExtraVars = std::function<std::map<std::string, std::string>(int rank)>;

// `base` with `vars` added (or put in place of its own).
ddp::EnvLookup with_vars(ddp::EnvLookup base, std::map<std::string, std::string> vars) {
  return [base = std::move(base), vars = std::move(vars)](const std::string& k) -> std::optional<std::string> {
    if (auto it = vars.find(k); it != vars.end()) return it->second;
    return base(k);
  };
}

// Over `comm` (shm or gloo), rank 0 runs an all_reduce that rank 1 never joins
// (rank 1 stays connected until rank 0 is done); `release(rank0)` runs on
// rank 1's thread. Returns the error rank 0 got ("" if the all_reduce
// completed, which it must not).
std::string blocked_all_reduce(const std::string& comm, const ExtraVars& extra,
                               const std::function<void(ddp::World&)>& release) {
  auto store = std::make_shared<ddprun::MemoryStore>();
  std::promise<ddp::World*> zero;
  auto zero_ready = zero.get_future().share();
  std::promise<std::string> error;
  auto rank0_done = error.get_future().share();
  ddptest::run_threads(2, [&](int r) {
    ddp::InitOptions o;
    o.env = with_vars(ddptest::env_for(r, 2, comm), extra(r));
    o.store = store;
    o.timeout = 10min;  // a test that waits for this has failed
    auto world = ddp::init(o);
    if (r == 0) {
      zero.set_value(world.get());
      at::Tensor t = at::ones({4096});
      std::string what;
      try {
        world->cpu().all_reduce(t, ddp::ReduceOp::kSum);
      } catch (const ddp::CollectiveError& e) {
        what = e.what();
      }
      error.set_value(what);
    } else {
      release(*zero_ready.get());
      rank0_done.wait();  // silent, but connected, until rank 0 is out
    }
  });
  return rank0_done.get();
}

void expect_abort_releases(const std::string& comm) {
  // The abort may land before rank 0's all_reduce starts or while it waits:
  // either way it fails with the reason, not at the timeout.
  const std::string what = blocked_all_reduce(comm, [](int) { return std::map<std::string, std::string>{}; },
                                              [](ddp::World& zero) { zero.cpu().abort("the test gives up on rank 1"); });
  EXPECT_NE(what.find("the test gives up on rank 1"), std::string::npos) << what;
}

TEST(Abort, ReleasesAnAllReduceBlockedOnASilentPeerOnSharedMemory) { expect_abort_releases("shm"); }
TEST(Abort, ReleasesAnAllReduceBlockedOnASilentPeerOnGloo) { expect_abort_releases("gloo"); }

// A heartbeat file as the agent makes it, mapped here to play the agent.
class AgentSlots {
 public:
  explicit AgentSlots(int slots) : path_(fs::temp_directory_path() / ("ddprun-abort-test-" + std::to_string(getpid()))) {
    len_ = ddprun::channel::heartbeat_file_bytes(slots);
    std::ofstream(path_, std::ios::binary) << std::string(len_, '\0');
    const int fd = ::open(path_.c_str(), O_RDWR);
    map_ = ::mmap(nullptr, len_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
    ::close(fd);
  }
  ~AgentSlots() {
    ::munmap(map_, len_);
    fs::remove(path_);
  }
  std::string path() const { return path_.string(); }
  // What the agent does when it starts a replacement: a new generation in
  // the slot, every sleeper on it woken.
  void name_generation(int slot, uint32_t g) {
    uint32_t* word = ddprun::channel::heal_generation_word(map_, slot);
    __atomic_store_n(word, g, __ATOMIC_RELEASE);
    syscall(SYS_futex, word, FUTEX_WAKE, INT32_MAX, nullptr, nullptr, 0);
  }

 private:
  fs::path path_;
  size_t len_ = 0;
  void* map_ = nullptr;
};

void expect_a_newer_generation_releases(const std::string& comm) {
  namespace ch = ddprun::channel;
  AgentSlots slots(2);
  auto extra = [file = slots.path()](int rank) {
    return std::map<std::string, std::string>{
        {ch::kHeals, "1"}, {ch::kHeartbeatFile, file}, {ch::kHeartbeatSlot, std::to_string(rank)}};
  };
  const std::string what = blocked_all_reduce(comm, extra, [&](ddp::World&) { slots.name_generation(0, 1); });
  EXPECT_NE(what.find("heals in generation 1"), std::string::npos) << what;
}

TEST(Abort, ANewerHealGenerationInTheSlotReleasesTheBlockedCollective) { expect_a_newer_generation_releases("shm"); }
TEST(Abort, ANewerHealGenerationInTheSlotReleasesABlockedGlooCollective) {
  expect_a_newer_generation_releases("gloo");
}

// A store that stops answering, as behind a cut link, at the first write
// (or read) of a key under `cut_under`: a rank whose heal generation voted
// "connect", cut off before (or after) it published its Gloo address.
// cut() tells when it got there; release() lets it go on, failing the call.
enum class CutAt { kWrite, kRead };
class CutOffStore final : public ddprun::Store {
 public:
  CutOffStore(std::shared_ptr<ddprun::Store> inner, CutAt at, std::string cut_under)
      : inner_(std::move(inner)), at_(at), cut_under_(std::move(cut_under)),
        released_(release_.get_future().share()) {}
  void set(const std::string& key, std::string_view value) override {
    stop_at(CutAt::kWrite, key);
    inner_->set(key, value);
  }
  std::string get(const std::string& key, std::chrono::milliseconds timeout) override {
    stop_at(CutAt::kRead, key);
    return inner_->get(key, timeout);
  }
  void wait(const std::vector<std::string>& keys, std::chrono::milliseconds timeout) override {
    for (const auto& k : keys) stop_at(CutAt::kRead, k);
    inner_->wait(keys, timeout);
  }
  int64_t add(const std::string& key, int64_t delta) override { return inner_->add(key, delta); }
  std::shared_future<void> cut() { return reached_future_; }
  void release() { std::call_once(released_once_, [this] { release_.set_value(); }); }

 private:
  void stop_at(CutAt at, const std::string& key) {
    if (at != at_ || key.find(cut_under_) == std::string::npos) return;
    std::call_once(reached_once_, [this] { reached_.set_value(); });
    released_.wait();
    throw ddprun::StoreClosed("the test's cut-off store, at " + key);
  }
  std::shared_ptr<ddprun::Store> inner_;
  CutAt at_;
  std::string cut_under_;
  std::promise<void> reached_;
  std::shared_future<void> reached_future_ = reached_.get_future().share();
  std::once_flag reached_once_;
  std::promise<void> release_;
  std::shared_future<void> released_;
  std::once_flag released_once_;
};

// The connect window of a heal: rank 1 votes "connect" in generation 1 and
// is cut off at a write or read of a key under `cut_under`; rank 0 is then inside
// Gloo's set-up with it, which has no cancel. When the agent names
// generation 2 (for rank 1's loss), rank 0 leaves generation 1's connect
// behind at once (GenerationSuperseded), not at the connect's timeout
// (seen: a heal that took 60 s on a flapping link); and generation 2
// connects, rank 1 back.
void expect_a_newer_generation_leaves_the_connect_behind(CutAt at, const std::string& cut_under) {
  namespace ch = ddprun::channel;
  AgentSlots slots(2);
  auto memory = std::make_shared<ddprun::MemoryStore>();
  auto cut = std::make_shared<CutOffStore>(memory, at, cut_under);
  std::string rank0_in_1, rank1_in_1;
  std::atomic<bool> rank1_out{false};
  std::promise<void> left_behind;
  auto rank0_out = left_behind.get_future().share();
  std::vector<float> sums(2, 0);
  ddptest::run_threads(2, [&](int r) {
    ddp::InitOptions o;
    o.env = with_vars(ddptest::env_for(r, 2, "gloo"),
                      {{ch::kHeals, "1"}, {ch::kHeartbeatFile, slots.path()}, {ch::kHeartbeatSlot, std::to_string(r)}});
    o.store = r == 1 ? std::static_pointer_cast<ddprun::Store>(cut) : memory;
    o.timeout = 60s;  // the connect's own end: a test that waits for it has failed
    auto world = ddp::init(o);
    world->disconnect();
    if (r == 0) {
      // The agent, once rank 1 is cut off (or out of generation 1 some
      // other way, which fails the test below): generation 2 for rank 0.
      std::thread agent([&] {
        while (cut->cut().wait_for(10ms) != std::future_status::ready && !rank1_out.load()) {
        }
        slots.name_generation(0, 2);
      });
      try {
        world->reconnect(1);
        rank0_in_1 = "connected";
      } catch (const ddp::GenerationSuperseded& e) {
        rank0_in_1 = "left behind";
      } catch (const std::exception& e) {
        rank0_in_1 = e.what();
      }
      agent.join();
      left_behind.set_value();
    } else {
      // Its link comes back once rank 0 is out: generation 1's reads fail.
      std::thread link([&] {
        rank0_out.wait();
        cut->release();
      });
      try {
        world->reconnect(1);
        rank1_in_1 = "connected";
      } catch (const std::exception& e) {
        rank1_in_1 = e.what();
      }
      rank1_out = true;
      link.join();
    }
    world->reconnect(2);
    at::Tensor t = at::ones({4});
    world->cpu().all_reduce(t, ddp::ReduceOp::kSum);
    sums[size_t(r)] = t[0].item<float>();
  });
  EXPECT_EQ(rank0_in_1, "left behind");
  EXPECT_NE(rank1_in_1.find("the test's cut-off store"), std::string::npos) << rank1_in_1;
  EXPECT_EQ(sums, (std::vector<float>{2, 2})) << "generation 2 did not connect both ranks";
}

// Cut at its first write of the generation's Gloo keys: rank 0 waits in
// the store for an address that never comes.
TEST(Abort, ANewerGenerationLeavesBehindAConnectWhosePeerWasCutOffBeforeItsAddress) {
  expect_a_newer_generation_leaves_the_connect_behind(CutAt::kWrite, "/heal1/gloo/");
}
// Cut once it has published "1" (at its read of rank 0's "0"): rank 0
// connects its socket to rank 1's and waits inside Gloo's transport.
TEST(Abort, ANewerGenerationLeavesBehindAConnectWhosePeerWasCutOffAfterItsAddress) {
  expect_a_newer_generation_leaves_the_connect_behind(CutAt::kRead, "/heal1/gloo/0");
}

// A send Gloo had begun writing when its peer died: the peer had stopped
// reading (SIGSTOP), so the send sat half written in the socket, and the
// peer's death (SIGKILL: its unread bytes reset the connection) fails the
// pair without telling that send (Gloo signals a pair's posted receives
// and not-yet-asked sends, not a send it is writing). Before, its waitSend
// blocked until Gloo's timeout even after the abort (seen: a heal that
// hung for minutes when a peer that healed first closed its end on a bucket
// half sent); the abort must release it. Rank 0 broadcasts (it only sends,
// then waits for its send); rank 1 is another process (this binary,
// AbortPeer below), rank 0 a World in this one.
constexpr int64_t kHalfSentFloats = int64_t{64} << 20;  // 256 MiB: far above a socket's buffers

// Rank `rank` of 2 over Gloo, its store the TCPStore at 127.0.0.1:`port`.
ddp::EnvLookup peer_env(int rank, int port) {
  return with_vars(ddptest::env_for(rank, 2, "gloo"), {{"MASTER_ADDR", "127.0.0.1"},
                                                       {"MASTER_PORT", std::to_string(port)},
                                                       {"TORCHELASTIC_USE_AGENT_STORE", "1"}});
}

// The most bytes any socket of this process has not had acknowledged.
int queued_send_bytes() {
  int most = 0;
  std::error_code ec;
  for (const auto& e : fs::directory_iterator("/proc/self/fd", ec)) {
    const int fd = std::atoi(e.path().filename().c_str());
    struct stat st {};
    if (::fstat(fd, &st) != 0 || !S_ISSOCK(st.st_mode)) continue;
    int queued = 0;
    if (::ioctl(fd, SIOCOUTQ, &queued) == 0) most = std::max(most, queued);
  }
  return most;
}

TEST(Abort, AGlooSendHalfWrittenWhenItsPeerDiedIsReleasedByTheAbort) {
  ddprun::tcpstore::ServerOptions so;
  so.host = "127.0.0.1";
  ddprun::tcpstore::Server server(so);
  ddptest::Process peer({"/proc/self/exe", "--gtest_also_run_disabled_tests",
                         "--gtest_filter=AbortPeer.DISABLED_ReceivesBroadcastsUntilKilled"},
                        {"ABORT_TEST_PEER_PORT=" + std::to_string(server.port())});
  ddp::InitOptions o;
  o.env = peer_env(0, server.port());
  o.timeout = 10min;  // Gloo's own release: a test that waits for it has failed
  auto world = ddp::init(o);
  ASSERT_TRUE(peer.wait_for_line([](const std::string& l) { return l == "peer connected"; }, 2min)) << peer.err();
  // Broadcasts, one after the other (a loaded machine may see one through
  // before the test looks), until one fails.
  std::promise<std::string> error;
  auto done = error.get_future();
  std::thread rank0([&] {
    at::Tensor t = at::ones({kHalfSentFloats});
    try {
      for (;;) world->cpu().broadcast(t, 0);
    } catch (const ddp::CollectiveError& e) {
      error.set_value(e.what());
    }
  });
  // Once rank 0's bytes are in flight (more queued than a tiny message),
  // the peer stops reading, then dies.
  bool sending = false;
  while (!sending && done.wait_for(1ms) == std::future_status::timeout) sending = queued_send_bytes() > (64 << 10);
  peer.signal(SIGSTOP);
  peer.signal(SIGKILL);
  peer.finish(1min);
  world->cpu().abort("the test gives up on rank 1");
  const bool released = done.wait_for(2min) == std::future_status::ready;
  EXPECT_TRUE(sending) << "a broadcast failed before rank 0 had bytes in flight: " << (released ? done.get() : "");
  EXPECT_TRUE(released) << "rank 0's broadcast is still blocked after the abort";
  rank0.join();
}

// Rank 1 of the test above (run by it, with ABORT_TEST_PEER_PORT).
TEST(AbortPeer, DISABLED_ReceivesBroadcastsUntilKilled) {
  const char* port = std::getenv("ABORT_TEST_PEER_PORT");
  if (!port) GTEST_SKIP() << "rank 1 of Abort.AGlooSendHalfWrittenWhenItsPeerDiedIsReleasedByTheAbort";
  ddp::InitOptions o;
  o.env = peer_env(1, std::atoi(port));
  o.timeout = 10min;
  auto world = ddp::init(o);
  std::printf("peer connected\n");
  std::fflush(stdout);
  at::Tensor t = at::zeros({kHalfSentFloats});
  for (;;) world->cpu().broadcast(t, 0);  // stopped and killed in one
}

}  // namespace
