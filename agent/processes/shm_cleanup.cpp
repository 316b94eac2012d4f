#include "agent/processes/shm_cleanup.h"

#include <dirent.h>
#include <unistd.h>

#include <cstring>

#include "channel/shm_names.h"

namespace ddprun {

int remove_worker_segments(pid_t pid, const std::string& dir) {
  const std::string prefix = channel::shm_segment_prefix(geteuid(), pid);
  DIR* d = opendir(dir.c_str());
  if (!d) return 0;
  int removed = 0;
  while (dirent* e = readdir(d)) {
    if (std::strncmp(e->d_name, prefix.c_str(), prefix.size()) != 0) continue;
    // unlinkat on the directory we listed: the same file shm_unlink would
    // remove, without building a path an odd name could steer.
    if (unlinkat(dirfd(d), e->d_name, 0) == 0) ++removed;
  }
  closedir(d);
  return removed;
}

}  // namespace ddprun
