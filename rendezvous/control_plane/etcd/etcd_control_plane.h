// The control plane's election and state in an etcd cluster (v3 API).
//
// Keys, under /ddprun/<job id>/:
//   leader  "address\nnode id", attached to the leader's lease; its
//           create_revision is the leader's term (etcd's revisions only
//           grow, so a later leader's term is higher);
//   state   the job's state (job_state.h), written in a transaction that
//           checks the leader key still has the writer's create_revision:
//           a leader that lost its lease writes nothing. A state larger
//           than a chunk (etcd refuses requests over 1.5 MiB by default;
//           10,000 nodes make about 3 MB) is written first as chunks under
//           chunks/<term>-<n>/, unfenced, and `state` then names them (a
//           manifest), fenced as above; older chunks go after that.
// A candidate creates the leader key if it is absent, else watches it until
// it is deleted (its lease expired, or its leader resigned) and tries again.
// A leader's renewal keeps its lease alive and then checks, in one
// transaction, that the key is still the one it created (same create
// revision, lease and value): a key deleted or rewritten behind its back
// (etcdctl, another tool) ends its term, so two agents never serve.
#pragma once

#include <memory>
#include <mutex>

#include "rendezvous/control_plane/control_plane.h"
#include "rendezvous/control_plane/etcd/etcd_client.h"

namespace ddprun {

class EtcdControlPlane final : public ControlPlane {
 public:
  // ttl: the leader's lease (etcd rounds it up to its minimum, about
  // 1.5 election timeouts).
  EtcdControlPlane(std::shared_ptr<EtcdClient> etcd, const std::string& job_id,
                   std::chrono::seconds ttl = std::chrono::seconds(2));
  std::optional<int64_t> campaign(const std::string& address, const std::string& node_id,
                                  const std::function<bool()>& stop) override;
  std::optional<ControlLeader> leader() override;
  bool wait_leader_gone(int64_t term, std::chrono::milliseconds timeout) override;
  bool renew(int64_t term) override;
  void resign(int64_t term) override;
  bool save(int64_t term, const std::string& state) override;
  std::optional<std::string> load() override;
  std::chrono::milliseconds ttl() const override;

  static std::string prefix(const std::string& job_id) { return "/ddprun/" + job_id + "/"; }

 private:
  std::shared_ptr<EtcdClient> etcd_;
  const std::string leader_key_;
  const std::string state_key_;
  const std::string chunks_prefix_;
  uint64_t saves_ = 0;  // numbers chunk sets
  std::chrono::seconds ttl_;
  mutable std::mutex mu_;
  int64_t lease_ = 0;  // of the term this process leads (0: none)
  int64_t term_ = 0;
  std::string leader_value_;  // what its leader key holds
};

}  // namespace ddprun
