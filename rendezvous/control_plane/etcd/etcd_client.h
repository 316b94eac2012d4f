// A small client of etcd's v3 API (gRPC, proto/etcd/etcd_v3.proto): keys,
// compare-and-set transactions, leases and the cluster's status. What the
// etcd backend of the control plane needs (control_plane.h), no more.
//
// Endpoints: "host:port" (an "http://" prefix is accepted, as torchrun's
// --rdzv-endpoint takes it). A call goes to the endpoint that answered last
// and moves on to the next when one does not answer (a dead member), so any
// one member of the cluster may die. Thread-safe.
#pragma once

#include <chrono>
#include <cstdint>
#include <memory>
#include <mutex>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace ddprun {

// A call no endpoint answered, or that etcd refused: says which and why.
class EtcdError : public std::runtime_error {
 public:
  EtcdError(const std::string& what, int code) : std::runtime_error(what), code_(code) {}
  int code() const { return code_; }  // the gRPC status code

 private:
  int code_;
};

struct EtcdKeyValue {
  std::string key;
  std::string value;
  int64_t create_revision = 0;  // the revision that created the key (a term, for a leader key)
  int64_t mod_revision = 0;
  int64_t lease = 0;
};

// What etcd said of itself (Maintenance.Status).
struct EtcdMemberStatus {
  uint64_t member_id = 0;
  uint64_t leader_id = 0;
  std::string version;
};

class EtcdClient {
 public:
  // Throws std::invalid_argument naming an endpoint that is not host:port
  // (or an https:// one: this backend speaks plain gRPC).
  EtcdClient(const std::vector<std::string>& endpoints,
             std::chrono::milliseconds call_timeout = std::chrono::seconds(2));
  ~EtcdClient();
  EtcdClient(const EtcdClient&) = delete;
  EtcdClient& operator=(const EtcdClient&) = delete;

  // Splits "a:1,b:2" and checks each (the error names the flag's value).
  static std::vector<std::string> parse_endpoints(const std::string& list);

  std::optional<EtcdKeyValue> get(const std::string& key);
  // Returns the revision of the write.
  int64_t put(const std::string& key, const std::string& value, int64_t lease = 0);
  void erase(const std::string& key);
  // Deletes every key in [begin, end).
  void erase_range(const std::string& begin, const std::string& end);

  // Creates key with value and lease if it does not exist. The outcome:
  // created (kv is the new key, create_revision its revision) or not (kv is
  // the key that exists).
  struct Created {
    bool created = false;
    EtcdKeyValue kv;
  };
  Created create(const std::string& key, const std::string& value, int64_t lease);

  // Puts key=value only while `guard` exists with create_revision
  // `guard_revision` (a leader's fence: its term); false, with nothing
  // written, when it does not.
  bool put_if(const std::string& guard, int64_t guard_revision, const std::string& key,
              const std::string& value);

  // Whether key exists exactly as written: created at `create_revision`,
  // attached to `lease`, holding `value` (one transaction). A leader's
  // check that its key was not deleted or rewritten behind its back.
  bool holds(const std::string& key, int64_t create_revision, int64_t lease, const std::string& value);

  // Blocks until key is deleted at a revision after `after` (true), or
  // until timeout passes or the member watched stops answering (false: look
  // again). No event is missed between a get and this.
  bool wait_deleted(const std::string& key, int64_t after, std::chrono::milliseconds timeout);

  // A lease of ttl (etcd may make it longer: its minimum); returns its id
  // and sets granted_ttl.
  int64_t grant_lease(std::chrono::seconds ttl, std::chrono::seconds* granted_ttl = nullptr);
  // Renews the lease; false when it is gone (expired or revoked).
  bool keep_alive(int64_t lease);
  void revoke_lease(int64_t lease);

  // The status of one endpoint (not failing over: tests ask each member).
  EtcdMemberStatus member_status(size_t endpoint);
  const std::vector<std::string>& endpoints() const { return endpoints_; }

 private:
  struct Stubs;
  // Runs call(stubs) on the endpoint that answered last, then on the
  // others in turn while they do not answer; throws EtcdError.
  template <typename Call>
  void on_any(const char* what, Call&& call);

  // Endpoint i's stubs, and a fresh channel for it (after it failed).
  std::shared_ptr<Stubs> stubs(size_t i);
  void renew(size_t i);

  std::vector<std::string> endpoints_;
  std::chrono::milliseconds call_timeout_;
  std::mutex mu_;
  std::vector<std::shared_ptr<Stubs>> stubs_;
  size_t current_ = 0;  // the endpoint that answered last
};

}  // namespace ddprun
