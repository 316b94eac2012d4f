// Reports a worker's fatal error to its launcher through the file named by
// TORCHELASTIC_ERROR_FILE, in torchrun's JSON format, so the failure summary
// can show it. No LibTorch here.
//
//   int main() try { ... } catch (const std::exception& e) { ddp::record_error(e); return 1; }
#pragma once

#include <exception>
#include <string>

namespace ddp {

// Writes {"message": {"message": message, "extraInfo": {...}}} to path.
// Returns false (and writes nothing) when path is empty or not writable.
bool write_error_file(const std::string& path, const std::string& message);

// For a program that catches its fatal error to exit cleanly (return 1 from
// main rather than abort): writes "<type>: <what>" to the error file, as an
// uncaught exception would, and prints "error: <type>: <what>" on stderr.
// Returns that message.
std::string record_error(const std::exception& e);

// Makes an uncaught exception (in any thread) write its type and what() to
// $TORCHELASTIC_ERROR_FILE before the process aborts as usual. Idempotent.
void install_error_file_handler();

}  // namespace ddp
