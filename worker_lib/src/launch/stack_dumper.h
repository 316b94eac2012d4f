// The worker's side of stack dumps (channel/stack_dump.h): a handler for
// the dump signal that writes every thread's return addresses to the
// worker's stack file. It runs inside a signal handler, so it only makes
// async-signal-safe calls: open/read/write, getdents64, tgkill, nanosleep,
// and glibc's backtrace() (whose one unsafe step, loading the unwinder, is
// done at install). The agent symbolizes the addresses. No LibTorch here.
#pragma once

#include <string>

namespace ddp {

// Opens `path` (made by the agent) for appending and handles the dump
// signal from now on. Installing again (a second World) points the handler
// at the new file. Returns an error text, empty on success (a worker
// without a stack dump still trains: World only warns).
std::string install_stack_dumper(const std::string& path);

}  // namespace ddp
