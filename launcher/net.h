// Facts about this machine's network that the launcher needs for multi-node
// jobs: whether the rendezvous endpoint names this machine, and which of
// its addresses the other nodes reach it by.
#pragma once

#include <memory>
#include <string>

namespace ddprun {

// "host:port", with an IPv6 host in brackets.
std::string with_port(const std::string& host, int port);

// The numeric address host resolves to (IPv4 first); throws
// std::runtime_error naming the host when it does not resolve.
std::string resolve_address(const std::string& host);

// Whether address (numeric) belongs to this machine: loopback, or the
// address of one of its interfaces.
bool is_local_address(const std::string& address);

// The address of this machine that packets to `address` leave from (what
// the routing table picks): the node's address as that peer sees it.
// Throws std::runtime_error when there is no route.
std::string source_address_towards(const std::string& address);

// The interface that holds address ("lo", "eth0", ...), empty if none does.
std::string interface_of(const std::string& address);

// The IPv4 (else IPv6) address of interface `name`, empty if it has none
// or there is no such interface.
std::string address_of_interface(const std::string& name);

// A socket that only listens, for as long as this process lives: where the
// rendezvous may ask this node's host whether its agent still lives
// (rendezvous/server/liveness_probe.h; NodeSpec::probe_address). Nothing is ever
// accepted; the kernel answers the probe's handshake, or refuses it once
// the process is gone.
class ProbeSocket {
 public:
  // On address:0; nullptr when it cannot listen there (then the lease alone decides).
  static std::unique_ptr<ProbeSocket> listen_on(const std::string& address);
  ~ProbeSocket();
  ProbeSocket(const ProbeSocket&) = delete;
  ProbeSocket& operator=(const ProbeSocket&) = delete;
  const std::string& address() const { return address_; }  // host:port

 private:
  ProbeSocket(int fd, std::string address) : fd_(fd), address_(std::move(address)) {}
  int fd_;
  std::string address_;
};

// A node's probe address: its rendezvous service's host:port when that is
// on local_addr (the rendezvous probes only a node's own address), else "".
std::string probe_address_of(const std::string& service, const std::string& local_addr);

}  // namespace ddprun
