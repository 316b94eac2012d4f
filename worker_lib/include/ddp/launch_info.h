// Who this worker is, as the launcher told it through the environment.
// No LibTorch here.
//
//   const ddp::LaunchInfo& me = world->info();  // or ddp::read_launch_info()
//   if (me.from_ddprun()) std::printf("rank %d of %d\n", me.rank, me.world_size);
#pragma once

#include <cstddef>
#include <cstdint>
#include <functional>
#include <optional>
#include <stdexcept>
#include <string>

namespace ddp {

// A launch variable is missing or malformed. Names the variable.
class ConfigError : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// Which communicator CPU tensors get (DDPRUN_CPU_COMM): shared memory when
// every rank of a group is on one node (kAuto), always (kShm), or Gloo.
enum class CpuComm { kAuto, kShm, kGloo };

struct LaunchInfo {
  int rank = 0;
  int world_size = 1;
  int local_rank = 0;
  int local_world_size = 1;
  int group_rank = 0;        // node rank
  int group_world_size = 1;  // number of nodes
  int restart_count = 0;
  std::string rdzv_address;  // empty when not launched by ddprun
  std::string job_id;
  // DDPRUN_RDZV_TOKEN and DDPRUN_RDZV_TLS_*: how to call the rendezvous.
  std::string rdzv_token;
  std::string rdzv_tls_ca, rdzv_tls_cert, rdzv_tls_key;
  int64_t round = 0;
  std::string nccl_id;  // raw bytes, empty when none
  std::string local_addr = "127.0.0.1";
  std::string error_file;
  std::string heartbeat_file;  // DDPRUN_HEARTBEAT_FILE, empty without hang detection
  int heartbeat_slot = 0;
  // --trace (trace.h): DDPRUN_TRACE_FILE (empty: off), the step window of
  // DDPRUN_TRACE_STEPS, and DDPRUN_TRACE_CAPACITY records.
  std::string trace_file;
  int64_t trace_first_step = 0;
  int64_t trace_end_step = INT64_MAX;
  uint64_t trace_capacity = uint64_t{1} << 18;
  // DDPRUN_PROGRESS_BY_AGENT: the agent shows rank 0's progress, so the
  // worker does not print it.
  bool progress_by_agent = false;
  // DDPRUN_HEALS: the agent replaces a failed worker while the others go on
  // (ddp::Healer); DDPRUN_HEAL_GENERATION: the heal this process is the
  // replacement in (0: it started with the job).
  bool heals = false;
  uint32_t heal_generation = 0;
  // DDPRUN_VERIFY_EVERY: a Healer compares the ranks' parameters every this
  // many optimizer steps, and their whole state after every heal (0: never).
  int64_t verify_every = 0;
  // DDPRUN_HARDWARE_KIND: this node's hardware kind as the user names it
  // (empty: the Healer reads the CPU's and the GPU's names).
  std::string hardware_kind;
  // What any torchrun-like launcher sets: where the c10d store is, and
  // whether the launcher hosts it (TORCHELASTIC_USE_AGENT_STORE=True) or
  // rank 0 must, as PyTorch's env:// rendezvous does.
  std::string master_addr;  // empty when unset
  int master_port = 0;      // 0 when unset
  bool agent_store = false;
  bool local_addr_given = false;  // DDPRUN_LOCAL_ADDR was set
  CpuComm cpu_comm = CpuComm::kAuto;
  size_t shm_slot_bytes = 0;  // DDPRUN_SHM_SLOT_KB x 1024; 0: ShmGroupOptions' default

  // Launched by ddprun (so a rendezvous store is reachable).
  bool from_ddprun() const { return !rdzv_address.empty(); }
};

using EnvLookup = std::function<std::optional<std::string>(const std::string&)>;

// The process environment.
std::optional<std::string> process_env(const std::string& name);

// Reads RANK, WORLD_SIZE, LOCAL_RANK, ... and DDPRUN_*. Without RANK and
// WORLD_SIZE it describes a single process (rank 0 of 1). Throws ConfigError.
LaunchInfo read_launch_info(const EnvLookup& env = process_env);

// DDPRUN_TRACE_STEPS' "A:B", "A:", ":B" or ":" into the step window
// [first, end) of TraceOptions (trace.h); throws ConfigError naming it.
void parse_trace_steps(const std::string& value, int64_t* first, int64_t* end);

}  // namespace ddp
