// `ddprun --version`: "ddprun 0.1.0 (commit 0123456789ab)", the project's
// version (python/ddprun/__init__.py's __version__, the one place it is
// written) and the commit the build was configured at (none outside git).
#pragma once

namespace ddprun {

const char* version_line();

}  // namespace ddprun
