#include "channel/standby_message.h"

namespace ddprun::channel {

std::string encode_standby_message(const std::map<std::string, std::string>& vars,
                                   const std::vector<std::string>& unset) {
  std::string msg;
  for (const auto& k : unset) {
    msg += k;
    msg.push_back('\0');
  }
  for (const auto& [k, v] : vars) {
    msg += k + "=" + v;
    msg.push_back('\0');
  }
  msg.push_back('\0');
  return msg;
}

bool standby_message_complete(const std::string& msg) {
  // An empty map is the single "\0"; otherwise the last entry's "\0" and
  // the closing one.
  if (msg.size() == 1) return msg[0] == '\0';
  return msg.size() >= 2 && msg.compare(msg.size() - 2, 2, std::string("\0\0", 2)) == 0;
}

std::vector<std::pair<std::string, std::optional<std::string>>> decode_standby_message(const std::string& msg) {
  std::vector<std::pair<std::string, std::optional<std::string>>> out;
  size_t start = 0;
  while (start < msg.size() && msg[start] != '\0') {
    size_t end = msg.find('\0', start);
    if (end == std::string::npos) end = msg.size();
    const std::string entry = msg.substr(start, end - start);
    const size_t eq = entry.find('=');
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
