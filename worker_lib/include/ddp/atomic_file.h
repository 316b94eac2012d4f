// Writing a whole file so that readers see either the old file or the new
// one, never a part: write a temporary file, check every write, fsync,
// close, rename over the final name, fsync the folder. No LibTorch here.
//
//   ddp::write_file_atomically(path, path + ".tmp", bytes.data(), bytes.size());
#pragma once

#include <cstddef>
#include <string>

namespace ddp {

// Writes n bytes to temp_path (same folder as final_path), then renames it
// to final_path. On any failure the temporary file is removed, final_path is
// left as it was, and std::runtime_error says which step failed on which
// file with the OS error ("... No space left on device").
void write_file_atomically(const std::string& final_path, const std::string& temp_path, const void* data,
                           size_t n);

}  // namespace ddp
