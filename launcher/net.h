// Facts about this machine's network that the launcher needs for multi-node
// jobs: whether the rendezvous endpoint names this machine, and which of
// its addresses the other nodes reach it by.
#pragma once

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

}  // namespace ddprun
