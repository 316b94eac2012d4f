// NetLab end to end: hosts in their own network namespaces reach each other
// over the lab's bridge, a cut link really cuts, and nothing is left behind.
// Skipped (with the reason) where namespaces cannot be made, e.g. not root.
#include <arpa/inet.h>
#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sched.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <chrono>
#include <cstring>
#include <thread>

#include "support/netns.h"

namespace {

using ddptest::NetLab;
using namespace std::chrono_literals;

// A TCP socket that belongs to network namespace `ns`: made on a short-lived
// thread that first joins the namespace (a socket keeps the namespace it was
// made in, whichever thread uses it later).
int socket_in(const std::string& ns) {
  int nsfd = open(("/run/netns/" + ns).c_str(), O_RDONLY | O_CLOEXEC);
  if (nsfd < 0) return -1;
  int fd = -1;
  std::thread t([&] {
    if (setns(nsfd, CLONE_NEWNET) == 0) fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  });
  t.join();
  close(nsfd);
  return fd;
}

sockaddr_in make_addr(const std::string& ip, int port) {
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(port);
  inet_pton(AF_INET, ip.c_str(), &a.sin_addr);
  return a;
}

// A listening socket in `ns` on ip and a free port; returns fd, sets *port.
int listen_in(const std::string& ns, const std::string& ip, int* port) {
  int fd = socket_in(ns);
  if (fd < 0) return -1;
  sockaddr_in a = make_addr(ip, 0);
  socklen_t len = sizeof a;
  if (bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof a) != 0 || listen(fd, 8) != 0 ||
      getsockname(fd, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
    close(fd);
    return -1;
  }
  *port = ntohs(a.sin_port);
  return fd;
}

// One connect attempt from namespace `ns`, given up after `timeout`. Returns
// the connected fd, or -1 with *err saying why.
int connect_from(const std::string& ns, const std::string& ip, int port,
                 std::chrono::milliseconds timeout, std::string* err) {
  err->clear();
  int fd = socket_in(ns);
  if (fd < 0) {
    *err = "no socket in " + ns;
    return -1;
  }
  fcntl(fd, F_SETFL, O_NONBLOCK);
  sockaddr_in a = make_addr(ip, port);
  int rc = connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof a);
  if (rc != 0 && errno == EINPROGRESS) {
    pollfd p{fd, POLLOUT, 0};
    int n = poll(&p, 1, static_cast<int>(timeout.count()));
    int so = 0;
    socklen_t len = sizeof so;
    getsockopt(fd, SOL_SOCKET, SO_ERROR, &so, &len);
    if (n == 0) {
      rc = -1, errno = ETIMEDOUT;
      *err = "timed out";
    } else {
      rc = so == 0 ? 0 : -1, errno = so;
    }
  }
  if (rc != 0) {
    if (err->empty()) *err = strerror(errno);
    close(fd);
    return -1;
  }
  fcntl(fd, F_SETFL, 0);
  return fd;
}

// Connect, retrying until `deadline` passes (links need no settling time in
// theory, but a caller should not rely on that).
int connect_retrying(const std::string& ns, const std::string& ip, int port,
                     std::chrono::milliseconds within, std::string* err) {
  auto end = std::chrono::steady_clock::now() + within;
  for (;;) {
    err->clear();
    int fd = connect_from(ns, ip, port, 1s, err);
    if (fd >= 0 || std::chrono::steady_clock::now() >= end) return fd;
    std::this_thread::sleep_for(50ms);
  }
}

// Runs argv to completion (no shell); returns its stdout, sets *code.
std::string run_out(const std::vector<std::string>& argv, int* code) {
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return "";
  pid_t pid = fork();
  if (pid == 0) {
    dup2(p[1], 1);
    execvp(cargv[0], cargv.data());
    _exit(127);
  }
  close(p[1]);
  std::string out;
  char buf[4096];
  for (ssize_t n; (n = read(p[0], buf, sizeof buf)) > 0;) out.append(buf, n);
  close(p[0]);
  int status = 0;
  waitpid(pid, &status, 0);
  *code = WIFEXITED(status) ? WEXITSTATUS(status) : -1;
  return out;
}

std::string peer_ip(int fd) {
  sockaddr_in a{};
  socklen_t len = sizeof a;
  getpeername(fd, reinterpret_cast<sockaddr*>(&a), &len);
  char s[INET_ADDRSTRLEN] = {};
  inet_ntop(AF_INET, &a.sin_addr, s, sizeof s);
  return s;
}

// Skips when no lab can be made, unless DDPTEST_REQUIRE_NETNS is set (for a
// CI that runs as root, where a skip would hide a broken NetLab).
#define MAKE_LAB(var, n)                                       \
  std::string why_not;                                         \
  std::unique_ptr<NetLab> var = NetLab::create(n, &why_not);   \
  if (!var && getenv("DDPTEST_REQUIRE_NETNS")) FAIL() << why_not; \
  if (!var) GTEST_SKIP() << why_not;

TEST(NetLab, HostReachesHostOverBridge) {
  MAKE_LAB(lab, 2);
  ASSERT_EQ(lab->size(), 2);
  int port = 0;
  int srv = listen_in(lab->ns(0), lab->addr(0), &port);
  ASSERT_GE(srv, 0);
  std::string err;
  int c = connect_retrying(lab->ns(1), lab->addr(0), port, 5s, &err);
  ASSERT_GE(c, 0) << "host 1 -> " << lab->addr(0) << ": " << err;
  int s = accept(srv, nullptr, nullptr);
  ASSERT_GE(s, 0);
  EXPECT_EQ(peer_ip(s), lab->addr(1));  // came from host 1, across the bridge
  ASSERT_EQ(write(c, "hi", 2), 2);
  char buf[2] = {};
  EXPECT_EQ(read(s, buf, 2), 2);
  EXPECT_EQ(std::string(buf, 2), "hi");
  close(s);
  close(c);
  close(srv);
}

TEST(NetLab, LoopbackIsUpInEveryHost) {
  MAKE_LAB(lab, 2);
  for (int i = 0; i < lab->size(); ++i) {
    int port = 0;
    int srv = listen_in(lab->ns(i), "127.0.0.1", &port);
    ASSERT_GE(srv, 0);
    std::string err;
    int c = connect_from(lab->ns(i), "127.0.0.1", port, 1s, &err);
    EXPECT_GE(c, 0) << "host " << i << " loopback: " << err;
    if (c >= 0) close(c);
    close(srv);
  }
}

TEST(NetLab, LinkDownCutsHostOffAndLinkUpRestores) {
  MAKE_LAB(lab, 2);
  int port = 0;
  int srv = listen_in(lab->ns(0), lab->addr(0), &port);
  ASSERT_GE(srv, 0);
  std::string err;
  int c = connect_retrying(lab->ns(1), lab->addr(0), port, 5s, &err);
  ASSERT_GE(c, 0) << "before link_down: " << err;
  close(c);

  lab->link_down(1);
  auto t0 = std::chrono::steady_clock::now();
  c = connect_from(lab->ns(1), lab->addr(0), port, 1s, &err);
  EXPECT_LT(c, 0) << "host 1 still reaches host 0 after link_down(1)";
  if (c >= 0) close(c);
  EXPECT_LT(std::chrono::steady_clock::now() - t0, 2s);

  lab->link_up(1);
  c = connect_retrying(lab->ns(1), lab->addr(0), port, 5s, &err);
  EXPECT_GE(c, 0) << "after link_up: " << err;
  if (c >= 0) close(c);
  close(srv);
}

// A partition: hosts 0 and 1 reach each other and not host 2 (nor it
// them); healed, everyone reaches everyone again.
TEST(NetLab, APartitionSplitsTheHostsInTwoUntilHealed) {
  MAKE_LAB(lab, 3);
  int port0 = 0, port2 = 0;
  int srv0 = listen_in(lab->ns(0), lab->addr(0), &port0);
  int srv2 = listen_in(lab->ns(2), lab->addr(2), &port2);
  ASSERT_GE(srv0, 0);
  ASSERT_GE(srv2, 0);
  std::string err;
  lab->partition({0, 1});
  int c = connect_retrying(lab->ns(1), lab->addr(0), port0, 5s, &err);
  EXPECT_GE(c, 0) << "host 1 no longer reaches host 0 on its side: " << err;
  if (c >= 0) close(c);
  c = connect_from(lab->ns(1), lab->addr(2), port2, 1s, &err);
  EXPECT_LT(c, 0) << "host 1 reaches host 2 across the partition";
  if (c >= 0) close(c);
  c = connect_from(lab->ns(2), lab->addr(0), port0, 1s, &err);
  EXPECT_LT(c, 0) << "host 2 reaches host 0 across the partition";
  if (c >= 0) close(c);
  lab->heal_partition();
  c = connect_retrying(lab->ns(1), lab->addr(2), port2, 5s, &err);
  EXPECT_GE(c, 0) << "healed, host 1 still does not reach host 2: " << err;
  if (c >= 0) close(c);
  close(srv0);
  close(srv2);
}

TEST(NetLab, WrapRunsInsideTheHost) {
  MAKE_LAB(lab, 2);
  int code = -1;
  std::string out = run_out(lab->wrap(1, {"ip", "-4", "-o", "addr", "show"}), &code);
  EXPECT_EQ(code, 0);
  EXPECT_NE(out.find(" " + lab->addr(1) + "/24 "), std::string::npos) << out;
  EXPECT_EQ(out.find(" " + lab->addr(0) + "/24 "), std::string::npos) << out;
}

TEST(NetLab, TwoLabsGetDistinctNamesAndSubnets) {
  MAKE_LAB(a, 1);
  std::unique_ptr<NetLab> b = NetLab::create(1, &why_not);
  ASSERT_TRUE(b) << why_not;
  EXPECT_NE(a->ns(0), b->ns(0));
  EXPECT_NE(a->addr(0), b->addr(0));
  EXPECT_EQ(a->addr(0).rfind("10.", 0), 0u);
}

TEST(NetLab, BadHostCountIsRefused) {
  std::string why_not;
  EXPECT_FALSE(NetLab::create(0, &why_not));
  EXPECT_FALSE(why_not.empty());
}

TEST(NetLab, DestroyRemovesEverything) {
  std::vector<std::string> names;
  {
    MAKE_LAB(lab, 2);
    for (int i = 0; i < lab->size(); ++i) names.push_back(lab->ns(i));
    int code = -1;
    std::string listed = run_out({"ip", "netns", "list"}, &code);
    for (const auto& n : names) EXPECT_NE(listed.find(n), std::string::npos) << n << " not made";
  }
  int code = -1;
  std::string listed = run_out({"ip", "netns", "list"}, &code);
  ASSERT_EQ(code, 0);
  std::string prefix = names[0].substr(0, names[0].rfind('-'));  // "ddpt-<pid>-<n>"
  EXPECT_EQ(listed.find(prefix + "-"), std::string::npos) << listed;
  for (const auto& n : names) EXPECT_NE(access(("/run/netns/" + n).c_str(), F_OK), 0) << n;
}

}  // namespace
