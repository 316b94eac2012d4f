// Hang diagnosis without processes: the flight record's ring (the worker's
// writes, the agent's reads), the verdict built from records and stacks,
// and where a dump says a main thread is.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "agent/health/hang_verdict.h"
#include "agent/health/stack_collection.h"
#include "channel/flight_record.h"

namespace {

using namespace ddprun;
using channel::FlightEntry;
using channel::FlightOp;
using channel::FlightState;

constexpr int64_t kSecond = 1000000000;

bool has(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

TEST(FlightRecord, TheRingKeepsTheNewestRecordsWithTheirStates) {
  channel::FlightRing ring{};
  uint64_t last = 0;
  for (uint64_t i = 1; i <= channel::kFlightEntries + 3; ++i) {
    last = channel::flight_begin(&ring, FlightOp::kAllReduce, i, 4096, 2, 0, static_cast<int64_t>(i) * kSecond);
    if (i % 5 == 0) channel::flight_end(&ring, last, /*failed=*/true, static_cast<int64_t>(i) * kSecond + 1);
    else if (i != channel::kFlightEntries + 3) channel::flight_end(&ring, last, false, static_cast<int64_t>(i) * kSecond + 1);
  }
  const std::vector<FlightEntry> got = channel::read_flight(&ring);
  ASSERT_EQ(got.size(), channel::kFlightEntries);
  EXPECT_EQ(got.front().seq, 4u);  // the three oldest were written over
  EXPECT_EQ(got.back().seq, channel::kFlightEntries + 3);
  EXPECT_EQ(got.back().state, static_cast<uint32_t>(FlightState::kStarted));  // not returned yet
  EXPECT_EQ(got.back().finished_ns, 0);
  EXPECT_EQ(got[1].seq, 5u);
  EXPECT_EQ(got[1].state, static_cast<uint32_t>(FlightState::kFailed));
  EXPECT_EQ(got[0].state, static_cast<uint32_t>(FlightState::kFinished));
  EXPECT_EQ(got[0].bytes, 4096u);
  EXPECT_EQ(got[0].generation, 2u);
  // A record written over since: its end changes nothing.
  channel::flight_end(&ring, 1, false, 99);
  EXPECT_EQ(channel::read_flight(&ring).front().finished_ns, 4 * kSecond + 1);
}

FlightEntry record(uint64_t seq, FlightState state, int64_t started_s, int64_t finished_s = 0) {
  FlightEntry e;
  e.id = seq;
  e.op = static_cast<uint32_t>(FlightOp::kAllReduce);
  e.state = static_cast<uint32_t>(state);
  e.seq = seq;
  e.bytes = 25 << 20;
  e.started_ns = started_s * kSecond;
  e.finished_ns = finished_s * kSecond;
  return e;
}

RankView rank(int r, std::vector<FlightEntry> flight, const std::string& where = "", bool hung = false) {
  RankView v;
  v.rank = r;
  v.hung = hung;
  v.flight = std::move(flight);
  v.stacks.rank = r;
  v.stacks.state = StackReport::kAnswered;
  v.stacks.where = where;
  return v;
}

TEST(HangVerdict, NamesTheRankTheOthersWaitForAndWhereItIs) {
  const std::vector<RankView> ranks = {
      rank(0, {record(5, FlightState::kFinished, 90, 91), record(6, FlightState::kStarted, 92)}),
      rank(1, {record(5, FlightState::kFinished, 90, 91)}, "load_batch (loader.cpp:88) [train]", true),
      rank(2, {record(5, FlightState::kFinished, 90, 91), record(6, FlightState::kStarted, 93)}),
  };
  const std::string v = hang_verdict(ranks, 104 * kSecond);
  EXPECT_TRUE(has(v, "ranks 0,2 wait in all_reduce #6 (25.0 MB) since 12.0 s")) << v;
  EXPECT_TRUE(has(v, "rank 1 never entered it (its last: all_reduce #5, finished 13.0 s ago)")) << v;
  EXPECT_TRUE(has(v, "rank 1 is in: load_batch (loader.cpp:88) [train]")) << v;
  EXPECT_FALSE(has(v, "rank 0 is in")) << v;
  EXPECT_EQ(judge_hang(ranks, 104 * kSecond).suspects, std::vector<int>{1});
}

// Across nodes the verdict is the job's: the other nodes' ranks come from
// the rendezvous (their newest collective as their agents last reported
// it), with no stacks here.
RankView remote(int r, FlightEntry newest) {
  RankView v = rank(r, {newest});
  v.stacks.state = StackReport::kRemote;
  return v;
}

TEST(HangVerdict, OtherNodesRanksJoinTheVerdict) {
  // This node has ranks 2 and 3; rank 2 hangs outside the collective that
  // ranks 0 and 1, on another node, and 3 wait in.
  std::vector<RankView> ranks = {
      remote(0, record(6, FlightState::kStarted, 92)),
      remote(1, record(6, FlightState::kStarted, 92)),
      rank(2, {record(5, FlightState::kFinished, 90, 91)}, "blocking_call (hang_check.cpp:40) [hang_check]", true),
      rank(3, {record(5, FlightState::kFinished, 90, 91), record(6, FlightState::kStarted, 93)}),
  };
  std::string v = hang_verdict(ranks, 104 * kSecond);
  EXPECT_TRUE(has(v, "ranks 0,1,3 wait in all_reduce #6 (25.0 MB) since 12.0 s")) << v;
  EXPECT_TRUE(has(v, "rank 2 never entered it")) << v;
  EXPECT_TRUE(has(v, "rank 2 is in: blocking_call")) << v;
  EXPECT_FALSE(has(v, "another node")) << v;
  // The one they wait for is elsewhere: named, with where its node last saw it.
  ranks = {
      remote(0, record(5, FlightState::kFinished, 90, 91)),
      rank(1, {record(6, FlightState::kStarted, 92)}, "", true),
  };
  v = hang_verdict(ranks, 104 * kSecond);
  EXPECT_TRUE(has(v, "rank 1 waits in all_reduce #6")) << v;
  EXPECT_TRUE(has(v, "rank 0 never entered it (its last: all_reduce #5, finished 13.0 s ago)")) << v;
  EXPECT_TRUE(has(v, "rank 0 is on another node")) << v;
  EXPECT_FALSE(has(v, "every local rank is inside it")) << v;
}

TEST(HangVerdict, ARankThatCannotAnswerIsNamedWithWhy) {
  std::vector<RankView> ranks = {
      rank(0, {record(3, FlightState::kStarted, 10)}),
      rank(1, {record(2, FlightState::kFinished, 9, 9)}, "", true),
  };
  ranks[1].stacks.state = StackReport::kStopped;
  const std::string v = hang_verdict(ranks, 20 * kSecond);
  EXPECT_TRUE(has(v, "rank 0 waits in all_reduce #3")) << v;
  EXPECT_TRUE(has(v, "rank 1 never entered it")) << v;
  EXPECT_TRUE(has(v, "rank 1 stopped (SIGSTOP")) << v;
}

TEST(HangVerdict, OutsideAnyCollectiveTheHungRankIsNamed) {
  const std::vector<RankView> ranks = {
      rank(0, {record(7, FlightState::kFinished, 10, 11)}, "main (train.cpp:40) [train]"),
      rank(1, {record(7, FlightState::kFinished, 10, 11)}, "spin (train.cpp:12) [train]", true),
  };
  const std::string v = hang_verdict(ranks, 20 * kSecond);
  EXPECT_TRUE(has(v, "no rank is inside a collective (the newest, all_reduce #7, finished on ranks 0,1)")) << v;
  EXPECT_TRUE(has(v, "rank 1 is in: spin (train.cpp:12)")) << v;
  EXPECT_FALSE(has(v, "rank 0 is in")) << v;
}

TEST(HangVerdict, ARankWithoutStacksIsPlacedByItsFlightRecord) {
  std::vector<RankView> ranks = {
      rank(0, {record(7, FlightState::kFinished, 10, 11)}, "main (train.cpp:40) [train]"),
      rank(1, {record(7, FlightState::kFinished, 10, 11)}, "", true),
  };
  ranks[1].stacks.state = StackReport::kInKernel;
  const std::string v = hang_verdict(ranks, 20 * kSecond);
  EXPECT_TRUE(has(v, "rank 1 stuck in the kernel (uninterruptible sleep): it cannot answer; its flight record "
                     "last saw it after all_reduce #7, finished 9.0 s ago")) << v;
}

TEST(HangVerdict, OnlyTheNewestHealGenerationCounts) {
  FlightEntry old = record(40, FlightState::kFinished, 1, 2);
  FlightEntry fresh = record(2, FlightState::kStarted, 5);
  fresh.id = 41;  // recorded after the old one
  fresh.generation = 1;
  const std::vector<RankView> ranks = {rank(0, {old, fresh}), rank(1, {old}, "", true)};
  const std::string v = hang_verdict(ranks, 10 * kSecond);
  EXPECT_TRUE(has(v, "rank 0 waits in all_reduce #2")) << v;
  EXPECT_TRUE(has(v, "rank 1 never entered it")) << v;
}

// How long the others have waited for each rank: ranks 0 and 2 wait in #7
// since 100 s and 103 s, rank 1 never entered it; a wait in an older
// generation's #9 counts for nobody it does not concern.
TEST(HangVerdict, AwaitedIsTheLongestWaitOfAPeerInACollectiveTheRankNeverEntered) {
  std::vector<std::vector<FlightEntry>> flights = {
      {record(6, FlightState::kFinished, 99, 99), record(7, FlightState::kStarted, 100)},
      {record(5, FlightState::kFinished, 98, 98), record(6, FlightState::kFinished, 99, 99)},
      {record(6, FlightState::kFinished, 99, 99), record(7, FlightState::kStarted, 103)},
  };
  auto got = awaited_ns(flights, 110 * kSecond);
  EXPECT_EQ(got, (std::vector<int64_t>{0, 10 * kSecond, 0}));
  // Rank 1 enters #7 too: nobody is awaited any more.
  flights[1].push_back(record(7, FlightState::kStarted, 109));
  EXPECT_EQ(awaited_ns(flights, 110 * kSecond), (std::vector<int64_t>{0, 0, 0}));
  // A newer generation numbers afresh: rank 1's #7 of generation 0 is not
  // the others' #2 of generation 1, which it never entered.
  for (size_t r : {0u, 2u}) {
    FlightEntry e = record(2, FlightState::kStarted, 105);
    e.generation = 1;
    flights[r].push_back(e);
  }
  EXPECT_EQ(awaited_ns(flights, 110 * kSecond), (std::vector<int64_t>{0, 5 * kSecond, 0}));
}

TEST(HangVerdict, PythonStacksSayWhoIsInsideTorchDistributed) {
  const std::vector<RankView> ranks = {
      rank(0, {}, "File \"/usr/lib/python3/dist-packages/torch/distributed/distributed_c10d.py\", line 1541 in all_reduce"),
      rank(1, {}, "File \"/job/train.py\", line 8 in stuck_in_python"),
  };
  const std::string v = hang_verdict(ranks, 0);
  EXPECT_TRUE(has(v, "rank 0 waits in torch.distributed (all_reduce)")) << v;
  EXPECT_TRUE(has(v, "rank 1 is not in it; rank 1 is in: File \"/job/train.py\", line 8 in stuck_in_python")) << v;
  EXPECT_EQ(judge_hang(ranks, 0).suspects, std::vector<int>{1}) << "the failure summary's root cause";
}

TEST(StackDump, TheMainThreadsOwnFrameIsFoundInNativeAndPythonDumps) {
  const std::string native =
      "native thread 41 worker\n"
      "  ddp::(anonymous namespace)::write_own_stack(int) (stack_dumper.cpp:45) [train]\n"
      "  helper_thread_loop (train.cpp:3) [train]\n"
      "\n"
      "native thread 40 train\n"
      "  ddp::(anonymous namespace)::write_own_stack(int) (stack_dumper.cpp:45) [train]\n"
      "  ddp::(anonymous namespace)::on_dump_signal(int, siginfo_t*, void*) (stack_dumper.cpp:129) [train]\n"
      "  libc.so.6+0x3c050\n"
      "  read (../sysdeps/unix/sysv/linux/read.c:26) [libc.so.6]\n"
      "  stuck_outside_any_collective() (hang_check.cpp:20) [hang_check]\n"
      "  main (hang_check.cpp:40) [hang_check]\n";
  EXPECT_EQ(main_thread_frame(native, 40), "stuck_outside_any_collective() (hang_check.cpp:20) [hang_check]");
  const std::string python =
      "Thread 0x00007f0000000001 (most recent call first):\n"
      "  File \"/usr/lib/python3.11/threading.py\", line 320 in wait\n"
      "\n"
      "Current thread 0x00007f0000000000 (most recent call first):\n"
      "  File \"/job/train.py\", line 8 in stuck_in_python\n"
      "  File \"/job/train.py\", line 12 in <module>\n";
  EXPECT_EQ(main_thread_frame(python, 1), "File \"/job/train.py\", line 8 in stuck_in_python");
  EXPECT_EQ(main_thread_frame("", 1), "");
}

}  // namespace
