// DistributedDataParallel with ranks as threads over an in-memory store.
#include <gtest/gtest.h>

#include <ATen/Parallel.h>

#include "comm/swappable_communicator.h"
#include "ddp/ddp.h"
#include "support/ddp_checks.h"
#include "support/thread_ranks.h"

namespace {

using ddptest::run_ranks;
using ddptest::TrainCase;

class DdpTest : public ::testing::Test {
 protected:
  // Ranks are threads here: one intra-op thread each keeps them from
  // fighting over the cores.
  void SetUp() override { at::set_num_threads(1); }
};

TEST_F(DdpTest, MatchesSingleProcessTrainingForEveryStrategy) {
  for (int ws : {2, 4}) {
    for (const TrainCase& c : ddptest::all_train_cases()) {
      SCOPED_TRACE(std::to_string(ws) + " ranks, " + ddptest::describe(c));
      run_ranks(ws, [&](ddp::World& w) {
        ddptest::TrainResult r = ddptest::train_both(w.cpu(), c);
        EXPECT_TRUE(torch::allclose(r.distributed, r.reference, /*rtol=*/1e-4, /*atol=*/1e-5))
            << "max deviation " << (r.distributed - r.reference).abs().max().item<double>();
        EXPECT_TRUE(ddptest::identical_on_all_ranks(w.cpu(), r.distributed));
      });
    }
  }
}

TEST_F(DdpTest, WithoutSyncRanksDrift) {
  // The check above can fail: with gradient sync disabled for good, every
  // rank follows only its own shard and the parameters differ.
  run_ranks(2, [](ddp::World& w) {
    ddp::DistributedDataParallel<ddptest::Mlp> model(ddptest::seeded_model<ddptest::Mlp>(7), w);
    model.disable_grad_sync();
    torch::optim::SGD opt(model.module()->parameters(), 0.1);
    auto gen = at::detail::createCPUGenerator(100 + w.rank());
    torch::nn::functional::cross_entropy(model(at::randn({4, 64}, gen)),
                                         at::randint(0, 10, {4}, gen, at::kLong))
        .backward();
    model.finalize();  // a no-op while sync is disabled
    opt.step();
    EXPECT_FALSE(ddptest::identical_on_all_ranks(w.cpu(), ddptest::flat_parameters(*model.module())));
  });
}

TEST_F(DdpTest, BroadcastMakesRanksStartFromRankZero) {
  run_ranks(3, [](ddp::World& w) {
    auto net = ddptest::seeded_model<ddptest::Mlp>(w.rank());  // deliberately different
    ddp::DistributedDataParallel<ddptest::Mlp> model(net, w);  // kBroadcast by default
    EXPECT_TRUE(ddptest::identical_on_all_ranks(w.cpu(), ddptest::flat_parameters(*net)));
  });
}

TEST_F(DdpTest, VerifyNamesTheFirstDifferingParameterAndTheRanks) {
  run_ranks(3, [](ddp::World& w) {
    auto net = ddptest::seeded_model<ddptest::Mlp>(7);
    if (w.rank() == 2) {
      torch::NoGradGuard g;
      net->fc2->bias[3] += 0.25;
    }
    ddp::DdpOptions o;
    o.init_sync = ddp::InitSync::kVerify;
    try {
      ddp::DistributedDataParallel<ddptest::Mlp> model(net, w, o);
      ADD_FAILURE() << "a differing parameter passed verification on rank " << w.rank();
    } catch (const std::runtime_error& e) {
      const std::string msg = e.what();
      EXPECT_NE(msg.find("parameter 'fc2.bias' differs between rank 0 and rank(s) 2"), std::string::npos) << msg;
      EXPECT_NE(msg.find("max difference 0.25"), std::string::npos) << msg;
      EXPECT_NE(msg.find("torch::manual_seed"), std::string::npos) << msg;
    }
  });
}

TEST_F(DdpTest, DifferentModelsOnDifferentRanksAreRefused) {
  run_ranks(2, [](ddp::World& w) {
    try {
      if (w.rank() == 0) {
        ddp::DistributedDataParallel<ddptest::Mlp> model(ddptest::Mlp(), w);
      } else {
        ddp::DistributedDataParallel<ddptest::Cnn> model(ddptest::Cnn(), w);
      }
      ADD_FAILURE() << "different models were accepted";
    } catch (const std::runtime_error& e) {
      EXPECT_NE(std::string(e.what()).find("different structure"), std::string::npos) << e.what();
    }
  });
}

// A model whose `extra` layer is used only when asked.
struct BranchyImpl : torch::nn::Module {
  BranchyImpl() : main(register_module("main", torch::nn::Linear(8, 4))),
                  extra(register_module("extra", torch::nn::Linear(8, 4))) {}
  torch::Tensor forward(torch::Tensor x, bool use_extra) {
    auto y = main(x);
    return use_extra ? y + extra(x) : y;
  }
  torch::nn::Linear main, extra;
};
TORCH_MODULE(Branchy);

TEST_F(DdpTest, UnusedParametersAreAClearErrorByDefault) {
  for (auto s : {ddp::SyncStrategy::kNaive, ddp::SyncStrategy::kBucketed}) {
    run_ranks(2, [&](ddp::World& w) {
      ddp::DdpOptions o;
      o.strategy = s;
      ddp::DistributedDataParallel<Branchy> model(Branchy(), w, o);
      try {
        // Bucketed finalizes at the end of backward: the error comes out of
        // backward(); naive's comes out of finalize().
        model(torch::randn({2, 8}), false).sum().backward();
        model.finalize();
        ADD_FAILURE() << "no error for unused parameters";
      } catch (const std::runtime_error& e) {
        const std::string msg = e.what();
        EXPECT_NE(msg.find("extra.weight, extra.bias got no gradient"), std::string::npos) << msg;
        EXPECT_NE(msg.find("find_unused_parameters = true"), std::string::npos) << msg;
      }
    });
  }
}

TEST_F(DdpTest, UnusedParametersAreHandledWhenDeclared) {
  for (auto s : {ddp::SyncStrategy::kNaive, ddp::SyncStrategy::kFlat, ddp::SyncStrategy::kOverlap,
                 ddp::SyncStrategy::kBucketed}) {
    SCOPED_TRACE(ddp::to_string(s));
    run_ranks(2, [&](ddp::World& w) {
      ddp::DdpOptions o;
      o.strategy = s;
      o.find_unused_parameters = true;
      ddp::DistributedDataParallel<Branchy> model(ddptest::seeded_model<Branchy>(3), w, o);
      auto& net = model.module();
      // Step 1: only rank 1 uses `extra`; rank 0's share counts as zero.
      torch::Tensor x = torch::ones({1, 8}) * (w.rank() + 1);
      model(x, w.rank() == 1).sum().backward();
      model.finalize();
      ASSERT_TRUE(net->extra->bias.grad().defined());
      // d(sum)/d(bias) is 1 per output on rank 1, 0 on rank 0: average 0.5.
      EXPECT_TRUE(torch::allclose(net->extra->bias.grad(), torch::full({4}, 0.5)));
      EXPECT_TRUE(torch::allclose(net->main->bias.grad(), torch::ones({4})));
      // Step 2: nobody uses `extra`: it keeps no gradient.
      for (auto& p : net->parameters()) p.mutable_grad() = torch::Tensor();
      model(x, false).sum().backward();
      model.finalize();
      EXPECT_FALSE(net->extra->weight.grad().defined());
      EXPECT_TRUE(net->main->weight.grad().defined());
    });
  }
}

TEST_F(DdpTest, GradientsAreAveragedWhenBackwardReturns) {
  // No finalize() anywhere: backward alone leaves the average in .grad, and
  // a second backward (no zero_grad) adds the next average to it.
  run_ranks(2, [](ddp::World& w) {
    ddp::DistributedDataParallel<ddptest::Mlp> model(ddptest::seeded_model<ddptest::Mlp>(7), w);
    auto& net = model.module();
    auto gen = at::detail::createCPUGenerator(11);
    torch::Tensor x = at::randn({2, 2, 64}, gen);  // [step, rank, features]
    // What the average is: the mean of both ranks' local gradients,
    // computed on one model outside DDP.
    auto local_grads = [&](int step, int rank) {
      auto plain = ddptest::seeded_model<ddptest::Mlp>(7);
      plain->forward(x[step][rank].unsqueeze(0)).sum().backward();
      return plain->fc1->weight.grad().clone();
    };
    torch::Tensor want1 = (local_grads(0, 0) + local_grads(0, 1)) / 2;
    torch::Tensor want2 = want1 + (local_grads(1, 0) + local_grads(1, 1)) / 2;

    model(x[0][w.rank()].unsqueeze(0)).sum().backward();
    EXPECT_TRUE(torch::allclose(net->fc1->weight.grad(), want1, 1e-5, 1e-6));
    model.finalize();  // by hand as well: a no-op, nothing changes
    EXPECT_TRUE(torch::allclose(net->fc1->weight.grad(), want1, 1e-5, 1e-6));
    model(x[1][w.rank()].unsqueeze(0)).sum().backward();
    EXPECT_TRUE(torch::allclose(net->fc1->weight.grad(), want2, 1e-5, 1e-6));
    EXPECT_TRUE(ddptest::identical_on_all_ranks(w.cpu(), ddptest::flat_parameters(*net)));
  });
}

TEST_F(DdpTest, BackwardThatReachesNoParameterDoesNotHang) {
  run_ranks(2, [](ddp::World& w) {
    ddp::DistributedDataParallel<ddptest::Mlp> model(ddptest::seeded_model<ddptest::Mlp>(7), w);
    // No hook fires, so nothing is queued and no collective starts.
    torch::Tensor leaf = torch::ones({3}, torch::requires_grad());
    (leaf * 2).sum().backward();
    EXPECT_FALSE(model.module()->fc1->weight.grad().defined());
    // The next real step still synchronises.
    auto gen = at::detail::createCPUGenerator(70 + w.rank());
    model(at::randn({2, 64}, gen)).sum().backward();
    EXPECT_TRUE(ddptest::identical_on_all_ranks(w.cpu(), model.module()->fc1->weight.grad().clone()));
  }, std::chrono::seconds(20));
}

TEST_F(DdpTest, RankThatUsesNoParameterJoinsByFinalizingByHand) {
  // find_unused_parameters: rank 1's loss reaches no parameter, so only
  // rank 0 finalizes in backward; rank 1's finalize() by hand pairs with it.
  run_ranks(2, [](ddp::World& w) {
    ddp::DdpOptions o;
    o.find_unused_parameters = true;
    ddp::DistributedDataParallel<Branchy> model(ddptest::seeded_model<Branchy>(3), w, o);
    torch::Tensor x = torch::ones({1, 8});
    torch::Tensor out = model(x, false);
    if (w.rank() == 0) {
      out.sum().backward();
    } else {
      torch::Tensor leaf = torch::ones({1}, torch::requires_grad());
      leaf.sum().backward();
    }
    model.finalize();  // a no-op on rank 0, the whole step on rank 1
    auto& net = model.module();
    ASSERT_TRUE(net->main->bias.grad().defined());
    // d(sum)/d(bias) is 1 per output on rank 0, nothing on rank 1: average 0.5.
    EXPECT_TRUE(torch::allclose(net->main->bias.grad(), torch::full({4}, 0.5)));
    EXPECT_FALSE(net->extra->bias.grad().defined());
  }, std::chrono::seconds(20));
}

TEST_F(DdpTest, Bf16CommunicationStaysCloseToFp32) {
  // Gradients averaged in bf16 follow single-process training within bf16's
  // precision, but not exactly (which shows the option does something).
  run_ranks(2, [](ddp::World& w) {
    for (auto s : {ddp::SyncStrategy::kBucketed, ddp::SyncStrategy::kFlat}) {
      ddptest::TrainCase c;
      c.options.strategy = s;
      c.options.comm_dtype = ddp::CommDtype::kBFloat16;
      c.finalize_by_hand = s == ddp::SyncStrategy::kFlat;
      SCOPED_TRACE(ddptest::describe(c));
      ddptest::TrainResult r = ddptest::train_both(w.cpu(), c);
      const double dev = (r.distributed - r.reference).abs().max().item<double>();
      EXPECT_LT(dev, 2e-3) << "bf16 averaging strayed too far";
      EXPECT_GT(dev, 0.0) << "bf16 averaging was bit-exact: the cast did not happen";
      EXPECT_TRUE(ddptest::identical_on_all_ranks(w.cpu(), r.distributed));
    }
  });
}

TEST_F(DdpTest, BucketsFollowReverseRegistrationOrderAndCaps) {
  run_ranks(1, [](ddp::World& w) {
    // fc1.weight 64x32 floats = 8 KiB, fc1.bias 128 B, fc2.weight 1280 B, fc2.bias 40 B.
    ddp::DdpOptions o;
    o.first_bucket_cap_bytes = 1000;
    o.bucket_cap_bytes = 4000;
    ddp::DistributedDataParallel<ddptest::Mlp> model(ddptest::Mlp(), w, o);
    using V = std::vector<std::vector<size_t>>;
    // Walking backwards: fc2.bias (40) + fc2.weight (1320 >= 1000) close the
    // first bucket; fc1.bias (128) + fc1.weight (8320 >= 4000) the second.
    EXPECT_EQ(model.reducer().bucket_layout(), (V{{3, 2}, {1, 0}}));
    ddp::DdpOptions per_param;
    per_param.strategy = ddp::SyncStrategy::kOverlap;
    ddp::DistributedDataParallel<ddptest::Mlp> overlap(ddptest::Mlp(), w, per_param);
    EXPECT_EQ(overlap.reducer().bucket_layout(), (V{{3}, {2}, {1}, {0}}));
  });
}

TEST_F(DdpTest, BuffersFollowRankZero) {
  run_ranks(2, [](ddp::World& w) {
    auto bn = torch::nn::BatchNorm1d(4);
    auto net = torch::nn::Sequential(torch::nn::Linear(4, 4), bn);
    ddp::DistributedDataParallel<torch::nn::Sequential> model(net, w);
    // Different data: different running statistics, until finalize copies rank 0's.
    auto gen = at::detail::createCPUGenerator(50 + w.rank());
    model(at::randn({8, 4}, gen)).sum().backward();
    model.finalize();
    EXPECT_TRUE(ddptest::identical_on_all_ranks(w.cpu(), bn->running_mean.clone()));
    EXPECT_TRUE(ddptest::identical_on_all_ranks(w.cpu(), bn->running_var.clone()));
  });
}

// Stands in, on CPU, for a communicator that enqueues on device streams
// (NCCL): all_reduce_async only records the call, and the reduction happens
// when its Work is waited for, the way a device stream runs the collective
// and the caller's stream waits on it. Gradients come out averaged only if
// the reducer waits for every bucket before backward returns.
class DeferredComm final : public ddp::Communicator {
 public:
  explicit DeferredComm(ddp::Communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  Timeout default_timeout() const override { return inner_.default_timeout(); }
  std::string backend() const override { return "deferred"; }
  bool enqueues_on_device() const override { return true; }
  void all_reduce(at::Tensor& t, ddp::ReduceOp op, Timeout timeout) override {
    ++blocking;
    inner_.all_reduce(t, op, timeout);
  }
  std::unique_ptr<ddp::Work> all_reduce_async(at::Tensor t, ddp::ReduceOp op, Timeout timeout) override {
    ++started;
    return std::make_unique<Deferred>(*this, t, op, timeout);
  }
  void broadcast(at::Tensor& t, int root, Timeout timeout) override { inner_.broadcast(t, root, timeout); }
  at::Tensor all_gather(const at::Tensor& in, Timeout timeout) override { return inner_.all_gather(in, timeout); }
  void barrier(Timeout timeout) override { inner_.barrier(timeout); }

  std::atomic<int> started{0}, waited{0}, blocking{0};
  std::atomic<bool> fail_waits{false};

 private:
  class Deferred final : public ddp::Work {
   public:
    Deferred(DeferredComm& c, at::Tensor t, ddp::ReduceOp op, Timeout timeout)
        : c_(c), t_(std::move(t)), op_(op), timeout_(timeout) {}
    void wait() override {
      ++c_.waited;
      if (c_.fail_waits) throw ddp::CollectiveError("ddp: all_reduce timed out (deferred test)");
      c_.inner_.all_reduce(t_, op_, timeout_);
    }

   private:
    DeferredComm& c_;
    at::Tensor t_;
    ddp::ReduceOp op_;
    Timeout timeout_;
  };
  ddp::Communicator& inner_;
};

TEST_F(DdpTest, DeviceEnqueuedBucketsMatchSingleProcessTraining) {
  // Every case as on Gloo, through the device path (hook-driven strategies)
  // or the blocking calls (naive, flat); with bf16 on the wire as well.
  std::vector<TrainCase> cases = ddptest::all_train_cases();
  for (auto s : {ddp::SyncStrategy::kBucketed, ddp::SyncStrategy::kOverlap}) {
    TrainCase c;
    c.options.strategy = s;
    c.options.comm_dtype = ddp::CommDtype::kBFloat16;
    c.finalize_by_hand = false;
    cases.push_back(c);
  }
  run_ranks(2, [&](ddp::World& w) {
    for (const TrainCase& c : cases) {
      SCOPED_TRACE(ddptest::describe(c));
      DeferredComm comm(w.cpu());
      ddptest::TrainResult r = ddptest::train_both(comm, c);
      const double tol = c.options.comm_dtype == ddp::CommDtype::kBFloat16 ? 2e-3 : 1e-5;
      EXPECT_TRUE(torch::allclose(r.distributed, r.reference, 1e-4, tol))
          << "max deviation " << (r.distributed - r.reference).abs().max().item<double>();
      EXPECT_TRUE(ddptest::identical_on_all_ranks(w.cpu(), r.distributed));
    }
  });
}

TEST_F(DdpTest, DeviceEnqueuedBucketsStartInBackwardAndAreWaitedForBeforeItReturns) {
  run_ranks(2, [](ddp::World& w) {
    DeferredComm comm(w.cpu());
    ddp::DdpOptions o;
    o.first_bucket_cap_bytes = 1000;
    o.bucket_cap_bytes = 4000;  // two buckets (see the test above)
    ddp::DistributedDataParallel<ddptest::Mlp> model(ddptest::seeded_model<ddptest::Mlp>(7), comm, o);
    const int blocking_before = comm.blocking;
    auto gen = at::detail::createCPUGenerator(90 + w.rank());
    model(at::randn({2, 64}, gen)).sum().backward();
    // Enqueued by the hooks, one per bucket, and ordered before backward
    // returned; no blocking all_reduce, no communication thread.
    EXPECT_EQ(comm.started, 2);
    EXPECT_EQ(comm.waited, 2);
    EXPECT_EQ(comm.blocking, blocking_before);
    EXPECT_TRUE(ddptest::identical_on_all_ranks(w.cpu(), model.module()->fc1->weight.grad().clone()));
    model.finalize();  // a no-op: nothing more is started
    EXPECT_EQ(comm.started, 2);
  });
}

TEST_F(DdpTest, DeviceEnqueuedBucketFailureComesOutOfBackward) {
  run_ranks(1, [](ddp::World& w) {
    DeferredComm comm(w.cpu());
    ddp::DistributedDataParallel<ddptest::Mlp> model(ddptest::seeded_model<ddptest::Mlp>(7), comm);
    comm.fail_waits = true;
    EXPECT_THROW(model(at::ones({1, 64})).sum().backward(), ddp::CollectiveError);
    // The next step runs again from a clean state.
    comm.fail_waits = false;
    model.module()->zero_grad();
    model(at::ones({1, 64})).sum().backward();
    EXPECT_TRUE(model.module()->fc1->weight.grad().defined());
  });
}

// A communicator that passes every call on (World::cpu() below), for a
// SwappableCommunicator to own.
class Forwarding final : public ddp::Communicator {
 public:
  explicit Forwarding(ddp::Communicator& inner) : inner_(inner) {}
  int rank() const override { return inner_.rank(); }
  int size() const override { return inner_.size(); }
  Timeout default_timeout() const override { return inner_.default_timeout(); }
  std::string backend() const override { return inner_.backend(); }
  void all_reduce(at::Tensor& t, ddp::ReduceOp op, Timeout timeout) override { inner_.all_reduce(t, op, timeout); }
  void broadcast(at::Tensor& t, int root, Timeout timeout) override { inner_.broadcast(t, root, timeout); }
  at::Tensor all_gather(const at::Tensor& in, Timeout timeout) override { return inner_.all_gather(in, timeout); }
  void barrier(Timeout timeout) override { inner_.barrier(timeout); }

 private:
  ddp::Communicator& inner_;
};

// A heal aborts the connection (a newer generation) while a rank is still
// in its forward or backward: the step's backward fails with a
// CollectiveError, and the step, done again on the new connection, starts
// clean instead of finding its gradients "given twice".
TEST_F(DdpTest, AStepWhoseConnectionIsAbortedRunsAgainClean) {
  for (auto overlap : {ddp::Overlap::kOff, ddp::Overlap::kOn}) {
    run_ranks(1, [&](ddp::World& w) {
      ddp::SwappableCommunicator comm(std::make_unique<Forwarding>(w.cpu()), 0);
      ddp::DdpOptions o;
      o.overlap = overlap;
      ddp::DistributedDataParallel<ddptest::Mlp> model(ddptest::seeded_model<ddptest::Mlp>(7), comm, o);
      model(at::ones({1, 64})).sum().backward();
      model.module()->zero_grad();
      comm.abort_older_than(1, "ddp: the group heals in generation 1 (test)");
      EXPECT_THROW(model(at::ones({1, 64})).sum().backward(), ddp::CollectiveError);
      comm.replace(std::make_unique<Forwarding>(w.cpu()), 1);
      model.module()->zero_grad();
      EXPECT_NO_THROW(model(at::ones({1, 64})).sum().backward()) << "overlap " << ddp::to_string(overlap);
      EXPECT_TRUE(model.module()->fc1->weight.grad().defined());
    });
  }
}

TEST_F(DdpTest, BucketsDuringOrAfterBackwardTrainAlike) {
  // Both ways, on both CPU communicators: the same training, and the
  // overlap that was asked for (auto: where the communicator says it pays).
  for (const char* comm : {"shm", "gloo"}) {
    run_ranks(2, [&](ddp::World& w) {
      for (auto overlap : {ddp::Overlap::kOn, ddp::Overlap::kOff, ddp::Overlap::kAuto}) {
        TrainCase c;
        c.options.overlap = overlap;
        c.finalize_by_hand = false;
        c.accumulation = 2;
        SCOPED_TRACE(std::string(comm) + " overlap " + ddp::to_string(overlap));
        ddptest::TrainResult r = ddptest::train_both(w.cpu(), c);
        EXPECT_TRUE(torch::allclose(r.distributed, r.reference, 1e-4, 1e-5));
        EXPECT_TRUE(ddptest::identical_on_all_ranks(w.cpu(), r.distributed));
        ddp::DistributedDataParallel<ddptest::Mlp> model(ddptest::seeded_model<ddptest::Mlp>(7), w, c.options);
        const bool expected = overlap == ddp::Overlap::kOn || (overlap == ddp::Overlap::kAuto && w.cpu().overlap_pays());
        EXPECT_EQ(model.reducer().overlaps_backward(), expected);
      }
    }, std::chrono::seconds(30), comm);
  }
  EXPECT_EQ(ddp::parse_overlap("off"), ddp::Overlap::kOff);
  EXPECT_THROW(ddp::parse_overlap("sometimes"), std::invalid_argument);
}

TEST(SyncStrategy, ParsesItsNames) {
  for (auto s : {ddp::SyncStrategy::kNaive, ddp::SyncStrategy::kFlat, ddp::SyncStrategy::kOverlap,
                 ddp::SyncStrategy::kBucketed}) {
    EXPECT_EQ(ddp::parse_sync_strategy(ddp::to_string(s)), s);
  }
  EXPECT_THROW(ddp::parse_sync_strategy("fast"), std::invalid_argument);
}

TEST(CommDtype, ParsesItsNames) {
  EXPECT_EQ(ddp::parse_comm_dtype("bf16"), ddp::CommDtype::kBFloat16);
  EXPECT_EQ(ddp::parse_comm_dtype("fp32"), ddp::CommDtype::kParam);
  EXPECT_EQ(ddp::parse_comm_dtype(ddp::to_string(ddp::CommDtype::kParam)), ddp::CommDtype::kParam);
  EXPECT_THROW(ddp::parse_comm_dtype("fp8"), std::invalid_argument);
}

}  // namespace
