// The agent ↔ worker contract, part 3: the standby hand-off. A standby
// worker waits in ddp::init() on a pipe (its fd kStandbyFdNumber, named by
// DDPRUN_STANDBY_FD); the agent sends its variables as "KEY=VALUE\0"
// entries followed by one more "\0", then closes the pipe. A "KEY\0" entry
// (no '=') removes KEY: a variable the standby was started with for
// another assignment (a heal generation, say) must not outlive it.
#pragma once

#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace ddprun::channel {

inline constexpr int kStandbyFdNumber = 3;
// The format's two bytes: each entry ends with kStandbyEntryEnd (and the
// message with one more); kStandbyAssign parts KEY from VALUE. The Python
// standby reads them from here (python_contract.h) and decodes with
// kPythonStandbyMessage (python_standby.h).
inline constexpr char kStandbyEntryEnd = '\0';
inline constexpr char kStandbyAssign = '=';

std::string encode_standby_message(const std::map<std::string, std::string>& vars,
                                   const std::vector<std::string>& unset = {});
// Whether msg holds a whole message (ends with the empty entry).
bool standby_message_complete(const std::string& msg);
// The entries of a whole message, in order: a value to set, or none (unset).
std::vector<std::pair<std::string, std::optional<std::string>>> decode_standby_message(const std::string& msg);

}  // namespace ddprun::channel
