#include "ddp/heartbeat.h"

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <stdexcept>

#include "channel/heartbeat_layout.h"

namespace ddp {

Heartbeat::Heartbeat(const std::string& path, int slot) {
  if (path.empty()) return;
  int fd = ::open(path.c_str(), O_RDWR | O_CLOEXEC);
  if (fd < 0) {
    throw std::runtime_error("ddp: cannot open heartbeat file " + path + " (DDPRUN_HEARTBEAT_FILE): " +
                             std::strerror(errno));
  }
  struct stat st {};
  const size_t need = ddprun::channel::heartbeat_file_bytes(slot + 1);
  if (::fstat(fd, &st) != 0 || slot < 0 || static_cast<size_t>(st.st_size) < need) {
    ::close(fd);
    throw std::runtime_error("ddp: heartbeat file " + path + " has no slot " + std::to_string(slot) +
                             " (DDPRUN_HEARTBEAT_SLOT)");
  }
  map_len_ = need;
  map_ = ::mmap(nullptr, map_len_, PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  ::close(fd);
  if (map_ == MAP_FAILED) {
    map_ = nullptr;
    throw std::runtime_error("ddp: cannot map heartbeat file " + path + ": " + std::strerror(errno));
  }
  // The whole slot is mapped: the counter and the progress block after it.
  counter_ = ddprun::channel::heartbeat_counter(map_, slot);
  progress_ = ddprun::channel::progress_block(map_, slot);
}

Heartbeat::~Heartbeat() {
  if (map_) ::munmap(map_, map_len_);
}

}  // namespace ddp
