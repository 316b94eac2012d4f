#include "rendezvous/control_plane/etcd/etcd_control_plane.h"

#include <cstdio>
#include <sstream>

namespace ddprun {

namespace {

// The largest value written in one request.
constexpr size_t kChunkBytes = 1 << 20;
// A `state` value that names chunks starts so (a JobState never does:
// protobuf has no field 0).
const std::string kManifest("\0chunks\n", 8);

// Chunk i's key in its set (in order as text too).
std::string chunk_name(size_t i) {
  char name[32];
  std::snprintf(name, sizeof name, "%06zu", i);
  return name;
}

// The first key after every key that starts with `prefix`.
std::string prefix_end(std::string prefix) {
  prefix.back() = static_cast<char>(prefix.back() + 1);
  return prefix;
}

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
      chunks_prefix_(prefix(job_id) + "chunks/"),
      ttl_(ttl) {}

std::optional<int64_t> EtcdControlPlane::campaign(const std::string& address, const std::string& node_id,
                                                  const std::function<bool()>& stop) {
  while (!stop()) {
    std::chrono::seconds granted{0};
    const int64_t lease = etcd_->grant_lease(ttl_, &granted);
    EtcdClient::Created c;
    const std::string value = address + "\n" + node_id;
    try {
      c = etcd_->create(leader_key_, value, lease);
    } catch (const EtcdError&) {
      etcd_->revoke_lease(lease);
      throw;
    }
    if (c.created) {
      std::lock_guard lock(mu_);
      lease_ = lease;
      term_ = c.kv.create_revision;
      leader_value_ = value;
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
  std::string value;
  {
    std::lock_guard lock(mu_);
    if (term != term_ || lease_ == 0) return false;
    lease = lease_;
    value = leader_value_;
  }
  return etcd_->keep_alive(lease) && etcd_->holds(leader_key_, term, lease, value);
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
  if (state.size() <= kChunkBytes) {
    if (!etcd_->put_if(leader_key_, term, state_key_, state)) return false;
    etcd_->erase_range(chunks_prefix_, prefix_end(chunks_prefix_));  // a larger state's chunks, if any
    return true;
  }
  uint64_t n;
  {
    std::lock_guard lock(mu_);
    n = ++saves_;
  }
  // The chunks go first; the fenced manifest makes them the state.
  const std::string set = chunks_prefix_ + std::to_string(term) + "-" + std::to_string(n) + "/";
  const size_t count = (state.size() + kChunkBytes - 1) / kChunkBytes;
  for (size_t i = 0; i < count; ++i) {
    etcd_->put(set + chunk_name(i), state.substr(i * kChunkBytes, kChunkBytes));
  }
  const std::string manifest = kManifest + set + "\n" + std::to_string(count) + "\n" + std::to_string(state.size());
  if (!etcd_->put_if(leader_key_, term, state_key_, manifest)) {
    etcd_->erase_range(set, prefix_end(set));
    return false;
  }
  // Every other chunk set is stale now.
  etcd_->erase_range(chunks_prefix_, set);
  etcd_->erase_range(prefix_end(set), prefix_end(chunks_prefix_));
  return true;
}

std::optional<std::string> EtcdControlPlane::load() {
  auto kv = etcd_->get(state_key_);
  if (!kv) return std::nullopt;
  if (kv->value.compare(0, kManifest.size(), kManifest) != 0) return kv->value;
  // set \n count \n size
  std::istringstream in(kv->value.substr(kManifest.size()));
  std::string set;
  size_t count = 0, size = 0;
  if (!std::getline(in, set) || !(in >> count >> size)) {
    throw EtcdError("the saved state's manifest is unreadable", 0);
  }
  std::string state;
  state.reserve(size);
  for (size_t i = 0; i < count; ++i) {
    auto chunk = etcd_->get(set + chunk_name(i));
    if (!chunk) throw EtcdError("the saved state's chunk " + set + chunk_name(i) + " is missing", 0);
    state += chunk->value;
  }
  if (state.size() != size) {
    throw EtcdError("the saved state's chunks hold " + std::to_string(state.size()) + " bytes, not " +
                        std::to_string(size),
                    0);
  }
  return state;
}

std::chrono::milliseconds EtcdControlPlane::ttl() const {
  std::lock_guard lock(mu_);
  return ttl_;
}

}  // namespace ddprun
