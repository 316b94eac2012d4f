#include "channel/error_file.h"

#include <nlohmann/json.hpp>
#include <stdexcept>

namespace ddprun::channel {

std::string error_file_json(const std::string& message, long long timestamp) {
  nlohmann::json j = {
      {"message",
       {{"message", message},
        {"extraInfo", {{"py_callstack", ""}, {"timestamp", std::to_string(timestamp)}}}}}};
  return j.dump();
}

std::string error_file_message(const std::string& json_text) {
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    throw std::runtime_error(std::string("not JSON: ") + e.what());
  }
  if (!j.is_object() || !j.contains("message")) return "";
  const auto& m = j["message"];
  if (m.is_string()) return m.get<std::string>();
  if (!m.is_object()) return "";
  // PyTorch's @record puts the whole traceback in py_callstack: prefer it.
  if (m.contains("extraInfo") && m["extraInfo"].is_object() &&
      m["extraInfo"].contains("py_callstack")) {
    const auto& cs = m["extraInfo"]["py_callstack"];
    if (cs.is_string() && !cs.get<std::string>().empty()) return cs.get<std::string>();
  }
  if (m.contains("message") && m["message"].is_string()) return m["message"].get<std::string>();
  return "";
}

}  // namespace ddprun::channel
