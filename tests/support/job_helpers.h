// Small helpers the end-to-end tests share: substring checks, per-test temp
// paths, the parameter checksum of train's --summary-json, and waiting for
// train's step lines.
#pragma once

#include <netinet/in.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <optional>
#include <random>
#include <regex>
#include <string>
#include <thread>
#include <vector>

#include "support/process.h"

namespace ddptest {

// A socket listening on 127.0.0.1 at a port the kernel picked, for as long
// as it lives (or until close()): what a live agent's listening port looks
// like to a probe or to `ddprun status`.
class LoopbackListener {
 public:
  LoopbackListener() {
    fd_ = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    socklen_t len = sizeof(a);
    if (fd_ < 0 || bind(fd_, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0 || listen(fd_, 4) != 0 ||
        getsockname(fd_, reinterpret_cast<sockaddr*>(&a), &len) != 0) {
      close();
      return;
    }
    address_ = "127.0.0.1:" + std::to_string(ntohs(a.sin_port));
  }
  ~LoopbackListener() { close(); }
  LoopbackListener(const LoopbackListener&) = delete;
  LoopbackListener& operator=(const LoopbackListener&) = delete;
  // "" when it could not listen.
  const std::string& address() const { return address_; }
  void close() {
    if (fd_ >= 0) ::close(fd_);
    fd_ = -1;
  }

 private:
  int fd_ = -1;
  std::string address_;
};

// A loopback port nobody listens on right now (for an explicit
// --rdzv-endpoint, which the test's nodes bind later). It is drawn at random
// below the kernel's ephemeral range (ip_local_port_range): a port the kernel
// hands out itself - bind(port 0) or the local end of any outgoing connection
// of a test running beside this one - would be free here and taken a moment
// later (CI saw both nodes of a job fail to host their rendezvous so).
inline int free_port() {
  int ephemeral_low = 32768;
  std::ifstream("/proc/sys/net/ipv4/ip_local_port_range") >> ephemeral_low;
  const int low = 10000, high = ephemeral_low > low + 1000 ? ephemeral_low : 30000;
  std::random_device seed;
  std::uniform_int_distribution<int> pick(low, high - 1);
  for (;;) {
    const int port = pick(seed);
    int fd = socket(AF_INET, SOCK_STREAM, 0);
    sockaddr_in a{};
    a.sin_family = AF_INET;
    a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
    a.sin_port = htons(static_cast<uint16_t>(port));
    const bool free = bind(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) == 0;
    close(fd);
    if (free) return port;
  }
}

#ifdef DDPRUN_BIN
// The argv of `ddprun ARGS...` (test targets that define DDPRUN_BIN).
inline std::vector<std::string> ddprun(std::vector<std::string> args) {
  args.insert(args.begin(), DDPRUN_BIN);
  return args;
}
#endif

#if defined(PYTHON_BIN) && defined(TORCHRUN_SCRIPT)
// PyTorch's own torchrun with args, the reference the compatibility tests
// compare with; nothing when this lane has none. TORCHRUN_SCRIPT empty:
// PYTHON_BIN's (python -m torch.distributed.run, the PyTorch 2.x lane);
// else a script that runs it (1.13's through ../shared/anchors/torchrun-compat.py).
inline std::optional<std::vector<std::string>> torchrun(const std::vector<std::string>& args) {
  std::vector<std::string> argv{PYTHON_BIN};
  if (std::string(TORCHRUN_SCRIPT).empty()) {
    argv.insert(argv.end(), {"-m", "torch.distributed.run"});
  } else if (std::filesystem::exists(TORCHRUN_SCRIPT)) {
    argv.push_back(TORCHRUN_SCRIPT);
  } else {
    return std::nullopt;
  }
  argv.insert(argv.end(), args.begin(), args.end());
  return argv;
}
#endif

// How many times what occurs in text (overlapping or not).
inline int occurrences(const std::string& text, const std::string& what) {
  int n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

inline bool contains(const std::string& hay, const std::string& needle) {
  return hay.find(needle) != std::string::npos;
}

// A fresh (removed) path under the temp folder, unique to this process.
inline std::filesystem::path temp_path(const std::string& suite, const std::string& name) {
  std::filesystem::path p = std::filesystem::temp_directory_path() /
                            ("ddprun-" + suite + "-" + name + "-" + std::to_string(getpid()));
  std::filesystem::remove_all(p);
  return p;
}

// The "param_checksum" train wrote to --summary-json; empty if none.
inline std::string checksum_in(const std::filesystem::path& summary) {
  std::ifstream in(summary);
  std::string json((std::istreambuf_iterator<char>(in)), {});
  std::smatch m;
  if (!std::regex_search(json, m, std::regex(R"re("param_checksum": "([0-9a-f]{16})")re"))) return "";
  return m[1];
}

// The "final_loss" train wrote to --summary-json, as written; empty if none.
inline std::string final_loss_in(const std::filesystem::path& summary) {
  std::ifstream in(summary);
  std::string json((std::istreambuf_iterator<char>(in)), {});
  std::smatch m;
  if (!std::regex_search(json, m, std::regex(R"re("final_loss": ([-+0-9.eE]+))re"))) return "";
  return m[1];
}

// Waits for rank 0's "step N done" (train --print-steps) with N >= step.
inline bool reach_step(Process& p, int step,
                       std::chrono::milliseconds timeout = std::chrono::seconds(90)) {
  return p.wait_for_line(
             [&](const std::string& l) {
               std::smatch m;
               return std::regex_search(l, m, std::regex(R"(\]:step (\d+) done)")) &&
                      std::stoi(m[1]) >= step;
             },
             timeout)
      .has_value();
}

// How the checkpoint files of `step` begin: "ckpt-000000000020-" (the crc
// follows; worker_lib's checkpoint_file_name).
inline std::string checkpoint_file_prefix(long long step) {
  char prefix[32];
  std::snprintf(prefix, sizeof(prefix), "ckpt-%012lld-", step);
  return prefix;
}

// Waits until dir holds a checkpoint file whose name begins with `prefix`
// (written in the background, it lands some steps after the save): the
// file's rename is the event. False after timeout.
inline bool wait_for_checkpoint_named(const std::filesystem::path& dir, const std::string& prefix,
                                      std::chrono::milliseconds timeout) {
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  while (std::chrono::steady_clock::now() < deadline) {
    std::error_code ec;
    for (const auto& e : std::filesystem::directory_iterator(dir, ec)) {
      const std::string name = e.path().filename().string();
      if (name.rfind(prefix, 0) == 0 && name.size() > 3 && name.compare(name.size() - 3, 3, ".pt") == 0) return true;
    }
    std::this_thread::sleep_for(std::chrono::milliseconds(10));  // polling a folder: nothing to wake on
  }
  return false;
}
// ... the checkpoint file of `step`.
inline bool wait_for_checkpoint(const std::filesystem::path& dir, long long step,
                                std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  return wait_for_checkpoint_named(dir, checkpoint_file_prefix(step), timeout);
}

// Waits until dir holds any checkpoint file (of whichever step).
inline bool wait_for_any_checkpoint(const std::filesystem::path& dir,
                                    std::chrono::milliseconds timeout = std::chrono::seconds(60)) {
  return wait_for_checkpoint_named(dir, "ckpt-", timeout);
}

// An agent's worker (not a standby it warmed up); 0 if none.
inline pid_t worker_of(Process& agent) {
  for (pid_t c : children_of(agent.pid())) {
    if (!started_as_standby(c)) return c;
  }
  return 0;
}

// The text of the file ddprun named for every rank's stacks in `err`
// ("every rank's stacks, all threads: FILE"), removed once read; "" when
// none.
inline std::string stacks_file(const std::string& err) {
  std::smatch m;
  if (!std::regex_search(err, m, std::regex(R"(every rank's stacks, all threads: (\S+))"))) return "";
  std::ifstream in(m[1].str());
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  std::filesystem::remove(m[1].str());
  return text;
}

// ddprun's workers, in local-rank order: its children but the warm
// standbys it keeps for a heal or a restart, and but a child that is still
// between its clone and its exec (a standby being started shares ddprun's
// memory until then, so its environment has no LOCAL_RANK yet).
inline std::vector<pid_t> workers_of(pid_t ddprun) {
  std::vector<pid_t> out;
  for (pid_t c : children_of(ddprun)) {
    if (!started_as_standby(c) && has_env(c, "LOCAL_RANK")) out.push_back(c);
  }
  std::sort(out.begin(), out.end());  // spawned in local-rank order: pids rise
  return out;
}

// Runs argv (a `ddprun status ...`, say) again and again until it exits 0
// with `want` in its stdout, for at most `patience`; returns the last run.
// For a state that nothing announces on a stream the test reads (what the
// rendezvous knows): polling the condition, not sleeping for it.
inline Finished run_until(const std::vector<std::string>& argv, const std::string& want, const EnvChanges& env = {},
                          std::chrono::milliseconds patience = std::chrono::seconds(60)) {
  Finished f;
  const auto deadline = std::chrono::steady_clock::now() + patience;
  do {
    f = run(argv, env, std::chrono::seconds(30));
    if (f.exit_code == 0 && contains(f.out, want)) return f;
    std::this_thread::sleep_for(std::chrono::milliseconds(100));  // the next poll, not a synchronisation
  } while (std::chrono::steady_clock::now() < deadline);
  return f;
}

}  // namespace ddptest
