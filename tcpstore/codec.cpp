#include "tcpstore/codec.h"

#include <iterator>

#include <stdexcept>

namespace ddprun::tcpstore {

bool Reader::get(uint64_t& v, int n) {
  if (in_.size() - pos_ < static_cast<size_t>(n)) return false;
  v = 0;
  for (int i = 0; i < n; ++i) {
    v |= static_cast<uint64_t>(static_cast<uint8_t>(in_[pos_ + i])) << (8 * i);
  }
  pos_ += n;
  return true;
}

bool Reader::u8(uint8_t& v) {
  uint64_t x;
  if (!get(x, 1)) return false;
  v = static_cast<uint8_t>(x);
  return true;
}

bool Reader::u32(uint32_t& v) {
  uint64_t x;
  if (!get(x, 4)) return false;
  v = static_cast<uint32_t>(x);
  return true;
}

bool Reader::u64(uint64_t& v) { return get(v, 8); }

bool Reader::i64(int64_t& v) {
  uint64_t x;
  if (!get(x, 8)) return false;
  v = static_cast<int64_t>(x);
  return true;
}

bool Reader::take(uint64_t n, std::string& out) {
  if (in_.size() - pos_ < n) return false;
  out.assign(in_.substr(pos_, n));
  pos_ += n;
  return true;
}

namespace {

// Reads one length-prefixed string no longer than max; sets *bad (with a
// message naming what) when the length passes it.
class Decoder {
 public:
  Decoder(std::string_view in, const WireLimits& limits, Op op)
      : r_(in), limits_(limits), op_(op) {}

  bool key(std::string& out) { return string(out, limits_.max_key_bytes, "key", "4096 bytes"); }
  bool value(std::string& out) {
    return string(out, limits_.max_value_bytes, "value", "--rdzv-conf max_value_bytes");
  }
  bool count(uint64_t& n) {
    if (!r_.u64(n)) return false;
    if (n > limits_.max_keys_per_request) {
      fail(std::string(op_name(op_)) + " names " + std::to_string(n) + " keys, more than " +
           std::to_string(limits_.max_keys_per_request) + " (--rdzv-conf max_job_keys)");
      return false;
    }
    return true;
  }
  Reader& reader() { return r_; }
  bool bad() const { return !error_.empty(); }
  const std::string& error() const { return error_; }

 private:
  bool string(std::string& out, uint64_t max, const char* what, const char* setting) {
    uint64_t n;
    if (!r_.u64(n)) return false;
    if (n > max) {
      fail(std::string(op_name(op_)) + " sends a " + what + " of " + std::to_string(n) +
           " bytes, more than " + std::to_string(max) + " (" + setting + ")");
      return false;
    }
    return r_.take(n, out);
  }
  void fail(std::string e) { error_ = std::move(e); }

  Reader r_;
  const WireLimits& limits_;
  Op op_;
  std::string error_;
};

// Decodes the arguments of r.op; false when short or bad (see d.bad()).
bool decode_args(Decoder& d, Request& r) {
  auto& in = d.reader();
  switch (r.op) {
    case Op::kValidate:
    case Op::kPing:
      return in.u32(r.number);
    case Op::kSet:
    case Op::kAppend:
      r.keys.resize(1);
      r.values.resize(1);
      return d.key(r.keys[0]) && d.value(r.values[0]);
    case Op::kCompareSet:
      r.keys.resize(1);
      r.values.resize(2);
      return d.key(r.keys[0]) && d.value(r.values[0]) && d.value(r.values[1]);
    case Op::kGet:
    case Op::kWatchKey:
    case Op::kDeleteKey:
      r.keys.resize(1);
      return d.key(r.keys[0]);
    case Op::kAdd:
      r.keys.resize(1);
      return d.key(r.keys[0]) && in.i64(r.delta);
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet: {
      uint64_t n;
      if (!d.count(n)) return false;
      r.keys.resize(n);
      for (auto& k : r.keys) {
        if (!d.key(k)) return false;
      }
      return true;
    }
    case Op::kMultiSet: {
      uint64_t n;
      if (!d.count(n)) return false;
      r.keys.resize(n);
      r.values.resize(n);
      for (uint64_t i = 0; i < n; ++i) {
        if (!d.key(r.keys[i]) || !d.value(r.values[i])) return false;
      }
      return true;
    }
    case Op::kNumKeys:
    case Op::kCancelWait:
      return true;
  }
  return false;
}

}  // namespace

ParseResult parse_request(Version v, std::string_view in, const WireLimits& limits, Request& out) {
  ParseResult res;
  if (in.empty()) return res;
  const uint8_t code = static_cast<uint8_t>(in[0]);
  auto op = op_from_code(v, code);
  if (!op) {
    res.status = Parse::kBad;
    res.error = "unknown command " + std::to_string(code) + " for protocol " + version_name(v);
    // PyTorch 2.x's later commands, which this store does not serve.
    static const char* const kLater[] = {"QUEUE_PUSH", "QUEUE_POP", "QUEUE_LEN", "LIST_KEYS", "BARRIER"};
    if (v == Version::kV2 && code >= 14 && code < 14 + std::size(kLater)) {
      res.error = std::string("command ") + kLater[code - 14] + " (" + std::to_string(code) +
                  ", PyTorch 2.x) is not served by ddprun's store";
    }
    return res;
  }
  out = Request{};
  out.op = *op;
  Decoder d(in.substr(1), limits, *op);
  if (decode_args(d, out)) {
    res.status = Parse::kDone;
    res.used = 1 + d.reader().used();
  } else if (d.bad()) {
    res.status = Parse::kBad;
    res.error = d.error();
  }
  return res;
}

std::string encode_request(Version v, const Request& r) {
  auto code = op_code(v, r.op);
  if (!code) {
    throw std::invalid_argument(std::string("TCPStore protocol ") + version_name(v) + " has no " +
                                op_name(r.op));
  }
  Writer w;
  w.u8(*code);
  auto need = [&](size_t keys, size_t values) {
    if (r.keys.size() < keys || r.values.size() < values) {
      throw std::invalid_argument(std::string(op_name(r.op)) + " needs " + std::to_string(keys) +
                                  " key(s) and " + std::to_string(values) + " value(s)");
    }
  };
  switch (r.op) {
    case Op::kValidate:
    case Op::kPing:
      w.u32(r.number);
      break;
    case Op::kSet:
    case Op::kAppend:
      need(1, 1);
      w.bytes(r.keys[0]);
      w.bytes(r.values[0]);
      break;
    case Op::kCompareSet:
      need(1, 2);
      w.bytes(r.keys[0]);
      w.bytes(r.values[0]);
      w.bytes(r.values[1]);
      break;
    case Op::kGet:
    case Op::kWatchKey:
    case Op::kDeleteKey:
      need(1, 0);
      w.bytes(r.keys[0]);
      break;
    case Op::kAdd:
      need(1, 0);
      w.bytes(r.keys[0]);
      w.i64(r.delta);
      break;
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet:
      w.u64(r.keys.size());
      for (const auto& k : r.keys) w.bytes(k);
      break;
    case Op::kMultiSet:
      need(r.keys.size(), r.keys.size());
      w.u64(r.keys.size());
      for (size_t i = 0; i < r.keys.size(); ++i) {
        w.bytes(r.keys[i]);
        w.bytes(r.values[i]);
      }
      break;
    case Op::kNumKeys:
    case Op::kCancelWait:
      break;
  }
  return w.take();
}

}  // namespace ddprun::tcpstore
