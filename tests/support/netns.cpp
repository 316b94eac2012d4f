// NetLab: see netns.h.
#include "support/netns.h"

#include <fcntl.h>
#include <sys/wait.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <stdexcept>

namespace ddptest {
namespace {

std::atomic<unsigned> lab_counter{0};

// What a finished command said: exit status and its stdout+stderr together.
struct Outcome {
  bool ok = false;
  std::string text;
};

// Runs argv (argv[0] an absolute path) without a shell and waits for it.
Outcome run_cmd(const std::vector<std::string>& argv) {
  std::vector<char*> cargv;
  for (const auto& a : argv) cargv.push_back(const_cast<char*>(a.c_str()));
  cargv.push_back(nullptr);
  int p[2];
  if (pipe2(p, O_CLOEXEC) != 0) return {false, std::string("pipe: ") + strerror(errno)};
  pid_t pid = fork();
  if (pid < 0) {
    close(p[0]);
    close(p[1]);
    return {false, std::string("fork: ") + strerror(errno)};
  }
  if (pid == 0) {  // child: only async-signal-safe calls from here on
    int devnull = open("/dev/null", O_RDONLY);
    if (devnull >= 0) dup2(devnull, 0);
    dup2(p[1], 1);
    dup2(p[1], 2);
    execv(cargv[0], cargv.data());
    _exit(127);
  }
  close(p[1]);
  Outcome o;
  char buf[512];
  for (;;) {
    ssize_t n = read(p[0], buf, sizeof buf);
    if (n > 0) o.text.append(buf, n);
    else if (n < 0 && errno == EINTR) continue;
    else break;
  }
  close(p[0]);
  int status = 0;
  while (waitpid(pid, &status, 0) < 0 && errno == EINTR) {
  }
  o.ok = WIFEXITED(status) && WEXITSTATUS(status) == 0;
  if (!o.ok && o.text.empty())
    o.text = WIFEXITED(status) ? "exit code " + std::to_string(WEXITSTATUS(status))
                               : "killed by signal " + std::to_string(WTERMSIG(status));
  while (!o.text.empty() && (o.text.back() == '\n' || o.text.back() == ' ')) o.text.pop_back();
  for (char& c : o.text)
    if (c == '\n') c = ' ';  // keep reasons on one line
  return o;
}

std::string join(const std::vector<std::string>& v) {
  std::string s;
  for (const auto& a : v) s += (s.empty() ? "" : " ") + a;
  return s;
}

std::string find_ip() {
  for (const char* p : {"/usr/sbin/ip", "/sbin/ip", "/usr/bin/ip", "/bin/ip"})
    if (access(p, X_OK) == 0) return p;
  return "";
}

std::string base36(unsigned long v) {
  const char* digits = "0123456789abcdefghijklmnopqrstuvwxyz";
  std::string s;
  do {
    s.insert(s.begin(), digits[v % 36]);
    v /= 36;
  } while (v);
  return s;
}

}  // namespace

std::unique_ptr<NetLab> NetLab::create(int hosts, std::string* why_not) {
  std::string dummy;
  std::string& why = why_not ? *why_not : dummy;
  why.clear();
  if (hosts < 1 || hosts > 253) {
    why = "NetLab: host count must be 1..253, got " + std::to_string(hosts);
    return nullptr;
  }
  if (geteuid() != 0) {
    why = "NetLab: needs root to make network namespaces (euid " + std::to_string(geteuid()) + ")";
    return nullptr;
  }
  if (access("/proc/self/ns/net", F_OK) != 0) {
    why = "NetLab: kernel has no network namespaces (/proc/self/ns/net missing)";
    return nullptr;
  }
  std::string ip = find_ip();
  if (ip.empty()) {
    why = "NetLab: no `ip` binary (install iproute2)";
    return nullptr;
  }

  std::unique_ptr<NetLab> lab(new NetLab());
  lab->hosts_ = hosts;
  lab->ip_ = ip;
  unsigned long pid = static_cast<unsigned long>(getpid());
  unsigned count = lab_counter.fetch_add(1);
  // Namespace names may be long; interface names are at most 15 characters,
  // so they use the short base-36 tag, e.g. "v2hwb4x0b12".
  lab->prefix_ = "ddpt-" + std::to_string(pid) + "-" + std::to_string(count);
  lab->tag_ = base36(pid) + "x" + base36(count);
  lab->bridge_ns_ = lab->prefix_ + "-br";
  lab->bridge_if_ = "br" + lab->tag_;
  if (lab->port_if(hosts - 1).size() > 15 || lab->host_if(hosts - 1).size() > 15) {
    why = "NetLab: interface names too long (too many labs in this process?)";
    return nullptr;
  }
  // Subnet 10.A.B.0/24: distinct for every lab of this process, and mixed
  // with the pid so parallel processes very likely differ too (the labs are
  // isolated from each other anyway, so a clash would do no harm).
  unsigned v = (static_cast<unsigned>(pid) * 40503u + count) & 0xffffu;
  lab->subnet_ = "10." + std::to_string(v >> 8) + "." + std::to_string(v & 0xff) + ".";

  // Runs one `ip` command; on failure fills `why` (the lab's destructor then
  // removes what was made when `lab` is dropped).
  auto ip_do = [&](std::vector<std::string> args) {
    args.insert(args.begin(), ip);
    Outcome o = run_cmd(args);
    if (!o.ok) why = "NetLab: `" + join(args) + "` failed: " + o.text;
    return o.ok;
  };
  auto add_ns = [&](const std::string& name) {
    if (!ip_do({"netns", "add", name})) return false;
    lab->made_.push_back(name);
    return true;
  };

  const std::string& br = lab->bridge_ns_;
  bool ok = add_ns(br) &&
            ip_do({"-n", br, "link", "add", lab->bridge_if_, "type", "bridge"}) &&
            ip_do({"-n", br, "link", "set", lab->bridge_if_, "up"});
  for (int i = 0; ok && i < hosts; ++i) {
    std::string h = lab->ns(i);
    // The veth pair is made inside host i with its peer sent straight to the
    // bridge namespace, so neither end ever appears in the root namespace.
    ok = add_ns(h) && ip_do({"-n", h, "link", "set", "lo", "up"}) &&
         ip_do({"-n", h, "link", "add", lab->host_if(i), "type", "veth", "peer", "name",
                lab->port_if(i), "netns", br}) &&
         ip_do({"-n", br, "link", "set", lab->port_if(i), "master", lab->bridge_if_}) &&
         ip_do({"-n", br, "link", "set", lab->port_if(i), "up"}) &&
         ip_do({"-n", h, "addr", "add", lab->addr(i) + "/24", "dev", lab->host_if(i)}) &&
         ip_do({"-n", h, "link", "set", lab->host_if(i), "up"});
  }
  if (!ok) return nullptr;  // ~NetLab cleans up
  return lab;
}

NetLab::~NetLab() {
  // Deleting a namespace destroys the interfaces in it, and a veth pair dies
  // with either end, so removing the namespaces removes everything.
  for (auto it = made_.rbegin(); it != made_.rend(); ++it) {
    Outcome o = run_cmd({ip_, "netns", "delete", *it});
    if (!o.ok) fprintf(stderr, "NetLab: cannot delete netns %s: %s\n", it->c_str(), o.text.c_str());
  }
}

std::string NetLab::ns(int i) const { return prefix_ + "-h" + std::to_string(i); }
std::string NetLab::addr(int i) const { return subnet_ + std::to_string(i + 1); }
std::string NetLab::host_if(int i) const { return "v" + tag_ + "h" + std::to_string(i); }
std::string NetLab::port_if(int i) const { return "v" + tag_ + "b" + std::to_string(i); }

std::vector<std::string> NetLab::wrap(int i, std::vector<std::string> argv) const {
  std::vector<std::string> full = {ip_, "netns", "exec", ns(i)};
  full.insert(full.end(), argv.begin(), argv.end());
  return full;
}

void NetLab::link_down(int i) { set_port(i, "down"); }
void NetLab::link_up(int i) { set_port(i, "up"); }

void NetLab::set_port(int i, const char* state) {
  if (i < 0 || i >= hosts_) throw std::out_of_range("NetLab: no host " + std::to_string(i));
  std::vector<std::string> cmd = {ip_, "-n", bridge_ns_, "link", "set", port_if(i), state};
  Outcome o = run_cmd(cmd);
  if (!o.ok) throw std::runtime_error("NetLab: `" + join(cmd) + "` failed: " + o.text);
}

void NetLab::set_master(int i, const std::string& bridge) {
  if (i < 0 || i >= hosts_) throw std::out_of_range("NetLab: no host " + std::to_string(i));
  std::vector<std::string> cmd = {ip_, "-n", bridge_ns_, "link", "set", port_if(i), "master", bridge};
  Outcome o = run_cmd(cmd);
  if (!o.ok) throw std::runtime_error("NetLab: `" + join(cmd) + "` failed: " + o.text);
}

void NetLab::partition(const std::vector<int>& side) {
  heal_partition();
  if (split_if_.empty()) {
    const std::string name = "bs" + tag_;
    for (std::vector<std::string> cmd : {std::vector<std::string>{ip_, "-n", bridge_ns_, "link", "add", name, "type", "bridge"},
                                         std::vector<std::string>{ip_, "-n", bridge_ns_, "link", "set", name, "up"}}) {
      Outcome o = run_cmd(cmd);
      if (!o.ok) throw std::runtime_error("NetLab: `" + join(cmd) + "` failed: " + o.text);
    }
    split_if_ = name;
  }
  for (int i : side) {
    set_master(i, split_if_);
    split_off_.push_back(i);
  }
}

void NetLab::heal_partition() {
  for (int i : split_off_) set_master(i, bridge_if_);
  split_off_.clear();
}

}  // namespace ddptest
