// A little network of "hosts" for multi-host tests: N Linux network
// namespaces, each joined by a veth pair to a bridge that lives in a
// namespace of its own, so the root namespace's network is never touched.
//
//   host i's namespace:  lo (up), veth "v<tag>h<i>" holding addr(i)/24
//   bridge namespace:    bridge "br<tag>", with each pair's other end
//                        "v<tag>b<i>" as a port
//
// Needs root (CAP_NET_ADMIN + CAP_SYS_ADMIN) and iproute2's `ip`. Every name
// carries the process id and a per-process counter, so labs in parallel test
// processes never collide. Nothing here waits for links: a caller that
// connects right after create() or link_up() should retry its connect.
#pragma once

#include <memory>
#include <string>
#include <vector>

namespace ddptest {

class NetLab {
 public:
  // Builds a lab of `hosts` hosts (1..253). Returns nullptr when it cannot,
  // with a one-line reason in *why_not (not root, no `ip`, the failing
  // command and its output, ...); whatever was made is removed again.
  static std::unique_ptr<NetLab> create(int hosts, std::string* why_not);
  ~NetLab();  // deletes every namespace (and with them every link) it made
  NetLab(const NetLab&) = delete;
  NetLab& operator=(const NetLab&) = delete;

  int size() const { return hosts_; }
  std::string ns(int i) const;    // namespace name of host i, as `ip netns` knows it
  std::string addr(int i) const;  // IPv4 address of host i: 10.A.B.(i+1) in a /24
  // argv running `argv` inside host i: {"/path/to/ip","netns","exec",ns(i)} + argv.
  // ip is given by absolute path, so posix_spawn (not spawnp) can run it.
  std::vector<std::string> wrap(int i, std::vector<std::string> argv) const;
  // Cuts host i off the bridge (its veth end in the bridge namespace goes
  // down) and reconnects it. Throw std::runtime_error on failure. Just after
  // link_up the first packets are now and then dropped (seen: a SYN, so one
  // connect took ~1 s, the TCP retransmit): callers retry.
  void link_down(int i);
  void link_up(int i);
  // Splits the network in two: the hosts in `side` move to a bridge of their
  // own (they still reach each other, and nobody else), until
  // heal_partition() moves them back. Throw std::runtime_error on failure.
  void partition(const std::vector<int>& side);
  void heal_partition();

 private:
  NetLab() = default;
  std::string host_if(int i) const;  // host i's end of its veth pair (in ns(i))
  std::string port_if(int i) const;  // the bridge's end (in bridge_ns_)
  void set_port(int i, const char* state);  // "up" or "down"
  void set_master(int i, const std::string& bridge);

  int hosts_ = 0;
  std::string ip_;         // absolute path of the ip binary
  std::string prefix_;     // "ddpt-<pid>-<counter>", starts every namespace name
  std::string tag_;        // short per-instance id used in interface names
  std::string bridge_ns_;  // namespace holding the bridge
  std::string bridge_if_;
  std::string split_if_;        // the partition's second bridge, once made
  std::vector<int> split_off_;  // the hosts on it
  std::string subnet_;     // "10.A.B."
  std::vector<std::string> made_;  // namespaces created so far, for cleanup
};

}  // namespace ddptest
