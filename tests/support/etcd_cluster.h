// A real etcd cluster for the tests of the control plane: N members of
// Debian's etcd-server on one address (loopback, or a NetLab host's, run
// inside that host), data and logs in a temp folder, fast elections (50 ms
// heartbeats, 500 ms election timeout). Members can be killed and the raft
// leader found (asked with etcdctl, run where the members run).
#pragma once

#include <filesystem>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "support/process.h"

namespace ddptest {

// Whether etcd can run here ("" when it can, else why not).
std::string etcd_missing();

// Where the members run: an address of that host, and how to run a
// command there (NetLab::wrap for a lab host; as it is for this one).
struct EtcdHost {
  std::string address = "127.0.0.1";
  std::function<std::vector<std::string>(std::vector<std::string>)> wrap;
};

class EtcdCluster {
 public:
  // Starts the members and waits until they have elected a leader (throws
  // std::runtime_error with the members' logs when they do not).
  EtcdCluster(int members, const std::string& name, EtcdHost host = {});
  ~EtcdCluster();

  const std::vector<std::string>& endpoints() const { return endpoints_; }
  std::string endpoint_list() const;  // "a:1,b:2,c:3"
  // The index of the raft leader among the members still running.
  int leader();
  // SIGKILLs member i.
  void kill(int i);
  std::string logs() const;

 private:
  // etcdctl's `endpoint status` of member i: {member id, leader id}, or
  // nullopt when it does not answer.
  std::optional<std::pair<uint64_t, uint64_t>> status(int i) const;
  std::vector<std::string> here(std::vector<std::string> argv) const;

  EtcdHost host_;
  std::filesystem::path dir_;
  std::vector<std::string> endpoints_;
  std::vector<std::unique_ptr<Process>> members_;
};

}  // namespace ddptest
