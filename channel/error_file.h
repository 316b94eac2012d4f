// The agent ↔ worker contract, part 4: the error file (TORCHELASTIC_ERROR_FILE)
// in torchrun's JSON format, which PyTorch's @record writes too:
//   {"message": {"message": "...", "extraInfo": {"py_callstack": ..., "timestamp": "..."}}}
// or simply {"message": "..."}. Workers write it; the agent reads it.
#pragma once

#include <string>

namespace ddprun::channel {

// The JSON a worker writes for `message` (timestamp: seconds since the epoch).
std::string error_file_json(const std::string& message, long long timestamp);

// The message in an error file's text (its traceback when it has one);
// empty when it has none. Throws
// std::runtime_error when the text is not JSON.
std::string error_file_message(const std::string& json_text);

}  // namespace ddprun::channel
