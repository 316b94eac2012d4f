#include "support/etcd_cluster.h"

#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <stdexcept>
#include <thread>

#include "rendezvous/etcd_client.h"
#include "support/job_helpers.h"

namespace ddptest {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string etcd_missing() {
  if (access("/usr/bin/etcd", X_OK) != 0) return "etcd is not installed (apt-get install etcd-server)";
  return "";
}

EtcdCluster::EtcdCluster(int members, const std::string& name) {
  dir_ = temp_path("etcd", name);
  fs::create_directories(dir_);
  std::vector<int> client(members), peer(members);
  std::string initial;
  for (int i = 0; i < members; ++i) {
    client[i] = free_port();
    do peer[i] = free_port();
    while (peer[i] == client[i]);
    initial += (i ? "," : "") + ("m" + std::to_string(i)) + "=http://127.0.0.1:" + std::to_string(peer[i]);
    endpoints_.push_back("127.0.0.1:" + std::to_string(client[i]));
  }
  for (int i = 0; i < members; ++i) {
    const std::string m = "m" + std::to_string(i);
    const std::string c = "http://127.0.0.1:" + std::to_string(client[i]);
    const std::string p = "http://127.0.0.1:" + std::to_string(peer[i]);
    members_.push_back(std::make_unique<Process>(std::vector<std::string>{
        "/usr/bin/etcd", "--name", m, "--data-dir", (dir_ / m).string(), "--listen-client-urls", c,
        "--advertise-client-urls", c, "--listen-peer-urls", p, "--initial-advertise-peer-urls", p,
        "--initial-cluster", initial, "--initial-cluster-state", "new", "--initial-cluster-token",
        name + "-" + std::to_string(getpid()), "--heartbeat-interval", "50", "--election-timeout", "500",
        "--logger", "zap", "--log-outputs", (dir_ / (m + ".log")).string()}));
  }
  // Ready once every member answers and names a leader.
  ddprun::EtcdClient probe(endpoints_, 1s);
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  std::string last_error;
  for (int i = 0; i < members; ++i) {
    for (;;) {
      try {
        if (probe.member_status(i).leader_id != 0) break;
      } catch (const ddprun::EtcdError& e) {
        last_error = e.what();
      }
      if (process_state(members_[i]->pid()) == 0 || process_state(members_[i]->pid()) == 'Z' ||
          std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error("etcd member m" + std::to_string(i) + " did not start (" + last_error + "):\n" + logs());
      }
      std::this_thread::sleep_for(50ms);  // etcd offers no event to wait on for its election
    }
  }
}

EtcdCluster::~EtcdCluster() {
  for (auto& m : members_) {
    if (m) m->signal(SIGKILL);
  }
  members_.clear();
  std::error_code ec;
  fs::remove_all(dir_, ec);
}

std::string EtcdCluster::endpoint_list() const {
  std::string out;
  for (const auto& e : endpoints_) out += (out.empty() ? "" : ",") + e;
  return out;
}

int EtcdCluster::leader() {
  ddprun::EtcdClient probe(endpoints_, 1s);
  std::vector<uint64_t> ids(members_.size());
  uint64_t leader = 0;
  for (size_t i = 0; i < members_.size(); ++i) {
    if (!members_[i]) continue;
    try {
      auto s = probe.member_status(i);
      ids[i] = s.member_id;
      if (s.leader_id) leader = s.leader_id;
    } catch (const ddprun::EtcdError&) {
    }
  }
  for (size_t i = 0; i < ids.size(); ++i) {
    if (ids[i] && ids[i] == leader) return static_cast<int>(i);
  }
  return -1;
}

void EtcdCluster::kill(int i) {
  members_.at(i)->signal(SIGKILL);
  members_.at(i)->finish(10s);
  members_.at(i).reset();
}

std::string EtcdCluster::logs() const {
  std::string out;
  for (size_t i = 0; i < members_.size(); ++i) {
    std::ifstream in(dir_ / ("m" + std::to_string(i) + ".log"));
    std::string text((std::istreambuf_iterator<char>(in)), {});
    if (text.size() > 3000) text = text.substr(text.size() - 3000);
    out += "--- m" + std::to_string(i) + "\n" + text;
  }
  return out;
}

}  // namespace ddptest
