// Bytes as lowercase hex and back, for ids passed through the environment
// (the NCCL unique id in DDPRUN_NCCL_ID).
#pragma once

#include <string>

namespace ddprun {

std::string to_hex(const std::string& bytes);
// Throws std::invalid_argument on odd length or a non-hex character.
std::string from_hex(const std::string& hex);

}  // namespace ddprun
