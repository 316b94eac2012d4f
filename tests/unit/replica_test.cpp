// The replicas compared (--verify-every): fingerprints that one flipped bit
// changes, the ranks' comparison (who is apart, from which tensor on, with
// or without a majority, hardware of different kinds), the Healer's repair
// and its stop, and the Checkpointer's part. Ranks as threads.
#include <gtest/gtest.h>

#include <filesystem>
#include <random>

#include "base/fingerprint.h"
#include "ddp/ddp.h"
#include "support/ddp_checks.h"
#include "support/thread_ranks.h"
#include "verify/replica_check.h"
#include "verify/tensor_fingerprint.h"

namespace {

namespace fs = std::filesystem;
using ddptest::run_ranks;

void flip_low_bit(at::Tensor t, int64_t element, int bit = 0) {
  at::NoGradGuard no_grad;
  t.view(at::kInt).view({-1}).narrow(0, element, 1).bitwise_xor_(1 << bit);
}

TEST(Fingerprint, AnyChangeConfinedToOneWordChangesIt) {
  std::mt19937_64 gen(7);
  std::vector<unsigned char> bytes(1000 + 5);  // whole lanes, words, and a tail of 5 bytes
  for (auto& b : bytes) b = static_cast<unsigned char>(gen());
  const uint64_t base = ddp::fingerprint_bytes(bytes.data(), bytes.size());
  for (size_t at = 0; at < bytes.size(); ++at) {
    for (int bit = 0; bit < 8; ++bit) {
      bytes[at] ^= static_cast<unsigned char>(1u << bit);
      ASSERT_NE(ddp::fingerprint_bytes(bytes.data(), bytes.size()), base) << "byte " << at << " bit " << bit;
      bytes[at] ^= static_cast<unsigned char>(1u << bit);
    }
  }
  EXPECT_EQ(ddp::fingerprint_bytes(bytes.data(), bytes.size()), base);
  EXPECT_NE(ddp::fingerprint_bytes(bytes.data(), bytes.size() - 1), base) << "a shorter buffer";
}

TEST(Fingerprint, ATensorsLowestBitDtypeAndShapeCountOnBothWays) {
  for (bool weighted : {false, true}) {
    auto fp = [&](const at::Tensor& t) {
      return weighted ? ddp::fingerprint_by_weighted_sum(t) : ddp::fingerprint_of(t);
    };
    SCOPED_TRACE(weighted ? "the device way (weighted sum)" : "the host way (bytes)");
    at::Tensor a = at::randn({64, 33});
    const uint64_t base = fp(a);
    EXPECT_EQ(fp(a.clone()), base);
    for (int64_t e : {int64_t{0}, int64_t{1000}, a.numel() - 1}) {
      at::Tensor b = a.clone();
      flip_low_bit(b, e);
      EXPECT_NE(fp(b), base) << "element " << e;
      EXPECT_TRUE(at::allclose(a, b)) << "a float sum would not see it";
    }
    EXPECT_NE(fp(a.view({33, 64})), base) << "another shape";
    EXPECT_NE(fp(a.view(at::kInt)), base) << "another dtype";
    EXPECT_EQ(fp(a.t().contiguous().t()), base) << "not contiguous, the same values";
    at::Tensor odd = at::randint(0, 255, {7}, at::kByte);  // 7 bytes: neither 8- nor 4-byte words
    at::Tensor odd2 = odd.clone();
    odd2[3] = (odd2[3].item<int>() ^ 1);
    EXPECT_NE(fp(odd), fp(odd2));
  }
}

// Two named tensors, the same on every rank; `change` alters them on some.
ddp::ReplicaCheckInput input_of(int rank, const std::function<void(int, at::Tensor&, at::Tensor&)>& change,
                                const std::string& kind = "cpu") {
  at::Tensor w = at::arange(12, at::kFloat).reshape({3, 4}), b = at::ones({4});
  change(rank, w, b);
  ddp::ReplicaCheckInput in;
  in.tensors = {{"layer.weight", w}, {"layer.bias", b}};
  in.step = 7;
  in.hardware_kind = kind;
  return in;
}

TEST(ReplicaCheck, EqualRanksAgreeSilently) {
  run_ranks(4, [](ddp::World& w) {
    const auto c = ddp::compare_replicas(w.cpu(), input_of(w.rank(), [](int, at::Tensor&, at::Tensor&) {}));
    EXPECT_EQ(c.outcome, ddp::ReplicaComparison::Outcome::kAgree);
    EXPECT_TRUE(c.text.empty()) << c.text;
    EXPECT_FALSE(c.by_design);
  });
}

TEST(ReplicaCheck, OneRankApartIsNamedWithTheFirstTensorThatDiffers) {
  run_ranks(4, [](ddp::World& w) {
    const auto c = ddp::compare_replicas(w.cpu(), input_of(w.rank(), [](int r, at::Tensor&, at::Tensor& b) {
                                           if (r == 2) flip_low_bit(b, 3);
                                         }));
    ASSERT_EQ(c.outcome, ddp::ReplicaComparison::Outcome::kApart);
    ASSERT_EQ(c.repairs.size(), 1u);
    EXPECT_EQ(c.repairs[0].source, 0);
    EXPECT_EQ(c.repairs[0].apart, std::vector<int>{2});
    EXPECT_EQ(c.self_apart, w.rank() == 2);
    EXPECT_EQ(c.text, "rank 2's parameters differ from ranks 0, 1, 3 at step 7 (first differing tensor: layer.bias)");
  });
}

TEST(ReplicaCheck, RankZeroApartTakesFromTheLowestOfTheMajority) {
  run_ranks(3, [](ddp::World& w) {
    const auto c = ddp::compare_replicas(w.cpu(), input_of(w.rank(), [](int r, at::Tensor& wt, at::Tensor&) {
                                           if (r == 0) flip_low_bit(wt, 0);
                                         }));
    ASSERT_EQ(c.outcome, ddp::ReplicaComparison::Outcome::kApart);
    EXPECT_EQ(c.repairs[0].source, 1);
    EXPECT_EQ(c.text, "rank 0's parameters differ from ranks 1, 2 at step 7 (first differing tensor: layer.weight)");
  });
}

TEST(ReplicaCheck, TwoOfFourApartHaveNoMajority) {
  run_ranks(4, [](ddp::World& w) {
    const auto c = ddp::compare_replicas(w.cpu(), input_of(w.rank(), [](int r, at::Tensor& wt, at::Tensor&) {
                                           if (r == 1 || r == 2) flip_low_bit(wt, 5);
                                         }));
    EXPECT_EQ(c.outcome, ddp::ReplicaComparison::Outcome::kNoMajority);
    EXPECT_TRUE(c.repairs.empty());
    EXPECT_EQ(c.text, "the ranks' parameters differ with no majority at step 7: ranks 0, 3 | ranks 1, 2 (first "
                      "differing tensor: layer.weight)");
  });
}

TEST(ReplicaCheck, OneOfTwoApartHasNoMajority) {
  run_ranks(2, [](ddp::World& w) {
    const auto c = ddp::compare_replicas(w.cpu(), input_of(w.rank(), [](int r, at::Tensor& wt, at::Tensor&) {
                                           if (r == 1) flip_low_bit(wt, 11);
                                         }));
    EXPECT_EQ(c.outcome, ddp::ReplicaComparison::Outcome::kNoMajority);
  });
}

TEST(ReplicaCheck, KindsThatDifferAlikeAreByDesignAndRepairedWithinTheirKind) {
  run_ranks(6, [](ddp::World& w) {
    // Ranks 0-2 are one kind, 3-5 another that rounds its own way; rank 4
    // is apart within its kind besides.
    const std::string kind = w.rank() < 3 ? "Intel Xeon" : "AMD EPYC";
    const auto c = ddp::compare_replicas(w.cpu(), input_of(
                                                      w.rank(),
                                                      [](int r, at::Tensor& wt, at::Tensor& b) {
                                                        if (r >= 3) flip_low_bit(wt, 2);
                                                        if (r == 4) flip_low_bit(b, 0);
                                                      },
                                                      kind));
    EXPECT_TRUE(c.by_design);
    EXPECT_EQ(c.by_design_text,
              "ranks 0-2 (node 0: Intel Xeon) and ranks 3-5 (node 0: AMD EPYC) hold different parameters at step 7 "
              "while each kind agrees within itself (first differing tensor: layer.weight): hardware of different "
              "kinds may round differently; ddprun compares each kind within itself and repairs nothing between them");
    ASSERT_EQ(c.outcome, ddp::ReplicaComparison::Outcome::kApart);
    ASSERT_EQ(c.repairs.size(), 1u);
    EXPECT_EQ(c.repairs[0].source, 3) << "rank 4 takes its own kind's state";
    EXPECT_EQ(c.repairs[0].apart, std::vector<int>{4});
  });
}

TEST(ReplicaCheck, RankListsRunsAsRanges) {
  EXPECT_EQ(ddp::rank_list({3}), "3");
  EXPECT_EQ(ddp::rank_list({1, 0}), "0, 1");
  EXPECT_EQ(ddp::rank_list({5, 0, 1, 2, 3}), "0-3, 5");
  EXPECT_EQ(ddp::rank_list({0, 2, 4, 5, 6, 7, 9}), "0, 2, 4-7, 9");
}

// A few Healer steps of SGD with momentum on the same data everywhere
// (every rank's gradients agree: no DDP needed), comparing every
// `verify_every` steps; `corrupt` runs on each rank after each commit.
struct HealedRun {
  std::vector<at::Tensor> params;
  ddp::HealReport report;
  std::string error;
  int64_t agreed = -1;
};

using Corrupt = std::function<void(int rank, int64_t step, ddptest::Mlp&)>;
void no_corruption(int, int64_t, ddptest::Mlp&) {}

HealedRun run_healed(ddp::World& w, int steps, const Corrupt& corrupt, ddp::Checkpointer* ckpt = nullptr,
                     int64_t verify_every = 2) {
  HealedRun out;
  ddptest::Mlp net;
  auto gen = at::detail::createCPUGenerator(1);  // the threads share the global one
  {
    at::NoGradGuard no_grad;
    for (auto& p : net->parameters()) p.copy_(at::randn(p.sizes(), gen) * 0.1);
  }
  torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  int64_t step = 0;
  ddp::HealOptions ho;
  ho.verify_every = verify_every;
  ddp::Healer healer(w, {.module = net.ptr().get(), .optimizer = &opt, .step = &step, .counters = {}}, ho);
  try {
    for (int i = 0; i < steps; ++i) {
      healer.step([&] {
        opt.zero_grad();
        torch::nn::functional::cross_entropy(net->forward(at::randn({8, 64}, gen)), at::randint(0, 10, {8}, gen, at::kLong))
            .backward();
        opt.step();
        ++step;
        corrupt(w.rank(), step, net);
        if (ckpt && ckpt->due(step)) {
          ckpt->save(*net, opt, step, 0, 0);
          ckpt->wait();
        }
      });
    }
  } catch (const ddp::ReplicasDiffer& e) {
    out.error = e.what();
  }
  for (const auto& p : net->parameters()) out.params.push_back(p.detach().clone());
  out.report = healer.report();
  out.agreed = w.replicas().agreed_step();
  return out;
}

Corrupt flip_on(int rank, int64_t step, size_t param, int bit = 0) {
  return [=](int r, int64_t s, ddptest::Mlp& net) {
    if (r == rank && s == step) flip_low_bit(net->parameters()[param], 0, bit);
  };
}

TEST(HealerReplicas, ARankApartIsRepairedWithTheMajoritysStateAndTrainingGoesOn) {
  std::vector<HealedRun> runs(3), reference(3);
  run_ranks(3, [&](ddp::World& w) { reference[w.rank()] = run_healed(w, 6, no_corruption); });
  // Rank 1 flips a bit right after step 4, where the comparison runs: the
  // repair comes before any gradient was computed with the flipped bit.
  run_ranks(3, [&](ddp::World& w) { runs[w.rank()] = run_healed(w, 6, flip_on(1, 4, 2)); });
  for (int r = 0; r < 3; ++r) {
    SCOPED_TRACE("rank " + std::to_string(r));
    EXPECT_TRUE(runs[r].error.empty()) << runs[r].error;
    EXPECT_EQ(runs[r].report.repairs, 1);
    EXPECT_EQ(runs[r].report.verified_step, 6);
    EXPECT_EQ(runs[r].agreed, 6);
    for (size_t i = 0; i < runs[r].params.size(); ++i) {
      EXPECT_TRUE(at::equal(runs[r].params[i], reference[0].params[i]))
          << "parameter " << i << " differs from an uncorrupted run";
    }
  }
  EXPECT_EQ(reference[0].report.repairs, 0);
  EXPECT_EQ(reference[0].report.checks, 4) << "at the start, then after steps 2, 4 and 6";
}

TEST(HealerReplicas, WithTheComparisonOffTheFlipStays) {
  std::vector<HealedRun> runs(3);
  // (Bit 16: a flip of the lowest bit may wash out in two steps' rounding.)
  run_ranks(3, [&](ddp::World& w) {
    runs[w.rank()] = run_healed(w, 6, flip_on(1, 4, 2, /*bit=*/16), nullptr, /*verify_every=*/0);
  });
  EXPECT_EQ(runs[1].report.checks, 0);
  EXPECT_FALSE(at::equal(runs[1].params[2], runs[0].params[2])) << "the corruption stays without the comparison";
}

// A checkpoint after every step in `dir`, the newest `keep` kept.
ddp::CheckpointOptions every_step(const fs::path& dir, int keep) {
  ddp::CheckpointOptions co;
  co.dir = dir.string();
  co.every_steps = 1;
  co.keep = keep;
  return co;
}

TEST(HealerReplicas, NoMajorityThrowsOnEveryRankAndSetsAsideCheckpointsSinceTheyAgreed) {
  const fs::path dir = fs::temp_directory_path() / ("ddprun-replicas-" + std::to_string(getpid()));
  fs::remove_all(dir);
  std::vector<HealedRun> runs(2);
  run_ranks(2, [&](ddp::World& w) {
    ddp::Checkpointer ckpt(w, every_step(dir, 10));
    runs[w.rank()] = run_healed(w, 6, flip_on(1, 3, 0), &ckpt);  // found at step 4
    ckpt.finish();
  });
  for (int r = 0; r < 2; ++r) {
    EXPECT_NE(runs[r].error.find("differ with no majority at step 4: rank 0 | rank 1 (first differing tensor: "
                                 "fc1.weight)"),
              std::string::npos)
        << runs[r].error;
    EXPECT_NE(runs[r].error.find("(step 2 or before)"), std::string::npos) << runs[r].error;
    EXPECT_EQ(runs[r].agreed, 2);
  }
  std::vector<int64_t> kept;
  for (const auto& f : ddp::list_checkpoints(dir.string())) kept.push_back(f.step);
  EXPECT_EQ(kept, (std::vector<int64_t>{2, 1})) << "steps 3 and 4 were written after the replicas last agreed";
  int unagreed = 0;
  for (const auto& e : fs::directory_iterator(dir)) unagreed += e.path().extension() == ".unagreed";
  EXPECT_EQ(unagreed, 2);
  fs::remove_all(dir);
}

TEST(HealerReplicas, PruningKeepsTheNewestCheckpointTheReplicasAgreedOn) {
  const fs::path dir = fs::temp_directory_path() / ("ddprun-replicas-keep-" + std::to_string(getpid()));
  fs::remove_all(dir);
  run_ranks(2, [&](ddp::World& w) {
    ddp::Checkpointer ckpt(w, every_step(dir, 1));
    run_healed(w, 5, no_corruption, &ckpt);
    ckpt.finish();
  });
  std::vector<int64_t> kept;
  for (const auto& f : ddp::list_checkpoints(dir.string())) kept.push_back(f.step);
  // keep=1 keeps step 5; step 4 stays, the last one written when the
  // replicas agreed (they are compared every 2 steps: at 4, not yet at 5).
  EXPECT_EQ(kept, (std::vector<int64_t>{5, 4}));
  fs::remove_all(dir);
}

}  // namespace

namespace {

TEST(CheckpointFingerprint, AFileWhoseTensorsAreNotTheOnesItWasWrittenWithIsRefused) {
  ddp::TrainingState s;
  s.model["w"] = at::full({256}, 12345.678f);
  s.optimizer.kind = "sgd";
  s.optimizer.lr = {0.1};
  std::vector<char> bytes = ddp::encode_state(s);
  EXPECT_NO_THROW(ddp::decode_state(bytes));
  // The tensor's bytes are stored as they are: flip the lowest bit of one.
  const float value = 12345.678f;
  const char* pattern = reinterpret_cast<const char*>(&value);
  auto at = std::search(bytes.begin(), bytes.end(), pattern, pattern + 4);
  ASSERT_NE(at, bytes.end());
  *(at + 4 * 10) ^= 1;  // the 11th element
  try {
    ddp::decode_state(bytes);
    FAIL() << "a file with another tensor than it records was read";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("not the") , std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("it was written with"), std::string::npos) << e.what();
  }
}

}  // namespace

namespace {

// DistributedDataParallel compares for a program without a Healer: every
// 2nd forward pass with gradients here. Rank 1 flips a bit after the 3rd
// step: at the 4th forward every rank stops, naming it.
std::string ddp_run(ddp::World& w, bool with_healer, int flip_rank = 1, ddp::Checkpointer* ckpt = nullptr) {
  ddptest::Mlp net;
  auto gen = at::detail::createCPUGenerator(3);
  ddp::DdpOptions o;
  o.verify_every = 2;
  ddp::DistributedDataParallel<ddptest::Mlp> model(net, w, o);
  torch::optim::SGD opt(model.module()->parameters(), torch::optim::SGDOptions(0.1));
  int64_t step = 0;
  ddp::HealOptions ho;
  ho.verify_every = 2;
  std::unique_ptr<ddp::Healer> healer;
  if (with_healer) {
    healer = std::make_unique<ddp::Healer>(
        w, ddp::Healable{.module = model.module().ptr().get(), .optimizer = &opt, .step = &step, .counters = {}}, ho);
  }
  try {
    for (int i = 0; i < 6; ++i) {
      auto body = [&] {
        opt.zero_grad();
        torch::nn::functional::cross_entropy(model(at::randn({8, 64}, gen)), at::randint(0, 10, {8}, gen, at::kLong))
            .backward();
        opt.step();
        ++step;
        if (w.rank() == flip_rank && step == 3) flip_low_bit(model.module()->parameters()[0], 5);
        if (ckpt && ckpt->due(step)) {
          ckpt->save(*model.module(), opt, step, 0, 0);
          ckpt->wait();
        }
      };
      if (healer) {
        healer->step(body);
      } else {
        body();
      }
    }
  } catch (const ddp::ReplicasDiffer& e) {
    return e.what();
  }
  return "";
}

TEST(DdpReplicas, WithoutAHealerAReplicaApartStopsEveryRankAtTheNextComparison) {
  std::vector<std::string> errors(3);
  run_ranks(3, [&](ddp::World& w) { errors[w.rank()] = ddp_run(w, /*with_healer=*/false); });
  for (const auto& e : errors) {
    EXPECT_NE(e.find("rank 1's parameters differ from ranks 0, 2 at forward pass 4 (first differing tensor: "
                     "fc1.weight); without a ddp::Healer nothing repairs a replica here: every rank stops"),
              std::string::npos)
        << e;
  }
}

// Rank 0's parameters apart (what its checkpoints hold): the checkpoints
// saved since the replicas last agreed (at the 2nd forward pass, before
// step 2's update) are set aside, in any unit a program counts its steps.
TEST(DdpReplicas, RankZeroApartSetsAsideTheCheckpointsSavedSinceTheyLastAgreed) {
  const fs::path dir = fs::temp_directory_path() / ("ddprun-ddp-replicas-" + std::to_string(getpid()));
  fs::remove_all(dir);
  std::vector<std::string> errors(3);
  run_ranks(3, [&](ddp::World& w) {
    ddp::Checkpointer ckpt(w, every_step(dir, 10));
    errors[w.rank()] = ddp_run(w, /*with_healer=*/false, /*flip_rank=*/0, &ckpt);
    ckpt.finish();
  });
  EXPECT_NE(errors[1].find("rank 0's parameters differ from ranks 1, 2 at forward pass 4"), std::string::npos) << errors[1];
  std::vector<int64_t> kept;
  for (const auto& f : ddp::list_checkpoints(dir.string())) kept.push_back(f.step);
  EXPECT_EQ(kept, std::vector<int64_t>{1});
  fs::remove_all(dir);
}

TEST(DdpReplicas, WithAHealerTheHealerComparesAndRepairsAndDdpStaysQuiet) {
  std::vector<std::string> errors(3);
  run_ranks(3, [&](ddp::World& w) { errors[w.rank()] = ddp_run(w, /*with_healer=*/true); });
  for (const auto& e : errors) EXPECT_EQ(e, "");
}

}  // namespace
