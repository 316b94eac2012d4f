#include "launcher/job_file.h"

#include <dirent.h>
#include <fcntl.h>
#include <signal.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <map>
#include <sstream>
#include <stdexcept>

#include "rendezvous/store/host_port.h"

namespace ddprun {
namespace {

constexpr const char* kPrefix = "job-";
constexpr size_t kMaxFileBytes = 64 * 1024;

std::string errno_text() { return std::strerror(errno); }

// Whether the file (or folder) behind fd is this user's and private.
std::string unsafe_reason(const struct stat& st) {
  if (st.st_uid != geteuid()) return "owned by uid " + std::to_string(st.st_uid) + ", not us";
  if (st.st_mode & (S_IRWXG | S_IRWXO)) return "open to other users (mode " + [&] {
      char buf[8];
      std::snprintf(buf, sizeof(buf), "%04o", static_cast<unsigned>(st.st_mode & 07777));
      return std::string(buf);
    }() + ")";
  return "";
}

// Values are one line each: no newline may sneak into one.
bool one_line(const std::string& v) { return v.find('\n') == std::string::npos; }

std::string serialize(const JobFileEntry& e) {
  std::string out;
  auto line = [&](const char* key, const std::string& v) {
    if (!one_line(v)) throw std::runtime_error(std::string("job file: ") + key + " holds a newline");
    out += std::string(key) + "=" + v + "\n";
  };
  line("run_id", e.run_id);
  line("endpoint", e.endpoint);
  line("token", e.auth.token);
  line("tls_cert", e.auth.tls.cert);
  line("tls_key", e.auth.tls.key);
  line("tls_ca", e.auth.tls.ca);
  line("pid", std::to_string(e.pid));
  line("start_time", e.start_time);
  line("netns", e.netns);
  return out;
}

std::optional<JobFileEntry> parse(const std::string& text) {
  std::map<std::string, std::string> kv;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) {
    const auto eq = l.find('=');
    if (eq == std::string::npos) return std::nullopt;
    kv[l.substr(0, eq)] = l.substr(eq + 1);
  }
  JobFileEntry e;
  e.run_id = kv["run_id"];
  e.endpoint = kv["endpoint"];
  e.auth.token = kv["token"];
  e.auth.tls.cert = kv["tls_cert"];
  e.auth.tls.key = kv["tls_key"];
  e.auth.tls.ca = kv["tls_ca"];
  e.start_time = kv["start_time"];
  e.netns = kv["netns"];
  char* end = nullptr;
  const std::string pid = kv["pid"];
  e.pid = std::strtol(pid.c_str(), &end, 10);
  if (pid.empty() || *end != '\0' || e.pid <= 0 || e.run_id.empty() || e.endpoint.empty()) {
    return std::nullopt;
  }
  return e;
}

// Whether the process that wrote e still runs (and is the same process: a
// pid reused since has another start time).
bool alive(const JobFileEntry& e) {
  if (kill(static_cast<pid_t>(e.pid), 0) != 0 && errno == ESRCH) return false;
  return process_start_time(e.pid) == e.start_time;
}

}  // namespace

std::string process_start_time(long pid) {
  std::ifstream in("/proc/" + std::to_string(pid) + "/stat");
  std::string stat;
  if (!std::getline(in, stat)) return "";
  // "pid (comm) state ppid ...": comm may hold spaces and ')'; fields
  // after the last ')' start at 3 (state); starttime is field 22.
  const auto close = stat.rfind(')');
  if (close == std::string::npos) return "";
  std::istringstream rest(stat.substr(close + 1));
  std::string field;
  for (int i = 3; i <= 22 && rest >> field; ++i) {
    if (i == 22) return field;
  }
  return "";
}

std::string own_netns() {
  char buf[64];
  const ssize_t n = readlink("/proc/self/ns/net", buf, sizeof(buf) - 1);
  return n > 0 ? std::string(buf, static_cast<size_t>(n)) : "";
}

namespace {

// The inodes of the sockets listening on TCP `port` in the network
// namespace of `pid` (its /proc/PID/net/tcp and tcp6).
std::vector<std::string> listening_inodes(long pid, int port) {
  std::vector<std::string> out;
  char hex_port[16];
  std::snprintf(hex_port, sizeof(hex_port), "%04X", static_cast<unsigned>(port) & 0xFFFFu);
  for (const char* table : {"tcp", "tcp6"}) {
    std::ifstream in("/proc/" + std::to_string(pid) + "/net/" + table);
    std::string line;
    std::getline(in, line);  // the header
    while (std::getline(in, line)) {
      // sl local_address rem_address st tx_queue:rx_queue tr:tm->when retrnsmt uid timeout inode
      std::istringstream f(line);
      std::string sl, local, remote, state, queues, timer, retransmits, uid, timeout, inode;
      if (!(f >> sl >> local >> remote >> state >> queues >> timer >> retransmits >> uid >> timeout >> inode)) continue;
      const auto colon = local.rfind(':');
      if (state == "0A" && colon != std::string::npos && local.substr(colon + 1) == hex_port) out.push_back(inode);
    }
  }
  return out;
}

// Whether process pid holds one of these socket inodes (its fd table).
bool holds_socket(long pid, const std::vector<std::string>& inodes) {
  const std::string fds = "/proc/" + std::to_string(pid) + "/fd";
  DIR* d = opendir(fds.c_str());
  if (!d) return false;
  bool found = false;
  while (dirent* ent = readdir(d)) {
    char target[64];
    const ssize_t n = readlink((fds + "/" + ent->d_name).c_str(), target, sizeof(target) - 1);
    if (n <= 0) continue;
    const std::string t(target, static_cast<size_t>(n));
    for (const auto& inode : inodes) found = found || t == "socket:[" + inode + "]";
  }
  closedir(d);
  return found;
}

}  // namespace

std::string why_not_contacted(const JobFileEntry& e) {
  const std::string where = " (" + e.endpoint + "): not contacted";
  if (e.netns.empty() || e.netns != own_netns()) {
    return "its ddprun (pid " + std::to_string(e.pid) + ") runs in another network namespace" + where +
           " (run `ddprun status` there, or give --rdzv-endpoint and --rdzv-id)";
  }
  struct stat st {};
  if (stat(("/proc/" + std::to_string(e.pid)).c_str(), &st) != 0 || st.st_uid != geteuid()) {
    return "its ddprun (pid " + std::to_string(e.pid) + ") is not this user's" + where;
  }
  HostPort hp;
  const int port = split_host_port(e.endpoint, hp) == HostPortError::kNone ? parse_port(hp.port).value_or(0) : 0;
  if (port <= 0 || !holds_socket(e.pid, listening_inodes(e.pid, port))) {
    return "its rendezvous is not served by its ddprun (pid " + std::to_string(e.pid) + ") here" + where +
           " (another host's, or give --rdzv-endpoint and --rdzv-id)";
  }
  return "";
}

std::string job_dir() {
  // $XDG_RUNTIME_DIR (/run/user/UID: the user's, 0700, gone at logout) when
  // it is a sane absolute path; else a folder of our own under /tmp.
  if (const char* xdg = getenv("XDG_RUNTIME_DIR"); xdg && xdg[0] == '/') {
    struct stat st {};
    if (stat(xdg, &st) == 0 && S_ISDIR(st.st_mode) && unsafe_reason(st).empty()) {
      return std::string(xdg) + "/ddprun";
    }
  }
  return "/tmp/ddprun-" + std::to_string(geteuid());
}

int open_job_dir(const std::string& dir, bool create) {
  if (create && mkdir(dir.c_str(), 0700) != 0 && errno != EEXIST) {
    throw std::runtime_error("cannot make " + dir + ": " + errno_text());
  }
  // O_NOFOLLOW: a link planted at that path (say by another user, in /tmp)
  // is refused, never followed.
  const int fd = open(dir.c_str(), O_RDONLY | O_DIRECTORY | O_NOFOLLOW | O_CLOEXEC);
  if (fd < 0) {
    const int err = errno;
    if (err == ENOENT) return -1;
    throw std::runtime_error("cannot open " + dir + ": " +
                             (err == ELOOP || err == ENOTDIR ? std::string("not a folder (a link?)")
                                                             : std::strerror(err)));
  }
  struct stat st {};
  fstat(fd, &st);
  if (std::string why = unsafe_reason(st); !why.empty()) {
    close(fd);
    throw std::runtime_error(dir + " is " + why + "; remove it (ddprun keeps job tokens there)");
  }
  return fd;
}

JobFile::JobFile(const JobFileEntry& entry, const std::string& dir) {
  dir_fd_ = open_job_dir(dir, true);
  if (dir_fd_ < 0) throw std::runtime_error("cannot open " + dir);
  name_ = kPrefix + std::to_string(entry.pid);
  path_ = dir + "/" + name_;
  const std::string tmp = name_ + ".tmp";
  const std::string text = serialize(entry);
  // Written whole under a temporary name, then renamed: a reader sees the
  // whole file or none. Only we can write in the folder, so a leftover of
  // ours (a reused pid) is all that can be in the way.
  unlinkat(dir_fd_, tmp.c_str(), 0);
  const int fd = openat(dir_fd_, tmp.c_str(),
                        O_WRONLY | O_CREAT | O_EXCL | O_NOFOLLOW | O_CLOEXEC, 0600);
  if (fd < 0) {
    const std::string err = errno_text();
    close(dir_fd_);
    throw std::runtime_error("cannot write " + dir + "/" + tmp + ": " + err);
  }
  const bool written = write(fd, text.data(), text.size()) == static_cast<ssize_t>(text.size());
  close(fd);
  if (!written || renameat(dir_fd_, tmp.c_str(), dir_fd_, name_.c_str()) != 0) {
    const std::string err = errno_text();
    unlinkat(dir_fd_, tmp.c_str(), 0);
    close(dir_fd_);
    throw std::runtime_error("cannot write " + path_ + ": " + err);
  }
}

std::string asked_stacks_path(const std::string& dir, long pid) {
  return dir + "/stacks-" + std::to_string(pid) + ".txt";
}

JobFile::~JobFile() {
  unlinkat(dir_fd_, name_.c_str(), 0);
  const std::string stacks = "stacks-" + std::to_string(getpid()) + ".txt";
  unlinkat(dir_fd_, stacks.c_str(), 0);
  unlinkat(dir_fd_, (stacks + ".err").c_str(), 0);
  close(dir_fd_);
}

std::vector<JobFileEntry> running_jobs(std::vector<std::string>& warnings, const std::string& dir) {
  std::vector<JobFileEntry> jobs;
  const int dir_fd = open_job_dir(dir, false);
  if (dir_fd < 0) return jobs;  // no folder: no job ever ran here
  const int list_fd = dup(dir_fd);
  DIR* d = list_fd >= 0 ? fdopendir(list_fd) : nullptr;
  if (!d) {
    if (list_fd >= 0) close(list_fd);
    close(dir_fd);
    throw std::runtime_error("cannot list " + dir + ": " + errno_text());
  }
  while (dirent* ent = readdir(d)) {
    const std::string name = ent->d_name;
    if (name.rfind(kPrefix, 0) != 0 || name.find('.') != std::string::npos) continue;
    const std::string path = dir + "/" + name;
    const int fd = openat(dir_fd, name.c_str(), O_RDONLY | O_NOFOLLOW | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
      warnings.push_back("skipping " + path + ": " + errno_text());
      continue;
    }
    struct stat st {};
    fstat(fd, &st);
    std::string why = !S_ISREG(st.st_mode) ? "not a regular file" : unsafe_reason(st);
    if (why.empty() && static_cast<size_t>(st.st_size) > kMaxFileBytes) why = "too large";
    std::string text;
    if (why.empty()) {
      text.resize(static_cast<size_t>(st.st_size));
      if (read(fd, text.data(), text.size()) != static_cast<ssize_t>(text.size())) why = "short read";
    }
    close(fd);
    std::optional<JobFileEntry> e;
    if (why.empty() && !(e = parse(text))) why = "not a job file";
    if (!why.empty()) {
      warnings.push_back("skipping " + path + ": " + why);
      continue;
    }
    if (!alive(*e)) {
      unlinkat(dir_fd, name.c_str(), 0);  // its ddprun is gone (killed)
      continue;
    }
    jobs.push_back(std::move(*e));
  }
  closedir(d);
  close(dir_fd);
  std::sort(jobs.begin(), jobs.end(),
            [](const JobFileEntry& a, const JobFileEntry& b) { return a.pid < b.pid; });
  return jobs;
}

}  // namespace ddprun
