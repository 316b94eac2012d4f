// Makes NCCL unique ids for the rendezvous without linking NCCL: libnccl is
// opened at run time, so ddprun builds and runs where NCCL is absent.
#pragma once

#include <string>

namespace ddprun {

// Returns the 128 bytes of a fresh ncclUniqueId. The calling process keeps
// NCCL's bootstrap listener for that id, so it must outlive the workers'
// ncclCommInitRank. Throws std::runtime_error saying why when libnccl cannot
// be loaded or fails.
std::string make_nccl_unique_id();

}  // namespace ddprun
