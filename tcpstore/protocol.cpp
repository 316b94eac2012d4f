#include "tcpstore/protocol.h"

#include <array>

namespace ddprun::tcpstore {
namespace {

// Index: the command byte; value: the op. Keep in the order of PyTorch's enums.
constexpr std::array kV1Ops = {Op::kSet,      Op::kCompareSet, Op::kGet,      Op::kAdd,
                               Op::kCheck,    Op::kWait,       Op::kNumKeys,  Op::kWatchKey,
                               Op::kDeleteKey, Op::kAppend,    Op::kMultiGet, Op::kMultiSet,
                               Op::kCancelWait};
constexpr std::array kV2Ops = {Op::kValidate, Op::kSet,      Op::kCompareSet, Op::kGet,
                               Op::kAdd,      Op::kCheck,    Op::kWait,       Op::kNumKeys,
                               Op::kDeleteKey, Op::kAppend,  Op::kMultiGet,   Op::kMultiSet,
                               Op::kCancelWait, Op::kPing};

template <size_t N>
std::optional<uint8_t> find_code(const std::array<Op, N>& ops, Op op) {
  for (size_t i = 0; i < N; ++i) {
    if (ops[i] == op) return static_cast<uint8_t>(i);
  }
  return std::nullopt;
}

}  // namespace

const char* version_name(Version v) {
  return v == Version::kV1 ? "v1 (PyTorch <= 2.1)" : "v2 (PyTorch >= 2.3)";
}

const char* op_name(Op op) {
  switch (op) {
    case Op::kValidate: return "VALIDATE";
    case Op::kSet: return "SET";
    case Op::kCompareSet: return "COMPARE_SET";
    case Op::kGet: return "GET";
    case Op::kAdd: return "ADD";
    case Op::kCheck: return "CHECK";
    case Op::kWait: return "WAIT";
    case Op::kNumKeys: return "GETNUMKEYS";
    case Op::kWatchKey: return "WATCH_KEY";
    case Op::kDeleteKey: return "DELETE_KEY";
    case Op::kAppend: return "APPEND";
    case Op::kMultiGet: return "MULTI_GET";
    case Op::kMultiSet: return "MULTI_SET";
    case Op::kCancelWait: return "CANCEL_WAIT";
    case Op::kPing: return "PING";
  }
  return "?";
}

std::optional<uint8_t> op_code(Version v, Op op) {
  return v == Version::kV1 ? find_code(kV1Ops, op) : find_code(kV2Ops, op);
}

std::optional<Op> op_from_code(Version v, uint8_t code) {
  if (v == Version::kV1) {
    if (code < kV1Ops.size()) return kV1Ops[code];
  } else if (code < kV2Ops.size()) {
    return kV2Ops[code];
  }
  return std::nullopt;
}

std::optional<Version> detect_version(std::string_view b) {
  if (b.empty()) return std::nullopt;
  if (static_cast<uint8_t>(b[0]) != 0) return Version::kV1;
  if (b.size() < 5) return std::nullopt;
  // The magic, little-endian: CE F7 85 3C.
  const uint32_t word = static_cast<uint32_t>(static_cast<uint8_t>(b[1])) |
                        static_cast<uint32_t>(static_cast<uint8_t>(b[2])) << 8 |
                        static_cast<uint32_t>(static_cast<uint8_t>(b[3])) << 16 |
                        static_cast<uint32_t>(static_cast<uint8_t>(b[4])) << 24;
  return word == kValidationMagic ? Version::kV2 : Version::kV1;
}

}  // namespace ddprun::tcpstore
