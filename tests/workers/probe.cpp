// A worker for launcher tests that needs no LibTorch. Its first argument
// picks what it does:
//   env                print the launch variables as KEY=VALUE lines
//   exit CODE          print to stdout and stderr, then exit with CODE
//   fail-on-first-attempt  exit 7 when TORCHELASTIC_RESTART_COUNT is 0, else 0
//   throw MESSAGE      throw an uncaught exception (error file handler on)
//   wait               print "ready PID", then wait for signals: print
//                      "got SIGNAME" for SIGUSR1/SIGUSR2, exit 0 on SIGTERM
//                      (or after printing, if --ignore-term is given, keep
//                      waiting: only SIGKILL ends it)
//   spam N             print N long lines in pieces, to test line integrity
//   standby-env        wait as a standby worker (ddp::wait_if_standby), then
//                      print RANK and PROBE_EXTRA
//   fail-rank RANK CODE    the worker of that rank exits with CODE once every
//                      other worker is ready (a barrier through the job's
//                      store); the others wait for signals like `wait`
//   intrude            write into the job's store as a stranger would:
//                      without the token, with a wrong one, then with the
//                      job's; print "CASE: ok" or "CASE: refused: ERROR"
//   flood N CODE       print N lines of 1000 characters to stdout as fast as
//                      it can (N < 0: for ever), then exit with CODE
//   error-file KIND    make TORCHELASTIC_ERROR_FILE hostile, then exit 1:
//                      fifo (a FIFO), zero (a link to /dev/zero), escapes
//                      (a message and a stderr line full of escape sequences)
//   beat MODE...       beat the heartbeat (DDPRUN_HEARTBEAT_FILE) every 20 ms
//                      from a thread, and do MODE... as above
//   progress STEPS MS [fail-first]  a training loop without LibTorch: print
//                      "step N" and report it in its heartbeat slot
//                      (channel::write_progress), and beat, every MS ms, with a total,
//                      samples (64 a step), loss, epoch (10 steps each) and a
//                      checkpoint saved every 5 steps; a restart reports it
//                      restored step 4 and goes on from 5. fail-first: the
//                      first attempt exits 7 after step 7
//   report STEP SAVED MODE...  report training progress into this rank's
//                      heartbeat slot (channel::write_progress): step STEP
//                      of 1000, epoch 1, loss 0.25, checkpoint saved at
//                      SAVED (and resumed from SAVED on a restart); then do
//                      MODE... as above
//   fail-first MODE... exit 7 on the first attempt; later ones do MODE...
//   leave-child FILE MODE...  first start a grandchild that leaves the
//                      worker's session (setsid), ignores SIGTERM, SIGINT and
//                      SIGHUP, writes its pid to FILE and sleeps for ever;
//                      then do MODE... as above
//   shm-leak           make a shared-memory segment named as a worker's
//                      (channel/shm_names.h), print "segment NAME" and exit
//                      without unlinking it, as a rank 0 killed in the
//                      middle of setting up its group would
//   shm-peer-exits     ranks join a shared-memory group (ShmGroup) through
//                      the job's store; rank 1 then exits with 3, rank 0
//                      ignores SIGTERM and all_reduces (timeout 60 s): it
//                      prints "shm error after S s: MESSAGE"
#include <fcntl.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <string.h>
#include <unistd.h>

#include <cstdio>
#include <chrono>
#include <cstdlib>
#include <stdexcept>
#include <string>
#include <thread>
#include <vector>

#include <fcntl.h>
#include <sys/mman.h>
#include <time.h>

#include "channel/heartbeat_layout.h"
#include "channel/shm_names.h"
#include "comm/shm_group.h"
#include "ddp/error_file.h"
#include "base/heartbeat.h"
#include "launch/standby.h"
#include "rendezvous/client/client.h"

namespace {

const char* kVars[] = {"RANK", "LOCAL_RANK", "WORLD_SIZE", "LOCAL_WORLD_SIZE", "GROUP_RANK",
                       "GROUP_WORLD_SIZE", "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME",
                       "MASTER_ADDR", "MASTER_PORT", "TORCHELASTIC_RESTART_COUNT",
                       "TORCHELASTIC_MAX_RESTARTS", "TORCHELASTIC_RUN_ID",
                       "TORCHELASTIC_ERROR_FILE", "OMP_NUM_THREADS", "DDPRUN_RDZV_ADDR",
                       "DDPRUN_JOB_ID", "DDPRUN_ROUND", "DDPRUN_LOCAL_ADDR", "PROBE_EXTRA",
                       "GLOO_SOCKET_IFNAME", "NCCL_SOCKET_IFNAME", "DDPRUN_RDZV_TLS_CA"};

int env_int(const char* name) {
  const char* v = getenv(name);
  return v ? atoi(v) : -1;
}

// Writes with write(2) so that nothing is buffered behind our back.
void say(int fd, const std::string& s) {
  size_t off = 0;
  while (off < s.size()) {
    ssize_t n = write(fd, s.data() + off, s.size() - off);
    if (n <= 0) return;
    off += static_cast<size_t>(n);
  }
}

// The job's store, as worker_lib would open it.
std::string env_str(const char* name) {
  const char* v = getenv(name);
  return v ? v : "";
}

ddprun::GrpcStore job_store(const char* token = getenv("DDPRUN_RDZV_TOKEN")) {
  const ddprun::TlsFiles tls{env_str("DDPRUN_RDZV_TLS_CERT"), env_str("DDPRUN_RDZV_TLS_KEY"),
                             env_str("DDPRUN_RDZV_TLS_CA")};
  return ddprun::GrpcStore(env_str("DDPRUN_RDZV_ADDR"), env_str("DDPRUN_JOB_ID"), std::nullopt,
                           ddprun::RendezvousAuth{token ? token : "", tls});
}

// A key of this rendezvous round: a restarted group must not see the last one's.
std::string round_key(const std::string& key) {
  return "probe/round" + std::string(getenv("DDPRUN_ROUND") ? getenv("DDPRUN_ROUND") : "?") + "/" + key;
}

// See shm-peer-exits above.
int shm_peer_exits() {
  auto store = job_store();
  ddprun::PrefixStore shm_store(round_key("shm"), store);
  ddp::ShmGroupOptions o;
  o.rank = atoi(getenv("RANK"));
  o.size = atoi(getenv("WORLD_SIZE"));
  o.timeout = std::chrono::seconds(60);
  // The agent stops the group when rank 1 exits: rank 0 stays to see what
  // the collective says. It ignores SIGTERM before the barrier: ignored
  // after it, a SIGTERM sent while rank 0 was still on its way out of the
  // barrier killed it now and then on a loaded machine.
  if (o.rank == 0) signal(SIGTERM, SIG_IGN);
  ddp::ShmGroup group(shm_store, o);
  group.barrier(o.timeout);
  if (o.rank == 1) _exit(3);
  if (o.rank != 0) return 0;
  float v = 1;
  const auto t0 = std::chrono::steady_clock::now();
  try {
    group.all_reduce(&v, 1, ddp::ShmDtype::kFloat32, ddp::ReduceOp::kSum, o.timeout);
    say(1, "shm all_reduce returned\n");
  } catch (const std::exception& e) {
    const double s = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
    char took[32];
    snprintf(took, sizeof took, "%.2f", s);
    say(1, std::string("shm error after ") + took + " s: " + e.what() + "\n");
  }
  return 0;
}

// Blocks the signals we report, then says "ready" (and, when asked, tells
// the store), then reports signals until told to stop.
int wait_for_signals(bool ignore_term, bool announce_in_store = false) {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGTERM, SIGUSR1, SIGUSR2, SIGINT, SIGHUP}) sigaddset(&set, s);
  sigprocmask(SIG_BLOCK, &set, nullptr);
  say(1, "ready " + std::to_string(getpid()) + "\n");
  if (announce_in_store) job_store().set(round_key("ready/" + std::to_string(env_int("RANK"))), "1");
  while (true) {
    int sig = 0;
    if (sigwait(&set, &sig) != 0) return 3;
    say(1, std::string("got SIG") + sigabbrev_np(sig) + "\n");
    if (sig == SIGUSR1 || sig == SIGUSR2) continue;
    if (ignore_term) continue;
    return 0;
  }
}

// A process that tries hard to outlive the job: its own session, deaf to
// the polite signals. Returns once its pid is in `file`.
void leave_child(const std::string& file) {
  int sync[2];
  if (pipe(sync) != 0) exit(20);
  const pid_t pid = fork();
  if (pid < 0) exit(21);
  if (pid == 0) {
    close(sync[0]);
    setsid();
    for (int s : {SIGTERM, SIGINT, SIGHUP}) signal(s, SIG_IGN);
    const std::string tmp = file + ".tmp";
    FILE* f = fopen(tmp.c_str(), "w");
    if (!f) _exit(22);
    fprintf(f, "%d\n", static_cast<int>(getpid()));
    fclose(f);
    rename(tmp.c_str(), file.c_str());
    say(sync[1], "x");
    close(sync[1]);
    while (true) pause();
  }
  close(sync[1]);
  char c;
  if (read(sync[0], &c, 1) != 1) exit(23);
  close(sync[0]);
}

int run_mode(int argc, char** argv);

}  // namespace

int main(int argc, char** argv) {
  ddp::install_error_file_handler();
  return run_mode(argc, argv);
}

namespace {

int report_progress(int steps, int step_ms, bool fail_first) {
  namespace ch = ddprun::channel;
  const char* file = getenv("DDPRUN_HEARTBEAT_FILE");
  const char* slot = getenv("DDPRUN_HEARTBEAT_SLOT");
  if (!file || !slot) return 5;
  const int fd = open(file, O_RDWR | O_CLOEXEC);
  struct stat st;
  if (fd < 0 || fstat(fd, &st) != 0) return 5;
  void* map = mmap(nullptr, static_cast<size_t>(st.st_size), PROT_READ | PROT_WRITE, MAP_SHARED, fd, 0);
  close(fd);
  if (map == MAP_FAILED) return 5;
  ch::ProgressBlock* block = ch::progress_block(map, atoi(slot));
  const int attempt = env_int("TORCHELASTIC_RESTART_COUNT");
  ch::Progress p;
  p.total_steps = steps;
  p.flags = ch::Progress::kHasStep | ch::Progress::kHasTotalSteps | ch::Progress::kHasLoss |
            ch::Progress::kHasEpoch;
  int start = 0;
  if (attempt > 0) {
    p.restored_step = 4;
    p.saved_step = 4;
    p.flags |= ch::Progress::kHasRestored | ch::Progress::kHasSaved;
    start = 5;
  }
  for (int step = start; step < steps; ++step) {
    p.step = step;
    p.samples = (step + 1) * 64;
    p.loss = 1.0 / (step + 1);
    p.epoch = step / 10;
    if (step % 5 == 4) {
      p.saved_step = step;
      p.flags |= ch::Progress::kHasSaved;
    }
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    p.updated_ns = static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
    ch::write_progress(block, p);
    __atomic_fetch_add(ch::heartbeat_counter(map, atoi(slot)), 1, __ATOMIC_RELAXED);  // a beat a step
    say(1, "step " + std::to_string(step) + "\n");
    if (fail_first && attempt == 0 && step == 7) return 7;
    std::this_thread::sleep_for(std::chrono::milliseconds(step_ms));  // the step's "work"
  }
  return 0;
}

int run_mode(int argc, char** argv) {
  const std::string mode = argc > 1 ? argv[1] : "env";
  if (mode == "env") {
    std::string out;
    for (const char* v : kVars) {
      const char* val = getenv(v);
      out += std::string(v) + "=" + (val ? val : "<unset>") + "\n";
    }
    say(1, out);
    return 0;
  }
  if (mode == "standby-env") {
    const bool was_standby = ddp::wait_if_standby();
    say(1, std::string(was_standby ? "released" : "not a standby") + " RANK=" +
               (getenv("RANK") ? getenv("RANK") : "<unset>") + " PROBE_EXTRA=" +
               (getenv("PROBE_EXTRA") ? getenv("PROBE_EXTRA") : "<unset>") + "\n");
    return 0;
  }
  if (mode == "exit" && argc > 2) {
    say(1, "about to exit\n");
    say(2, "rank " + std::to_string(env_int("RANK")) + " exits with " + argv[2] + "\n");
    return atoi(argv[2]);
  }
  if (mode == "fail-on-first-attempt") {
    const int attempt = env_int("TORCHELASTIC_RESTART_COUNT");
    say(1, "attempt " + std::to_string(attempt) + "\n");
    return attempt == 0 ? 7 : 0;
  }
  if (mode == "throw" && argc > 2) {
    throw std::runtime_error(argv[2]);
  }
  if (mode == "wait") {
    return wait_for_signals(argc > 2 && std::string(argv[2]) == "--ignore-term");
  }
  if (mode == "spam" && argc > 2) {
    const int n = atoi(argv[2]);
    const int rank = env_int("RANK");
    const std::string payload(200, 'a' + rank % 26);
    for (int i = 0; i < n; ++i) {
      const std::string line = "line " + std::to_string(rank) + " " + std::to_string(i) + " " +
                               payload + "\n";
      // In three pieces: the launcher must still print it as one line.
      const size_t a = line.size() / 3, b = 2 * line.size() / 3;
      say(1, line.substr(0, a));
      say(1, line.substr(a, b - a));
      say(1, line.substr(b));
    }
    say(1, "unterminated last line of rank " + std::to_string(rank));
    return 0;
  }
  if (mode == "fail-rank" && argc > 3) {
    const int failing = atoi(argv[2]);
    if (env_int("RANK") == failing) {
      std::vector<std::string> others;
      for (int r = 0; r < env_int("WORLD_SIZE"); ++r) {
        if (r != failing) others.push_back(round_key("ready/" + std::to_string(r)));
      }
      job_store().wait(others, std::chrono::seconds(60));
      say(2, "rank " + std::string(argv[2]) + " is failing on purpose\n");
      return atoi(argv[3]);
    }
    return wait_for_signals(false, /*announce_in_store=*/true);
  }
  if (mode == "intrude") {
    const std::pair<const char*, const char*> cases[] = {
        {"no-token", ""}, {"wrong-token", "guessed"}, {"job-token", getenv("DDPRUN_RDZV_TOKEN")}};
    for (const auto& [name, token] : cases) {
      try {
        job_store(token).set("intruder", "junk");
        say(1, std::string(name) + ": ok\n");
      } catch (const std::exception& e) {
        say(1, std::string(name) + ": refused: " + e.what() + "\n");
      }
    }
    return 0;
  }
  if (mode == "flood" && argc > 3) {
    const long n = atol(argv[2]);
    std::string lines;
    for (int i = 0; i < 64; ++i) lines += std::string(999, 'f') + "\n";
    say(2, "flooding\n");
    for (long i = 0; n < 0 || i < n; i += 64) say(1, lines);
    say(2, "flooded, now failing\n");
    return atoi(argv[3]);
  }
  if (mode == "error-file" && argc > 2) {
    const std::string kind = argv[2];
    const char* path = getenv("TORCHELASTIC_ERROR_FILE");
    if (!path) return 3;
    if (kind == "fifo" && mkfifo(path, 0600) != 0) return 4;
    if (kind == "zero" && symlink("/dev/zero", path) != 0) return 4;
    if (kind == "escapes") {
      FILE* f = fopen(path, "w");
      if (!f) return 4;
      fputs(R"({"message": "red \u001b[31mALERT\u001b[0m title\u001b]0;pwned\u0007 end"})", f);
      fclose(f);
      say(2, "tail \x1b[2J\x1b[Hcleared\n");
    }
    return 1;
  }
  if (mode == "beat" && argc > 2) {
    // The signals `wait` reports are blocked before the thread starts, so
    // that they reach the main thread's sigwait, not the beating thread.
    sigset_t set;
    sigemptyset(&set);
    for (int sig : {SIGTERM, SIGUSR1, SIGUSR2, SIGINT, SIGHUP}) sigaddset(&set, sig);
    sigprocmask(SIG_BLOCK, &set, nullptr);
    const char* file = getenv("DDPRUN_HEARTBEAT_FILE");
    const char* slot = getenv("DDPRUN_HEARTBEAT_SLOT");
    if (!file || !slot) return 5;
    static ddp::Heartbeat heartbeat(file, atoi(slot));
    std::thread([] {
      while (true) {
        heartbeat.beat();
        std::this_thread::sleep_for(std::chrono::milliseconds(20));
      }
    }).detach();
    argv[1] = argv[0];
    return run_mode(argc - 1, argv + 1);
  }
  if (mode == "progress" && argc > 3) {
    return report_progress(atoi(argv[2]), atoi(argv[3]), argc > 4 && std::string(argv[4]) == "fail-first");
  }
  if (mode == "report" && argc > 4) {
    const char* file = getenv("DDPRUN_HEARTBEAT_FILE");
    const char* slot = getenv("DDPRUN_HEARTBEAT_SLOT");
    if (!file || !slot) return 5;
    const int fd = open(file, O_RDWR | O_CLOEXEC);
    if (fd < 0) return 6;
    const int s = atoi(slot);
    void* map = mmap(nullptr, ddprun::channel::heartbeat_file_bytes(s + 1), PROT_READ | PROT_WRITE,
                     MAP_SHARED, fd, 0);
    close(fd);
    if (map == MAP_FAILED) return 6;
    using P = ddprun::channel::Progress;
    P p;
    p.step = atoll(argv[2]);
    p.total_steps = 1000;
    p.epoch = 1;
    p.loss = 0.25;
    p.samples = p.step * 32;
    p.saved_step = atoll(argv[3]);
    p.flags = P::kHasStep | P::kHasTotalSteps | P::kHasEpoch | P::kHasLoss | P::kHasSaved;
    if (env_int("TORCHELASTIC_RESTART_COUNT") > 0) {
      p.restored_step = p.saved_step;
      p.flags |= P::kHasRestored;
    }
    timespec ts{};
    clock_gettime(CLOCK_MONOTONIC, &ts);
    p.updated_ns = static_cast<int64_t>(ts.tv_sec) * 1000000000 + ts.tv_nsec;
    ddprun::channel::write_progress(ddprun::channel::progress_block(map, s), p);
    argv[3] = argv[0];
    return run_mode(argc - 3, argv + 3);
  }
  if (mode == "fail-first" && argc > 2) {
    if (env_int("TORCHELASTIC_RESTART_COUNT") == 0) return 7;
    argv[1] = argv[0];
    return run_mode(argc - 1, argv + 1);
  }
  if (mode == "shm-leak") {
    const std::string name = ddprun::channel::shm_segment_name(geteuid(), getpid(), 0x5eed);
    const int fd = shm_open(name.c_str(), O_RDWR | O_CREAT | O_EXCL, 0600);
    if (fd < 0 || ftruncate(fd, 4096) != 0) return 4;
    say(1, "segment " + name.substr(1) + "\n");
    return 0;
  }
  if (mode == "shm-peer-exits") {
    return shm_peer_exits();
  }
  if (mode == "leave-child" && argc > 3) {
    leave_child(argv[2]);
    argv[2] = argv[0];
    return run_mode(argc - 2, argv + 2);
  }
  fprintf(stderr, "probe: unknown mode %s\n", mode.c_str());
  return 2;
}

}  // namespace
