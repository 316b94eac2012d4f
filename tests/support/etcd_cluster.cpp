#include "support/etcd_cluster.h"

#include <signal.h>
#include <unistd.h>

#include <fstream>
#include <regex>
#include <stdexcept>
#include <thread>

#include "support/job_helpers.h"

namespace ddptest {

namespace fs = std::filesystem;
using namespace std::chrono_literals;

std::string etcd_missing() {
  if (access("/usr/bin/etcd", X_OK) != 0) return "etcd is not installed (apt-get install etcd-server)";
  return "";
}

std::vector<std::string> EtcdCluster::here(std::vector<std::string> argv) const {
  return host_.wrap ? host_.wrap(std::move(argv)) : argv;
}

std::optional<std::pair<uint64_t, uint64_t>> EtcdCluster::status(int i) const {
  Finished f = run(here({"/usr/bin/etcdctl", "--endpoints", endpoints_.at(i), "--dial-timeout", "1s",
                         "--command-timeout", "1s", "endpoint", "status", "--write-out", "json"}),
                   {}, 10s);
  std::smatch m, l;
  static const std::regex member_id(R"re("member_id":(\d+))re"), leader(R"re("leader":(\d+))re");
  if (f.exit_code != 0 || !std::regex_search(f.out, m, member_id) || !std::regex_search(f.out, l, leader)) {
    return std::nullopt;
  }
  return std::make_pair(std::stoull(m[1]), std::stoull(l[1]));
}

EtcdCluster::EtcdCluster(int members, const std::string& name, EtcdHost host) : host_(std::move(host)) {
  dir_ = temp_path("etcd", name);
  fs::create_directories(dir_);
  std::vector<int> client(members), peer(members);
  std::string initial;
  for (int i = 0; i < members; ++i) {
    client[i] = free_port();
    do peer[i] = free_port();
    while (peer[i] == client[i]);
    initial += (i ? "," : "") + ("m" + std::to_string(i)) + "=http://" + host_.address + ":" + std::to_string(peer[i]);
    endpoints_.push_back(host_.address + ":" + std::to_string(client[i]));
  }
  for (int i = 0; i < members; ++i) {
    const std::string m = "m" + std::to_string(i);
    const std::string c = "http://" + host_.address + ":" + std::to_string(client[i]);
    const std::string p = "http://" + host_.address + ":" + std::to_string(peer[i]);
    members_.push_back(std::make_unique<Process>(here({
        "/usr/bin/etcd", "--name", m, "--data-dir", (dir_ / m).string(), "--listen-client-urls", c,
        "--advertise-client-urls", c, "--listen-peer-urls", p, "--initial-advertise-peer-urls", p,
        "--initial-cluster", initial, "--initial-cluster-state", "new", "--initial-cluster-token",
        name + "-" + std::to_string(getpid()), "--heartbeat-interval", "50", "--election-timeout", "500",
        "--logger", "zap", "--log-outputs", (dir_ / (m + ".log")).string()})));
  }
  // Ready once every member answers and names a leader.
  const auto deadline = std::chrono::steady_clock::now() + 60s;
  for (int i = 0; i < members; ++i) {
    for (;;) {
      if (auto s = status(i); s && s->second != 0) break;
      if (process_state(members_[i]->pid()) == 0 || process_state(members_[i]->pid()) == 'Z' ||
          std::chrono::steady_clock::now() > deadline) {
        throw std::runtime_error("etcd member m" + std::to_string(i) + " did not start:\n" + logs());
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
  std::vector<uint64_t> ids(members_.size());
  uint64_t leader = 0;
  for (size_t i = 0; i < members_.size(); ++i) {
    if (!members_[i]) continue;
    if (auto s = status(static_cast<int>(i))) {
      ids[i] = s->first;
      if (s->second) leader = s->second;
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
