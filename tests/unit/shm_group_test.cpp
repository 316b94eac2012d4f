// The shared-memory collectives (ShmGroup) with ranks as threads over an
// in-memory store: results against values computed here, chunking with tiny
// slots, the call-mismatch check, timeouts, a peer that leaves, and that no
// segment is left under /dev/shm; the streaming copy big broadcasts use.
// No LibTorch.
#include <gtest/gtest.h>

#include <dirent.h>
#include <fcntl.h>
#include <sys/mman.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cmath>
#include <cstring>
#include <functional>
#include <future>
#include <random>
#include <vector>

#include "channel/shm_names.h"
#include "comm/shm_group.h"
#include "comm/stream_copy.h"
#include "ddp/collective_error.h"
#include "rendezvous/store/memory_store.h"
#include "support/threads.h"

namespace ddp {
namespace {

using namespace std::chrono_literals;

ShmGroupOptions options(int rank, int size, size_t slot_bytes = 4096,
                        std::chrono::milliseconds timeout = 30s) {
  ShmGroupOptions o;
  o.rank = rank;
  o.size = size;
  o.slot_bytes = slot_bytes;
  o.timeout = timeout;
  o.check_every = 10ms;
  return o;
}

// Runs body(group) on `size` threads; rethrows the first failure.
void run_group(int size, const std::function<void(ShmGroup&)>& body, size_t slot_bytes = 4096,
               std::chrono::milliseconds timeout = 30s) {
  ddprun::MemoryStore store;
  ddptest::run_threads(size, [&](int r) {
    ShmGroup g(store, options(r, size, slot_bytes, timeout));
    body(g);
  });
}

// This process's segments under /dev/shm.
std::vector<std::string> my_segments() {
  const std::string prefix = ddprun::channel::shm_segment_prefix(geteuid(), getpid());
  std::vector<std::string> found;
  if (DIR* d = opendir(ddprun::channel::kShmDir)) {
    while (dirent* e = readdir(d)) {
      if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) == 0) found.push_back(e->d_name);
    }
    closedir(d);
  }
  return found;
}

// Rank r's value at index i: distinct per rank and index, exact in bf16.
double value(int r, size_t i) { return static_cast<double>((r * 7 + static_cast<int>(i % 13)) % 16) - 5; }

template <typename T>
T cast(double v) {
  return static_cast<T>(v);
}

// bf16 and fp16 by their bits (what ShmDtype::kBFloat16/kFloat16 hold).
uint16_t bf16_bits(float f) {
  uint32_t b;
  std::memcpy(&b, &f, 4);
  return static_cast<uint16_t>(b >> 16);  // the values used are exact in bf16
}
float from_bf16(uint16_t h) {
  uint32_t b = static_cast<uint32_t>(h) << 16;
  float f;
  std::memcpy(&f, &b, 4);
  return f;
}

double expected(ReduceOp op, int size, size_t i) {
  double acc = value(0, i);
  for (int r = 1; r < size; ++r) {
    const double v = value(r, i);
    if (op == ReduceOp::kSum || op == ReduceOp::kAvg) acc += v;
    if (op == ReduceOp::kMax) acc = std::max(acc, v);
    if (op == ReduceOp::kMin) acc = std::min(acc, v);
  }
  return op == ReduceOp::kAvg ? acc / size : acc;
}

template <typename T>
void check_all_reduce(ShmDtype type, int size, size_t count) {
  for (auto op : {ReduceOp::kSum, ReduceOp::kAvg, ReduceOp::kMax, ReduceOp::kMin}) {
    if (op == ReduceOp::kAvg && !is_floating(type)) continue;
    SCOPED_TRACE(std::string(to_string(type)) + " " + to_string(op) + " x" + std::to_string(count) + " on " +
                 std::to_string(size) + " ranks");
    run_group(size, [&](ShmGroup& g) {
      std::vector<T> data(count);
      for (size_t i = 0; i < count; ++i) {
        if constexpr (std::is_same_v<T, uint16_t>) {
          data[i] = bf16_bits(static_cast<float>(value(g.rank(), i)));
        } else {
          data[i] = cast<T>(value(g.rank(), i));
        }
      }
      g.all_reduce(data.data(), count, type, op, 30s);
      for (size_t i = 0; i < count; ++i) {
        const double want = expected(op, size, i);
        double got;
        if constexpr (std::is_same_v<T, uint16_t>) {
          got = from_bf16(data[i]);
        } else {
          got = static_cast<double>(data[i]);
        }
        if (is_floating(type)) {
          ASSERT_NEAR(got, want, std::abs(want) * 1e-2 + 1e-6) << "at " << i;
        } else {
          ASSERT_EQ(got, want) << "at " << i;  // integers: exact
        }
      }
    });
  }
}

TEST(ShmGroup, AllReduceOfEveryTypeAndOpOverManyChunks) {
  // 4 KiB slots: 10007 floats span 10 chunks; odd sizes leave ragged shares.
  for (int size : {2, 3, 4}) {
    for (size_t count : {size_t{1}, size_t{5}, size_t{1000}, size_t{10007}}) {
      check_all_reduce<float>(ShmDtype::kFloat32, size, count);
      check_all_reduce<int32_t>(ShmDtype::kInt32, size, count);
    }
    check_all_reduce<double>(ShmDtype::kFloat64, size, 3001);
    check_all_reduce<int64_t>(ShmDtype::kInt64, size, 3001);
    check_all_reduce<int8_t>(ShmDtype::kInt8, size, 5003);
    check_all_reduce<uint16_t>(ShmDtype::kBFloat16, size, 5003);
  }
}

TEST(ShmGroup, IntegerSumsWrapAroundLikeGloos) {
  run_group(3, [](ShmGroup& g) {
    std::vector<int8_t> v(100, 100);
    g.all_reduce(v.data(), v.size(), ShmDtype::kInt8, ReduceOp::kSum, 30s);
    EXPECT_EQ(v[99], static_cast<int8_t>(300 - 256));
  });
}

TEST(ShmGroup, Bf16SumsAccumulateInFloatAndRoundOnce) {
  // 1 + 2^-8 + 2^-8 in bf16 steps stays 1 (each step rounds); accumulated
  // in float it is 1 + 2^-7, which bf16 holds.
  run_group(3, [](ShmGroup& g) {
    const float mine = g.rank() == 0 ? 1.0f : 1.0f / 256;
    std::vector<uint16_t> v(8, bf16_bits(mine));
    g.all_reduce(v.data(), v.size(), ShmDtype::kBFloat16, ReduceOp::kSum, 30s);
    EXPECT_EQ(from_bf16(v[0]), 1.0f + 1.0f / 128);
  });
}

TEST(ShmGroup, ZeroElementsAndOneRankAreNoOps) {
  run_group(2, [](ShmGroup& g) {
    g.all_reduce(nullptr, 0, ShmDtype::kFloat32, ReduceOp::kSum, 1s);
    g.broadcast(nullptr, 0, 0, 1s);
    g.all_gather(nullptr, 0, nullptr, 1s);
  });
  run_group(1, [](ShmGroup& g) {
    float v[3] = {1, 2, 3};
    g.all_reduce(v, 3, ShmDtype::kFloat32, ReduceOp::kAvg, 1s);
    EXPECT_EQ(v[2], 3.0f);
    float out[3];
    g.all_gather(v, sizeof(v), out, 1s);
    EXPECT_EQ(out[1], 2.0f);
    g.barrier(1s);
  });
}

TEST(ShmGroup, BroadcastAndAllGatherAcrossChunks) {
  for (int size : {2, 3, 5}) {
    run_group(size, [size](ShmGroup& g) {
      // Broadcast: 3 buffers' worth (a chunk is size x 4 KiB) plus a tail.
      const size_t bytes = size_t(size) * 4096 * 3 + 123;
      for (int root : {0, size - 1}) {
        std::vector<unsigned char> b(bytes);
        for (size_t i = 0; i < bytes; ++i) b[i] = static_cast<unsigned char>(g.rank() == root ? i * 31 + root : 0);
        g.broadcast(b.data(), bytes, root, 30s);
        for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(b[i], static_cast<unsigned char>(i * 31 + root)) << i;
      }
      // All-gather: 2.5 slots per rank.
      const size_t each = 4096 * 2 + 2048;
      std::vector<unsigned char> in(each), out(each * size_t(size));
      for (size_t i = 0; i < each; ++i) in[i] = static_cast<unsigned char>(i + 17 * g.rank());
      g.all_gather(in.data(), each, out.data(), 30s);
      for (int r = 0; r < size; ++r) {
        for (size_t i = 0; i < each; ++i) {
          ASSERT_EQ(out[size_t(r) * each + i], static_cast<unsigned char>(i + 17 * r)) << r << "/" << i;
        }
      }
      g.barrier(30s);
    });
  }
}

// A broadcast of kStreamCopyBytes or more writes around the caches
// (stream_copy): every byte arrives, into a destination that is not
// 16-byte aligned, across chunks whose ends are not either.
TEST(ShmGroup, ABigBroadcastStreamsEveryByteIntoAnUnalignedDestination) {
  constexpr size_t bytes = kStreamCopyBytes + 123;
  run_group(3, [](ShmGroup& g) {
    std::vector<unsigned char> b(bytes + 7);
    unsigned char* p = b.data() + 7;
    for (size_t i = 0; i < bytes; ++i) p[i] = static_cast<unsigned char>(g.rank() == 1 ? i * 131 + i / 4099 : 0);
    g.broadcast(p, bytes, 1, 30s);
    for (size_t i = 0; i < bytes; ++i) ASSERT_EQ(p[i], static_cast<unsigned char>(i * 131 + i / 4099)) << i;
  }, 65536 + 4096 + 4096 * 3);
}

TEST(StreamCopy, CopiesEveryByteAtAnyAlignmentAndLength) {
  std::vector<unsigned char> src(4096 + 64), dst(4096 + 64);
  for (size_t i = 0; i < src.size(); ++i) src[i] = static_cast<unsigned char>(i * 7 + 3);
  for (size_t d = 0; d < 17; ++d) {
    for (size_t s = 0; s < 17; ++s) {
      for (size_t n : {size_t(0), size_t(1), size_t(15), size_t(16), size_t(63), size_t(64), size_t(65), size_t(200),
                       size_t(4096)}) {
        std::fill(dst.begin(), dst.end(), 0xEE);
        stream_copy(dst.data() + d, src.data() + s, n);
        for (size_t i = 0; i < dst.size(); ++i) {
          const bool inside = i >= d && i < d + n;
          ASSERT_EQ(dst[i], inside ? src[s + i - d] : 0xEE) << "dst+" << d << " src+" << s << " n " << n << " at " << i;
        }
      }
    }
  }
}

TEST(ShmGroup, ManyCollectivesInARowKeepStep) {
  // Alternating kinds and sizes: a rank racing ahead must never overwrite a
  // buffer a slower one still reads.
  run_group(4, [](ShmGroup& g) {
    std::mt19937 gen(7);  // the same sequence on every rank
    for (int i = 0; i < 300; ++i) {
      const size_t n = 1 + gen() % 3000;
      std::vector<int32_t> v(n, g.rank() + i);
      g.all_reduce(v.data(), n, ShmDtype::kInt32, ReduceOp::kSum, 30s);
      ASSERT_EQ(v[n - 1], 6 + 4 * i) << "round " << i;
      int32_t b = g.rank() == i % 4 ? i : -1;
      g.broadcast(&b, sizeof(b), i % 4, 30s);
      ASSERT_EQ(b, i);
      // And broadcasts of 1 to 3 chunks (16 KiB here): pipelined phases,
      // odd and even in number, between all-reduces.
      std::vector<int32_t> w(1 + gen() % 12000, g.rank() == (i + 1) % 4 ? i : -1);
      g.broadcast(w.data(), w.size() * sizeof(int32_t), (i + 1) % 4, 30s);
      ASSERT_EQ(w.front(), i);
      ASSERT_EQ(w.back(), i);
    }
  }, 4096);
}

TEST(ShmGroup, MismatchedCallsFailOnEveryRankNamingBoth) {
  std::vector<std::string> errors(2);
  run_group(2, [&](ShmGroup& g) {
    float v[10] = {};
    try {
      if (g.rank() == 0) {
        g.all_reduce(v, 10, ShmDtype::kFloat32, ReduceOp::kSum, 10s);
      } else {
        g.broadcast(v, 12, 0, 10s);
      }
    } catch (const CollectiveError& e) {
      errors[size_t(g.rank())] = e.what();
    }
  });
  // Each rank either found the mismatch itself or was stopped by the one
  // that did: both messages name both calls.
  for (const auto& m : errors) {
    EXPECT_TRUE(m.find("called broadcast of 12 bytes where this rank called all_reduce of 40 bytes") !=
                    std::string::npos ||
                m.find("called all_reduce of 40 bytes where this rank called broadcast of 12 bytes") !=
                    std::string::npos)
        << m;
  }
}

TEST(ShmGroup, AMissingPeerTimesOutNamingItAndTheSetting) {
  std::promise<void> done;
  auto finished = done.get_future().share();
  std::string late_error;
  run_group(2, [&](ShmGroup& g) {
    if (g.rank() == 1) {
      finished.wait();  // comes only after rank 0 gave up
      float v = 1;
      try {
        g.all_reduce(&v, 1, ShmDtype::kFloat32, ReduceOp::kSum, 10s);
      } catch (const CollectiveError& e) {
        late_error = e.what();
      }
      return;
    }
    float v = 1;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      g.all_reduce(&v, 1, ShmDtype::kFloat32, ReduceOp::kSum, 200ms);
      ADD_FAILURE() << "all_reduce without its peer returned";
    } catch (const CollectiveError& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind("ddp: all_reduce on rank 0 of 2 timed out after 200 ms waiting for peer rank 1", 0), 0u)
          << m;
      EXPECT_NE(m.find("DDPRUN_TIMEOUT_S"), std::string::npos) << m;
    }
    EXPECT_LT(std::chrono::steady_clock::now() - t0, 5s);
    done.set_value();
  }, 4096, 30s);
  // The group is unusable afterwards, and says why at once.
  EXPECT_NE(late_error.find("failed earlier (rank 0: ddp: all_reduce on rank 0 of 2 timed out"), std::string::npos)
      << late_error;
}

TEST(ShmGroup, OneRankGivingUpStopsTheOthersAtOnce) {
  // Rank 2 never comes. Rank 0 gives up after 200 ms; rank 1, with a 60 s
  // timeout, must stop right after rather than wait out its own.
  std::promise<void> done;
  auto finished = done.get_future().share();
  std::string rank1;
  std::chrono::steady_clock::duration rank1_took{};
  ddprun::MemoryStore store;
  auto rank = [&](int r, std::chrono::milliseconds timeout) {
    ShmGroup g(store, options(r, 3));
    if (r == 2) {
      finished.wait();
      return;
    }
    float v = 1;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      g.all_reduce(&v, 1, ShmDtype::kFloat32, ReduceOp::kSum, timeout);
    } catch (const CollectiveError& e) {
      if (r == 1) {
        rank1 = e.what();
        rank1_took = std::chrono::steady_clock::now() - t0;
      }
    }
  };
  auto r0 = std::async(std::launch::async, rank, 0, 200ms);
  auto r1 = std::async(std::launch::async, rank, 1, 60000ms);
  auto r2 = std::async(std::launch::async, rank, 2, 60000ms);
  r0.get();
  r1.get();
  done.set_value();
  r2.get();
  EXPECT_EQ(rank1.rfind("ddp: all_reduce on rank 1 of 3 stopped: peer rank 0 of the shared-memory group failed "
                        "first: ddp: all_reduce on rank 0 of 3 timed out",
                        0),
            0u)
      << rank1;
  EXPECT_LT(rank1_took, 10s);
}

TEST(ShmGroup, APeerThatLeavesIsNamedNotWaitedFor) {
  std::string error;
  std::chrono::steady_clock::duration took{};
  run_group(2, [&](ShmGroup& g) {
    if (g.rank() == 1) return;  // its group is destroyed at once
    float v = 1;
    const auto t0 = std::chrono::steady_clock::now();
    try {
      g.all_reduce(&v, 1, ShmDtype::kFloat32, ReduceOp::kSum, 60s);
    } catch (const CollectiveError& e) {
      error = e.what();
    }
    took = std::chrono::steady_clock::now() - t0;
  });
  EXPECT_EQ(error.rfind("ddp: all_reduce on rank 0 of 2: peer rank 1 left the shared-memory group", 0), 0u) << error;
  EXPECT_LT(took, 10s);
}

TEST(ShmGroup, NoSegmentIsLeftUnderDevShm) {
  const auto before = my_segments();
  run_group(3, [&](ShmGroup& g) {
    g.barrier(30s);
    // Every rank holds the mapping, and the name is already gone.
    EXPECT_EQ(my_segments(), before);
  });
  EXPECT_EQ(my_segments(), before);
}

TEST(ShmGroup, EachGroupGetsAFreshSegment) {
  // Two setups over two stores (as two rounds get): different names, and
  // the second never sees the first's data.
  std::vector<std::string> names;
  for (int round = 0; round < 2; ++round) {
    ddprun::MemoryStore store;
    std::vector<std::future<void>> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.push_back(std::async(std::launch::async, [&, r] {
        ShmGroup g(store, options(r, 2));
        int32_t v = round * 10 + r;
        g.all_reduce(&v, 1, ShmDtype::kInt32, ReduceOp::kSum, 30s);
        EXPECT_EQ(v, round * 20 + 1);
      }));
    }
    for (auto& f : ranks) f.get();
    names.push_back(store.get("shm/segment", 1s));
  }
  EXPECT_NE(names[0].substr(0, names[0].find('\n')), names[1].substr(0, names[1].find('\n')));
}

TEST(ShmSegment, RefusesASegmentOthersCanWrite) {
  const std::string name = "/ddprun-test-" + std::to_string(getpid()) + "-open";
  const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
  ASSERT_GE(fd, 0);
  ASSERT_EQ(ftruncate(fd, 4096), 0);
  ASSERT_EQ(fchmod(fd, 0666), 0);
  close(fd);
  try {
    ShmSegment::open(name, 4096);
    ADD_FAILURE() << "opened a world-writable segment";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("with mode 438; expected this user's"), std::string::npos) << e.what();
  }
  shm_unlink(name.c_str());
  // And never makes one over an existing name.
  const std::string taken = "/ddprun-test-" + std::to_string(getpid()) + "-taken";
  auto first = ShmSegment::create(taken, 4096);
  EXPECT_THROW(ShmSegment::create(taken, 4096), CollectiveError);
}

TEST(ShmGroup, RankZeroWithoutRoomMakesEveryRankFail) {
  // What rank 0 publishes when it cannot make the segment reaches the
  // others (who fall back to Gloo together in World).
  ddprun::MemoryStore store;
  store.set("shm/segment", "error\nddp: shared memory segment /x: no room for 9 MiB in /dev/shm");
  try {
    ShmGroup g(store, options(1, 2));
    FAIL() << "joined a group rank 0 could not make";
  } catch (const CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("rank 0 could not make the segment: ddp: shared memory segment /x: no room"),
              std::string::npos)
        << e.what();
  }
}

}  // namespace
}  // namespace ddp
