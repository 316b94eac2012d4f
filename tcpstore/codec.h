// Requests of the TCPStore protocol as values: encoded by clients (ours and
// the tests'), decoded incrementally by the server from whatever part of
// the byte stream has arrived.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "tcpstore/protocol.h"

namespace ddprun::tcpstore {

// Little-endian appends, as PyTorch's SendBuffer writes them.
class Writer {
 public:
  void u8(uint8_t v) { out_.push_back(static_cast<char>(v)); }
  void u32(uint32_t v) { put(v, 4); }
  void u64(uint64_t v) { put(v, 8); }
  void i64(int64_t v) { put(static_cast<uint64_t>(v), 8); }
  // A uint64 length, then the bytes.
  void bytes(std::string_view s) {
    u64(s.size());
    out_.append(s);
  }
  std::string take() { return std::move(out_); }
  const std::string& str() const { return out_; }

 private:
  void put(uint64_t v, int n) {
    for (int i = 0; i < n; ++i) out_.push_back(static_cast<char>((v >> (8 * i)) & 0xff));
  }
  std::string out_;
};

// Little-endian reads from a buffer that may end early: every read returns
// false (and reads nothing) when the bytes are not all there yet.
class Reader {
 public:
  // pos: where reading starts (bytes of in already taken).
  explicit Reader(std::string_view in, size_t pos = 0) : in_(in), pos_(pos) {}
  bool u8(uint8_t& v);
  bool u32(uint32_t& v);
  bool u64(uint64_t& v);
  bool i64(int64_t& v);
  // The bytes of a length-prefixed string; n is the length already read.
  bool take(uint64_t n, std::string& out);
  size_t used() const { return pos_; }

 private:
  bool get(uint64_t& v, int n);
  std::string_view in_;
  size_t pos_ = 0;
};

struct Request {
  Op op = Op::kPing;
  std::vector<std::string> keys;    // one for single-key ops
  std::vector<std::string> values;  // SET/APPEND: 1; COMPARE_SET: expected, desired; MULTI_SET: one per key
  int64_t delta = 0;                // ADD
  uint32_t number = 0;              // VALIDATE: the magic; PING: the nonce
};

// The largest request the server accepts, checked as lengths arrive so that
// a bad length is refused before its bytes are buffered.
struct WireLimits {
  uint64_t max_key_bytes = 4096;
  uint64_t max_value_bytes = uint64_t{1} << 20;
  uint64_t max_keys_per_request = 100000;
  // The keys and values of one multi-key request (CHECK, WAIT, MULTI_GET,
  // MULTI_SET) together: more than the store may hold could never be
  // stored or answered (--rdzv-conf max_job_bytes).
  uint64_t max_request_bytes = uint64_t{64} << 20;
};

enum class Parse { kNeedMore, kDone, kBad };

struct ParseResult {
  Parse status = Parse::kNeedMore;
  size_t used = 0;    // bytes of the request when kDone
  std::string error;  // why, when kBad (names the op and the limit)
  size_t steps = 0;   // fields decoded by this call (what it cost)
};

// How far the decoding of a request got when its bytes ran out. Passed again
// with the same bytes and more, decoding resumes there instead of starting
// over, so a request that arrives a few bytes at a time costs time linear
// in its size (decoding it again from the start each time was quadratic: a
// MULTI_SET of 60 MiB sent a byte at a time copied 60 MiB per byte).
struct ParseState {
  bool started = false;
  Request partial;      // the fields decoded so far
  size_t used = 0;      // bytes they took, the command byte included
  size_t fields = 0;    // how many
  uint64_t count = 0;   // multi-key ops: the keys named, once read
  uint64_t payload = 0; // multi-key ops: key and value bytes announced so far
};

// Decodes the first request of in (bytes a version-v connection sent). With
// state, resumes where the last call with the same state stopped (in must
// start with the same bytes); the state is reset on kDone and kBad.
ParseResult parse_request(Version v, std::string_view in, const WireLimits& limits, Request& out,
                          ParseState* state = nullptr);

// The bytes a client of version v sends for r. Throws std::invalid_argument
// when v has no such command.
std::string encode_request(Version v, const Request& r);

}  // namespace ddprun::tcpstore
