// Files that ddprun and its workers create in folders a user names
// (--log-dir, --trace, TMPDIR), shared by the agent, the trace merge and
// worker_lib:
//   - never through a symbolic link planted at the file's name (another
//     user's link in a shared folder would make root's ddprun overwrite
//     its target): O_NOFOLLOW, so such a name fails with ELOOP;
//   - a file that is to be mapped gets its blocks before anything is stored
//     through the map: a sparse file on a full file system faults with
//     SIGBUS at the first store to a page it cannot allocate, which kills
//     the process with no message; posix_fallocate fails with ENOSPC instead.
#pragma once

#include <sys/types.h>

#include <cstddef>
#include <string>

namespace ddprun::channel {

// Opens `path` for writing (O_WRONLY, or O_RDWR in `flags`), creating it
// with `mode`; `flags` adds O_TRUNC or O_APPEND (O_CLOEXEC and O_NOFOLLOW
// are always added). Returns the fd, or -1 with errno set (ELOOP: a link).
int open_output_file(const std::string& path, int flags, mode_t mode = 0644);

// Writes `text` to `path` (created or truncated by open_output_file).
// Returns "" or why it could not ("<path>: <reason>").
std::string write_output_file(const std::string& path, const std::string& text);

// Writes `text` to fd (an open file at `path`) and closes it; returns "" or
// why it could not ("<path>: <reason>").
std::string write_and_close(int fd, const std::string& path, const std::string& text);

// Gives fd's file `len` bytes with their blocks allocated (see above).
// Returns 0 or the error number (ENOSPC on a full file system).
int allocate_file(int fd, size_t len);

// The reason for an errno from open_output_file, naming a planted link as such.
std::string open_error_text(int err);

}  // namespace ddprun::channel
