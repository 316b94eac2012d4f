// worker_lib with ranks as threads of one process, sharing an in-memory
// store: fast checks of the collectives, timeouts and get().
#include <gtest/gtest.h>

#include <csignal>
#include <future>
#include <optional>
#include <vector>

#include "comm/gloo_communicator.h"
#include "comm/nccl_communicator.h"
#include "ddp/ddp.h"
#include "rendezvous/store/memory_store.h"
#include "support/collective_checks.h"
#include "support/thread_ranks.h"

namespace {

using namespace std::chrono_literals;

using ddptest::env_for;
using ddptest::run_ranks;

// Both CPU communicators: shared memory (what one node gets by default)
// and Gloo.
const char* const kCpuComms[] = {"shm", "gloo"};

TEST(Collectives, AllHoldOnOneTwoAndFourRanks) {
  for (const char* comm : kCpuComms) {
    for (int ws : {1, 2, 4}) {
      SCOPED_TRACE(std::string(comm) + ", world size " + std::to_string(ws));
      run_ranks(ws, [&](ddp::World& w) {
        EXPECT_EQ(w.cpu().backend(), comm);
        ddptest::check_collectives(w);
      }, std::chrono::seconds(30), comm);
    }
  }
}

TEST(Collectives, SharedMemoryMatchesGlooOnTheSameInputs) {
  for (int ws : {2, 3}) {
    SCOPED_TRACE("world size " + std::to_string(ws));
    run_ranks(ws, [](ddp::World& w) { ddptest::check_shm_matches_gloo(w); });
  }
}

// Rank r of a world of ws ranks, per_node on each node (GROUP_RANK r / per_node).
ddp::EnvLookup env_on_nodes(int r, int ws, int per_node, const std::string& comm = "") {
  return [=](const std::string& k) -> std::optional<std::string> {
    if (k == "LOCAL_WORLD_SIZE") return std::to_string(per_node);
    if (k == "LOCAL_RANK") return std::to_string(r % per_node);
    if (k == "GROUP_RANK") return std::to_string(r / per_node);
    return env_for(r, ws, comm)(k);
  };
}

TEST(Collectives, OneNodeGetsSharedMemoryAndSeveralNodesGloo) {
  // auto (the default): every rank on one node → shared memory.
  run_ranks(2, [](ddp::World& w) { EXPECT_EQ(w.cpu().backend(), "shm"); });
  // One rank per node (LOCAL_WORLD_SIZE=1): Gloo; forcing shm is an error.
  for (const char* comm : {"auto", "shm"}) {
    auto store = std::make_shared<ddprun::MemoryStore>();
    std::vector<std::future<std::string>> ranks;
    for (int r = 0; r < 2; ++r) {
      ranks.push_back(std::async(std::launch::async, [=]() -> std::string {
        ddp::InitOptions o;
        o.store = store;
        o.timeout = std::chrono::seconds(30);
        o.env = env_on_nodes(r, 2, 1, comm);
        try {
          return ddp::init(o)->cpu().backend();
        } catch (const ddp::ConfigError& e) {
          return e.what();
        }
      }));
    }
    for (auto& f : ranks) {
      const std::string got = f.get();
      if (std::string(comm) == "auto") {
        EXPECT_EQ(got, "gloo");
      } else {
        EXPECT_EQ(got.rfind("ddp: DDPRUN_CPU_COMM=shm, but the ranks of the world are on 2 nodes", 0), 0u)
            << got;
      }
    }
  }
}

TEST(Collectives, NodesOfSeveralRanksShareMemoryInsideAndGlooBetween) {
  // 3 nodes of 2 ranks: all_reduce goes shm, then Gloo between the leaders,
  // then shm again; everything else through Gloo over all.
  auto store = std::make_shared<ddprun::MemoryStore>();
  std::vector<std::future<void>> ranks;
  for (int r = 0; r < 6; ++r) {
    ranks.push_back(std::async(std::launch::async, [=] {
      ddp::InitOptions o;
      o.store = store;
      o.timeout = std::chrono::seconds(30);
      o.env = env_on_nodes(r, 6, 2);
      auto w = ddp::init(o);
      EXPECT_EQ(w->cpu().backend(), "shm+gloo");
      ddptest::check_collectives(*w);
      // Integer sums are exact whatever the route: the same as Gloo's.
      at::Tensor t = at::arange(1001, at::kLong) * (r + 1);
      w->all_reduce(t, ddp::ReduceOp::kSum);
      EXPECT_TRUE(at::equal(t, at::arange(1001, at::kLong) * 21));
    }));
  }
  for (auto& f : ranks) f.get();
}

TEST(Collectives, AnUnknownCpuCommunicatorIsAConfigErrorNamingTheVariable) {
  ddp::InitOptions o;
  o.store = std::make_shared<ddprun::MemoryStore>();
  o.env = env_for(0, 1, "tcp");
  try {
    ddp::init(o);
    FAIL() << "init() accepted DDPRUN_CPU_COMM=tcp";
  } catch (const ddp::ConfigError& e) {
    EXPECT_EQ(std::string(e.what()), "ddp: DDPRUN_CPU_COMM='tcp' is not auto, shm or gloo");
  }
}

// A peer's death is an error a rank heals from, not SIGPIPE's default end
// (Gloo's writes to a dead peer's socket raise it). A handler the program
// chose stays.
void count_pipe(int) {}
TEST(Collectives, InitLetsNoSigpipeEndTheWorker) {
  auto world_of_one = [] {
    ddp::InitOptions o;
    o.store = std::make_shared<ddprun::MemoryStore>();
    o.env = env_for(0, 1, "gloo");
    return ddp::init(o);
  };
  EXPECT_EXIT(
      {
        signal(SIGPIPE, SIG_DFL);
        auto w = world_of_one();
        raise(SIGPIPE);
        _exit(7);
      },
      testing::ExitedWithCode(7), "");
  EXPECT_EXIT(
      {
        signal(SIGPIPE, count_pipe);
        auto w = world_of_one();
        struct sigaction now {};
        sigaction(SIGPIPE, nullptr, &now);
        _exit(now.sa_handler == count_pipe ? 7 : 1);
      },
      testing::ExitedWithCode(7), "");
}

TEST(Collectives, GetUsesThisThreadsWorld) {
  run_ranks(3, [](ddp::World& w) {
    // init() registered w for this thread only.
    EXPECT_EQ(ddp::get("rank"), w.rank());
    EXPECT_EQ(ddp::get("ws"), 3);
  });
}

TEST(Collectives, UnknownGetKeyListsTheValidOnes) {
  run_ranks(1, [](ddp::World& w) {
    try {
      ddp::get("size", w);
      FAIL();
    } catch (const std::invalid_argument& e) {
      EXPECT_EQ(std::string(e.what()),
                "ddp::get: unknown key 'size'; valid keys: ws, rank, grank, lrank, lws, pg");
    }
  });
}

TEST(Collectives, AvgOfIntegersIsRefused) {
  run_ranks(1, [](ddp::World& w) {
    at::Tensor t = at::ones({2}, at::kInt);
    EXPECT_THROW(w.all_reduce(t, ddp::ReduceOp::kAvg), std::invalid_argument);
  });
}

TEST(Collectives, AMissingPeerTimesOutInsteadOfHanging) {
  for (const char* comm : kCpuComms) {
    SCOPED_TRACE(comm);
    std::promise<void> done;
    auto finished = done.get_future().share();
    run_ranks(
        2,
        [&](ddp::World& w) {
          if (w.rank() == 1) {
            finished.wait();  // never joins the all_reduce
            return;
          }
          at::Tensor t = at::ones({4});
          try {
            w.all_reduce(t, ddp::ReduceOp::kSum);
            ADD_FAILURE() << "all_reduce without its peer returned";
          } catch (const ddp::CollectiveError& e) {
            EXPECT_EQ(std::string(e.what()).rfind("ddp: all_reduce on rank 0 of 2 timed out after 300 ms", 0), 0u)
                << e.what();
            EXPECT_NE(std::string(e.what()).find("DDPRUN_TIMEOUT_S"), std::string::npos);
          }
          done.set_value();
        },
        300ms, comm);
  }
}

// Rank r of a 2-rank world over store, with a timeout far longer than the test.
std::shared_ptr<ddp::World> rank_of_two(int r, std::shared_ptr<ddprun::MemoryStore> store, const char* comm) {
  ddp::InitOptions o;
  o.env = env_for(r, 2, comm);
  o.store = std::move(store);
  o.timeout = 60s;
  return ddp::init(o);
}

TEST(Collectives, APeerThatLeavesMidCollectiveIsNamedNotCalledATimeout) {
  for (const char* comm : kCpuComms) {
    SCOPED_TRACE(comm);
    auto store = std::make_shared<ddprun::MemoryStore>();
    auto leaver = std::async(std::launch::async, [&] {
      auto w = rank_of_two(1, store, comm);
      w->barrier();
    });  // its world, and its sockets or segment, end here
    auto w = rank_of_two(0, store, comm);
    w->barrier();
    at::Tensor t = at::ones({1 << 16});
    try {
      w->all_reduce(t, ddp::ReduceOp::kSum);  // rank 1 never comes
      FAIL() << "all_reduce without its peer returned";
    } catch (const ddp::CollectiveError& e) {
      const std::string m = e.what();
      EXPECT_EQ(m.rfind("ddp: all_reduce on rank 0 of 2: peer rank 1 ", 0), 0u) << m;
      EXPECT_TRUE(m.find("closed the connection") != std::string::npos ||
                  m.find("reset the connection") != std::string::npos ||
                  m.find("left the shared-memory group") != std::string::npos)
          << m;
      EXPECT_EQ(m.find("timed out"), std::string::npos) << m;
      EXPECT_EQ(m.find('\n'), std::string::npos) << m;
    }
    leaver.get();
  }
}

TEST(Collectives, GloosFailedChecksCarryTheRankLikeItsOtherErrors) {
  // A peer that published an address Gloo cannot parse (another Gloo build,
  // a damaged store): Gloo's EnforceNotMet, which is no gloo::Exception, or
  // (Gloo of 2023 on) a std::length_error from reading the address.
  ddprun::MemoryStore store;
  store.set("rank_1", "otherhost");
  store.set("1", "not an address");
  ddp::GlooOptions o;
  o.rank = 0;
  o.size = 2;
  o.timeout = 30s;
  try {
    ddp::GlooCommunicator comm(store, o);
    FAIL() << "connected to a peer without an address";
  } catch (const ddp::CollectiveError& e) {
    const std::string m = e.what();
    EXPECT_EQ(m.rfind("ddp: Gloo setup on rank 0 (binding to 127.0.0.1, set by --local-addr) failed: ", 0), 0u) << m;
    EXPECT_TRUE(m.find("enforce fail") != std::string::npos || m.find("(from Gloo's setup)") != std::string::npos)
        << m;
  } catch (const std::exception& e) {
    FAIL() << "not a CollectiveError: " << e.what();
  }
}

TEST(Collectives, ABadLocalAddressFailsInitWithTheVariableNotACrash) {
  ddp::InitOptions o;
  o.store = std::make_shared<ddprun::MemoryStore>();
  o.env = [](const std::string& k) -> std::optional<std::string> {
    if (k == "DDPRUN_LOCAL_ADDR") return "nonexistent.invalid";
    return env_for(0, 1)(k);
  };
  try {
    ddp::init(o);
    FAIL() << "init() accepted DDPRUN_LOCAL_ADDR=nonexistent.invalid";
  } catch (const ddp::ConfigError& e) {
    EXPECT_EQ(std::string(e.what()).rfind("ddp: DDPRUN_LOCAL_ADDR='nonexistent.invalid' does not resolve", 0), 0u)
        << e.what();
  }
}

TEST(Collectives, APeerThatNeverArrivesFailsInit) {
  auto store = std::make_shared<ddprun::MemoryStore>();
  ddp::InitOptions o;
  o.env = env_for(0, 2);
  o.store = store;
  o.timeout = 200ms;
  try {
    ddp::init(o);
    FAIL();
  } catch (const ddp::CollectiveError& e) {
    EXPECT_NE(std::string(e.what()).find("could not connect to its peers within 200 ms"),
              std::string::npos)
        << e.what();
  }
}

TEST(Collectives, InitWithoutAStoreOutsideDdprunSaysWhatToDo) {
  ddp::InitOptions o;
  o.env = env_for(0, 2);
  try {
    ddp::init(o);
    FAIL();
  } catch (const ddp::ConfigError& e) {
    EXPECT_NE(std::string(e.what()).find("start the workers with ddprun"), std::string::npos);
  }
}

TEST(Collectives, CudaCommunicatorMakesItsOwnNcclIdAtWorldSizeOne) {
  run_ranks(1, [](ddp::World& w) {
    try {
      EXPECT_EQ(w.cuda().backend(), "nccl");  // on a GPU machine
    } catch (const ddp::CollectiveError& e) {
      const std::string m = e.what();
      if (ddp::nccl_available()) {
        // No GPU here: rank 0 made the id itself (the launcher hands out
        // none), then CUDA found no device.
        EXPECT_EQ(m.find("no NCCL unique id"), std::string::npos) << m;
        EXPECT_NE(m.find("ddp: cudaSetDevice"), std::string::npos) << m;
      } else {
        EXPECT_NE(m.find("has no NCCL"), std::string::npos) << m;
      }
    }
  });
}

}  // namespace
