// Names the return addresses a worker_lib program wrote in its stack dump
// (channel/stack_dump.h): function, source file and line where the binary
// has them, else the module and offset (enough for addr2line after the
// fact). Reads the live worker's /proc/PID/maps and its binaries with
// elfutils' libdwfl where ddprun was built with it (libdw-dev); no ptrace,
// the worker is not stopped.
#pragma once

#include <sys/types.h>

#include <cstdint>
#include <string>
#include <vector>

namespace ddprun {

struct Frame {
  uint64_t address = 0;
  std::string function;  // demangled; empty when unknown
  std::string source;    // "file:line"; empty when unknown
  std::string module;    // the binary or library's path; empty when unknown
  uint64_t offset = 0;   // in the module
};

// `addresses` are return addresses, innermost first (the first is taken as
// it is, the others one byte back, inside their call).
std::vector<Frame> symbolize(pid_t pid, const std::vector<uint64_t>& addresses);

// One line: "function (file:line) [module]" (what is known of it), else
// "module+0xOFFSET", else the address.
std::string describe(const Frame& f);

}  // namespace ddprun
