#include "rendezvous/server/memory_trimmer.h"

#include <malloc.h>

namespace ddprun {

MemoryTrimmer::MemoryTrimmer(std::chrono::milliseconds every) : task_(every, [] { malloc_trim(0); }) {}

MemoryTrimmer::~MemoryTrimmer() = default;

}  // namespace ddprun
