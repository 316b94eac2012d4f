#include <gtest/gtest.h>
#include <fcntl.h>
#include <poll.h>
#include <signal.h>
#include <sys/resource.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>

#include "agent/output/failure_report.h"
#include "agent/output/line_splitter.h"
#include "agent/output/worker_output.h"
#include "ddp/error_file.h"
#include "support/job_helpers.h"

namespace ddprun {
namespace {

std::vector<std::string> split_all(const std::vector<std::string>& chunks, bool flush) {
  LineSplitter s;
  std::vector<std::string> lines;
  auto sink = [&](std::string_view l) { lines.emplace_back(l); };
  for (const auto& c : chunks) s.feed(c, sink);
  if (flush) s.flush(sink);
  return lines;
}

TEST(LineSplitter, JoinsLinesAcrossChunks) {
  EXPECT_EQ(split_all({"ab", "c\nde", "f\n\ng"}, false),
            (std::vector<std::string>{"abc", "def", ""}));
  EXPECT_EQ(split_all({"ab", "c\nde", "f\n\ng"}, true),
            (std::vector<std::string>{"abc", "def", "", "g"}));
  EXPECT_TRUE(split_all({""}, true).empty());
}

TEST(LineSplitter, BoundsEndlessLines) {
  std::string huge(LineSplitter::kMaxLine * 2 + 10, 'x');
  auto lines = split_all({huge}, true);
  ASSERT_EQ(lines.size(), 3u);
  EXPECT_EQ(lines[0].size(), LineSplitter::kMaxLine);
  EXPECT_EQ(lines[2].size(), 10u);
}

// Reads everything written so far to a pipe's read end.
std::string drain(int fd) {
  std::string out;
  char buf[4096];
  ssize_t n;
  while ((n = read(fd, buf, sizeof(buf))) > 0) out.append(buf, static_cast<size_t>(n));
  return out;
}

std::vector<std::string> ddprun_lines(const std::string& text) {
  std::vector<std::string> out;
  std::istringstream in(text);
  for (std::string l; std::getline(in, l);) out.push_back(l);
  return out;
}

struct Pipes {
  int out[2], err[2];
  Pipes() {
    EXPECT_EQ(pipe2(out, O_NONBLOCK), 0);
    EXPECT_EQ(pipe2(err, O_NONBLOCK), 0);
  }
  ~Pipes() {
    for (int fd : {out[0], out[1], err[0], err[1]}) close(fd);
  }
};

TEST(WorkerOutput, PrefixesWholeLinesAndKeepsTheStderrTail) {
  Pipes p;
  OutputOptions o;
  Console out(p.out[1]), err(p.err[1]);
  o.console_out = &out;
  o.console_err = &err;
  o.tail_lines = 2;
  WorkerOutput w(3, o);
  w.write(kStdout, "hel");
  EXPECT_EQ(drain(p.out[0]), "");  // nothing until the line is complete
  w.write(kStdout, "lo\nwor");
  EXPECT_EQ(drain(p.out[0]), "[rank3]:hello\n");
  w.write(kStderr, "e1\ne2\ne3\n");
  w.finish();
  EXPECT_EQ(drain(p.out[0]), "[rank3]:wor\n");
  EXPECT_EQ(drain(p.err[0]), "[rank3]:e1\n[rank3]:e2\n[rank3]:e3\n");
  EXPECT_EQ(std::vector<std::string>(w.stderr_tail().begin(), w.stderr_tail().end()),
            (std::vector<std::string>{"e2", "e3"}));
}

// A console that does not read never blocks the output: lines beyond the
// backlog are dropped, counted, and announced once it reads again.
TEST(WorkerOutput, AStalledConsoleDropsLinesAndSaysSoWhenItReadsAgain) {
  Pipes p;
  ASSERT_GT(fcntl(p.out[1], F_SETPIPE_SZ, 4096), 0);
  Console console(p.out[1]);
  OutputOptions o;
  o.console_mask = kStdout;
  o.console_out = &console;
  WorkerOutput w(3, o);
  const std::string line(1000, 'x');
  const size_t lines = 3 * WorkerOutput::kConsoleBacklog / line.size();
  for (size_t i = 0; i < lines; ++i) w.write(kStdout, line + "\n");  // returns: never blocks
  ASSERT_FALSE(w.waiting_consoles().empty());
  // The reader comes back: everything kept, then how much was lost.
  std::string got;
  for (int rounds = 0; rounds < 100000 && !w.waiting_consoles().empty(); ++rounds) {
    got += drain(p.out[0]);
    w.flush_console();
  }
  got += drain(p.out[0]);
  ASSERT_TRUE(w.waiting_consoles().empty());
  const auto all = ddprun_lines(got);
  ASSERT_GE(all.size(), 2u);
  std::smatch m;
  ASSERT_TRUE(std::regex_match(all.back(), m, std::regex(R"(\[rank3\]: \.\.\. (\d+) lines dropped: console not reading)")))
      << all.back();
  const size_t shown = all.size() - 1;
  EXPECT_EQ(shown + std::stoul(m[1]), lines);
  for (size_t i = 0; i < shown; ++i) ASSERT_EQ(all[i], "[rank3]:" + line) << "line " << i;
}

TEST(WorkerOutput, FilesWithoutConsole) {
  Pipes p;
  auto dir = std::filesystem::temp_directory_path() / ("ddprun-output-test-" + std::to_string(getpid()));
  std::filesystem::create_directories(dir);
  OutputOptions o;
  o.console_mask = kStderr;  // stdout redirected to its file only
  o.file_mask = kBoth;
  o.stdout_path = (dir / "stdout.log").string();
  o.stderr_path = (dir / "stderr.log").string();
  Console out(p.out[1]), err(p.err[1]);
  o.console_out = &out;
  o.console_err = &err;
  {
    WorkerOutput w(0, o);
    w.write(kStdout, "to file\n");
    w.write(kStderr, "both\n");
    w.finish();
  }
  EXPECT_EQ(drain(p.out[0]), "");
  EXPECT_EQ(drain(p.err[0]), "[rank0]:both\n");
  auto slurp = [](const std::filesystem::path& f) {
    std::ifstream in(f);
    return std::string(std::istreambuf_iterator<char>(in), {});
  };
  EXPECT_EQ(slurp(dir / "stdout.log"), "to file\n");
  EXPECT_EQ(slurp(dir / "stderr.log"), "both\n");
  std::filesystem::remove_all(dir);
}

TEST(WorkerOutput, UnopenableLogFileIsAClearError) {
  OutputOptions o;
  o.file_mask = kStdout;
  o.stdout_path = "/nonexistent-dir/x/stdout.log";
  try {
    WorkerOutput w(0, o);
    FAIL();
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find("/nonexistent-dir/x/stdout.log"), std::string::npos);
  }
}

std::string temp_file(const std::string& name, const std::string& content) {
  auto path = std::filesystem::temp_directory_path() / (name + std::to_string(getpid()));
  std::ofstream(path) << content;
  return path.string();
}

TEST(ErrorFile, ReadsTorchrunsFormatsAndOurOwn) {
  auto py = temp_file("err-py", R"({"message": {"message": "ValueError: bad", "extraInfo": {"py_callstack": "Traceback:\n  boom\nValueError: bad", "timestamp": "1"}}})");
  EXPECT_EQ(read_error_file(py), "Traceback:\n  boom\nValueError: bad");
  auto plain = temp_file("err-plain", R"({"message": "it broke"})");
  EXPECT_EQ(read_error_file(plain), "it broke");
  auto junk = temp_file("err-junk", "not json");
  EXPECT_NE(read_error_file(junk).find("not torchrun's JSON format"), std::string::npos);
  // Cut by the stop while it was written: said so, with what it holds.
  auto cut = temp_file("err-cut", R"({"message": {"message": "RuntimeError: boom", "extraInfo": {"py_callst)");
  const std::string cut_text = read_error_file(cut);
  EXPECT_NE(cut_text.find("was cut short, most likely by the stop while it was written; its start: "
                          "{\"message\": {\"message\": \"RuntimeError: boom\""),
            std::string::npos)
      << cut_text;
  std::filesystem::remove(cut);
  EXPECT_EQ(read_error_file("/nonexistent/error.json"), "");

  auto ours = std::filesystem::temp_directory_path() / ("err-ours" + std::to_string(getpid()));
  ASSERT_TRUE(ddp::write_error_file(ours.string(), "std::runtime_error: disk full"));
  EXPECT_EQ(read_error_file(ours.string()), "std::runtime_error: disk full");
  EXPECT_FALSE(ddp::write_error_file("", "x"));
  for (const auto& f : {py, plain, junk, ours.string()}) std::filesystem::remove(f);
}

// A worker may leave anything at its error file's path; reading it must
// neither block nor read without end. The read happens in a child process
// with little memory, so that a reader that does either fails the test
// (killed after the timeout, or out of memory) instead of hanging it.
std::optional<std::string> read_error_file_in_child(const std::string& path) {
  int fds[2];
  if (pipe(fds) != 0) return std::nullopt;
  const pid_t pid = fork();
  if (pid == 0) {
    close(fds[0]);
    rlimit limit{512u << 20, 512u << 20};
    setrlimit(RLIMIT_AS, &limit);
    const std::string msg = read_error_file(path);
    if (write(fds[1], msg.data(), msg.size()) < 0) _exit(1);
    _exit(0);
  }
  close(fds[1]);
  std::string got;
  bool done = false;
  while (!done) {
    pollfd p{fds[0], POLLIN, 0};
    if (poll(&p, 1, 10000) <= 0) break;  // no answer in 10 s: blocked
    char buf[4096];
    const ssize_t n = read(fds[0], buf, sizeof(buf));
    if (n <= 0) done = true;
    else got.append(buf, static_cast<size_t>(n));
  }
  close(fds[0]);
  kill(pid, SIGKILL);
  int status = 0;
  waitpid(pid, &status, 0);
  if (!done || !WIFEXITED(status) || WEXITSTATUS(status) != 0) return std::nullopt;
  return got;
}

TEST(ErrorFile, AFifoIsNotWaitedFor) {
  auto path = std::filesystem::temp_directory_path() / ("err-fifo" + std::to_string(getpid()));
  std::filesystem::remove(path);
  ASSERT_EQ(mkfifo(path.c_str(), 0600), 0);
  auto got = read_error_file_in_child(path.string());
  ASSERT_TRUE(got) << "reading a FIFO error file blocked";
  EXPECT_NE(got->find("is not a regular file"), std::string::npos) << *got;
  std::filesystem::remove(path);
}

TEST(ErrorFile, ALinkToDevZeroIsNotRead) {
  auto path = std::filesystem::temp_directory_path() / ("err-zero" + std::to_string(getpid()));
  std::filesystem::remove(path);
  std::filesystem::create_symlink("/dev/zero", path);
  auto got = read_error_file_in_child(path.string());
  ASSERT_TRUE(got) << "reading a link to /dev/zero did not end";
  EXPECT_NE(got->find("is a symbolic link"), std::string::npos) << *got;
  std::filesystem::remove(path);
}

TEST(ErrorFile, AHugeFileIsReadOnlyInPartAndSaysSo) {
  const std::string message(8 * 1024 * 1024, 'x');
  auto huge = temp_file("err-huge", R"({"message": ")" + message + R"("})");
  const std::string got = read_error_file(huge);
  EXPECT_LT(got.size(), 2 * kMaxErrorFile);
  EXPECT_NE(got.find("truncated"), std::string::npos) << got.substr(0, 300);
  std::filesystem::remove(huge);
}

TEST(FailureSummary, WhatWorkersWroteLosesItsEscapeSequences) {
  WorkerExit e;
  e.exit_code = 1;
  e.error_message = "red \x1b[31mALERT\x1b[0m bell\a title\x1b]0;pwned\a end\r\nnext\tline \xc2\x9b" "2J";
  e.stderr_tail = {"tail \x1b[2J\x1b[Hcleared\rover"};
  const std::string s = format_failure_summary({e}, SummaryContext{"job", 0, 0, 0, ""});
  EXPECT_EQ(s.find('\x1b'), std::string::npos) << s;
  EXPECT_EQ(s.find('\a'), std::string::npos) << s;
  EXPECT_EQ(s.find('\r'), std::string::npos) << s;
  EXPECT_EQ(s.find("\xc2\x9b"), std::string::npos) << s;
  EXPECT_NE(s.find("error: red ALERT bell title end\n"), std::string::npos) << s;
  EXPECT_NE(s.find("next\tline 2J"), std::string::npos) << s;
  EXPECT_NE(s.find("  tail clearedover\n"), std::string::npos) << s;
}

// Ranks judged hung while they waited for another (their silence began
// first: a script's ranks inside a collective without a pulse) are not the
// root cause: the rank the hang's verdict blames is.
TEST(FailureSummary, RootCauseOfAHangIsTheRankTheVerdictBlames) {
  const auto t = std::chrono::system_clock::now();
  auto hung = [&](int rank, std::chrono::milliseconds silent_since, bool blamed) {
    WorkerExit e;
    e.rank = e.local_rank = rank;
    e.pid = 100 + rank;
    e.host = "hostA";
    e.reason = "hung: no heartbeat";
    e.time = t + silent_since;
    e.blamed = blamed;
    return e;
  };
  const std::string s = format_failure_summary(
      {hung(0, std::chrono::milliseconds(0), false), hung(2, std::chrono::milliseconds(900), true),
       hung(1, std::chrono::milliseconds(10), false)},
      SummaryContext{"job1", 0, 0, 0, ""});
  EXPECT_NE(s.find("root cause (the rank the hang's verdict names): rank 2 "), std::string::npos) << s;
  EXPECT_EQ(root_cause({hung(0, std::chrono::milliseconds(0), false), hung(2, std::chrono::milliseconds(900), true)}).rank, 2);
}

// worker_lib prints an uncaught error on stderr as "error: " and the
// message it writes to the error file: the summary shows it once.
TEST(FailureSummary, AWorkerLibErrorIsShownOnce) {
  WorkerExit e;
  e.rank = e.local_rank = 0;
  e.pid = 100;
  e.host = "hostA";
  e.exit_code = 1;
  e.error_message = "ddp::CollectiveError: ddp: the group heals in generation 2";
  e.stderr_tail = {"ddp: healed in generation 1", "error: ddp::CollectiveError: ddp: the group heals in generation 2"};
  const std::string s = format_failure_summary({e}, SummaryContext{"job1", 0, 0, 0, ""});
  EXPECT_EQ(ddptest::occurrences(s, "the group heals in generation 2"), 1) << s;
  EXPECT_NE(s.find("ddp: healed in generation 1"), std::string::npos) << s;
}

// Rank `rank` of host "hostA" (pid 100 + rank), exited with code 1 at `at`.
WorkerExit failed_worker(int rank, std::chrono::system_clock::time_point at, const std::string& message,
                         std::vector<std::string> tail) {
  WorkerExit e;
  e.rank = e.local_rank = rank;
  e.pid = 100 + rank;
  e.host = "hostA";
  e.exit_code = 1;
  e.time = at;
  e.error_message = message;
  e.stderr_tail = std::move(tail);
  return e;
}

// Ranks that failed alike (replicas apart with no majority stop every rank
// with one message; a Python traceback differs only in its rank prefixes)
// are told once: the others say whose it was.
TEST(FailureSummary, RanksThatFailedAlikeAreToldOnce) {
  const auto t = std::chrono::system_clock::now();
  auto failed = [&](int rank, const std::string& message, std::vector<std::string> tail) {
    return failed_worker(rank, t + std::chrono::milliseconds(rank), message, std::move(tail));
  };
  const std::string apart = "ddp::ReplicasDiffer: ddp: the ranks' parameters differ with no majority at step 60";
  std::string s = format_failure_summary({failed(0, apart, {}), failed(1, apart, {}), failed(2, "another", {})},
                                         SummaryContext{"job1", 0, 0, 0, ""});
  EXPECT_EQ(ddptest::occurrences(s, "with no majority at step 60"), 1) << s;
  EXPECT_NE(s.find("also failed: rank 1 (local rank 1, pid 101, host hostA): exit code 1 at "), std::string::npos) << s;
  EXPECT_NE(s.find("the same error as rank 0's above"), std::string::npos) << s;
  EXPECT_NE(s.find("error: another"), std::string::npos) << s;
  s = format_failure_summary({failed(0, "", {"[rank0]: Traceback", "[rank0]: [rank0]: ValueError: x"}),
                              failed(1, "", {"[rank1]: Traceback", "[rank1]: [rank1]: ValueError: x"})},
                             SummaryContext{"job1", 0, 0, 0, ""});
  EXPECT_EQ(ddptest::occurrences(s, "ValueError: x"), 1) << s;
  EXPECT_NE(s.find("the same error as rank 0's above"), std::string::npos) << s;
}

// Rank 1 raised in its step; rank 2's collective failed because rank 1's
// sockets closed, and rank 2's interpreter exited first (rank 1's teardown
// was slower): the root cause is rank 1, with its exception, by its own
// account, whichever was reaped first. A rank killed by a signal or found
// hung lost no peer.
TEST(FailureSummary, ARankThatLostAPeerIsNotTheRootCause) {
  const auto t = std::chrono::system_clock::now();
  auto failed = [&](int rank, int after_ms, std::vector<std::string> tail) {
    return failed_worker(rank, t + std::chrono::milliseconds(after_ms), "", std::move(tail));
  };
  const WorkerExit lost = failed(2, 0, {"[rank2]:    work.wait()",
                                        "[rank2]:RuntimeError: [./gloo/transport/tcp/pair.cc:598] Connection closed "
                                        "by peer [127.0.0.1]:4528"});
  const WorkerExit own = failed(1, 300, {"[rank1]:    raise RuntimeError(\"my own bug at step 5\")",
                                         "[rank1]:RuntimeError: my own bug at step 5"});
  const std::string s = format_failure_summary({lost, own}, SummaryContext{"job1", 0, 0, 0, ""});
  EXPECT_NE(s.find("root cause (the earliest failure of its own; the ranks before it lost a peer): rank 1 "),
            std::string::npos)
      << s;
  EXPECT_LT(s.find("RuntimeError: my own bug at step 5"), s.find("also failed: rank 2")) << s;
  EXPECT_EQ(root_cause({lost, own}).rank, 1);
  WorkerExit killed = failed(0, 200, {});
  killed.exit_code = 0;
  killed.signal = SIGKILL;
  EXPECT_EQ(root_cause({lost, killed}).rank, 0);
  EXPECT_EQ(root_cause({lost, failed(3, 100, {"[rank3]:RuntimeError: Connection reset by peer"})}).rank, 2)
      << "both lost a peer: the earliest";
  // Both still tearing down when the group's stop came (a loaded machine):
  // each ended by its SIGTERM, each with the error file it wrote before.
  WorkerExit lost_stopped = lost, own_stopped = own;
  for (WorkerExit* e : {&lost_stopped, &own_stopped}) {
    e->exit_code = 0;
    e->signal = SIGTERM;
  }
  lost_stopped.error_message = "RuntimeError: [./gloo/transport/tcp/pair.cc:598] Connection closed by peer [127.0.0.1]:4528";
  own_stopped.error_message = "RuntimeError: my own bug at step 5";
  EXPECT_EQ(root_cause({lost_stopped, own_stopped}).rank, 1);
}

TEST(FailureSummary, RootCauseIsTheEarliestFailure) {
  const auto t = std::chrono::system_clock::now();
  auto worker = [&](int rank, pid_t pid, int code, int sig, std::chrono::milliseconds later) {
    WorkerExit e;
    e.rank = e.local_rank = rank;
    e.pid = pid;
    e.host = "hostA";
    e.exit_code = code;
    e.signal = sig;
    e.time = t + later;
    return e;
  };
  WorkerExit late = worker(1, 101, 0, 11, std::chrono::milliseconds(5));
  WorkerExit early = worker(2, 102, 3, 0, std::chrono::milliseconds(0));
  early.error_message = "RuntimeError: boom";
  early.stderr_tail = {"line a", "line b"};
  SummaryContext ctx{"job1", 0, 2, 2, ""};
  std::string s = format_failure_summary({late, early}, ctx);
  const auto root = s.find("root cause (earliest failure): rank 2 (local rank 2, pid 102, host hostA): exit code 3");
  const auto also = s.find("also failed: rank 1 (local rank 1, pid 101, host hostA): killed by SIGSEGV");
  EXPECT_NE(root, std::string::npos) << s;
  EXPECT_NE(also, std::string::npos) << s;
  EXPECT_LT(root, also);
  EXPECT_NE(s.find("error: RuntimeError: boom"), std::string::npos);
  EXPECT_NE(s.find("last 2 line(s) of stderr:"), std::string::npos);
  EXPECT_NE(s.find("line b"), std::string::npos);
  EXPECT_NE(s.find("attempt 1 of 3"), std::string::npos);
  EXPECT_NE(s.find("2 other worker(s) stopped by ddprun"), std::string::npos);

  WorkerExit hung = worker(0, 100, 0, 0, std::chrono::milliseconds(0));
  hung.reason = "hung: no heartbeat for 3.0 s (--hang-timeout 3.0 s)";
  EXPECT_TRUE(hung.failed());
  EXPECT_NE(format_failure_summary({hung}, ctx).find("host hostA): hung: no heartbeat for 3.0 s"), std::string::npos);
}

// With a control plane the summary names who serves the rendezvous; without
// one it says nothing of it.
TEST(FailureSummary, NamesTheServingNodeWhenThereIsAControlPlane) {
  WorkerExit e;
  e.exit_code = 1;
  SummaryContext ctx{"job", 0, 0, 0, ""};
  EXPECT_EQ(format_failure_summary({e}, ctx).find("control plane"), std::string::npos);
  ctx.control_plane = "node 'b:12' serves the rendezvous (term 3, 1 takeover(s) seen from this node)";
  EXPECT_NE(format_failure_summary({e}, ctx).find("  control plane: node 'b:12' serves the rendezvous (term 3, 1 "
                                                  "takeover(s) seen from this node)\n"),
            std::string::npos);
}

TEST(FailureSummary, AGracefulStopIsNotCalledAFailure) {
  SummaryContext ctx{"job1", 0, 0, 4, "stopped by SIGTERM"};
  const std::string s = format_failure_summary({}, ctx);
  EXPECT_EQ(s, "ddprun: job job1 stopped by SIGTERM on attempt 1 of 1\n"
               "  no worker failed on its own\n"
               "  4 worker(s) stopped by ddprun\n");
}

TEST(FailureSummary, ATracebackInTheErrorFileIsNotRepeatedFromStderr) {
  WorkerExit e;
  e.exit_code = 1;
  e.error_message = "RuntimeError: boom\nTraceback (most recent call last):\n  File \"x.py\", line 3\n";
  e.stderr_tail = {"warming up", "Traceback (most recent call last):", "  File \"x.py\", line 3",
                   "RuntimeError: boom"};
  const std::string s = format_failure_summary({e}, SummaryContext{"job", 0, 0, 0, ""});
  EXPECT_NE(s.find("last 1 line(s) of stderr (not in the error above):\n      warming up\n"),
            std::string::npos) << s;
  EXPECT_EQ(s.find("File"), s.rfind("File")) << s;  // once
  EXPECT_EQ(s.find("hint:"), std::string::npos) << s;
}

TEST(FailureSummary, MissingTorchNamesTheInterpreterAndTheVariables) {
  WorkerExit e;
  e.exit_code = 1;
  e.stderr_tail = {"ModuleNotFoundError: No module named 'torch'"};
  SummaryContext ctx{"job", 0, 0, 0, ""};
  ctx.python = "/usr/local/bin/python3 (python3 from PATH)";
  const std::string s = format_failure_summary({e}, ctx);
  EXPECT_NE(s.find("hint: the workers ran under /usr/local/bin/python3 (python3 from PATH), which "
                   "cannot import torch; choose another interpreter with PYTHON_EXEC or DDPRUN_PYTHON"),
            std::string::npos) << s;
  ctx.python = "";  // not a Python job: no hint
  EXPECT_EQ(format_failure_summary({e}, ctx).find("hint:"), std::string::npos);
}

TEST(WorkerOutputPrefix, TorchrunTemplateIsExpanded) {
  EXPECT_EQ(expand_line_prefix("[${role_name}${rank}|${local_rank}]:", "trainer", 5, 1, "h"), "[trainer5|1]:");
  EXPECT_EQ(expand_line_prefix("${hostname}:${rank}: ", "r", 3, 0, "r12i0n8"), "r12i0n8:3: ");
  EXPECT_EQ(expand_line_prefix("${other} $rank", "r", 1, 0, "h"), "${other} $rank");
}

}  // namespace
}  // namespace ddprun
