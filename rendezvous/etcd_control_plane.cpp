#include "rendezvous/etcd_control_plane.h"

namespace ddprun {

namespace {

ControlLeader parse_leader(const EtcdKeyValue& kv) {
  ControlLeader l;
  const size_t nl = kv.value.find('\n');
  l.address = kv.value.substr(0, nl);
  if (nl != std::string::npos) l.node_id = kv.value.substr(nl + 1);
  l.term = kv.create_revision;
  return l;
}

}  // namespace

EtcdControlPlane::EtcdControlPlane(std::shared_ptr<EtcdClient> etcd, const std::string& job_id,
                                   std::chrono::seconds ttl)
    : etcd_(std::move(etcd)),
      leader_key_(prefix(job_id) + "leader"),
      state_key_(prefix(job_id) + "state"),
      ttl_(ttl) {}

std::optional<int64_t> EtcdControlPlane::campaign(const std::string& address, const std::string& node_id,
                                                  const std::function<bool()>& stop) {
  while (!stop()) {
    std::chrono::seconds granted{0};
    const int64_t lease = etcd_->grant_lease(ttl_, &granted);
    EtcdClient::Created c;
    try {
      c = etcd_->create(leader_key_, address + "\n" + node_id, lease);
    } catch (const EtcdError&) {
      etcd_->revoke_lease(lease);
      throw;
    }
    if (c.created) {
      std::lock_guard lock(mu_);
      lease_ = lease;
      term_ = c.kv.create_revision;
      if (granted > ttl_) ttl_ = granted;
      return term_;
    }
    etcd_->revoke_lease(lease);
    // Another leads: wait until its key goes, a few hundred ms at a time so
    // that stop() is heard.
    if (c.kv.create_revision > 0) {
      while (!stop() && !etcd_->wait_deleted(leader_key_, c.kv.mod_revision, std::chrono::milliseconds(300))) {
        auto now = etcd_->get(leader_key_);
        if (!now || now->create_revision != c.kv.create_revision) break;
      }
    }
  }
  return std::nullopt;
}

std::optional<ControlLeader> EtcdControlPlane::leader() {
  auto kv = etcd_->get(leader_key_);
  if (!kv) return std::nullopt;
  return parse_leader(*kv);
}

bool EtcdControlPlane::wait_leader_gone(int64_t term, std::chrono::milliseconds timeout) {
  auto kv = etcd_->get(leader_key_);
  if (!kv || kv->create_revision != term) return true;
  return etcd_->wait_deleted(leader_key_, kv->mod_revision, timeout);
}

bool EtcdControlPlane::renew(int64_t term) {
  int64_t lease;
  {
    std::lock_guard lock(mu_);
    if (term != term_ || lease_ == 0) return false;
    lease = lease_;
  }
  return etcd_->keep_alive(lease);
}

void EtcdControlPlane::resign(int64_t term) {
  int64_t lease;
  {
    std::lock_guard lock(mu_);
    if (term != term_ || lease_ == 0) return;
    lease = lease_;
    lease_ = 0;
  }
  etcd_->revoke_lease(lease);  // deletes the leader key: the next candidate leads
}

bool EtcdControlPlane::save(int64_t term, const std::string& state) {
  return etcd_->put_if(leader_key_, term, state_key_, state);
}

std::optional<std::string> EtcdControlPlane::load() {
  auto kv = etcd_->get(state_key_);
  if (!kv) return std::nullopt;
  return kv->value;
}

std::chrono::milliseconds EtcdControlPlane::ttl() const {
  std::lock_guard lock(mu_);
  return ttl_;
}

}  // namespace ddprun
