// The World's own part (ddp/world.h): this worker's identity and the tools
// its parts share. Connecting to the job is launch/'s (JobWorld).
#include "ddp/world.h"

#include "base/heartbeat.h"
#include "channel/heartbeat_layout.h"

namespace ddp {
namespace {

TraceOptions trace_options(const LaunchInfo& info) {
  TraceOptions o;
  o.file = info.trace_file;
  o.first_step = info.trace_first_step;
  o.end_step = info.trace_end_step;
  o.capacity = info.trace_capacity;
  o.rank = info.rank;
  o.local_rank = info.local_rank;
  o.world_size = info.world_size;
  o.attempt = info.restart_count;
  return o;
}

}  // namespace

World::World(LaunchInfo info, std::chrono::milliseconds timeout, double progress_print_seconds)
    : info_(std::move(info)),
      timeout_(timeout),
      heartbeat_(std::make_shared<Heartbeat>(info_.heartbeat_file, info_.heartbeat_slot)),
      tracer_(std::make_unique<Tracer>(trace_options(info_))) {
  ProgressPrintOptions print;
  print.enabled = info_.rank == 0 && !info_.progress_by_agent;
  print.interval_seconds = progress_print_seconds;
  progress_ = std::make_unique<ProgressReporter>(heartbeat_->progress_block(), print);
}

World::~World() { finish(); }

void World::finish() {
  if (heartbeat_) heartbeat_->finish();
}

void World::place(int rank, int world_size, int node_rank, int num_nodes) {
  info_.rank = rank;
  info_.world_size = world_size;
  info_.group_rank = node_rank;
  info_.group_world_size = num_nodes;
}

Communicator& World::for_tensor(const at::Tensor& t) {
  return t.defined() && t.device().is_cuda() ? cuda() : cpu();
}

void World::heartbeat() { heartbeat_->beat(); }

static_assert(static_cast<uint32_t>(Phase::kStartup) == static_cast<uint32_t>(ddprun::channel::Phase::kStartup) &&
              static_cast<uint32_t>(Phase::kOther) == static_cast<uint32_t>(ddprun::channel::Phase::kOther));

PhaseScope::PhaseScope(std::shared_ptr<Heartbeat> heartbeat, Phase phase) : heartbeat_(std::move(heartbeat)) {
  if (heartbeat_) heartbeat_->enter_phase(static_cast<uint32_t>(phase));
}

PhaseScope::~PhaseScope() {
  if (heartbeat_) heartbeat_->leave_phase();
}

}  // namespace ddp
