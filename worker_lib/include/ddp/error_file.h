// Reports a worker's fatal error to its launcher through the file named by
// TORCHELASTIC_ERROR_FILE, in torchrun's JSON format, so the failure summary
// can show it. No LibTorch here.
#pragma once

#include <string>

namespace ddp {

// Writes {"message": {"message": message, "extraInfo": {...}}} to path.
// Returns false (and writes nothing) when path is empty or not writable.
bool write_error_file(const std::string& path, const std::string& message);

// Makes an uncaught exception (in any thread) write its type and what() to
// $TORCHELASTIC_ERROR_FILE before the process aborts as usual. Idempotent.
void install_error_file_handler();

}  // namespace ddp
