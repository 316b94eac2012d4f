// Settings of DistributedDataParallel. No LibTorch here.
//
//   ddp::DdpOptions options;
//   options.strategy = ddp::parse_sync_strategy("bucketed");  // naive, flat, overlap
//   ddp::DistributedDataParallel<Net> model(Net(), *world, options);
#pragma once

#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

namespace ddp {

class Communicator;
class Heartbeat;
class ReplicaLedger;
class StateFence;
class Tracer;
struct LaunchInfo;

// How gradients are averaged over the ranks (seed 003's four designs):
//   kNaive    after backward, one all_reduce per parameter
//   kFlat     after backward, all gradients in one flat buffer, one all_reduce
//   kOverlap  during backward, one all_reduce per parameter as soon as its
//             gradient is ready (a bucket per parameter)
//   kBucketed during backward, buckets of gradients all-reduced as soon as
//             every gradient in them is ready (PyTorch's design; the default)
enum class SyncStrategy { kNaive, kFlat, kOverlap, kBucketed };

std::string to_string(SyncStrategy s);
// "naive", "flat", "overlap" or "bucketed"; throws std::invalid_argument listing them.
SyncStrategy parse_sync_strategy(const std::string& name);

// What construction does about parameters that differ between ranks.
// The dtype gradients travel in during the all-reduce.
//   kParam    the gradients' own dtype (exact averaging)
//   kBFloat16 floating-point buckets are divided by the world size, cast to
//             bf16, summed, and cast back (PyTorch's bf16_compress_hook):
//             half the bytes of fp32 on NCCL, at bf16's ~3 significant
//             digits. Gloo has no bf16 sum: it widens bf16 to fp32 for the
//             reduction, so on CPU the option gives bf16 rounding but no
//             saving in bytes.
enum class CommDtype { kParam, kBFloat16 };

std::string to_string(CommDtype d);
// "param" (also "fp32") or "bf16"; throws std::invalid_argument listing them.
CommDtype parse_comm_dtype(const std::string& name);

// Whether the hook-driven strategies (kOverlap, kBucketed) all-reduce
// buckets during backward, on a communication thread, or once backward is
// done, on the thread that finishes it (still in buckets, gradients still
// bucket views):
//   kAuto  during backward unless the communicator says overlapping costs
//          compute (Communicator::overlap_pays: shared memory, whose
//          collectives are CPU work, on a node with no core to spare)
//   kOn    always during backward
//   kOff   always after backward
enum class Overlap { kAuto, kOn, kOff };

std::string to_string(Overlap o);
// "auto", "on" or "off"; throws std::invalid_argument listing them.
Overlap parse_overlap(const std::string& name);

enum class InitSync {
  kBroadcast,  // copy rank 0's parameters and buffers to every rank
  kVerify,     // throw, naming the first parameter that differs from rank 0's
  // Nothing at construction: a replacement joining a heal (World::
  // replacement()) gets the state from the heal, and its peers, long past
  // their construction, run no matching collectives.
  kNone,
};

struct DdpOptions {
  SyncStrategy strategy = SyncStrategy::kBucketed;
  size_t bucket_cap_bytes = 25u << 20;       // 25 MiB
  size_t first_bucket_cap_bytes = 1u << 20;  // 1 MiB: start communicating early
  InitSync init_sync = InitSync::kBroadcast;
  // Parameters that get no gradient in a step are an error unless this is
  // set; then their gradient counts as zero on ranks that did not use them,
  // and parameters no rank used keep no gradient.
  bool find_unused_parameters = false;
  // Copy rank 0's buffers (e.g. batch-norm statistics) to every rank after
  // each synchronised step.
  bool broadcast_buffers = true;
  CommDtype comm_dtype = CommDtype::kParam;
  Overlap overlap = Overlap::kAuto;
  // Where backward, each bucket's all-reduce and the finalize wait are
  // recorded (trace.h); null: nowhere. DistributedDataParallel over a World
  // fills in the World's.
  Tracer* tracer = nullptr;
  // Waited for at the end of each synchronised backward, before the
  // optimizer step may change the state (a Checkpointer's copy in the
  // background: state_fence.h); null: nothing. DistributedDataParallel over
  // a World fills in the World's.
  const StateFence* state_fence = nullptr;
  // Compare the ranks' parameters (ddp/replicas.h) at every this-many-th
  // forward pass with gradients: replicas apart stop every rank with
  // ReplicasDiffer, since nothing here can repair them (a ddp::Healer can:
  // a program with one compares there instead, and this stays quiet); a
  // restart resumes from a checkpoint they agreed on. 0: never. -1: ddprun's
  // --verify-every (DistributedDataParallel over a World; never on a bare
  // communicator, nor in a heal's replacement).
  int64_t verify_every = -1;
  // What the comparisons need, filled in by DistributedDataParallel over a
  // World: a CPU communicator over every rank, the World's ledger, its
  // heartbeat (to tell the agent) and its launch info (the node, its kind).
  Communicator* verify_comm = nullptr;
  ReplicaLedger* replicas = nullptr;
  std::shared_ptr<Heartbeat> heartbeat;
  const LaunchInfo* launch = nullptr;
};

}  // namespace ddp
