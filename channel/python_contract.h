// The agent ↔ worker contract as the Python the agent writes sees it
// (python_startup.h's sitecustomize, python_standby.h's standby): the
// values it uses, as Python assignments made from their one definition in
// C++ (heartbeat_layout.h's offsets, phases and pulse; env_names.h's
// variables; standby_message.h's two bytes), so that no number or name of the contract is spelled twice.
// The ddprun Python package reads the same headers itself (python/ddprun/
// _contract.py); tests/unit/python/contract_test.py fails on a contract
// literal written in either.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "channel/env_names.h"
#include "channel/heartbeat_layout.h"
#include "channel/standby_message.h"

namespace ddprun::channel {

inline std::string python_contract_words() {
  auto n = [](size_t v) { return std::to_string(v); };
  auto phase = [](Phase p) { return std::to_string(static_cast<uint32_t>(p)); };
  auto quoted = [](const char* name) { return std::string("\"") + name + "\""; };
  auto byte = [](char c) { return "bytes([" + std::to_string(static_cast<unsigned char>(c)) + "])"; };
  const std::vector<std::pair<const char*, std::string>> words = {
      {"_DDPRUN_SLOT_BYTES", n(kHeartbeatSlotBytes)},
      {"_DDPRUN_PHASE_OFFSET", n(kPhaseOffset)},
      {"_DDPRUN_ADVANCED_OFFSET", n(kAdvancedOffset)},
      {"_DDPRUN_PHASE_NONE", phase(Phase::kNone)},
      {"_DDPRUN_PHASE_CHECKPOINT", phase(Phase::kCheckpoint)},
      {"_DDPRUN_PHASE_EVALUATION", phase(Phase::kEvaluation)},
      {"_DDPRUN_PHASE_FINISHING", phase(Phase::kFinishing)},
      {"_DDPRUN_PULSE_S", std::to_string(kWaitPulseMs) + " / 1000"},
      {"_DDPRUN_ENV_HEARTBEAT_FILE", quoted(kHeartbeatFile)},
      {"_DDPRUN_ENV_HEARTBEAT_SLOT", quoted(kHeartbeatSlot)},
      {"_DDPRUN_ENV_STANDBY_FD", quoted(kStandbyFd)},
      {"_DDPRUN_ENV_HEAL_GENERATION", quoted(kHealGeneration)},
      {"_DDPRUN_ENV_ERROR_FILE", quoted(kErrorFile)},
      {"_DDPRUN_STANDBY_END", byte(kStandbyEntryEnd)},
      {"_DDPRUN_STANDBY_ASSIGN", byte(kStandbyAssign)},
  };
  std::string text;
  for (const auto& [name, value] : words) text += std::string(name) + " = " + value + "\n";
  return text;
}

}  // namespace ddprun::channel
