// The files of a checkpoint folder: DIR/ckpt-<step, 12 digits>-<crc32 of
// the file, 8 hex>.pt. A file whose checksum does not match its name, or an
// entry that only looks like one (a folder, a device), is set aside as
// <name>.corrupt where possible, so that it no longer counts as a
// checkpoint. No LibTorch here.
//
//   for (const ddp::CheckpointFile& f : ddp::list_checkpoints("ckpt"))  // newest first
//     std::printf("step %lld in %s\n", static_cast<long long>(f.step), f.path.c_str());
#pragma once

#include <cstddef>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

namespace ddp {

// One checkpoint file as found in a folder.
struct CheckpointFile {
  std::string path;
  int64_t step = 0;
  uint32_t crc = 0;
};

uint32_t checkpoint_crc(const std::vector<char>& bytes);
// The same over bytes that come in pieces: start with crc = 0 and pass
// each piece with the value the last call returned.
uint32_t checkpoint_crc(uint32_t crc, const void* data, size_t n);

// "ckpt-000000000100-1a2b3c4d.pt"
std::string checkpoint_file_name(int64_t step, uint32_t crc);

// The entries of a folder named like checkpoints, newest (highest step)
// first, whatever they are (read_checkpoint tells). Other names are ignored.
std::vector<CheckpointFile> list_checkpoints(const std::string& dir);

// The file's bytes if it is a regular file whose checksum matches its name;
// otherwise nullopt and why in *problem. Never throws for what it finds.
std::optional<std::vector<char>> read_checkpoint(const CheckpointFile& f, std::string* problem);

// Renames a bad checkpoint to <path><suffix> so that it no longer counts
// (".corrupt"; ".unagreed": written while the ranks' replicas differed).
// Returns the new path, or "" when the entry is not a regular file (left
// alone) or cannot be renamed (why in *problem).
std::string set_aside(const CheckpointFile& f, std::string* problem, const std::string& suffix = ".corrupt");

}  // namespace ddp
