// A worker's view of its job: who it is (LaunchInfo), the job's key-value
// store, and communicators for CPU (shared memory or Gloo) and CUDA (NCCL)
// tensors.
//
// No process-wide state: init() returns a World, and several Worlds can live
// in one process (tests run ranks as threads, each with its own).
//
//   std::shared_ptr<ddp::World> world = ddp::init();
//   world->all_reduce(t, ddp::ReduceOp::kSum);   // CPU tensors: shared memory or Gloo
//   world->barrier();
//   if (world->rank() == 0) world->store().set("done", "1");
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "ddp/communicator.h"
#include "ddp/launch_info.h"
#include "ddp/progress.h"
#include "ddp/replicas.h"
#include "ddp/state_fence.h"
#include "ddp/trace.h"
#include "rendezvous/store/store.h"

namespace ddp {

class Heartbeat;  // worker_lib's side of the agent's heartbeat slot (internal)

// Where a communicator's tensors live: shared memory or Gloo serve CPU tensors, NCCL CUDA ones.
enum class Device { kCPU, kCUDA };

struct InitOptions {
  // Timeout of every collective and of connecting to peers. Zero means
  // $DDPRUN_TIMEOUT_S seconds if set, else 300 s.
  std::chrono::milliseconds timeout{0};
  // Where LaunchInfo comes from (the process environment by default).
  EnvLookup env = process_env;
  // The job's store. Null: the rendezvous' gRPC store named by the
  // environment, or an in-memory one for a single process.
  std::shared_ptr<ddprun::Store> store;
  // Rank 0 prints its progress reports (report_progress) itself when no
  // agent shows them: on a terminal one line updated in place, otherwise a
  // line every this many seconds.
  double progress_print_seconds = 10;
};

using Collective = ddprun::channel::CollectiveKind;

// Stretches a program spends without collectives, announced to the agent
// with World::announce.
enum class Phase { kStartup = 1, kCheckpoint = 2, kEvaluation = 3, kOther = 4 };

// While it lives, the worker is in an announced phase (see World::announce).
class PhaseScope {
 public:
  PhaseScope(std::shared_ptr<Heartbeat> heartbeat, Phase phase);
  ~PhaseScope();
  PhaseScope(PhaseScope&& other) noexcept : heartbeat_(std::move(other.heartbeat_)) {}
  PhaseScope(const PhaseScope&) = delete;
  PhaseScope& operator=(const PhaseScope&) = delete;
  PhaseScope& operator=(PhaseScope&&) = delete;

 private:
  std::shared_ptr<Heartbeat> heartbeat_;
};
class ReceivePool;  // memory a replacement prepares for its heal (internal)

// The World's interface, as a training program and worker_lib's parts
// (DDP, the checkpointer, the Healer, the captured step) use it: who this
// worker is and the tools its parts share (tracer, progress, state fence,
// replica ledger, heartbeat) live here; the connections are the job's, and
// init() returns the World that connects them (worker_lib/src/launch/).
class World {
 public:
  virtual ~World();
  World(const World&) = delete;
  World& operator=(const World&) = delete;

  const LaunchInfo& info() const { return info_; }
  int rank() const { return info_.rank; }
  int size() const { return info_.world_size; }
  int local_rank() const { return info_.local_rank; }
  int local_size() const { return info_.local_world_size; }
  std::chrono::milliseconds timeout() const { return timeout_; }

  // The communicator for CPU tensors over all ranks, connected by init():
  // shared memory when every rank is on this node, Gloo when each node has
  // one rank, both (shared memory inside nodes, Gloo between them) else
  // (DDPRUN_CPU_COMM=auto|shm|gloo).
  virtual Communicator& cpu() = 0;
  // The NCCL communicator, connected on first use. Throws CollectiveError
  // where NCCL is not built in or no NCCL id was handed out.
  virtual Communicator& cuda() = 0;
  // cpu() or cuda(), by where the tensor lives.
  Communicator& for_tensor(const at::Tensor& t);

  // Collectives on the communicator that matches the tensor's device,
  // recorded as kCollective (DDP's own all-reduces go to the communicator
  // directly and are recorded as kAllReduce instead).
  void all_reduce(at::Tensor& t, ReduceOp op = ReduceOp::kSum) {
    TraceSpan span(*tracer_, TracePhase::kCollective, TraceTrack::kMain, int64_t(Collective::kAllReduce), t.nbytes());
    for_tensor(t).all_reduce(t, op);
  }
  void broadcast(at::Tensor& t, int root = 0) {
    TraceSpan span(*tracer_, TracePhase::kCollective, TraceTrack::kMain, int64_t(Collective::kBroadcast), t.nbytes());
    for_tensor(t).broadcast(t, root);
  }
  at::Tensor all_gather(const at::Tensor& t) {
    TraceSpan span(*tracer_, TracePhase::kCollective, TraceTrack::kMain, int64_t(Collective::kAllGather), t.nbytes());
    return for_tensor(t).all_gather(t);
  }
  void barrier() {
    TraceSpan span(*tracer_, TracePhase::kCollective, TraceTrack::kMain, int64_t(Collective::kBarrier));
    cpu().barrier();
  }

  // This worker's trace recorder (off unless DDPRUN_TRACE_FILE is set):
  // mark steps with tracer().step(n) and time phases with TraceSpan.
  Tracer& tracer() { return *tracer_; }

  // The training loop's progress, for the agent (heartbeat slot) and, on
  // rank 0 without an agent showing it, printed. Cheap: call it every step.
  void report_progress(const ProgressReport& r) { progress_->report(r); }
  ProgressReporter& progress() { return *progress_; }

  // Waits for background readers of the training state (a Checkpointer's
  // copy) before the state changes: see ddp/state_fence.h. DDP's backward
  // and the Healer call it; so does a loop that changes parameters itself.
  StateFence& state_fence() { return *state_fence_; }
  const std::shared_ptr<StateFence>& state_fence_handle() const { return state_fence_; }
  // What the ranks' comparisons of their replicas found (ddp/replicas.h):
  // a Healer records them, a Checkpointer made on this World listens.
  ReplicaLedger& replicas() { return *replicas_; }
  const std::shared_ptr<ReplicaLedger>& replicas_handle() const { return replicas_; }

  // Tells the agent this worker is alive (see --hang-timeout). Collectives
  // do it themselves; call it in long stretches without any.
  void heartbeat();
  // Announces a long stretch without collectives (an evaluation, writing a
  // checkpoint in the loop, a slow start-up) until the returned scope ends:
  // ddprun's learned hang timeout (--hang-timeout auto) neither fires on
  // that silence nor learns from it. An explicit --hang-timeout SECONDS
  // still counts it (beat with heartbeat() there). Scopes may nest.
  //   { auto eval = world->announce(ddp::Phase::kEvaluation); evaluate(); }
  [[nodiscard]] PhaseScope announce(Phase phase) { return PhaseScope(heartbeat_, phase); }
  // worker_lib's own parts (heals, checkpoints, communicators) reach the slot here.
  const std::shared_ptr<Heartbeat>& heartbeat_handle() const { return heartbeat_; }
  // worker_lib's heals: rank 0's Healer tells the job how many bytes of
  // state a replacement would make afresh (its optimizer's), and a
  // replacement's World prepares that memory while the program starts; its
  // Healer takes it (null when none was prepared). See heal/receive_pool.h.
  virtual void tell_receive_bytes(int64_t bytes) = 0;
  virtual std::shared_ptr<ReceivePool> take_receive_pool() = 0;

  // A store for the program's own keys, private to this job and round.
  virtual ddprun::Store& store() = 0;

  // Connects a communicator over a subset of the ranks: `ranks` lists their
  // global ranks (this rank among them) and fixes their order, so rank i of
  // the group is ranks[i]. Every member must call it with the same name,
  // ranks and device; the name keeps groups apart. CPU groups get their
  // communicator as cpu() does, by where their members are. Throws std::invalid_argument for bad
  // ranks, CollectiveError when peers fail.
  virtual std::unique_ptr<Communicator> connect_group(const std::string& name, const std::vector<int>& ranks,
                                                      Device device = Device::kCPU) = 0;

  // Checkpointless recovery (ddp::Healer). The heal generation this World's
  // communicators belong to (0: the job's start), and whether this process
  // joined the job as a replacement for a failed rank: its start-up
  // collectives (DDP's parameter broadcast, a Checkpointer's restore) are
  // then skipped, since the heal brings the state.
  virtual uint32_t generation() const = 0;
  bool replacement() const { return info_.heal_generation > 0; }
  // Closes cpu() and the NCCL communicator: peers blocked on this rank fail
  // now instead of at their timeout; collectives throw until reconnect().
  virtual void disconnect() = 0;
  // Collective over the ranks of `generation`: connects cpu() afresh under
  // that generation's store keys (closing it first if it is open); the NCCL
  // communicator connects again on first use, with a fresh id. Groups from
  // connect_group() are not reconnected. When the job shrank (a node was
  // lost and the others went on without it), rank() and size() change here
  // to what the agent placed this worker at. Throws CollectiveError.
  virtual void reconnect(uint32_t generation) = 0;

  // Numbers the meshes built on this World (0, 1, ...): every rank builds
  // them in the same order, so the n-th mesh names its groups alike.
  int next_mesh_id() { return mesh_count_++; }

  // Whether this rank is inside a step of a ddp::Healer (it says so). A
  // generation that only grows the world (a node joined the running round:
  // nobody was lost, so no collective waits for a dead peer) named while
  // the rank is outside a step, in an evaluation say, does not abort the
  // connection: the rank finishes what it does with the old world and
  // heals at its next step (Healer::step), where a heal can put things
  // right. Any other generation aborts the connection at once.
  virtual void set_in_step(bool in_step) = 0;

 protected:
  // This worker's identity and its shared tools: its heartbeat slot (from
  // info), tracer and progress reporter. The connections are the derived
  // class's to make.
  World(LaunchInfo info, std::chrono::milliseconds timeout, double progress_print_seconds);
  // Where the agent placed this worker after the world shrank or grew.
  void place(int rank, int world_size, int node_rank, int num_nodes);
  // Past its last step: whatever the rest of its exit takes is no hang.
  // The derived class's destructor calls it first (once is enough).
  void finish();

 private:
  LaunchInfo info_;
  std::chrono::milliseconds timeout_;
  std::shared_ptr<Heartbeat> heartbeat_;
  std::unique_ptr<Tracer> tracer_;
  std::unique_ptr<ProgressReporter> progress_;
  std::shared_ptr<StateFence> state_fence_ = std::make_shared<StateFence>();
  std::shared_ptr<ReplicaLedger> replicas_ = std::make_shared<ReplicaLedger>();
  std::atomic<int> mesh_count_{0};
};

// Waits for its assignment if it is a standby worker (--standby), reads the
// launch environment, connects to the job's store and its peers,
// registers the World as this thread's default for get(), makes an uncaught
// exception land in the launcher's failure summary, and line-buffers stdout
// (so a worker that dies loses none of the lines it printed).
// Throws ConfigError, ddprun::StoreError or CollectiveError.
std::shared_ptr<World> init(InitOptions options = {});

}  // namespace ddp
