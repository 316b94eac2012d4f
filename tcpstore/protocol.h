// PyTorch's TCPStore wire protocol (c10d), as the two generations of it that
// users run speak it. Facts from PyTorch's source (torch/csrc/distributed/c10d):
//
//  * Every integer is sent in the sender's native byte order, which is
//    little-endian on every machine PyTorch supports; we write and read
//    little-endian explicitly.
//  * A string or byte vector is a uint64 length followed by the bytes.
//  * A request is one command byte followed by its arguments; a key list is
//    a uint64 count followed by that many strings.
//
//  kV1: PyTorch 1.x up to 2.1 (TCPStore.cpp, TCPStoreMasterDaemon). No
//       handshake. Commands SET=0 COMPARE_SET=1 GET=2 ADD=3 CHECK=4 WAIT=5
//       GETNUMKEYS=6 WATCH_KEY=7 DELETE_KEY=8, and from 2.0 APPEND=9
//       MULTI_GET=10 MULTI_SET=11 CANCEL_WAIT=12. A 1.13 client opens a
//       second connection that only sends WATCH_KEY (its callback listener).
//  kV2: PyTorch 2.3 and later (TCPStoreBackend.hpp, TCPStoreLibUvBackend.cpp).
//       The first request on a connection is VALIDATE with the magic
//       0x3C85F7CE; the enum is renumbered with VALIDATE=0 in front and
//       WATCH_KEY gone: SET=1 COMPARE_SET=2 GET=3 ADD=4 CHECK=5 WAIT=6
//       GETNUMKEYS=7 DELETE_KEY=8 APPEND=9 MULTI_GET=10 MULTI_SET=11
//       CANCEL_WAIT=12 PING=13. A client sends PING(nonce) after VALIDATE
//       and expects the nonce back.
#pragma once

#include <cstdint>
#include <optional>
#include <string_view>

namespace ddprun::tcpstore {

enum class Version { kV1, kV2 };

const char* version_name(Version v);

// What a request asks, whatever its number on the wire.
enum class Op {
  kValidate,
  kSet,
  kCompareSet,
  kGet,
  kAdd,
  kCheck,
  kWait,
  kNumKeys,
  kWatchKey,
  kDeleteKey,
  kAppend,
  kMultiGet,
  kMultiSet,
  kCancelWait,
  kPing,
};

const char* op_name(Op op);

inline constexpr uint32_t kValidationMagic = 0x3C85F7CE;

// One-byte replies.
inline constexpr uint8_t kCheckReady = 0;
inline constexpr uint8_t kCheckNotReady = 1;
inline constexpr uint8_t kStopWaiting = 0;
inline constexpr uint8_t kWaitCanceled = 1;  // kV2 and kV1 from 2.0

// What a watching (kV1) connection is told: the event byte, then the key,
// the old value and the new value (strings as above).
inline constexpr uint8_t kWatchKeyUpdated = 0;
inline constexpr uint8_t kWatchKeyCreated = 1;
inline constexpr uint8_t kWatchKeyDeleted = 2;
inline constexpr uint8_t kWatchCallbackRegistered = 3;
inline constexpr uint8_t kWatchKeyAppended = 4;

// The command byte of op in version v; nullopt where v has no such command.
std::optional<uint8_t> op_code(Version v, Op op);
// The op a command byte stands for in version v; nullopt when unknown.
std::optional<Op> op_from_code(Version v, uint8_t code);

// Which version a connection speaks, from the first bytes it sent: kV2 opens
// with VALIDATE (0) and the magic; kV1 has no handshake. A kV1 SET is also
// command 0, but its next bytes are a key length, and one whose low four
// bytes spell the magic is a key of over 1 GB, which no limit allows.
// nullopt: not enough bytes yet to tell.
std::optional<Version> detect_version(std::string_view first_bytes);

}  // namespace ddprun::tcpstore
