// The keys of a TCPStore server and the requests that wait on them, driven
// by one thread: requests come in as values, replies go out through a
// callback, and a wait that cannot be answered yet is parked (a note of
// which connection waits for which keys), never a blocked thread.
#pragma once

#include <cstdint>
#include <functional>
#include <optional>
#include <string>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "tcpstore/codec.h"

namespace ddprun::tcpstore {

using ConnId = uint64_t;

// What the key space may hold (the gRPC store's ServiceLimits, per server).
struct Quota {
  size_t max_key_bytes = 4096;
  size_t max_value_bytes = size_t{1} << 20;
  size_t max_keys = 100000;
  size_t max_bytes = size_t{64} << 20;
  size_t max_parked = 16384;  // parked waits and watches together, over all connections
  size_t max_parked_per_conn = 1024;  // the same, each connection's share
};

class KeySpace {
 public:
  using Send = std::function<void(ConnId, std::string)>;

  KeySpace(Quota quota, Send send) : quota_(quota), send_(std::move(send)) {}

  // Carries out r, sent by conn speaking v; replies (to conn, and to
  // connections whose waits or watches it ends) go through send. Returns why
  // r is refused (a limit, a missing key, a bad magic, a value that is not
  // an integer): nothing has changed then and the caller closes conn.
  std::optional<std::string> apply(ConnId conn, Version v, const Request& r);

  // Forgets conn's parked wait and watches (its connection closed).
  void drop_connection(ConnId conn);

  // Removes every key for which pred holds; returns how many.
  size_t erase_if(const std::function<bool(const std::string&)>& pred);

  size_t size() const { return data_.size(); }
  size_t bytes() const { return bytes_; }
  size_t parked() const { return parked_keys_ + watch_count_; }

 private:
  struct Wait {
    std::vector<std::string> missing;  // keys still absent when it was parked
    size_t remaining = 0;
  };

  std::optional<std::string> check_put(const std::string& key, size_t value_size, size_t* keys,
                                       size_t* bytes) const;
  void put(const std::string& key, std::string value);
  // A key changed: answer waits that now have all their keys, tell watchers.
  void changed(const std::string& key, uint8_t event, const std::string& old_value,
               const std::string& new_value);
  void cancel_wait(ConnId conn);
  size_t parked_by(ConnId conn) const;  // keys its wait misses plus keys it watches
  std::optional<std::string> over_quota(ConnId conn, size_t more, const char* what) const;
  bool all_present(const std::vector<std::string>& keys) const;

  const Quota quota_;
  Send send_;
  std::unordered_map<std::string, std::string> data_;
  size_t bytes_ = 0;
  std::unordered_map<ConnId, Wait> waits_;
  std::unordered_map<std::string, std::vector<ConnId>> waiters_;  // key → parked waits
  size_t parked_keys_ = 0;
  std::unordered_map<std::string, std::vector<ConnId>> watchers_;  // key → watching connections
  std::unordered_map<ConnId, std::unordered_set<std::string>> watched_;
  size_t watch_count_ = 0;
};

}  // namespace ddprun::tcpstore
