#include "channel/standby_message.h"

namespace ddprun::channel {

std::string encode_standby_message(const std::map<std::string, std::string>& vars,
                                   const std::vector<std::string>& unset) {
  std::string msg;
  for (const auto& k : unset) {
    msg += k;
    msg.push_back(kStandbyEntryEnd);
  }
  for (const auto& [k, v] : vars) {
    msg += k + kStandbyAssign + v;
    msg.push_back(kStandbyEntryEnd);
  }
  msg.push_back(kStandbyEntryEnd);
  return msg;
}

bool standby_message_complete(const std::string& msg) {
  // An empty map is the single end; otherwise the last entry's end and
  // the closing one.
  if (msg.size() == 1) return msg[0] == kStandbyEntryEnd;
  return msg.size() >= 2 && msg.compare(msg.size() - 2, 2, std::string(2, kStandbyEntryEnd)) == 0;
}

std::vector<std::pair<std::string, std::optional<std::string>>> decode_standby_message(const std::string& msg) {
  std::vector<std::pair<std::string, std::optional<std::string>>> out;
  size_t start = 0;
  while (start < msg.size() && msg[start] != kStandbyEntryEnd) {
    size_t end = msg.find(kStandbyEntryEnd, start);
    if (end == std::string::npos) end = msg.size();
    const std::string entry = msg.substr(start, end - start);
    const size_t eq = entry.find(kStandbyAssign);
    if (eq != std::string::npos) {
      out.emplace_back(entry.substr(0, eq), entry.substr(eq + 1));
    } else {
      out.emplace_back(entry, std::nullopt);
    }
    start = end + 1;
  }
  return out;
}

}  // namespace ddprun::channel
