#include "launcher/version.h"

namespace ddprun {

// DDPRUN_VERSION_LINE comes from launcher/CMakeLists.txt, for this file alone.
const char* version_line() { return DDPRUN_VERSION_LINE; }

}  // namespace ddprun
