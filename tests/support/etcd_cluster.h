// A real etcd cluster for the tests of the control plane: N members of
// Debian's etcd-server on loopback ports, data and logs in a temp folder,
// fast elections (50 ms heartbeats, 500 ms election timeout). Members can
// be killed and the raft leader found.
#pragma once

#include <filesystem>
#include <memory>
#include <string>
#include <vector>

#include "support/process.h"

namespace ddptest {

// Whether etcd can run here ("" when it can, else why not).
std::string etcd_missing();

class EtcdCluster {
 public:
  // Starts the members and waits until they have elected a leader (throws
  // std::runtime_error with the members' logs when they do not).
  EtcdCluster(int members, const std::string& name);
  ~EtcdCluster();

  const std::vector<std::string>& endpoints() const { return endpoints_; }
  std::string endpoint_list() const;  // "a:1,b:2,c:3"
  // The index of the raft leader among the members still running.
  int leader();
  // SIGKILLs member i.
  void kill(int i);
  std::string logs() const;

 private:
  std::filesystem::path dir_;
  std::vector<std::string> endpoints_;
  std::vector<std::unique_ptr<Process>> members_;
};

}  // namespace ddptest
