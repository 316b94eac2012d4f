#include "comm/shm_group.h"

#include <fcntl.h>
#include <linux/futex.h>
#include <sched.h>
#include <signal.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <cerrno>
#include <climits>
#include <cstring>
#include <iterator>
#include <random>
#include <sstream>
#include <string_view>

#include "channel/shm_names.h"
#include "comm/stream_copy.h"
#include "ddp/collective_error.h"

namespace ddp {

// At the start of the segment. Written by rank 0 before it publishes the
// name; read by the others after they got the name through the store.
struct ShmGroup::Header {
  uint64_t magic;
  uint64_t nonce;
  uint32_t version;
  uint32_t size;
  uint64_t slot_bytes;
  std::atomic<uint32_t> claim;  // 1 + the rank that failed first (compare-exchange)
  std::atomic<uint32_t> abort;  // set after why: 1 + that rank
  char why[512];                // its message
  // Phase arrivals of all ranks (see signal and wait_all), on a line of
  // their own.
  alignas(64) std::atomic<uint32_t> arrived;
  std::atomic<uint32_t> arrived_waiters;
};

// One per rank, on its own cache lines: its phase count (see signal and
// wait_all), and what it writes for its peers to read.
struct alignas(128) ShmGroup::Line {
  std::atomic<uint32_t> seq;
  int32_t pid;
  std::atomic<uint32_t> left;  // its communicator is gone (destroyed, not crashed)
  uint64_t pid_ns;  // the pid namespace the pid means something in
  // The collective this rank is in, for the mismatch check.
  uint64_t call_index;
  uint32_t call_kind;
  uint32_t call_detail;
  uint64_t call_bytes;
};

namespace {

using Clock = std::chrono::steady_clock;
constexpr uint64_t kMagic = 0x6464707275'6e5348ULL;  // "ddprunSH"
constexpr uint32_t kVersion = 1;
constexpr size_t kHeaderBytes = 1024;
constexpr size_t kPage = 4096;

static_assert(sizeof(std::atomic<uint32_t>) == 4 && std::atomic<uint32_t>::is_always_lock_free,
              "futex words must be plain 32-bit atomics");

size_t round_up(size_t v, size_t to) { return (v + to - 1) / to * to; }

size_t lines_offset() { return kHeaderBytes; }
size_t data_offset(int size) { return round_up(kHeaderBytes + size_t(size) * 128, kPage); }
size_t segment_bytes(int size, size_t slot_bytes) { return data_offset(size) + 2 * size_t(size) * slot_bytes; }

inline uint32_t* futex_word(std::atomic<uint32_t>* a) { return reinterpret_cast<uint32_t*>(a); }

// Sleeps while *word == expected, at most `timeout` (shared, not private:
// the word lives in memory other processes map).
void futex_wait(std::atomic<uint32_t>* word, uint32_t expected, std::chrono::nanoseconds timeout) {
  timespec ts{static_cast<time_t>(timeout.count() / 1000000000), static_cast<long>(timeout.count() % 1000000000)};
  syscall(SYS_futex, futex_word(word), FUTEX_WAIT, expected, &ts, nullptr, 0);
}

void futex_wake(std::atomic<uint32_t>* word) {
  syscall(SYS_futex, futex_word(word), FUTEX_WAKE, INT_MAX, nullptr, nullptr, 0);
}

inline void cpu_pause() {
#if defined(__x86_64__) || defined(__i386__)
  __builtin_ia32_pause();
#endif
}

uint64_t pid_namespace() {
  char buf[64] = {};
  const ssize_t n = readlink("/proc/self/ns/pid", buf, sizeof(buf) - 1);
  if (n <= 0) return 0;
  // "pid:[4026531836]"
  const char* open = std::strchr(buf, '[');
  return open ? std::strtoull(open + 1, nullptr, 10) : 0;
}

std::string hex(uint64_t v) {
  std::ostringstream s;
  s << std::hex << v;
  return s.str();
}

std::string seconds(std::chrono::milliseconds t) {
  std::string s = std::to_string(t.count() / 1000.0);
  return s.substr(0, s.find('.') + 4);
}

const char* call_name(uint32_t kind) {
  switch (kind) {
    case 1: return "all_reduce";
    case 2: return "broadcast";
    case 3: return "all_gather";
    case 4: return "barrier";
  }
  return "?";
}

}  // namespace

int cpus_available() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof(set), &set) == 0) return CPU_COUNT(&set);
  return static_cast<int>(sysconf(_SC_NPROCESSORS_ONLN));
}

ShmGroup::ShmGroup(ddprun::Store& store, const ShmGroupOptions& options) : options_(options) {
  const int size = options_.size, rank = options_.rank;
  if (size < 1 || rank < 0 || rank >= size) {
    throw std::invalid_argument("ddp: shared-memory rank " + std::to_string(rank) + " is not in [0, " +
                                std::to_string(size) + ")");
  }
  options_.slot_bytes = round_up(std::max<size_t>(options_.slot_bytes, kPage), kPage);
  if (options_.spin < 0) options_.spin = cpus_available() > size ? 2000 : 0;
  spin_ = options_.spin;
  my_pid_ns_ = pid_namespace();
  const size_t bytes = segment_bytes(size, options_.slot_bytes);
  const auto timeout = options_.timeout;
  const std::string me = "rank " + std::to_string(rank) + " of " + std::to_string(size);

  if (rank == 0) {
    std::random_device rd;
    const uint64_t nonce = (uint64_t{rd()} << 32) ^ rd();
    const std::string name = ddprun::channel::shm_segment_name(geteuid(), getpid(), nonce);
    try {
      segment_ = ShmSegment::create(name, bytes);
    } catch (const CollectiveError& e) {
      store.set("shm/segment", std::string("error\n") + e.what());  // the others fail with our words
      throw;
    }
    auto* h = reinterpret_cast<Header*>(segment_.data());
    h->magic = kMagic;
    h->nonce = nonce;
    h->version = kVersion;
    h->size = static_cast<uint32_t>(size);
    h->slot_bytes = options_.slot_bytes;
    store.set("shm/segment", name + "\n" + hex(nonce) + "\n" + std::to_string(bytes));
  } else {
    std::string published;
    try {
      published = store.get("shm/segment", timeout);
    } catch (const ddprun::StoreTimeout&) {
      throw CollectiveError("ddp: shared-memory setup on " + me + ": rank 0 published no segment within " +
                            seconds(timeout) + " s (set DDPRUN_TIMEOUT_S)");
    }
    std::istringstream in(published);
    std::string name, nonce_hex, bytes_text;
    std::getline(in, name);
    if (name == "error") {
      std::string why((std::istreambuf_iterator<char>(in)), {});
      throw CollectiveError("ddp: shared-memory setup on " + me + ": rank 0 could not make the segment: " + why);
    }
    std::getline(in, nonce_hex);
    std::getline(in, bytes_text);
    std::string problem;
    try {
      if (bytes_text != std::to_string(bytes)) {
        throw CollectiveError("ddp: shared memory segment " + name + " is " + bytes_text + " bytes, this rank expects " +
                              std::to_string(bytes) + " (ranks built with different slot sizes?)");
      }
      segment_ = ShmSegment::open(name, bytes);
      const auto* h = reinterpret_cast<const Header*>(segment_.data());
      if (h->magic != kMagic || h->version != kVersion || hex(h->nonce) != nonce_hex ||
          h->size != static_cast<uint32_t>(size) || h->slot_bytes != options_.slot_bytes) {
        throw CollectiveError("ddp: shared memory segment " + name +
                              " is not the one rank 0 published (its header differs)");
      }
    } catch (const CollectiveError& e) {
      problem = e.what();
    }
    // Rank 0 unlinks the name once every rank has it, or gives up on ours.
    store.set("shm/ready/" + std::to_string(rank), problem.empty() ? "ok" : "error\n" + problem);
    if (!problem.empty()) throw CollectiveError(problem);
    // All or none: a group where one rank could not open the segment is no
    // group, and every rank must know it (to fall back to Gloo together).
    std::string go;
    try {
      go = store.get("shm/go", timeout);
    } catch (const ddprun::StoreTimeout&) {
      throw CollectiveError("ddp: shared-memory setup on " + me + ": rank 0 did not confirm the group within " +
                            seconds(timeout) + " s (set DDPRUN_TIMEOUT_S)");
    }
    if (go != "ok") throw CollectiveError(go.substr(go.find('\n') + 1));
  }

  header_ = reinterpret_cast<Header*>(segment_.data());
  lines_ = segment_.data() + lines_offset();
  data_ = segment_.data() + data_offset(size);
  Line& mine = line(rank);
  mine.pid = static_cast<int32_t>(getpid());
  mine.pid_ns = my_pid_ns_;

  if (rank == 0) {
    // Every rank must hold the segment before its name goes; then nothing
    // is left under /dev/shm however the job ends.
    auto refuse = [&](const std::string& why) {
      segment_.unlink();
      store.set("shm/go", "error\n" + why);
      throw CollectiveError(why);
    };
    for (int r = 1; r < size; ++r) {
      std::string ready;
      try {
        ready = store.get("shm/ready/" + std::to_string(r), timeout);
      } catch (const ddprun::StoreTimeout&) {
        refuse("ddp: shared-memory setup: rank " + std::to_string(r) + " did not open the segment within " +
               seconds(timeout) + " s (set DDPRUN_TIMEOUT_S)");
      }
      if (ready != "ok") {
        refuse("ddp: shared-memory setup: rank " + std::to_string(r) + " failed: " +
               ready.substr(ready.find('\n') + 1));
      }
    }
    segment_.unlink();
    store.set("shm/go", "ok");
  }
}

ShmGroup::~ShmGroup() {
  // Peers still waiting for this rank would otherwise wait out their
  // timeout: mark this rank gone and wake them.
  if (!header_) return;
  line(options_.rank).left.store(1, std::memory_order_seq_cst);
  futex_wake(&header_->arrived);
}

ShmGroup::Line& ShmGroup::line(int r) const {
  return *reinterpret_cast<Line*>(lines_ + size_t(r) * sizeof(Line));
}

char* ShmGroup::slot(int buffer, int r) const {
  return data_ + (size_t(buffer) * size_t(options_.size) + size_t(r)) * options_.slot_bytes;
}

std::string ShmGroup::where(const char* op) const {
  return std::string("ddp: ") + op + " on rank " + std::to_string(options_.rank) + " of " +
         std::to_string(options_.size);
}

bool ShmGroup::aborted() const { return header_ && header_->abort.load(std::memory_order_acquire) != 0; }

void ShmGroup::check_usable(const char* op) const {
  if (aborted()) {
    const uint32_t who = header_->abort.load(std::memory_order_acquire) - 1;
    throw CollectiveError(where(op) + ": the shared-memory group failed earlier (rank " + std::to_string(who) +
                          ": " + header_->why + ")");
  }
}

void ShmGroup::abort(const std::string& why) {
  if (!header_) return;
  uint32_t none = 0;
  if (header_->claim.compare_exchange_strong(none, static_cast<uint32_t>(options_.rank + 1))) {
    std::strncpy(header_->why, why.c_str(), sizeof(header_->why) - 1);
    header_->abort.store(static_cast<uint32_t>(options_.rank + 1), std::memory_order_release);
  }
  // Wake every sleeper: they see the abort mark and fail at once.
  futex_wake(&header_->arrived);
}

void ShmGroup::give_up(const std::string& why) {
  abort(why);
  throw CollectiveError(why);
}

void ShmGroup::peer_failed(const char* op) {
  const uint32_t who = header_->abort.load(std::memory_order_acquire) - 1;
  throw CollectiveError(where(op) + " stopped: peer rank " + std::to_string(who) +
                        " of the shared-memory group failed first: " + header_->why);
}

bool ShmGroup::peer_alive(int peer) const {
  const Line& l = line(peer);
  // A pid from another pid namespace, or none yet, tells nothing.
  if (l.pid <= 0 || l.pid_ns == 0 || l.pid_ns != my_pid_ns_ || l.pid == getpid()) return true;
  if (kill(l.pid, 0) != 0 && errno == ESRCH) return false;
  // Exited but not reaped yet by its parent (the agent): a zombie. Read
  // with read(2), not a stream: the peer may be reaped between the open and
  // the read, which then fails with ESRCH (libstdc++'s filebuf throws on
  // that, and an istreambuf_iterator lets it through whatever the stream's
  // exception mask: a survivor failed on it).
  const std::string path = "/proc/" + std::to_string(l.pid) + "/stat";
  const int fd = open(path.c_str(), O_RDONLY | O_CLOEXEC);
  if (fd < 0) return errno != ENOENT && errno != ESRCH;
  char buf[1024];
  const ssize_t n = read(fd, buf, sizeof(buf));
  const int read_errno = errno;
  close(fd);
  if (n < 0) return read_errno != ESRCH;
  const std::string_view text(buf, static_cast<size_t>(n));
  const auto paren = text.rfind(')');
  if (paren != std::string_view::npos && paren + 2 < text.size()) {
    const char state = text[paren + 2];
    if (state == 'Z' || state == 'X') return false;
  }
  return true;
}

// A phase ends when every rank has bumped its seq to the same number. Every
// rank also adds one to the segment's `arrived` count per phase, so "every
// rank reached seq S" is "arrived reached S x size", one word that all
// waiters sleep on and the last rank to arrive wakes: one sleep and one
// wake per rank and phase, however many ranks (waiting on each peer's own
// word in turn costs up to size - 1 of each, which oversubscribed cores
// pay in context switches).
//
// seq_cst on both sides of the waiters count (Dekker): either the waiter
// sees the new count before sleeping, or the signaller sees the waiter and
// wakes it. A futex wait also returns at once if the count already moved.
void ShmGroup::signal(uint32_t seq) {
  line(options_.rank).seq.store(seq, std::memory_order_seq_cst);
  // No rank arrives at phase seq + 1 before all arrived at seq, so the
  // arrival that makes the count seq x size is the phase's last: only it
  // wakes anyone (and only if someone sleeps).
  const uint32_t now = header_->arrived.fetch_add(1, std::memory_order_seq_cst) + 1;
  if (now == seq * static_cast<uint32_t>(options_.size) &&
      header_->arrived_waiters.load(std::memory_order_seq_cst) != 0) {
    futex_wake(&header_->arrived);
  }
}

// Wrap-safe, like the arrival count.
bool ShmGroup::behind(int r, uint32_t target) const {
  return r != options_.rank && static_cast<int32_t>(line(r).seq.load(std::memory_order_acquire) - target) < 0;
}

// The first peer whose seq is still short of target (to name in errors),
// or -1.
int ShmGroup::first_behind(uint32_t target) const {
  for (int r = 0; r < options_.size; ++r) {
    if (behind(r, target)) return r;
  }
  return -1;
}

void ShmGroup::wait_all(uint32_t target, const char* op, Clock::time_point deadline,
                        std::chrono::milliseconds timeout) {
  // Wrap-safe: the counts are 32-bit and may wrap in a long job.
  const uint32_t want = target * static_cast<uint32_t>(options_.size);
  auto reached = [want](uint32_t v) { return static_cast<int32_t>(v - want) >= 0; };
  std::atomic<uint32_t>& arrived = header_->arrived;
  if (reached(arrived.load(std::memory_order_acquire))) return;
  for (int i = 0; i < spin_; ++i) {
    cpu_pause();
    if (reached(arrived.load(std::memory_order_acquire))) return;
  }
  header_->arrived_waiters.fetch_add(1, std::memory_order_seq_cst);
  struct Leave {
    std::atomic<uint32_t>& waiters;
    ~Leave() { waiters.fetch_sub(1, std::memory_order_seq_cst); }
  } leave{header_->arrived_waiters};
  // Peers' liveness is checked 2 ms into a wait, then at doubling
  // intervals up to check_every: a dead peer is seen within milliseconds
  // (a heal waits on it), and a long wait costs a handful of checks.
  auto last_check = Clock::now();
  std::chrono::milliseconds interval = std::min(options_.check_every, std::chrono::milliseconds(2));
  while (true) {
    const uint32_t v = arrived.load(std::memory_order_seq_cst);
    if (reached(v)) return;
    if (header_->abort.load(std::memory_order_acquire) != 0) peer_failed(op);
    const int laggard = first_behind(target);
    if (laggard >= 0 && line(laggard).left.load(std::memory_order_seq_cst) != 0) {
      give_up(where(op) + ": peer rank " + std::to_string(laggard) +
              " left the shared-memory group (it dropped its communicator) without joining it");
    }
    const auto now = Clock::now();
    if (now >= deadline) {
      give_up(where(op) + " timed out after " + std::to_string(timeout.count()) + " ms waiting for peer rank " +
              std::to_string(laggard < 0 ? 0 : laggard) +
              " (set by ddp::InitOptions::timeout or DDPRUN_TIMEOUT_S; a peer may be hung, stopped or slower than "
              "that; shared memory)");
    }
    if (now - last_check >= interval) {
      last_check = now;
      interval = std::min(interval * 2, options_.check_every);
      beat();
      for (int r = 0; r < options_.size; ++r) {
        if (behind(r, target) && !peer_alive(r)) {
          give_up(where(op) + ": peer rank " + std::to_string(r) + " (pid " + std::to_string(line(r).pid) +
                  ") exited during the collective (it crashed or was killed; shared memory)");
        }
      }
    }
    const auto left = std::min<Clock::duration>(deadline - now, last_check + interval - now);
    futex_wait(&arrived, v, std::chrono::duration_cast<std::chrono::nanoseconds>(
                                std::max<Clock::duration>(left, std::chrono::microseconds(100))));
  }
}

void ShmGroup::begin(const char* op, const Call& call, Clock::time_point, std::chrono::milliseconds) {
  check_usable(op);
  beat();
  ++calls_;
  Line& me = line(options_.rank);
  me.call_index = calls_;
  me.call_kind = call.kind;
  me.call_detail = call.detail;
  me.call_bytes = call.bytes;
  // Published by the first chunk's signal (a seq_cst store after these).
}

// After the first publish wait: every peer's descriptor is in place, and
// stays until we signal the end of this chunk. Different calls would pair
// the wrong bytes (or deadlock later): fail on every rank, naming both.
void ShmGroup::check_calls(const char* op, const Call& call) {
  for (int r = 0; r < options_.size; ++r) {
    const Line& l = line(r);
    if (l.call_index != calls_ || l.call_kind != call.kind || l.call_detail != call.detail ||
        l.call_bytes != call.bytes) {
      give_up(where(op) + ": peer rank " + std::to_string(r) + " called " + call_name(l.call_kind) + " of " +
              std::to_string(l.call_bytes) + " bytes where this rank called " + op + " of " +
              std::to_string(call.bytes) +
              " bytes (every rank must make the same collectives, with the same sizes, in the same order)");
    }
  }
}

void ShmGroup::all_reduce(void* data, size_t count, ShmDtype type, ReduceOp op, std::chrono::milliseconds timeout) {
  const char* name = "all_reduce";
  if (op == ReduceOp::kAvg && !is_floating(type)) {
    throw std::invalid_argument(std::string("ddp: all_reduce avg needs a floating-point type, got ") + to_string(type));
  }
  if (count == 0) return;
  const int size = options_.size, me = options_.rank;
  const size_t es = element_size(type);
  if (size == 1) {
    check_usable(name);  // the sum, max, min or average of one rank: unchanged
    return;
  }
  const auto deadline = Clock::now() + timeout;
  const Call call{1, (static_cast<uint32_t>(type) << 8) | static_cast<uint32_t>(op), count * es};
  begin(name, call, deadline, timeout);
  char* bytes = static_cast<char*>(data);
  // Shares start on cache-line boundaries: no two ranks write one line.
  const size_t align = std::max<size_t>(1, 64 / es);
  const size_t per_chunk = options_.slot_bytes / es;
  std::vector<const void*> inputs(static_cast<size_t>(size));
  for (size_t first = 0; first < count; first += per_chunk, ++chunk_) {
    const size_t n = std::min(per_chunk, count - first);
    const int buf = static_cast<int>(chunk_ % 2);
    const size_t share = round_up((n + size - 1) / size, align);
    auto share_begin = [&](int k) { return std::min(n, size_t(k) * share); };
    auto share_end = [&](int k) { return std::min(n, size_t(k + 1) * share); };
    char* chunk = bytes + first * es;
    char* mine = slot(buf, me);
    // 1. Publish all of this chunk but my own share (only I reduce that,
    //    reading it from my own memory).
    std::memcpy(mine, chunk, share_begin(me) * es);
    std::memcpy(mine + share_end(me) * es, chunk + share_end(me) * es, (n - share_end(me)) * es);
    signal(published_seq());
    wait_all(published_seq(), name, deadline, timeout);
    if (first == 0) check_calls(name, call);
    // 2. Reduce my share over every rank, into my slot.
    const size_t b = share_begin(me), e = share_end(me);
    if (e > b) {
      for (int k = 0; k < size; ++k) {
        inputs[size_t(k)] = (k == me ? chunk : slot(buf, k)) + b * es;
      }
      reduce_into(type, op, inputs.data(), size, mine + b * es, e - b);
    }
    signal(reduced_seq());
    wait_all(reduced_seq(), name, deadline, timeout);
    // 3. Gather every rank's reduced share.
    for (int k = 0; k < size; ++k) {
      const size_t kb = share_begin(k), ke = share_end(k);
      if (ke > kb) std::memcpy(chunk + kb * es, slot(buf, k) + kb * es, (ke - kb) * es);
    }
  }
  beat();
}

void ShmGroup::broadcast(void* data, size_t bytes, int root, std::chrono::milliseconds timeout) {
  const char* name = "broadcast";
  const int size = options_.size, me = options_.rank;
  if (root < 0 || root >= size) {
    throw std::invalid_argument("ddp: broadcast root " + std::to_string(root) + " is not in [0, " +
                                std::to_string(size) + ")");
  }
  if (bytes == 0) return;
  if (size == 1) return check_usable(name);
  const auto deadline = Clock::now() + timeout;
  const Call call{2, static_cast<uint32_t>(root), bytes};
  begin(name, call, deadline, timeout);
  // A chunk fills a whole buffer: every rank's slot, back to back. The
  // copies in and out overlap: in phase k root copies chunk k into one
  // buffer while the others copy chunk k - 1 out of the other buffer, and one
  // arrival ends the phase (root rewrites a buffer only after everyone has
  // read it, a phase later). n chunks take n + 1 phases, each on a seq of
  // its own; an odd count gets one more, so that the group's seq stays
  // 2 x chunk_ between collectives.
  const size_t per_chunk = size_t(size) * options_.slot_bytes;
  const size_t chunks = (bytes + per_chunk - 1) / per_chunk;
  const size_t phases = chunks + 1 + (chunks + 1) % 2;
  const uint32_t base = static_cast<uint32_t>(2 * chunk_);
  // Chunk k in buffer (chunk_ + k) % 2: the first is not the one a slower
  // rank may still gather from after the previous collective's last chunk.
  auto buffer = [&](size_t k) { return slot(static_cast<int>((chunk_ + k) % 2), 0); };
  char* p = static_cast<char*>(data);
  auto range = [&](size_t k) { return std::pair(k * per_chunk, std::min(per_chunk, bytes - k * per_chunk)); };
  for (size_t phase = 0; phase < phases; ++phase) {
    if (me == root && phase < chunks) {
      const auto [first, n] = range(phase);
      std::memcpy(buffer(phase), p + first, n);
    }
    if (me != root && phase >= 1 && phase <= chunks) {
      const auto [first, n] = range(phase - 1);
      // A big broadcast (a heal's state) streams past the caches: its
      // destination would not stay there anyway (stream_copy.h).
      if (bytes >= kStreamCopyBytes) {
        stream_copy(p + first, buffer(phase - 1), n);
      } else {
        std::memcpy(p + first, buffer(phase - 1), n);
      }
    }
    const uint32_t seq = base + static_cast<uint32_t>(phase) + 1;
    signal(seq);
    // Only root's data matters, but waiting for everyone also checks calls.
    wait_all(seq, name, deadline, timeout);
    if (phase == 0) check_calls(name, call);
  }
  chunk_ += phases / 2;
  beat();
}

void ShmGroup::all_gather(const void* in, size_t bytes, void* out, std::chrono::milliseconds timeout) {
  const char* name = "all_gather";
  const int size = options_.size, me = options_.rank;
  if (bytes == 0) return;
  char* o = static_cast<char*>(out);
  const char* i = static_cast<const char*>(in);
  if (size == 1) {
    check_usable(name);
    std::memmove(o, i, bytes);
    return;
  }
  const auto deadline = Clock::now() + timeout;
  const Call call{3, 0, bytes};
  begin(name, call, deadline, timeout);
  const size_t per_chunk = options_.slot_bytes;
  for (size_t first = 0; first < bytes; first += per_chunk, ++chunk_) {
    const size_t n = std::min(per_chunk, bytes - first);
    const int buf = static_cast<int>(chunk_ % 2);
    std::memcpy(slot(buf, me), i + first, n);
    signal(published_seq());
    wait_all(published_seq(), name, deadline, timeout);
    if (first == 0) check_calls(name, call);
    for (int k = 0; k < size; ++k) std::memcpy(o + size_t(k) * bytes + first, slot(buf, k), n);
    signal(reduced_seq());
    wait_all(reduced_seq(), name, deadline, timeout);
  }
  beat();
}

void ShmGroup::barrier(std::chrono::milliseconds timeout) {
  const char* name = "barrier";
  if (options_.size == 1) return check_usable(name);
  const auto deadline = Clock::now() + timeout;
  const Call call{4, 0, 0};
  begin(name, call, deadline, timeout);
  signal(published_seq());
  wait_all(published_seq(), name, deadline, timeout);
  check_calls(name, call);
  // The second phase keeps peers from starting their next collective (and
  // rewriting their descriptor) before every rank has checked this one.
  signal(reduced_seq());
  wait_all(reduced_seq(), name, deadline, timeout);
  ++chunk_;
  beat();
}

}  // namespace ddp
