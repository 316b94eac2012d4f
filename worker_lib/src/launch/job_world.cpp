// ddp::init() and the World it makes (job_world.h).
#include "launch/job_world.h"

#include <algorithm>
#include <csignal>
#include <cstdio>
#include <cstdlib>

#include "channel/env_names.h"
#include "comm/connect_vote.h"
#include "comm/cpu_comm.h"
#include "comm/gloo_communicator.h"
#include "comm/nccl_communicator.h"
#include "comm/superseded_connect.h"
#include "comm/swappable_communicator.h"
#include "ddp/error_file.h"
#include "ddp/get.h"
#include "heal/heal_watcher.h"
#include "heal/receive_pool.h"
#include "launch/env_store.h"
#include "base/heartbeat.h"
#include "launch/stack_dumper.h"
#include "channel/stack_dump.h"
#include "base/local_addr.h"
#include "launch/standby.h"
#include "rendezvous/client/client.h"
#include "rendezvous/store/memory_store.h"

namespace ddp {
namespace {

// The round's key under which rank 0's Healer says how much memory a
// replacement should prepare (receive_pool.h).
constexpr const char* kReceiveBytesKey = "healer/receive_bytes";

std::chrono::milliseconds default_timeout(const EnvLookup& env) {
  if (auto v = env(ddprun::channel::kTimeoutS)) {
    char* end = nullptr;
    double s = std::strtod(v->c_str(), &end);
    if (v->empty() || *end != '\0' || !(s > 0)) {
      throw ConfigError("ddp: DDPRUN_TIMEOUT_S='" + *v + "' is not a positive number of seconds");
    }
    return std::chrono::milliseconds(static_cast<int64_t>(s * 1000));
  }
  return std::chrono::minutes(5);
}

}  // namespace

namespace {

// NCCL among `size` members (this one `me`, on GPU LOCAL_RANK): with the
// given id, or one member 0 makes and shares through `ids`.
std::unique_ptr<Communicator> connect_nccl_over(ddprun::Store& ids, int me, int size, std::string id,
                                                const LaunchInfo& info, std::chrono::milliseconds timeout,
                                                std::shared_ptr<Heartbeat> heartbeat) {
  NcclOptions o;
  o.unique_id = std::move(id);
  if (o.unique_id.empty()) {
    if (me == 0) {
      o.unique_id = nccl_unique_id();
      ids.set("nccl_id", o.unique_id);
    } else {
      o.unique_id = ids.get("nccl_id", timeout);
    }
  }
  o.rank = me;
  o.size = size;
  o.device = info.local_rank;
  o.timeout = timeout;
  o.heartbeat = std::move(heartbeat);
  return make_nccl_communicator(o);
}

}  // namespace

JobWorld::JobWorld(LaunchInfo launch_info, std::shared_ptr<ddprun::Store> job_store,
                   std::chrono::milliseconds collective_timeout, double progress_print_seconds)
    : World(std::move(launch_info), collective_timeout, progress_print_seconds), store_(std::move(job_store)) {
  // Every round gets fresh keys: a restarted group never reads a dead one's.
  round_store_ = std::make_shared<ddprun::PrefixStore>(ddprun::round_key_prefix(info().round), *store_);
  group_store_ = std::make_unique<ddprun::PrefixStore>("group", *round_store_);
  user_store_ = std::make_unique<ddprun::PrefixStore>("user", *round_store_);
  // A replacement connects straight into the generation it was started
  // for, or a newer one if a peer failed while it connected. Each try takes
  // the placement the agent wrote for it: a node lost meanwhile shrinks the
  // world, and the next generation connects without that node's ranks.
  uint32_t generation = info().heal_generation;
  if (replacement() && info().heals) {
    // The memory the heal will bring state into is made while this
    // process connects and the program builds its model (receive_pool.h).
    try {
      receive_pool_ = ReceivePool::start(static_cast<size_t>(std::max<int64_t>(0, round_store_->add(kReceiveBytesKey, 0))));
    } catch (const ddprun::StoreError&) {
      // No hint: the heal makes its memory as it goes.
    }
  }
  // The others wait for a replacement until its Healer has the state: it
  // beats meanwhile (a stopped one falls silent, see --hang-timeout).
  if (replacement() && info().heals) heartbeat_handle()->set_joining(true);
  while (true) {
    try {
      cpu_ = std::make_unique<SwappableCommunicator>(connect_generation(generation), generation);
      break;
    } catch (const GenerationSuperseded&) {
      // The agent names the newer generation (its placement may come first).
      generation = heartbeat_handle()->wait_heal_generation(generation, timeout());
    }
  }
  cpu_->record_into(heartbeat_handle()->flight_ring(), 0);
  if (heartbeat_handle()->has_slot()) {
    // A hang shows where this rank stood (ddprun asks for the stacks).
    const std::string err =
        install_stack_dumper(ddprun::channel::stack_file_path(info().heartbeat_file, info().heartbeat_slot));
    if (!err.empty()) std::fprintf(stderr, "ddp: warning: %s; a hang will show no stack of this rank\n", err.c_str());
  }
  if (info().heals && heartbeat_handle()->has_slot()) {
    // A collective blocked on a peer that will not answer (cut off, its
    // node gone) fails as soon as the agent names the next generation.
    heal_watcher_ = std::make_unique<HealWatcher>(heartbeat_handle(), generation_, [this](uint32_t g) {
      // A grow (this rank keeps its place, the world is bigger) outside a
      // step waits for the next step; see set_in_step.
      const auto p = heartbeat_handle()->placement();
      const bool grows = p && p->generation == g && p->world_size > info().world_size && p->rank == info().rank;
      if (grows && !in_step_.load()) return;
      const std::string why =
          "ddp: the group heals in generation " + std::to_string(g) + " (a peer failed, or the world changed)";
      cpu_->abort_older_than(g, why);
      // NCCL too: a collective waiting on a dead peer over NVLink or shared
      // memory may never see it go. Not while cuda() connects (it holds the
      // lock): that connection fails by itself or belongs to the new
      // generation, and the step's CPU collectives fail anyway.
      std::unique_lock lock(cuda_mu_, std::try_to_lock);
      if (lock.owns_lock() && cuda_) cuda_->abort_older_than(g, why);
    });
  }
}

// Finished before its connections close: whatever closing them takes is no hang.
JobWorld::~JobWorld() { finish(); }

Communicator& JobWorld::cpu() { return *cpu_; }

void JobWorld::set_in_step(bool in_step) {
  in_step_.store(in_step);
  heartbeat_handle()->set_in_step(in_step);  // the agent replaces a straggler only inside steps
}

// The world's CPU communicator of `generation`: its keys are the round's
// "gloo/" at the start and "heal<g>/gloo/" after heal g, so that no rank
// ever meets a key a connection of another generation left.
std::unique_ptr<Communicator> JobWorld::connect_generation(uint32_t generation) {
  generation_ = generation;
  // A replacement in a round that shrank runs where its predecessor did; a
  // survivor takes the ranks the agent placed it at. A placement of a newer
  // generation means this one's world is gone (a grow right after a
  // shrink): its ranks are unknown now, so go on to the newer one.
  if (const auto p = heartbeat_handle()->placement()) {
    if (p->generation > generation) {
      throw GenerationSuperseded("ddp: the world changed again (generation " + std::to_string(p->generation) +
                                 ") before generation " + std::to_string(generation) + " connected");
    }
    place(p->rank, p->world_size, p->node_rank, p->num_nodes);
  }
  generation_store_.reset();
  if (generation > 0) {
    generation_store_ = std::make_shared<ddprun::PrefixStore>("heal" + std::to_string(generation), *round_store_);
  }
  const std::shared_ptr<ddprun::Store> keys = generation_keys();
  // The connect owns what it uses: with heals it may outlive this call,
  // even this World (superseded_connect.h); `keys` leans on the round's
  // store, and that on the job's.
  auto connect = [store = store_, round = round_store_, keys, info = std::make_shared<const LaunchInfo>(info()),
                  timeout = timeout(), heartbeat = heartbeat_handle()] {
    ddprun::PrefixStore gloo("gloo", *keys);
    return connect_cpu_communicator(gloo, info->rank, info->world_size, "the world", {info.get(), timeout, heartbeat});
  };
  if (!info().heals) return connect();
  // All the generation's ranks connect, or none does: one that gave up
  // before connecting would leave the others in Gloo's set-up until the
  // timeout (connect_vote.h). Past a "connect", a newer generation leaves
  // this connect behind, still serving its peers (superseded_connect.h).
  const auto superseded = [hb = heartbeat_handle(), generation] { return hb->heal_generation() > generation; };
  if (vote_to_connect(*keys, info().world_size, superseded, timeout()) == ConnectVote::kGiveUp) {
    throw GenerationSuperseded("ddp: a newer heal generation began while connecting (a peer failed meanwhile)");
  }
  return connect_unless_superseded<Communicator>(connect, superseded, Heartbeat::kWaitPulse);
}

std::shared_ptr<ddprun::Store> JobWorld::generation_keys() const {
  return generation_store_ ? generation_store_ : round_store_;
}

void JobWorld::tell_receive_bytes(int64_t bytes) { round_store_->set(kReceiveBytesKey, std::to_string(bytes)); }

std::shared_ptr<ReceivePool> JobWorld::take_receive_pool() { return std::move(receive_pool_); }

void JobWorld::disconnect() {
  cpu_->close();
  std::lock_guard lock(cuda_mu_);
  // NCCL: destroyed (aborted) here; its next use connects again, with a
  // fresh id in the generation's store (the Reducer keeps its reference).
  if (cuda_) cuda_->close();
}

void JobWorld::reconnect(uint32_t generation) {
  disconnect();  // first: peers blocked on this rank fail now, not at their timeout
  cpu_->replace(connect_generation(generation), generation);
}

Communicator& JobWorld::cuda() {
  std::lock_guard lock(cuda_mu_);
  if (!cuda_) {
    cuda_ = std::make_unique<SwappableCommunicator>(connect_nccl(), generation_, [this] { return connect_nccl(); },
                                                    [this] { return generation_; });
    cuda_->record_into(heartbeat_handle()->flight_ring(), 1);
  }
  return *cuda_;
}

// The world's NCCL communicator in this generation. The launcher makes no
// id (see launcher/plan.cpp; nor does torchrun): rank 0 makes it here, when
// a CUDA collective first needs it, and shares it through the round's (or
// the heal generation's) store. NCCL's bootstrap root then lives in rank 0,
// a member of the group that dies with it. A round's id handed out by a
// rendezvous serves its first generation only.
std::unique_ptr<Communicator> JobWorld::connect_nccl() {
  return connect_nccl_over(*generation_keys(), info().rank, info().world_size, generation_ == 0 ? info().nccl_id : "", info(),
                           timeout(), heartbeat_handle());
}

std::unique_ptr<Communicator> JobWorld::connect_group(const std::string& name,
                                                  const std::vector<int>& ranks, Device device) {
  int me = -1;
  for (size_t i = 0; i < ranks.size(); ++i) {
    if (ranks[i] < 0 || ranks[i] >= size()) {
      throw std::invalid_argument("ddp: group '" + name + "' names rank " + std::to_string(ranks[i]) +
                                  ", outside the world of " + std::to_string(size()));
    }
    for (size_t j = 0; j < i; ++j) {
      if (ranks[j] == ranks[i]) {
        throw std::invalid_argument("ddp: group '" + name + "' names rank " +
                                    std::to_string(ranks[i]) + " twice");
      }
    }
    if (ranks[i] == rank()) me = static_cast<int>(i);
  }
  if (me < 0) {
    throw std::invalid_argument("ddp: rank " + std::to_string(rank()) + " is not in group '" + name +
                                "' it asked to join");
  }
  ddprun::PrefixStore store(name, *group_store_);
  if (device == Device::kCPU) {
    return connect_cpu_communicator(store, me, static_cast<int>(ranks.size()), "group '" + name + "'",
                                    {&info(), timeout(), heartbeat_handle()});
  }
  // NCCL: the group's first rank makes the id and shares it through the store.
  return connect_nccl_over(store, me, static_cast<int>(ranks.size()), "", info(), timeout(), heartbeat_handle());
}

std::shared_ptr<World> init(InitOptions options) {
  const int64_t init_begin = Tracer::now_ns();  // recorded as kInit once the World has its tracer
  install_error_file_handler();
  // Output reaches ddprun line by line, as Python's does under ddprun's -u:
  // stdout to a pipe is block-buffered, and a worker that dies (a peer's
  // failure, SIGKILL) would lose the lines it printed last.
  std::fflush(stdout);
  std::setvbuf(stdout, nullptr, _IOLBF, BUFSIZ);
  // A peer that dies must be an error this rank can heal from, not a signal
  // that kills it too: Gloo's writes to a dead peer's socket do not ask for
  // MSG_NOSIGNAL, and SIGPIPE's default ends the process (seen: a rank killed
  // by SIGPIPE as another node died, which cost a replacement). Python
  // ignores SIGPIPE from its start; a program that chose a handler keeps it.
  struct sigaction pipe_action {};
  if (sigaction(SIGPIPE, nullptr, &pipe_action) == 0 && pipe_action.sa_handler == SIG_DFL) {
    signal(SIGPIPE, SIG_IGN);
  }
  // A standby worker learns here who it is (its variables arrive now).
  wait_if_standby();
  LaunchInfo info = read_launch_info(options.env);
  check_local_addr(info.local_addr, ddprun::channel::kLocalAddr);
  const auto timeout =
      options.timeout.count() > 0 ? options.timeout : default_timeout(options.env);
  std::shared_ptr<ddprun::Store> store = options.store;
  if (!store) {
    if (info.from_ddprun()) {
      // Scoped to its round: once the round is over the service refuses it.
      const ddprun::RendezvousAuth auth{
          info.rdzv_token, {info.rdzv_tls_cert, info.rdzv_tls_key, info.rdzv_tls_ca}};
      try {
        store = std::make_shared<ddprun::GrpcStore>(info.rdzv_address, info.job_id, info.round,
                                                    auth);
      } catch (const ddprun::AuthConfigError& e) {
        throw ConfigError(std::string("ddp: DDPRUN_RDZV_TLS_*: ") + e.what());
      }
    } else if (info.world_size == 1) {
      store = std::make_shared<ddprun::MemoryStore>();
    } else {
      // torchrun, Slurm, by hand: PyTorch's TCPStore at MASTER_ADDR:MASTER_PORT.
      store = connect_env_store(info, timeout, options.env);
      check_local_addr(info.local_addr, ddprun::channel::kLocalAddr);
    }
  }
  auto world = std::make_shared<JobWorld>(std::move(info), std::move(store), timeout, options.progress_print_seconds);
  world->tracer().record(TracePhase::kInit, TraceTrack::kMain, init_begin, Tracer::now_ns(), -1);
  register_world(world);
  return world;
}

}  // namespace ddp
