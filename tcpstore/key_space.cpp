#include "tcpstore/key_space.h"

#include <algorithm>
#include <charconv>
#include <limits>
#include <string_view>
#include <unordered_set>

#include "tcpstore/peer_text.h"

namespace ddprun::tcpstore {
namespace {

std::string one_byte(uint8_t b) { return std::string(1, static_cast<char>(b)); }

std::string i64_reply(int64_t v) {
  Writer w;
  w.i64(v);
  return w.take();
}

std::optional<int64_t> parse_int(const std::string& s) {
  int64_t v = 0;
  auto [p, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (s.empty() || ec != std::errc() || p != s.data() + s.size()) return std::nullopt;
  return v;
}

// A key in a refusal: it came from a client, so escaped and cut short.
std::string shown(const std::string& key) { return "'" + peer_text(key) + "'"; }

}  // namespace

bool KeySpace::all_present(const std::vector<std::string>& keys) const {
  return std::all_of(keys.begin(), keys.end(), [&](const auto& k) { return data_.count(k) > 0; });
}

// Would storing value_size bytes under key stay within the quota? Gives the
// key and byte counts after the write through keys/bytes.
std::optional<std::string> KeySpace::check_put(const std::string& key, size_t value_size,
                                               size_t* keys, size_t* bytes) const {
  if (key.size() > quota_.max_key_bytes) {
    return "key of " + std::to_string(key.size()) + " bytes, more than " +
           std::to_string(quota_.max_key_bytes);
  }
  if (value_size > quota_.max_value_bytes) {
    return "value of " + std::to_string(value_size) + " bytes for key " + shown(key) +
           ", more than " + std::to_string(quota_.max_value_bytes) + " (--rdzv-conf max_value_bytes)";
  }
  auto it = data_.find(key);
  const bool fresh = it == data_.end();
  const size_t old = fresh ? 0 : key.size() + it->second.size();
  *keys += fresh ? 1 : 0;
  *bytes = *bytes - old + key.size() + value_size;
  if (*keys > quota_.max_keys) {
    return "key " + shown(key) + " would be key " + std::to_string(*keys) + ", more than " +
           std::to_string(quota_.max_keys) + " (--rdzv-conf max_job_keys)";
  }
  if (*bytes > quota_.max_bytes) {
    return "key " + shown(key) + " would make the store " + std::to_string(*bytes) +
           " bytes, more than " + std::to_string(quota_.max_bytes) + " (--rdzv-conf max_job_bytes)";
  }
  return std::nullopt;
}

void KeySpace::put(const std::string& key, std::string value) {
  auto [it, fresh] = data_.try_emplace(key);
  if (!fresh) bytes_ -= key.size() + it->second.size();
  bytes_ += key.size() + value.size();
  std::string old = std::move(it->second);
  it->second = std::move(value);
  changed(key, fresh ? kWatchKeyCreated : kWatchKeyUpdated, old, it->second);
}

void KeySpace::changed(const std::string& key, uint8_t event, const std::string& old_value,
                       const std::string& new_value) {
  // Waits: each parked wait counts the keys it still misses; the one that
  // reaches zero is answered STOP_WAITING.
  if (event != kWatchKeyDeleted) {
    if (auto it = waiters_.find(key); it != waiters_.end()) {
      std::vector<ConnId> conns = std::move(it->second);
      waiters_.erase(it);
      parked_keys_ -= conns.size();
      for (ConnId c : conns) {
        auto w = waits_.find(c);
        if (w == waits_.end()) continue;
        if (--w->second.remaining == 0) {
          waits_.erase(w);
          send_(c, one_byte(kStopWaiting));
        }
      }
    }
  }
  // Watches (kV1 callback connections): event, key, old value, new value.
  if (auto it = watchers_.find(key); it != watchers_.end()) {
    Writer w;
    w.u8(event);
    w.bytes(key);
    w.bytes(old_value);
    w.bytes(new_value);
    for (ConnId c : it->second) send_(c, w.str());
  }
}

void KeySpace::cancel_wait(ConnId conn) {
  auto w = waits_.find(conn);
  if (w == waits_.end()) return;
  for (const auto& key : w->second.missing) {
    auto it = waiters_.find(key);
    if (it == waiters_.end()) continue;
    auto& v = it->second;
    const size_t before = v.size();
    v.erase(std::remove(v.begin(), v.end(), conn), v.end());
    parked_keys_ -= before - v.size();
    if (v.empty()) waiters_.erase(it);
  }
  waits_.erase(w);
}

size_t KeySpace::parked_by(ConnId conn) const {
  size_t n = 0;
  if (auto w = waits_.find(conn); w != waits_.end()) n += w->second.remaining;
  if (auto w = watched_.find(conn); w != watched_.end()) n += w->second.size();
  return n;
}

// Each connection may park its share (so one client cannot take every
// restarted worker's room), and all together at most max_parked.
std::optional<std::string> KeySpace::over_quota(ConnId conn, size_t more, const char* what) const {
  const size_t mine = parked_by(conn) + more;
  if (mine > quota_.max_parked_per_conn) {
    return std::string(what) + " would park " + std::to_string(mine) + " keys for this connection, more than its " +
           std::to_string(quota_.max_parked_per_conn) + " (max_waits_per_client)";
  }
  if (parked() + more > quota_.max_parked) {
    return std::string(what) + " would park " + std::to_string(parked() + more) +
           " keys for all connections, more than the store's " + std::to_string(quota_.max_parked) + " (max_waits)";
  }
  return std::nullopt;
}

void KeySpace::drop_connection(ConnId conn) {
  cancel_wait(conn);
  auto w = watched_.find(conn);
  if (w == watched_.end()) return;
  for (const auto& key : w->second) {
    auto it = watchers_.find(key);
    if (it == watchers_.end()) continue;
    auto& v = it->second;
    v.erase(std::remove(v.begin(), v.end(), conn), v.end());
    if (v.empty()) watchers_.erase(it);
    --watch_count_;
  }
  watched_.erase(w);
}

size_t KeySpace::erase_if(const std::function<bool(const std::string&)>& pred) {
  size_t n = 0;
  for (auto it = data_.begin(); it != data_.end();) {
    if (pred(it->first)) {
      bytes_ -= it->first.size() + it->second.size();
      it = data_.erase(it);
      ++n;
    } else {
      ++it;
    }
  }
  return n;
}

std::optional<std::string> KeySpace::apply(ConnId conn, Version v, const Request& r) {
  size_t keys = data_.size(), bytes = bytes_;
  switch (r.op) {
    case Op::kValidate:
      if (r.number != kValidationMagic) return "VALIDATE with a wrong magic number";
      return std::nullopt;
    case Op::kPing: {
      Writer w;
      w.u32(r.number);
      send_(conn, w.take());
      return std::nullopt;
    }
    case Op::kSet:
      if (auto e = check_put(r.keys[0], r.values[0].size(), &keys, &bytes)) return e;
      put(r.keys[0], r.values[0]);
      return std::nullopt;
    case Op::kCompareSet: {
      // As PyTorch: an absent key is created only when the expected value is
      // empty; the reply is the value the key holds afterwards (for an absent
      // key and a non-empty expectation, the expectation itself).
      const std::string& key = r.keys[0];
      const std::string& expected = r.values[0];
      const std::string& desired = r.values[1];
      auto it = data_.find(key);
      const bool swap = it == data_.end() ? expected.empty() : it->second == expected;
      if (swap) {
        if (auto e = check_put(key, desired.size(), &keys, &bytes)) return e;
        put(key, desired);
        it = data_.find(key);
      }
      Writer w;
      w.bytes(it != data_.end() ? it->second : expected);
      send_(conn, w.take());
      return std::nullopt;
    }
    case Op::kGet: {
      // Clients wait for the key before they get it; PyTorch's server drops
      // a connection that gets a missing key, and so do we.
      auto it = data_.find(r.keys[0]);
      if (it == data_.end()) return "GET of key " + shown(r.keys[0]) + ", which is not set";
      Writer w;
      w.bytes(it->second);
      send_(conn, w.take());
      return std::nullopt;
    }
    case Op::kAdd: {
      const std::string& key = r.keys[0];
      int64_t value = r.delta;
      if (auto it = data_.find(key); it != data_.end()) {
        auto cur = parse_int(it->second);
        if (!cur) return "ADD to key " + shown(key) + ", whose value is not an integer";
        if ((r.delta > 0 && *cur > std::numeric_limits<int64_t>::max() - r.delta) ||
            (r.delta < 0 && *cur < std::numeric_limits<int64_t>::min() - r.delta)) {
          return "ADD to key " + shown(key) + " overflows";
        }
        value = *cur + r.delta;
      }
      std::string text = std::to_string(value);
      if (auto e = check_put(key, text.size(), &keys, &bytes)) return e;
      send_(conn, i64_reply(value));
      put(key, std::move(text));
      return std::nullopt;
    }
    case Op::kCheck:
      send_(conn, one_byte(all_present(r.keys) ? kCheckReady : kCheckNotReady));
      return std::nullopt;
    case Op::kWait: {
      // A client whose earlier wait timed out (kV1 has no CANCEL_WAIT) asks
      // again on the same connection: the new wait replaces the old one.
      cancel_wait(conn);
      Wait w;
      std::unordered_set<std::string_view> seen;  // a key named twice is waited for once
      for (const auto& k : r.keys) {
        if (!data_.count(k) && seen.insert(k).second) w.missing.push_back(k);
      }
      if (w.missing.empty()) {
        send_(conn, one_byte(kStopWaiting));
        return std::nullopt;
      }
      if (auto over = over_quota(conn, w.missing.size(), "WAIT")) return over;
      w.remaining = w.missing.size();
      for (const auto& k : w.missing) waiters_[k].push_back(conn);
      parked_keys_ += w.missing.size();
      waits_.emplace(conn, std::move(w));
      return std::nullopt;
    }
    case Op::kNumKeys:
      send_(conn, i64_reply(static_cast<int64_t>(data_.size())));
      return std::nullopt;
    case Op::kWatchKey: {
      if (v != Version::kV1) return "WATCH_KEY is not a command of protocol v2";
      auto& mine = watched_[conn];
      if (!mine.count(r.keys[0])) {
        if (auto over = over_quota(conn, 1, "WATCH_KEY")) return over;
        mine.insert(r.keys[0]);
        watchers_[r.keys[0]].push_back(conn);
        ++watch_count_;
      }
      send_(conn, one_byte(kWatchCallbackRegistered));
      return std::nullopt;
    }
    case Op::kDeleteKey: {
      auto it = data_.find(r.keys[0]);
      int64_t n = 0;
      if (it != data_.end()) {
        std::string old = std::move(it->second);
        bytes_ -= r.keys[0].size() + old.size();
        data_.erase(it);
        n = 1;
        changed(r.keys[0], kWatchKeyDeleted, old, "");
      }
      send_(conn, i64_reply(n));
      return std::nullopt;
    }
    case Op::kAppend: {
      const std::string& key = r.keys[0];
      auto it = data_.find(key);
      const size_t old_size = it == data_.end() ? 0 : it->second.size();
      if (auto e = check_put(key, old_size + r.values[0].size(), &keys, &bytes)) return e;
      if (it == data_.end()) {
        put(key, r.values[0]);
      } else {
        it->second += r.values[0];
        bytes_ += r.values[0].size();
        changed(key, kWatchKeyAppended, "", r.values[0]);
      }
      return std::nullopt;
    }
    case Op::kMultiGet: {
      // The reply is sized before it is built: a key named 100,000 times
      // would otherwise make a reply of 100,000 values (gigabytes) from a
      // request of a megabyte.
      size_t reply = 0;
      for (const auto& k : r.keys) {
        auto it = data_.find(k);
        if (it == data_.end()) return "MULTI_GET of key " + shown(k) + ", which is not set";
        reply += 8 + it->second.size();
      }
      if (reply > quota_.max_bytes + 8 * r.keys.size()) {
        return "MULTI_GET would be answered with " + std::to_string(reply) + " bytes, more than the store's " +
               std::to_string(quota_.max_bytes) + " (--rdzv-conf max_job_bytes)";
      }
      Writer w;
      for (const auto& k : r.keys) w.bytes(data_.find(k)->second);
      send_(conn, w.take());
      return std::nullopt;
    }
    case Op::kMultiSet: {
      // All or nothing: check the whole batch against the quota first.
      std::unordered_map<std::string, size_t> batch;  // last write of each key wins
      for (size_t i = 0; i < r.keys.size(); ++i) batch[r.keys[i]] = r.values[i].size();
      for (const auto& [k, size] : batch) {
        if (auto e = check_put(k, size, &keys, &bytes)) return e;
      }
      for (size_t i = 0; i < r.keys.size(); ++i) put(r.keys[i], r.values[i]);
      return std::nullopt;
    }
    case Op::kCancelWait:
      cancel_wait(conn);
      send_(conn, one_byte(kWaitCanceled));
      return std::nullopt;
  }
  return "unknown request";
}

}  // namespace ddprun::tcpstore
