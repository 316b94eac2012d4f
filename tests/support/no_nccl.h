// The NCCL-id source of a rendezvous server or registry in tests that need
// no NCCL id: asked for one, it throws.
#pragma once

#include <stdexcept>
#include <string>

namespace ddptest {

inline std::string no_nccl() { throw std::runtime_error("no NCCL in this test"); }

}  // namespace ddptest
