// Checkpointer, training state, stop flag: ranks as threads.
#include <gtest/gtest.h>
#include <signal.h>

#include <ATen/Parallel.h>
#include <caffe2/serialize/inline_container.h>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "channel/heartbeat_layout.h"
#include "ddp/ddp.h"
#include "support/ddp_checks.h"
#include "support/thread_ranks.h"
#include "support/tmpfs.h"

namespace {

namespace fs = std::filesystem;
using ddptest::run_ranks;

fs::path fresh_dir(const std::string& name) {
  fs::path d = fs::temp_directory_path() / ("ddprun-ckpt-" + name + "-" + std::to_string(getpid()));
  fs::remove_all(d);
  return d;
}

// A few SGD-with-momentum steps so that the optimizer has state.
void train_a_bit(ddptest::Mlp& net, torch::optim::Optimizer& opt, int steps, uint64_t seed) {
  auto gen = at::detail::createCPUGenerator(seed);
  for (int i = 0; i < steps; ++i) {
    opt.zero_grad();
    torch::nn::functional::cross_entropy(net->forward(at::randn({8, 64}, gen)),
                                         at::randint(0, 10, {8}, gen, at::kLong))
        .backward();
    opt.step();
  }
}

TEST(TrainingState, RoundTripsModelOptimizerAndProgress) {
  for (const std::string kind : {"sgd", "adam", "adamw"}) {
    SCOPED_TRACE(kind);
    auto make_opt = [&](ddptest::Mlp& net) -> std::unique_ptr<torch::optim::Optimizer> {
      if (kind == "sgd") return std::make_unique<torch::optim::SGD>(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
      if (kind == "adam") return std::make_unique<torch::optim::Adam>(net->parameters(), torch::optim::AdamOptions(0.01));
      return std::make_unique<torch::optim::AdamW>(net->parameters(), torch::optim::AdamWOptions(0.01));
    };
    auto a = ddptest::seeded_model<ddptest::Mlp>(1);
    auto opt_a = make_opt(a);
    train_a_bit(a, *opt_a, 3, 5);
    const auto bytes = ddp::encode_state(ddp::capture_state(*a, *opt_a, 3, 1, 40));

    auto b = ddptest::seeded_model<ddptest::Mlp>(2);  // different start
    auto opt_b = make_opt(b);
    ddp::TrainingState s = ddp::decode_state(bytes);
    EXPECT_EQ(s.step, 3);
    EXPECT_EQ(s.epoch, 1);
    EXPECT_EQ(s.sampler_position, 40);
    ddp::apply_state(s, *b, *opt_b);
    EXPECT_TRUE(torch::equal(ddptest::flat_parameters(*a), ddptest::flat_parameters(*b)));
    // With the optimizer state restored too, the next steps agree exactly.
    train_a_bit(a, *opt_a, 2, 9);
    train_a_bit(b, *opt_b, 2, 9);
    EXPECT_TRUE(torch::equal(ddptest::flat_parameters(*a), ddptest::flat_parameters(*b)));
  }
}

// The pickle inside a checkpoint file (its data.pkl record).
std::string pickle_of(const std::vector<char>& file) {
  std::istringstream in(std::string(file.begin(), file.end()));
  caffe2::serialize::PyTorchStreamReader reader(&in);
  auto [data, size] = reader.getRecord("data.pkl");
  return std::string(static_cast<const char*>(data.get()), size);
}

TEST(TrainingState, TheFileNamesNoGlobalThatTorchLoadsSafeDefaultRefuses) {
  // torch.load(weights_only=True), the default from PyTorch 2.6, refuses
  // torch.jit._pickle's type tags and specialised lists.
  auto net = ddptest::seeded_model<ddptest::Mlp>(1);
  torch::optim::Adam adam(net->parameters(), torch::optim::AdamOptions(0.01));
  train_a_bit(net, adam, 1, 5);
  const std::string pickle = pickle_of(ddp::encode_state(ddp::capture_state(*net, adam, 1, 0, 0)));
  EXPECT_EQ(pickle.find("torch.jit"), std::string::npos) << pickle;
  EXPECT_NE(pickle.find("_rebuild_tensor_v2"), std::string::npos);  // the tensors are there
}

TEST(TrainingState, FilesWrittenWithTypeTagsStillLoad) {
  // The form written before: torch::pickle_save, tagged dicts, lr as List<double>.
  auto net = ddptest::seeded_model<ddptest::Mlp>(1);
  torch::optim::SGD sgd(net->parameters(), torch::optim::SGDOptions(0.25).momentum(0.9));
  train_a_bit(net, sgd, 2, 5);
  const ddp::TrainingState now = ddp::capture_state(*net, sgd, 7, 2, 64);
  c10::impl::GenericDict model(c10::StringType::get(), c10::TensorType::get());
  for (const auto& [k, v] : now.model) model.insert(k, v);
  c10::impl::GenericList per_param(c10::DictType::create(c10::StringType::get(), c10::TensorType::get()));
  for (const auto& entry : now.optimizer.params) {
    c10::impl::GenericDict d(c10::StringType::get(), c10::TensorType::get());
    for (const auto& [k, v] : entry) d.insert(k, v);
    per_param.push_back(d);
  }
  c10::impl::GenericDict opt(c10::StringType::get(), c10::AnyType::get());
  opt.insert("kind", now.optimizer.kind);
  opt.insert("lr", c10::List<double>(now.optimizer.lr));
  opt.insert("state", per_param);
  opt.insert("archive", at::empty({0}, at::kByte));
  c10::impl::GenericDict d(c10::StringType::get(), c10::AnyType::get());
  d.insert("format", std::string("ddprun-checkpoint/1"));
  d.insert("step", int64_t{7});
  d.insert("epoch", int64_t{2});
  d.insert("sampler_position", int64_t{64});
  d.insert("model", model);
  d.insert("optimizer", opt);
  d.insert("rng", now.rng);
  const std::vector<char> old_file = torch::pickle_save(d);
  ASSERT_NE(pickle_of(old_file).find("torch.jit._pickle"), std::string::npos) << "not the tagged form";

  const ddp::TrainingState s = ddp::decode_state(old_file);
  EXPECT_EQ(s.step, 7);
  EXPECT_EQ(s.sampler_position, 64);
  EXPECT_EQ(s.optimizer.lr, std::vector<double>{0.25});
  auto other = ddptest::seeded_model<ddptest::Mlp>(2);
  torch::optim::SGD other_sgd(other->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
  ddp::apply_state(s, *other, other_sgd);
  EXPECT_TRUE(torch::equal(ddptest::flat_parameters(*net), ddptest::flat_parameters(*other)));
  train_a_bit(net, sgd, 1, 9);
  train_a_bit(other, other_sgd, 1, 9);
  EXPECT_TRUE(torch::equal(ddptest::flat_parameters(*net), ddptest::flat_parameters(*other)));
}

TEST(TrainingState, MismatchesAreNamed) {
  auto mlp = ddptest::seeded_model<ddptest::Mlp>(1);
  torch::optim::SGD sgd(mlp->parameters(), 0.1);
  auto s = ddp::capture_state(*mlp, sgd, 0, 0, 0);
  s.model["fc1.weight"] = at::zeros({3, 3});
  try {
    ddp::apply_state(s, *mlp, sgd);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("checkpoint tensor 'fc1.weight' has shape [3, 3]"), std::string::npos)
        << e.what();
  }
  torch::optim::Adam adam(mlp->parameters());
  auto s2 = ddp::capture_state(*mlp, sgd, 0, 0, 0);
  EXPECT_THROW(ddp::apply_state(s2, *mlp, adam), std::runtime_error);
  EXPECT_THROW(ddp::decode_state(std::vector<char>{'n', 'o', 'p', 'e'}), std::runtime_error);
}

TEST(Checkpointer, RestoreBroadcastsRankZerosNewestToRanksWithoutTheFiles) {
  const fs::path dir = fresh_dir("broadcast");
  run_ranks(2, [&](ddp::World& w) {
    auto net = ddptest::seeded_model<ddptest::Mlp>(3);
    torch::optim::SGD opt(net->parameters(), torch::optim::SGDOptions(0.1).momentum(0.9));
    ddp::CheckpointOptions o;
    // Only rank 0 owns the folder: rank 1 names another, which must never
    // be created or read.
    o.dir = w.rank() == 0 ? dir.string() : dir.string() + "-rank1";
    o.every_steps = 2;
    o.keep = 2;
    ddp::Checkpointer ckpt(w.cpu(), o);
    EXPECT_FALSE(ckpt.restore());  // nothing yet, on every rank
    for (int64_t step = 1; step <= 6; ++step) {
      if (w.rank() == 0) train_a_bit(net, opt, 1, step);
      if (ckpt.due(step)) ckpt.save(ddp::capture_state(*net, opt, step, 0, step * 8));
      EXPECT_EQ(ckpt.due(step), false);  // just saved, or not due
    }
    ckpt.wait();
    w.barrier();
    auto state = ckpt.restore();
    ASSERT_TRUE(state);
    EXPECT_EQ(state->step, 6);
    EXPECT_EQ(state->sampler_position, 48);
  });
  EXPECT_FALSE(fs::exists(dir.string() + "-rank1"));
  // every_steps 2 over 6 steps, keep 2: steps 4 and 6 remain.
  auto files = ddp::list_checkpoints(dir.string());
  ASSERT_EQ(files.size(), 2u);
  EXPECT_EQ(files[0].step, 6);
  EXPECT_EQ(files[1].step, 4);
  fs::remove_all(dir);
}

// Writes checkpoints for steps 1..3 and returns their files, newest first.
std::vector<ddp::CheckpointFile> three_checkpoints(ddp::World& w, const fs::path& dir) {
  auto net = ddptest::seeded_model<ddptest::Mlp>(3);
  torch::optim::SGD opt(net->parameters(), 0.1);
  ddp::CheckpointOptions o;
  o.dir = dir.string();
  ddp::Checkpointer ckpt(w.cpu(), o);
  for (int64_t step = 1; step <= 3; ++step) ckpt.save(ddp::capture_state(*net, opt, step, 0, 0));
  ckpt.wait();
  return ddp::list_checkpoints(dir.string());
}

TEST(Checkpointer, TruncatedOrBitFlippedNewestIsSkippedForThePreviousOne) {
  for (const std::string damage : {"truncate", "flip"}) {
    SCOPED_TRACE(damage);
    const fs::path dir = fresh_dir(damage);
    run_ranks(1, [&](ddp::World& w) {
      auto files = three_checkpoints(w, dir);
      ASSERT_EQ(files.size(), 3u);
      if (damage == "truncate") {
        fs::resize_file(files[0].path, fs::file_size(files[0].path) / 2);
      } else {
        std::fstream f(files[0].path, std::ios::in | std::ios::out | std::ios::binary);
        f.seekg(100);
        char c = 0;
        f.read(&c, 1);
        c ^= 0x10;
        f.seekp(100);
        f.write(&c, 1);
      }
      ddp::CheckpointOptions o;
      o.dir = dir.string();
      ddp::Checkpointer ckpt(w.cpu(), o);
      testing::internal::CaptureStderr();
      auto state = ckpt.restore();
      const std::string err = testing::internal::GetCapturedStderr();
      ASSERT_TRUE(state);
      EXPECT_EQ(state->step, 2);
      EXPECT_EQ(ckpt.last_path(), files[1].path);
      EXPECT_NE(err.find("skipping checkpoint " + files[0].path), std::string::npos) << err;
      EXPECT_NE(err.find("does not match"), std::string::npos) << err;
    });
    fs::remove_all(dir);
  }
}

// The test model and its optimizer, checkpointed into a folder.
struct Saver {
  Saver(ddp::World& w, const fs::path& dir, int keep, int64_t every_steps = 0)
      : ckpt(w.cpu(), ddp::CheckpointOptions{dir.string(), every_steps, 0, keep}) {}
  void save(int64_t step) { ckpt.save(ddp::capture_state(*net, opt, step, 0, 0)); }
  ddptest::Mlp net = ddptest::seeded_model<ddptest::Mlp>(3);
  torch::optim::SGD opt{net->parameters(), 0.1};
  ddp::Checkpointer ckpt;
};

std::vector<int64_t> steps_in(const fs::path& dir) {
  std::vector<int64_t> steps;
  for (const auto& f : ddp::list_checkpoints(dir.string())) steps.push_back(f.step);
  return steps;
}

TEST(Checkpointer, AFolderNamedLikeTheNewestCheckpointIsSkipped) {
  const fs::path dir = fresh_dir("folder");
  run_ranks(1, [&](ddp::World& w) {
    ASSERT_EQ(three_checkpoints(w, dir).size(), 3u);
    const fs::path fake = dir / ddp::checkpoint_file_name(99, 0);
    fs::create_directories(fake / "inside");
    Saver s(w, dir, 1);
    testing::internal::CaptureStderr();
    auto state = s.ckpt.restore();
    const std::string err = testing::internal::GetCapturedStderr();
    ASSERT_TRUE(state);
    EXPECT_EQ(state->step, 3);
    EXPECT_NE(err.find("skipping checkpoint " + fake.string() + ": is a folder"), std::string::npos) << err;
    // Saving and pruning leave the folder alone and keep the new file.
    s.save(4);
    EXPECT_TRUE(s.ckpt.wait());
    EXPECT_TRUE(fs::is_directory(fake / "inside"));
    EXPECT_EQ(steps_in(dir), std::vector<int64_t>({99, 4}));
    EXPECT_EQ(s.ckpt.finish().failed, 0);
  });
  fs::remove_all(dir);
}

TEST(Checkpointer, ACorruptNewerFileNeverPushesNewSavesOut) {
  for (const bool restore_first : {false, true}) {
    SCOPED_TRACE(restore_first ? "after restore()" : "without restore()");
    const fs::path dir = fresh_dir("corrupt-newer");
    fs::create_directories(dir);
    const fs::path bad = dir / ddp::checkpoint_file_name(999, 0x12345678);
    std::ofstream(bad) << "not a checkpoint";
    run_ranks(1, [&](ddp::World& w) {
      Saver s(w, dir, 1);
      testing::internal::CaptureStderr();
      if (restore_first) {
        EXPECT_FALSE(s.ckpt.restore());
      }
      for (int64_t step = 1; step <= 3; ++step) s.save(step);
      EXPECT_EQ(s.ckpt.finish().written, 3);
      const std::string err = testing::internal::GetCapturedStderr();
      // The newest save survives keep=1; the corrupt file never counted.
      if (restore_first) {
        EXPECT_EQ(steps_in(dir), std::vector<int64_t>({3}));
        EXPECT_TRUE(fs::exists(bad.string() + ".corrupt")) << err;
        EXPECT_NE(err.find("skipping checkpoint " + bad.string() + ": checksum"), std::string::npos) << err;
      } else {
        EXPECT_EQ(steps_in(dir), std::vector<int64_t>({999, 3}));  // not ours to delete, and restore() skips it
      }
    });
    fs::remove_all(dir);
  }
}

TEST(Checkpointer, ACorruptOlderFileDoesNotCountTowardKeep) {
  const fs::path dir = fresh_dir("corrupt-older");
  run_ranks(1, [&](ddp::World& w) {
    auto files = three_checkpoints(w, dir);  // steps 3, 2, 1
    ASSERT_EQ(files.size(), 3u);
    fs::resize_file(files[1].path, 10);  // step 2 damaged
    Saver s(w, dir, 3);
    ASSERT_EQ(s.ckpt.restore()->step, 3);
    testing::internal::CaptureStderr();
    s.save(4);
    EXPECT_TRUE(s.ckpt.wait());
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(steps_in(dir), std::vector<int64_t>({4, 3, 1})) << err;  // three sound ones
    EXPECT_NE(err.find(files[1].path + " is set aside"), std::string::npos) << err;
    s.ckpt.finish();
  });
  fs::remove_all(dir);
}

// The size of one checkpoint file of the test model.
uintmax_t one_checkpoint_size() {
  auto net = ddptest::seeded_model<ddptest::Mlp>(3);
  torch::optim::SGD opt(net->parameters(), 0.1);
  return ddp::encode_state(ddp::capture_state(*net, opt, 1, 0, 0)).size();
}

TEST(Checkpointer, AFullDiskFailsTheSaveLoudlyKeepsTheOldOneAndTrainingGoesOn) {
  // Room for one file and a half: the second write runs out of space.
  ddptest::Tmpfs disk(fresh_dir("full"), static_cast<int>(one_checkpoint_size() * 3 / 2 / 1024 + 4));
  if (!disk.ok()) GTEST_SKIP() << disk.why_not();
  run_ranks(1, [&](ddp::World& w) {
    Saver s(w, disk.path(), 1);
    s.save(1);
    EXPECT_TRUE(s.ckpt.wait());
    testing::internal::CaptureStderr();
    EXPECT_NO_THROW(s.save(2));
    EXPECT_FALSE(s.ckpt.wait());
    EXPECT_NO_THROW(s.save(3));  // tried again, fails again
    const ddp::CheckpointReport r = s.ckpt.finish();
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_EQ(r.written, 1);
    EXPECT_EQ(r.failed, 2);
    EXPECT_NE(r.last_error.find("No space left on device"), std::string::npos) << r.last_error;
    EXPECT_NE(err.find("checkpoint of step 2 not saved: cannot write " + disk.path().string() + "/.ckpt-000000000002"),
              std::string::npos)
        << err;
    EXPECT_NE(err.find("No space left on device"), std::string::npos) << err;
    auto files = ddp::list_checkpoints(disk.path().string());
    ASSERT_EQ(files.size(), 1u);
    EXPECT_EQ(files[0].step, 1);
    std::string problem;
    EXPECT_TRUE(ddp::read_checkpoint(files[0], &problem)) << problem;
    // No temporary file is left to fill the disk further.
    EXPECT_EQ(std::distance(fs::directory_iterator(disk.path()), fs::directory_iterator()), 1);
  });
}

TEST(Checkpointer, AReadOnlyFolderFailsSavesUntilItIsWritableAgain) {
  ddptest::Tmpfs disk(fresh_dir("ro"), 1024);
  if (!disk.ok()) GTEST_SKIP() << disk.why_not();
  run_ranks(1, [&](ddp::World& w) {
    Saver s(w, disk.path(), 2, /*every_steps=*/1);
    s.save(1);
    EXPECT_TRUE(s.ckpt.wait());
    ASSERT_TRUE(disk.set_read_only(true));
    testing::internal::CaptureStderr();
    s.save(2);
    EXPECT_FALSE(s.ckpt.wait());
    const std::string err = testing::internal::GetCapturedStderr();
    EXPECT_NE(err.find("Read-only file system"), std::string::npos) << err;
    EXPECT_TRUE(s.ckpt.due(3));  // the next step tries again
    ASSERT_TRUE(disk.set_read_only(false));
    s.save(3);
    const ddp::CheckpointReport r = s.ckpt.finish();
    EXPECT_EQ(r.written, 2);
    EXPECT_EQ(r.failed, 1);
    EXPECT_EQ(steps_in(disk.path()), std::vector<int64_t>({3, 1}));
  });
}

TEST(Checkpointer, DestroyedWithAnUnreportedFailureItSaysSo) {
  for (const bool call_finish : {false, true}) {
    SCOPED_TRACE(call_finish ? "with finish()" : "without finish()");
    ddptest::Tmpfs disk(fresh_dir("dtor"), 1024);
    if (!disk.ok()) GTEST_SKIP() << disk.why_not();
    run_ranks(1, [&](ddp::World& w) {
      testing::internal::CaptureStderr();
      {
        Saver s(w, disk.path(), 3);
        ASSERT_TRUE(disk.set_read_only(true));
        s.save(1);  // still in flight at the end of the scope
        if (call_finish) {
          EXPECT_EQ(s.ckpt.finish().failed, 1);
        }
      }
      const std::string err = testing::internal::GetCapturedStderr();
      EXPECT_EQ(err.find("finish() was never called") != std::string::npos, !call_finish) << err;
      disk.set_read_only(false);
    });
  }
}

TEST(Checkpointer, LeftoverTemporaryFilesAreCleared) {
  const fs::path dir = fresh_dir("tmp");
  fs::create_directories(dir);
  std::ofstream(dir / ".ckpt-000000000007-00000000.pt.tmp") << "half a write";
  run_ranks(1, [&](ddp::World& w) {
    ddp::CheckpointOptions o;
    o.dir = dir.string();
    ddp::Checkpointer ckpt(w.cpu(), o);
    EXPECT_FALSE(fs::exists(dir / ".ckpt-000000000007-00000000.pt.tmp"));
  });
  fs::remove_all(dir);
}

TEST(Checkpointer, DueEveryStepsOrSeconds) {
  run_ranks(1, [&](ddp::World& w) {
    ddp::CheckpointOptions o;
    o.dir = fresh_dir("due").string();
    o.every_steps = 5;
    ddp::Checkpointer by_steps(w.cpu(), o);
    EXPECT_FALSE(by_steps.due(4));
    EXPECT_TRUE(by_steps.due(5));
    o.every_steps = 0;
    o.every_seconds = 1e-9;  // always overdue
    ddp::Checkpointer by_time(w.cpu(), o);
    EXPECT_TRUE(by_time.due(1));
    fs::remove_all(o.dir);
  });
}

TEST(StopFlag, SignalsSetItAndRanksAgree) {
  ddp::StopFlag flag;
  EXPECT_THROW(ddp::StopFlag second, std::logic_error);
  run_ranks(2, [&](ddp::World& w) {
    EXPECT_FALSE(ddp::stop_agreed(flag, w.cpu()));
    w.barrier();
    if (w.rank() == 0) raise(SIGTERM);  // only one rank's process would see it in real life
    w.barrier();
    EXPECT_TRUE(ddp::stop_agreed(flag, w.cpu()));
  });
  EXPECT_EQ(flag.signal(), SIGTERM);
}

// ddprun writes in the worker's heartbeat slot why it stops it: a stop it
// decided itself (a peer failed, a new round) kills the worker as if no
// StopFlag lived; only a forwarded signal (the user's) sets the flag.
void stop_with_reason(ddprun::channel::StopReason reason) {
  const fs::path file = fs::temp_directory_path() / ("ddprun-stopflag-" + std::to_string(getpid()));
  std::vector<char> slots(ddprun::channel::heartbeat_file_bytes(2), 0);
  *ddprun::channel::stop_reason_word(slots.data(), 1) = reason;
  std::ofstream(file, std::ios::binary).write(slots.data(), static_cast<std::streamsize>(slots.size()));
  setenv("DDPRUN_HEARTBEAT_FILE", file.c_str(), 1);
  setenv("DDPRUN_HEARTBEAT_SLOT", "1", 1);
  ddp::StopFlag flag;
  fs::remove(file);  // the mapping stays
  raise(SIGTERM);
  std::exit(flag.signal() == SIGTERM ? 3 : 4);
}

TEST(StopFlag, ASignalDdprunSendsByItsOwnDecisionKillsTheWorker) {
  EXPECT_EXIT(stop_with_reason(ddprun::channel::kAgentDecided), testing::KilledBySignal(SIGTERM), "");
  EXPECT_EXIT(stop_with_reason(ddprun::channel::kForwarded), testing::ExitedWithCode(3), "");
}

}  // namespace
