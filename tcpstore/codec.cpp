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

// One field of a request's arguments, in the order they are sent.
enum class Field { kNumber, kDelta, kCount, kKey, kValue, kEnd };

// The field at index f of op's arguments; count: the keys a multi-key op
// names (its field 0).
Field field_at(Op op, size_t f, uint64_t count) {
  switch (op) {
    case Op::kValidate:
    case Op::kPing:
      return f == 0 ? Field::kNumber : Field::kEnd;
    case Op::kSet:
    case Op::kAppend:
      return f == 0 ? Field::kKey : f == 1 ? Field::kValue : Field::kEnd;
    case Op::kCompareSet:
      return f == 0 ? Field::kKey : f <= 2 ? Field::kValue : Field::kEnd;
    case Op::kGet:
    case Op::kWatchKey:
    case Op::kDeleteKey:
      return f == 0 ? Field::kKey : Field::kEnd;
    case Op::kAdd:
      return f == 0 ? Field::kKey : f == 1 ? Field::kDelta : Field::kEnd;
    case Op::kCheck:
    case Op::kWait:
    case Op::kMultiGet:
      return f == 0 ? Field::kCount : f <= count ? Field::kKey : Field::kEnd;
    case Op::kMultiSet:
      if (f == 0) return Field::kCount;
      if (f > 2 * count) return Field::kEnd;
      return f % 2 == 1 ? Field::kKey : Field::kValue;
    case Op::kNumKeys:
    case Op::kCancelWait:
      return Field::kEnd;
  }
  return Field::kEnd;
}

bool multi_key(Op op) {
  return op == Op::kCheck || op == Op::kWait || op == Op::kMultiGet || op == Op::kMultiSet;
}

// Reads field f into st.partial; false when its bytes have not all arrived
// or it breaks a limit (then *error says which).
bool read_field(Field f, Reader& r, const WireLimits& limits, ParseState& st, std::string* error) {
  Request& req = st.partial;
  const char* name = op_name(req.op);
  switch (f) {
    case Field::kNumber:
      return r.u32(req.number);
    case Field::kDelta:
      return r.i64(req.delta);
    case Field::kCount:
      if (!r.u64(st.count)) return false;
      if (st.count > limits.max_keys_per_request) {
        *error = std::string(name) + " names " + std::to_string(st.count) + " keys, more than " +
                 std::to_string(limits.max_keys_per_request) + " (--rdzv-conf max_job_keys)";
        return false;
      }
      return true;
    case Field::kKey:
    case Field::kValue: {
      const bool key = f == Field::kKey;
      const uint64_t max = key ? limits.max_key_bytes : limits.max_value_bytes;
      uint64_t n;
      if (!r.u64(n)) return false;
      if (n > max) {
        *error = std::string(name) + " sends a " + (key ? "key" : "value") + " of " + std::to_string(n) +
                 " bytes, more than " + std::to_string(max) + " (" +
                 (key ? "4096 bytes" : "--rdzv-conf max_value_bytes") + ")";
        return false;
      }
      if (multi_key(req.op) && st.payload + n > limits.max_request_bytes) {
        *error = std::string(name) + " sends more than " + std::to_string(limits.max_request_bytes) +
                 " bytes of keys and values (--rdzv-conf max_job_bytes)";
        return false;
      }
      std::string bytes;
      if (!r.take(n, bytes)) return false;  // not all there yet
      st.payload += n;
      (key ? req.keys : req.values).push_back(std::move(bytes));
      return true;
    }
    case Field::kEnd:
      break;
  }
  return false;
}

}  // namespace

ParseResult parse_request(Version v, std::string_view in, const WireLimits& limits, Request& out,
                          ParseState* state) {
  ParseState scratch;
  ParseState& st = state ? *state : scratch;
  ParseResult res;
  if (in.empty()) return res;
  if (!st.started) {
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
    st = ParseState{};
    st.started = true;
    st.partial.op = *op;
    st.used = 1;
  }
  while (true) {
    const Field f = field_at(st.partial.op, st.fields, st.count);
    if (f == Field::kEnd) break;
    Reader r(in, st.used);
    std::string error;
    if (!read_field(f, r, limits, st, &error)) {
      if (!error.empty()) {
        res.status = Parse::kBad;
        res.error = std::move(error);
        st = ParseState{};
      }
      return res;
    }
    st.used = r.used();
    ++st.fields;
    ++res.steps;
  }
  out = std::move(st.partial);
  res.status = Parse::kDone;
  res.used = st.used;
  st = ParseState{};
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
