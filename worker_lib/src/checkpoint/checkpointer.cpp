#include "ddp/checkpointer.h"

#include <sched.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <stdexcept>

#include "checkpoint/staged_state.h"
#include "base/serial_worker.h"
#include "ddp/atomic_file.h"

namespace ddp {
namespace {

namespace fs = std::filesystem;

constexpr const char* kTempPrefix = ".ckpt-";
constexpr const char* kTempSuffix = ".tmp";

using Clock = std::chrono::steady_clock;

double seconds_since(Clock::time_point t) { return std::chrono::duration<double>(Clock::now() - t).count(); }

// SCHED_BATCH for the calling thread: woken by save(), it does not preempt
// the training thread there (which would count as a stall), and takes its
// turn as the scheduler sees fit. Best effort.
void batch_scheduling() {
  sched_param none{};
  ::sched_setscheduler(0, SCHED_BATCH, &none);  // 0: this thread
}

}  // namespace

Checkpointer::Checkpointer(Communicator& comm, CheckpointOptions options)
    : comm_(comm),
      options_(std::move(options)),
      tracer_(options_.tracer ? options_.tracer : &no_tracer_),
      last_save_(std::chrono::steady_clock::now()) {
  if (options_.dir.empty()) throw std::invalid_argument("ddp::Checkpointer: no folder given");
  if (options_.keep < 1) throw std::invalid_argument("ddp::Checkpointer: keep must be at least 1");
  copy_in_background_ = options_.copy == CheckpointOptions::Copy::kBackground;
  if (comm_.rank() != 0) return;
  std::error_code ec;
  fs::create_directories(options_.dir, ec);
  if (ec) {
    throw std::runtime_error("ddp: cannot create checkpoint folder " + options_.dir + ": " + ec.message());
  }
  // A write that was killed leaves its temporary file behind.
  for (const auto& e : fs::directory_iterator(options_.dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(kTempPrefix, 0) == 0 && name.size() > 4 &&
        name.compare(name.size() - 4, 4, kTempSuffix) == 0) {
      fs::remove(e.path(), ec);
    }
  }
  start_threads();
}

// Rank 0's threads: made with the Checkpointer, or by the first save of a
// rank that became rank 0 later (the job shrank without the old one).
void Checkpointer::start_threads() {
  if (writer_) return;
  std::error_code ec;
  fs::create_directories(options_.dir, ec);  // made already on the first rank 0; an error shows at the write
  writer_ = std::make_unique<SerialWorker>();
  // Encoding, checksumming and writing the file compete with training for
  // the CPU; the writer yields to it (nice 10, this thread only).
  writer_->submit([] {
    batch_scheduling();
    ::setpriority(PRIO_PROCESS, static_cast<id_t>(::syscall(SYS_gettid)), 10);
  });
  copier_ = std::make_unique<SerialWorker>();
  copier_->submit(batch_scheduling);
}

namespace {

CheckpointOptions with_world(CheckpointOptions o, World& world) {
  if (!o.tracer) o.tracer = &world.tracer();
  if (!o.progress) o.progress = &world.progress();
  return o;
}

}  // namespace

Checkpointer::Checkpointer(World& world, CheckpointOptions options)
    : Checkpointer(world.cpu(), with_world(std::move(options), world)) {
  joins_heal_ = world.replacement();
  replicas_ = world.replicas_handle();
  replicas_id_ = replicas_->listen([this](int64_t agreed_step, int64_t step, const std::vector<int>& ranks) {
    on_replicas_apart(agreed_step, step, ranks);
  });
  if (options_.copy == CheckpointOptions::Copy::kInSave) return;
  // The World's DDP and Healer wait for this Checkpointer's copies (on
  // every rank: a heal may make another rank rank 0).
  copy_in_background_ = true;
  fence_ = world.state_fence_handle();
  fence_id_ = fence_->add([this] { fence(); });
}

Checkpointer::~Checkpointer() {
  if (fence_) fence_->remove(fence_id_);
  if (replicas_) replicas_->forget(replicas_id_);
  if (in_flight_.valid()) in_flight_.wait();
  std::lock_guard lock(path_mu_);
  if (!reported_) {
    std::fprintf(stderr,
                 "ddp: error: %lld of %lld checkpoint saves failed and finish() was never called to report "
                 "it; the newest failure: %s\n",
                 static_cast<long long>(report_.failed), static_cast<long long>(report_.failed + report_.written),
                 report_.last_error.c_str());
  }
}

std::optional<TrainingState> Checkpointer::restore() {
  // A replacement in a heal: its peers restored long ago and run no
  // matching broadcast; the heal brings a state newer than any file.
  if (joins_heal_) return std::nullopt;
  TraceSpan span(*tracer_, TracePhase::kRestore);
  std::optional<TrainingState> state = restore_broadcast();
  if (state && options_.progress) options_.progress->restored(state->step);
  return state;
}

std::optional<TrainingState> Checkpointer::restore_broadcast() {
  std::vector<char> bytes;
  std::optional<TrainingState> state;
  if (comm_.rank() == 0) {
    for (const auto& f : list_checkpoints(options_.dir)) {
      std::string problem;
      auto read = read_checkpoint(f, &problem);
      if (read) {
        try {
          state = decode_state(*read);
          bytes = std::move(*read);
          std::lock_guard lock(path_mu_);
          last_path_ = f.path;
          checked_[f.path] = true;
          break;
        } catch (const std::exception& e) {
          problem = e.what();
        }
      }
      // Set aside, it no longer counts as the newest checkpoint nor toward `keep`.
      std::string why;
      const std::string moved = set_aside(f, &why);
      std::fprintf(stderr, "ddp: warning: skipping checkpoint %s: %s%s%s; trying an older one\n", f.path.c_str(),
                   problem.c_str(), moved.empty() ? "" : "; moved it to ", moved.c_str());
      if (!why.empty()) std::fprintf(stderr, "ddp: warning: %s\n", why.c_str());
      if (moved.empty()) {
        std::lock_guard lock(path_mu_);
        checked_[f.path] = false;  // still listed: never counted, never warned about again
      }
    }
  }
  // Rank 0's choice travels to everyone: the size first (0: none), then the bytes.
  at::Tensor size = at::tensor({static_cast<int64_t>(bytes.size())}, at::kLong);
  comm_.broadcast(size, 0);
  const int64_t n = size.item<int64_t>();
  if (n == 0) return std::nullopt;
  at::Tensor buffer = at::empty({n}, at::kByte);
  if (comm_.rank() == 0) std::memcpy(buffer.data_ptr(), bytes.data(), bytes.size());
  comm_.broadcast(buffer, 0);
  if (comm_.rank() == 0) return state;
  const auto* p = static_cast<const char*>(buffer.data_ptr());
  return decode_state(std::vector<char>(p, p + n));
}

std::string Checkpointer::last_path() const {
  std::lock_guard lock(path_mu_);
  return last_path_;
}

bool Checkpointer::due(int64_t step) const {
  if (comm_.rank() != 0 || step == last_step_) return false;
  if (options_.every_steps > 0 && step % options_.every_steps == 0) return true;
  if (options_.every_seconds > 0) {
    const double since = std::chrono::duration<double>(std::chrono::steady_clock::now() - last_save_).count();
    if (since >= options_.every_seconds) return true;
  }
  return false;
}

void Checkpointer::submit(int64_t step, std::function<void()> task) {
  last_save_ = Clock::now();
  last_step_ = step;
  if (replicas_) {
    std::lock_guard lock(path_mu_);
    saved_at_agreement_[step] = replicas_->agreements();
  }
  // Counted now: the write may fail before wait() is called.
  failed_before_in_flight_ = report().failed;
  in_flight_ = writer_->submit([this, step, task = std::move(task)] {
    try {
      task();
    } catch (const std::exception& e) {
      failed(step, e.what());
    }
  });
}

void Checkpointer::save(TrainingState state) {
  if (comm_.rank() != 0) return;
  start_threads();
  const auto begin = Clock::now();
  wait();  // at most one write in flight
  auto shared = std::make_shared<TrainingState>(std::move(state));
  submit(shared->step, [this, shared] {
    write(*shared);
    recycled_ = shared;  // read by save() only after wait(): no race
  });
  std::lock_guard lock(path_mu_);
  report_.stall_seconds += seconds_since(begin);
}

void Checkpointer::save(const torch::nn::Module& model, torch::optim::Optimizer& optimizer, int64_t step,
                        int64_t epoch, int64_t sampler_position) {
  if (comm_.rank() != 0) return;
  start_threads();
  const auto begin = Clock::now();
  wait();  // the previous write is done: its buffers are free
  std::shared_ptr<TrainingState> reuse = std::move(recycled_);
  // Now, on this thread: what forward changes; the rest only referred to.
  auto staged = std::make_shared<StagedState>(
      refer_to_state(model, optimizer, step, epoch, sampler_position, reuse.get()));
  // The copy, on a thread of normal priority: the next optimizer step
  // waits for it.
  auto copy = [this, staged, reuse, step] {
    const auto copy_begin = Clock::now();
    const int64_t copy_begin_ns = tracer_->recording() ? Tracer::now_ns() : 0;
    stage_state(*staged, reuse.get());
    if (copy_begin_ns) {
      tracer_->record(TracePhase::kCheckpointCopy, TraceTrack::kCheckpoint, copy_begin_ns, Tracer::now_ns(), step);
    }
    std::lock_guard lock(path_mu_);
    report_.copy_seconds += seconds_since(copy_begin);
  };
  std::shared_future<void> copied = copier_->submit(copy).share();
  {
    std::lock_guard lock(copy_mu_);
    copied_ = copied;
  }
  // The write, on the low-priority writer: nothing waits for it but the
  // next save. A failed copy (no memory) is this save's failure.
  submit(step, [this, staged, copied] {
    copied.get();
    write(staged->state);
    recycled_ = std::shared_ptr<TrainingState>(staged, &staged->state);  // read by save() only after wait()
  });
  if (!copy_in_background_) wait_for_copy();
  std::lock_guard lock(path_mu_);
  report_.stall_seconds += seconds_since(begin);
}

bool Checkpointer::wait_for_copy() {
  std::shared_future<void> copied;
  {
    std::lock_guard lock(copy_mu_);
    copied = copied_;
  }
  if (!copied.valid() || copied.wait_for(std::chrono::seconds(0)) == std::future_status::ready) return false;
  TraceSpan span(*tracer_, TracePhase::kCheckpointCopy);
  copied.wait();
  return true;
}

void Checkpointer::fence() {
  const auto begin = Clock::now();
  if (!wait_for_copy()) return;
  std::lock_guard lock(path_mu_);
  report_.stall_seconds += seconds_since(begin);
}

bool Checkpointer::wait() {
  if (!in_flight_.valid()) return true;
  auto f = std::move(in_flight_);
  f.get();  // the task catches its own failures
  return report().failed == failed_before_in_flight_;
}

CheckpointReport Checkpointer::finish() {
  wait();
  std::lock_guard lock(path_mu_);
  reported_ = true;
  return report_;
}

CheckpointReport Checkpointer::report() const {
  std::lock_guard lock(path_mu_);
  return report_;
}

void Checkpointer::failed(int64_t step, const std::string& why) {
  const std::string kept = last_path();
  std::fprintf(stderr,
               "ddp: warning: checkpoint of step %lld not saved: %s; training goes on, the older checkpoints "
               "stay (newest: %s), and the next due step tries again\n",
               static_cast<long long>(step), why.c_str(), kept.empty() ? "none" : kept.c_str());
  std::lock_guard lock(path_mu_);
  ++report_.failed;
  report_.last_error = why;
  reported_ = false;
}

// Encode, checksum, write atomically, and drop checkpoints beyond the newest
// `keep`.
void Checkpointer::write(const TrainingState& state) {
  const bool traced = tracer_->recording();
  const int64_t begin = traced ? Tracer::now_ns() : 0;
  // Streamed to a temporary file with its checksum on the way (no copy of
  // the whole file in memory), then renamed to the name the checksum gives.
  char step_text[32];
  std::snprintf(step_text, sizeof(step_text), "%012lld", static_cast<long long>(state.step));
  AtomicFileWriter out(options_.dir + "/" + kTempPrefix + step_text + ".pt" + kTempSuffix);
  uint32_t crc = 0;
  encode_state_to(state, [&](const void* p, size_t n) {
    crc = checkpoint_crc(crc, p, n);
    out.write(p, n);
  });
  const std::string final_path = options_.dir + "/" + checkpoint_file_name(state.step, crc);
  out.commit(final_path);
  {
    std::lock_guard lock(path_mu_);
    last_path_ = final_path;
    checked_[final_path] = true;
    ++report_.written;
  }
  if (traced) {
    tracer_->record(TracePhase::kCheckpointWrite, TraceTrack::kCheckpoint, begin, Tracer::now_ns(), state.step);
  }
  if (options_.progress) options_.progress->saved(state.step);
  prune(state.step);
}

// Whether f is a checkpoint file with the right checksum: read once, then
// remembered. A corrupt one is set aside with a warning.
bool Checkpointer::known_sound(const CheckpointFile& f) {
  {
    std::lock_guard lock(path_mu_);
    if (auto it = checked_.find(f.path); it != checked_.end()) return it->second;
  }
  std::string problem;
  const bool sound = read_checkpoint(f, &problem).has_value();
  std::string why;
  const std::string moved = sound ? "" : set_aside(f, &why);
  {
    std::lock_guard lock(path_mu_);
    if (moved.empty()) checked_[f.path] = sound;  // a moved file is gone from the listing
  }
  if (sound) return true;
  std::fprintf(stderr, "ddp: warning: checkpoint %s %s: %s; it does not count toward keep=%d%s%s\n",
               f.path.c_str(), moved.empty() ? "is ignored" : "is set aside", problem.c_str(), options_.keep,
               moved.empty() ? "" : ", moved to ", moved.c_str());
  if (!why.empty()) std::fprintf(stderr, "ddp: warning: %s\n", why.c_str());
  return false;
}

// Keeps the newest `keep` sound checkpoints at or below the step just
// written, and the newest one written when the replicas last agreed (a
// restart's way back when they are found apart). Entries above it (another
// writer's, or unreadable ones the last restore did not reach) are left
// alone: deleting them is not ours to decide, and they must not push our
// own new files out.
void Checkpointer::prune(int64_t newest_step) {
  bool agreed_kept = false;
  int kept = 0;
  for (const auto& f : list_checkpoints(options_.dir)) {
    if (f.step > newest_step || !known_sound(f)) continue;
    const bool agreed = replicas_ && replicas_agreed_on(f.step);
    if (kept < options_.keep) {
      ++kept;
      agreed_kept = agreed_kept || agreed;
      continue;
    }
    if (!agreed_kept && agreed) {
      agreed_kept = true;
      continue;
    }
    std::error_code ec;
    fs::remove(f.path, ec);
    std::lock_guard lock(path_mu_);
    checked_.erase(f.path);
  }
}

// The checkpoints hold rank 0's state: when it was apart (or nobody can
// say), those written since the replicas last agreed may hold a state apart,
// and a restart must not resume from them.
// Whether the checkpoint of `step` holds a state the replicas agreed on: one
// this process saved, when a comparison agreed after its save; another's
// (from before this process: the one it resumed from), unless it is newer
// than the step they last agreed at.
bool Checkpointer::replicas_agreed_on(int64_t step) const {
  std::lock_guard lock(path_mu_);
  auto it = saved_at_agreement_.find(step);
  if (it != saved_at_agreement_.end()) return it->second < replicas_->agreements();
  const int64_t agreed = replicas_->agreed_step();
  return agreed < 0 || step <= agreed;
}

void Checkpointer::on_replicas_apart(int64_t agreed_step, int64_t step, const std::vector<int>& ranks) {
  if (comm_.rank() != 0) return;
  if (!ranks.empty() && std::find(ranks.begin(), ranks.end(), 0) == ranks.end()) return;
  wait();  // a write in flight lands first, and is judged with the rest
  for (const auto& f : list_checkpoints(options_.dir)) {
    if (replicas_agreed_on(f.step)) continue;
    std::string why;
    const std::string moved = set_aside(f, &why, ".unagreed");
    if (!moved.empty()) {
      std::lock_guard lock(path_mu_);
      checked_.erase(f.path);
    }
    const std::string last = agreed_step >= 0 ? " (step " + std::to_string(agreed_step) + ")" : "";
    const std::string at = step >= 0 ? " at step " + std::to_string(step) : "";
    std::fprintf(stderr,
                 "ddp: warning: checkpoint %s %s: written at step %lld, after the replicas last agreed%s, and "
                 "they were found apart%s%s%s\n",
                 f.path.c_str(), moved.empty() ? "cannot be set aside" : "is set aside", static_cast<long long>(f.step),
                 last.c_str(), at.c_str(), moved.empty() ? "; " : "; moved to ", moved.empty() ? why.c_str() : moved.c_str());
  }
}

}  // namespace ddp
