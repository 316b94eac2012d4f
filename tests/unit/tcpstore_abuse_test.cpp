// The c10d store under abuse: anyone who reaches MASTER_PORT can connect, so
// connections, memory, parked waits and log lines stay bounded, and one
// client cannot take the room every restarted worker needs.
#include <gtest/gtest.h>

#include <arpa/inet.h>
#include <netinet/in.h>
#include <sys/resource.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <functional>
#include <mutex>
#include <thread>

#include "tcpstore/client.h"
#include "tcpstore/codec.h"
#include "tcpstore/server.h"

namespace ddprun::tcpstore {
namespace {

using namespace std::chrono_literals;

struct Log {
  std::mutex mu;
  std::string text;
  std::function<void(const std::string&)> sink() {
    return [this](const std::string& l) {
      std::lock_guard lock(mu);
      text += l + "\n";
    };
  }
  std::string all() {
    std::lock_guard lock(mu);
    return text;
  }
};

ServerOptions options(Log& log) {
  ServerOptions o;
  o.host = "127.0.0.1";
  o.log = log.sink();
  return o;
}

// rcvbuf > 0: a small receive buffer (set before connecting, so the
// window stays small and replies wait in the server, not in the kernel).
int connect_raw(int port, int rcvbuf = 0) {
  const int fd = socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  if (fd >= 0 && rcvbuf > 0) setsockopt(fd, SOL_SOCKET, SO_RCVBUF, &rcvbuf, sizeof(rcvbuf));
  sockaddr_in a{};
  a.sin_family = AF_INET;
  a.sin_port = htons(static_cast<uint16_t>(port));
  a.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (fd < 0 || ::connect(fd, reinterpret_cast<sockaddr*>(&a), sizeof(a)) != 0) {
    if (fd >= 0) close(fd);
    return -1;
  }
  return fd;
}

void send_all(int fd, const std::string& bytes) {
  size_t off = 0;
  while (off < bytes.size()) {
    const ssize_t n = ::send(fd, bytes.data() + off, bytes.size() - off, MSG_NOSIGNAL);
    ASSERT_GT(n, 0) << strerror(errno);
    off += static_cast<size_t>(n);
  }
}

std::string request(Version v, Op op, std::vector<std::string> keys, std::vector<std::string> values = {}) {
  Request r;
  r.op = op;
  r.keys = std::move(keys);
  r.values = std::move(values);
  return encode_request(v, r);
}

// Polls the server's figures until pred holds (the requests travel through
// sockets) or 10 s pass.
bool eventually(Server& s, const std::function<bool(const ServerStats&)>& pred) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < until) {
    if (pred(s.stats())) return true;
    std::this_thread::sleep_for(5ms);  // polling a figure: nothing to wait on
  }
  return pred(s.stats());
}

// The same for a line in the log.
bool logs(Log& log, const std::string& text) {
  const auto until = std::chrono::steady_clock::now() + 10s;
  while (std::chrono::steady_clock::now() < until) {
    if (log.all().find(text) != std::string::npos) return true;
    std::this_thread::sleep_for(5ms);
  }
  return false;
}

// Whether fd was closed by the server (EOF or reset), without blocking.
bool closed_by_server(int fd) {
  char b;
  const ssize_t n = recv(fd, &b, 1, MSG_DONTWAIT | MSG_PEEK);
  return n == 0 || (n < 0 && errno != EAGAIN && errno != EWOULDBLOCK);
}

// Whether the server closes fd (EOF or reset) within 10 s.
bool ends(int fd) {
  timeval tv{10, 0};
  setsockopt(fd, SOL_SOCKET, SO_RCVTIMEO, &tv, sizeof(tv));
  char b[256];
  while (true) {
    const ssize_t n = recv(fd, b, sizeof(b), 0);
    if (n == 0 || (n < 0 && errno == ECONNRESET)) return true;
    if (n < 0) return false;  // timed out
  }
}

// Reads exactly n bytes (the test's own replies), failing the test on EOF.
std::string read_n(int fd, size_t n) {
  std::string out(n, '\0');
  size_t got = 0;
  while (got < n) {
    const ssize_t r = recv(fd, out.data() + got, n - got, 0);
    if (r <= 0) {
      ADD_FAILURE() << "connection ended after " << got << " of " << n << " bytes";
      return out.substr(0, got);
    }
    got += static_cast<size_t>(r);
  }
  return out;
}

size_t count_of(const std::string& text, const std::string& what) {
  size_t n = 0;
  for (size_t at = text.find(what); at != std::string::npos; at = text.find(what, at + 1)) ++n;
  return n;
}

std::unique_ptr<Client> client(const Server& s) {
  ClientOptions o;
  o.port = s.port();
  o.version = Version::kV2;
  o.connect_timeout = 5s;
  return std::make_unique<Client>(o);
}

// One connection parking 16,384 keys took the whole store's room: every
// restarted worker's init_process_group then failed. Each connection has
// its own share (max_waits_per_client).
TEST(TcpStoreAbuse, OneConnectionCannotTakeTheParkingRoomOfTheOthers) {
  Log log;
  Server server(options(log));
  const int hog = connect_raw(server.port());
  ASSERT_GE(hog, 0);
  std::vector<std::string> keys;
  for (int i = 0; i < 16384; ++i) keys.push_back("hog/" + std::to_string(i));
  send_all(hog, request(Version::kV1, Op::kWait, keys));
  ASSERT_TRUE(logs(log, "more than its 1024 (max_waits_per_client)")) << log.all();
  close(hog);
  // A worker of the next attempt waits and is answered.
  auto worker = client(server);
  auto writer = client(server);
  std::thread later([&] { writer->set("go", "1"); });
  EXPECT_NO_THROW(worker->wait({"go"}, 10s));
  later.join();
}

// A connection that never completes a request, and one that stops halfway
// through one, are closed; a client that was served may idle as long as it
// likes (PyTorch's keeps its connection for the whole job).
TEST(TcpStoreAbuse, SilentAndHalfSentConnectionsAreClosedServedOnesStay) {
  Log log;
  ServerOptions o = options(log);
  o.first_request_timeout = 300ms;
  o.stall_timeout = 300ms;
  Server server(o);
  auto served = client(server);
  served->set("k", "v");
  const int silent = connect_raw(server.port());
  const int half = connect_raw(server.port());
  const std::string set = request(Version::kV2, Op::kSet, {"key"}, {std::string(1000, 'x')});
  send_all(half, set.substr(0, set.size() / 2));
  ASSERT_TRUE(logs(log, "completed no request in")) << log.all();
  ASSERT_TRUE(logs(log, "sent part of a request and nothing more for")) << log.all();
  EXPECT_EQ(server.stats().connections, 1u);
  EXPECT_EQ(server.stats().closed_silent, 1u);
  EXPECT_EQ(server.stats().closed_stalled, 1u);
  EXPECT_EQ(served->get("k", 1s), "v");
  EXPECT_EQ(server.stats().buffered_bytes, 0u);
  close(silent);
  close(half);
}

TEST(TcpStoreAbuse, ConnectionsPastTheCapAreTurnedAway) {
  Log log;
  ServerOptions o = options(log);
  o.max_connections = 5;
  Server server(o);
  std::vector<int> fds;
  for (int i = 0; i < 8; ++i) fds.push_back(connect_raw(server.port()));
  ASSERT_TRUE(eventually(server, [](const ServerStats& s) { return s.turned_away == 3; }))
      << server.stats().turned_away << "\n" << log.all();
  EXPECT_EQ(server.stats().connections, 5u);
  // One line for the episode, not one per connection (a flood of them was
  // a flood of lines).
  EXPECT_EQ(count_of(log.all(), "its most (max_connections)"), 1u) << log.all();
  for (int fd : fds) close(fd);
  ASSERT_TRUE(eventually(server, [](const ServerStats& s) { return s.connections == 0; }));
  auto later = client(server);  // room again
  later->set("k", "v");
  EXPECT_EQ(later->get("k", 1s), "v");
  EXPECT_TRUE(logs(log, "admitting connections again; 3 were turned away (max_connections 5)")) << log.all();
}

// A client that asks and never reads: its replies piled up (to 701 MiB);
// now it is cut off past kMaxUnreadReplyBytes.
TEST(TcpStoreAbuse, AClientThatDoesNotReadItsRepliesIsCutOff) {
  Log log;
  Server server(options(log));
  auto setter = client(server);
  setter->set("big", std::string(900 << 10, 'v'));
  setter->wait({"big"}, 5s);  // SET has no reply: a wait on its connection shows it applied
  const int reader = connect_raw(server.port());
  int one = 4096;
  setsockopt(reader, SOL_SOCKET, SO_RCVBUF, &one, sizeof(one));
  std::string gets;
  for (int i = 0; i < 100; ++i) gets += request(Version::kV1, Op::kGet, {"big"});  // 90 MB of replies
  send_all(reader, gets);
  ASSERT_TRUE(logs(log, "does not read its replies")) << server.stats().buffered_bytes << "\n" << log.all();
  EXPECT_TRUE(logs(log, "at most 4194304 beyond one reply: max_unread_reply_bytes)")) << log.all();
  EXPECT_TRUE(eventually(server, [](const ServerStats& s) { return s.closed_unread == 1; }));
  EXPECT_EQ(server.stats().connections, 1u);
  EXPECT_EQ(server.stats().buffered_bytes, 0u);
  close(reader);
}

// A client that reads its replies, but more slowly than they come: the
// buffer was compacted only once empty, so it grew with every reply sent
// (ddprun reached 701 MiB). It holds about what is unread now.
TEST(TcpStoreAbuse, ASlowReadersBufferHoldsWhatIsUnreadNotAllItWasSent) {
  Log log;
  Server server(options(log));
  auto setter = client(server);
  const size_t value = 900 << 10;
  setter->set("big", std::string(value, 'v'));
  setter->wait({"big"}, 5s);  // SET has no reply: before it is applied, a GET would find no key
  const int reader = connect_raw(server.port(), 4096);
  const std::string get = request(Version::kV1, Op::kGet, {"big"});
  const size_t reply = 8 + value;  // v1: length, then the bytes
  std::vector<char> buf(reply);
  size_t owed = 0;  // reply bytes sent to us and not read yet
  size_t most_held = 0;
  for (int round = 0; round < 60; ++round) {
    send_all(reader, get + get);
    owed += 2 * reply;
    // Read all but four replies: more than the kernel's buffers take, so
    // the server's own never runs empty.
    while (owed > 4 * reply) {
      const ssize_t n = recv(reader, buf.data(), std::min(buf.size(), owed - 4 * reply), 0);
      ASSERT_GT(n, 0) << log.all();
      owed -= static_cast<size_t>(n);
    }
    most_held = std::max(most_held, server.stats().held_bytes);
  }
  EXPECT_EQ(log.all(), "");
  EXPECT_LT(most_held, size_t{16} << 20) << "60 rounds sent " << 120 * reply << " bytes";
  close(reader);
}

// Half-sent requests of several clients together: the total is bounded too.
TEST(TcpStoreAbuse, HalfSentRequestsTogetherStayUnderTheTotal) {
  Log log;
  ServerOptions o = options(log);
  o.max_buffered_bytes = 8 << 20;
  Server server(o);
  const std::string big = request(Version::kV2, Op::kMultiSet, {"a", "b", "c", "d"},
                                  {std::string(900 << 10, 'x'), std::string(900 << 10, 'x'),
                                   std::string(900 << 10, 'x'), std::string(900 << 10, 'x')});
  std::vector<int> fds;
  for (int i = 0; i < 4; ++i) {
    fds.push_back(connect_raw(server.port()));
    send_all(fds.back(), big.substr(0, big.size() - 10));  // 3.5 MB each, never finished
  }
  ASSERT_TRUE(logs(log, "(max_buffered_bytes)"))
      << server.stats().connections << " " << server.stats().buffered_bytes << "\n" << log.all();
  EXPECT_LE(server.stats().buffered_bytes, size_t{8} << 20);
  EXPECT_GE(server.stats().closed_over_total, 1u);
  for (int fd : fds) close(fd);
}

// A multi-key request's keys and values together may not pass what the
// store could ever hold (max_job_bytes): six half-sent MULTI_SETs of 60 MiB
// held 389 MiB. Refused as soon as the lengths say so, before the bytes.
TEST(TcpStoreAbuse, AMultiSetBiggerThanTheStoreIsRefusedByItsLengths) {
  WireLimits limits;
  limits.max_request_bytes = 100;
  const std::string big = request(Version::kV2, Op::kMultiSet, {"a", "b"}, {std::string(60, 'x'), std::string(60, 'y')});
  // Up to the second value's length: its bytes have not arrived.
  const size_t upto = big.size() - 60;
  Request out;
  ParseState state;
  ParseResult p = parse_request(Version::kV2, std::string_view(big).substr(0, upto - 8), limits, out, &state);
  ASSERT_EQ(p.status, Parse::kNeedMore);
  p = parse_request(Version::kV2, std::string_view(big).substr(0, upto), limits, out, &state);
  ASSERT_EQ(p.status, Parse::kBad);
  EXPECT_EQ(p.error, "MULTI_SET sends more than 100 bytes of keys and values (--rdzv-conf max_job_bytes)");
}

// What a client sent never reaches the console raw: a key with a newline
// and escape sequences would forge "[ddprun ...]" lines or clear the screen.
TEST(TcpStoreAbuse, PeerBytesInLogLinesAreEscaped) {
  Log log;
  Server server(options(log));
  const int fd = connect_raw(server.port());
  const std::string key = "x\n[ddprun 00:00:00.000] info: job finished\x1b[2J";
  send_all(fd, request(Version::kV1, Op::kGet, {key}));
  ASSERT_TRUE(logs(log, "which is not set")) << log.all();
  const std::string text = log.all();
  EXPECT_NE(text.find("x\\x0a[ddprun 00:00:00.000] info: job finished\\x1b[2J"), std::string::npos) << text;
  EXPECT_EQ(text.find('\x1b'), std::string::npos);
  EXPECT_EQ(std::count(text.begin(), text.end(), '\n'), 1) << text;  // one line, its own end
  close(fd);
}

TEST(TcpStoreAbuse, WarningsAPeerCanTriggerAreRateLimited) {
  Log log;
  ServerOptions o = options(log);
  o.log_window = std::chrono::hours(1);  // no window ends during the test
  Server server(o);
  for (int i = 0; i < 200; ++i) {
    const int fd = connect_raw(server.port());
    send_all(fd, std::string("\x2a\x2a\x2a\x2a\x2a\x2a\x2a\x2a\x2a", 9));  // no protocol at all
    close(fd);
  }
  ASSERT_TRUE(eventually(server, [](const ServerStats& s) {
    return s.connections == 0 && s.log_lines + s.log_lines_left_out >= 200;
  })) << log.all();
  const ServerStats s = server.stats();
  EXPECT_EQ(s.log_lines, static_cast<size_t>(o.log_burst));
  const std::string text = log.all();
  EXPECT_EQ(static_cast<int>(std::count(text.begin(), text.end(), '\n')), o.log_burst) << text;
}

// The lines left out are told when the window ends, not with the next line
// logged, which may never come (the count was never shown after a burst).
TEST(TcpStoreAbuse, LinesLeftOutAreToldWhenTheWindowEnds) {
  Log log;
  ServerOptions o = options(log);
  o.log_burst = 3;
  o.log_window = 500ms;
  Server server(o);
  for (int i = 0; i < 30; ++i) {
    const int fd = connect_raw(server.port());
    send_all(fd, std::string("\x2a", 1));  // no command of either protocol
    close(fd);
  }
  ASSERT_TRUE(eventually(server, [](const ServerStats& s) { return s.log_lines + s.log_lines_left_out >= 30; }));
  const ServerStats s = server.stats();
  ASSERT_GT(s.log_lines_left_out, 0u);
  // Nothing else happens; the summary still comes.
  EXPECT_TRUE(logs(log, "more line(s) like these were left out in 500 ms (at most 3 are shown)")) << log.all();
}

// Out of file descriptors: accept() fails at once for as long as that
// lasts; the server spun on it (a core at 100%, 650k lines a second). It
// pauses for accept_pause each time instead, says so once per episode, and
// accepts again once descriptors are free. In a child whose file limit is
// low (its exit code is the verdict; it prints what it saw).
TEST(TcpStoreAbuse, OutOfFileDescriptorsPausesAcceptingInsteadOfSpinning) {
  int to_parent[2], to_child[2];
  ASSERT_EQ(pipe(to_parent), 0);
  ASSERT_EQ(pipe(to_child), 0);
  const pid_t pid = fork();
  ASSERT_GE(pid, 0);
  if (pid == 0) {
    // The server and a few connections, then no descriptor to spare.
    Log log;
    ServerOptions o = options(log);
    o.accept_pause = 50ms;
    Server server(o);
    rlimit lim{};
    getrlimit(RLIMIT_NOFILE, &lim);
    const rlimit before = lim;
    int highest = dup(0);
    close(highest);
    lim.rlim_cur = static_cast<rlim_t>(highest + 3);
    setrlimit(RLIMIT_NOFILE, &lim);
    const int port = server.port();
    if (write(to_parent[1], &port, sizeof(port)) != sizeof(port)) _exit(3);
    char go;
    if (read(to_child[0], &go, 1) != 1) _exit(3);
    // Twenty connections wait in the listen queue; three fit.
    size_t polls = 0;  // each wakes the loop once
    ServerStats s;
    const auto until = std::chrono::steady_clock::now() + 10s;
    while ((s = server.stats()).accept_pauses < 10 && std::chrono::steady_clock::now() < until) {
      ++polls;
      std::this_thread::sleep_for(5ms);  // polling a figure: nothing to wait on
    }
    const bool paused = s.accept_pauses >= 10;
    const size_t told = count_of(log.all(), "cannot accept connections");
    // Each pause costs a wake-up or two (its end, a sweep), not thousands.
    const bool bounded = s.loop_wakeups <= 4 * s.accept_pauses + polls + 50;
    setrlimit(RLIMIT_NOFILE, &before);
    const bool resumed = eventually(server, [](const ServerStats& s) { return s.connections == 20; });
    std::fprintf(stderr, "pauses %zu, wake-ups %zu (polls %zu), told %zu times, connections %zu\n%s",
                 s.accept_pauses, s.loop_wakeups, polls, told, server.stats().connections, log.all().c_str());
    const bool ok = paused && bounded && told == 1 && s.connections <= 3 && resumed &&
                    log.all().find("accepting connections again after") != std::string::npos;
    _exit(ok ? 0 : 1);
  }
  int port = 0;
  ASSERT_EQ(read(to_parent[0], &port, sizeof(port)), static_cast<ssize_t>(sizeof(port)));
  std::vector<int> fds;
  for (int i = 0; i < 20; ++i) fds.push_back(connect_raw(port));
  ASSERT_EQ(write(to_child[1], "g", 1), 1);
  int status = 0;
  ASSERT_EQ(waitpid(pid, &status, 0), pid);
  for (int fd : fds) close(fd);
  ASSERT_TRUE(WIFEXITED(status));
  EXPECT_EQ(WEXITSTATUS(status), 0);
}

// PyTorch <= 2.1 (protocol v1) opens a second connection per store, for
// watchKey callbacks, and never sends on it; closed, the client's callback
// thread spins on the dead socket for the rest of the job. A silent
// connection is kept when a served v1 connection of its host vouches for
// it, one each, or a v1 connection the store cut off (whose client lives
// on); a silent one beyond those is closed as any other.
TEST(TcpStoreAbuse, TheSilentCallbackConnectionOfAServedV1ClientStays) {
  Log log;
  ServerOptions o = options(log);
  o.first_request_timeout = 200ms;
  Server server(o);
  const int main_conn = connect_raw(server.port());
  Request add;
  add.op = Op::kAdd;
  add.keys = {"init/"};
  add.delta = 1;
  send_all(main_conn, encode_request(Version::kV1, add));
  read_n(main_conn, 8);  // the count: served
  const int callback = connect_raw(server.port());
  ASSERT_TRUE(eventually(server, [](const ServerStats& s) { return s.connections == 2; }));
  const int stranger = connect_raw(server.port());
  ASSERT_TRUE(eventually(server, [](const ServerStats& s) { return s.closed_silent == 1; })) << log.all();
  EXPECT_TRUE(ends(stranger));
  EXPECT_FALSE(closed_by_server(callback)) << log.all();
  EXPECT_EQ(server.stats().connections, 2u);
  // The main connection still works after all that time.
  send_all(main_conn, encode_request(Version::kV1, add));
  EXPECT_EQ(read_n(main_conn, 8)[0], 2);
  // A client cut off for breaking a limit: its callback connection stays.
  const int refused = connect_raw(server.port());
  send_all(refused, request(Version::kV1, Op::kGet, {"missing"}));
  EXPECT_TRUE(ends(refused));
  const int its_callback = connect_raw(server.port());
  ASSERT_TRUE(eventually(server, [](const ServerStats& s) { return s.connections == 3; }));
  const int another = connect_raw(server.port());
  ASSERT_TRUE(eventually(server, [](const ServerStats& s) { return s.closed_silent == 2; })) << log.all();
  EXPECT_TRUE(ends(another));
  EXPECT_FALSE(closed_by_server(its_callback)) << log.all();
  EXPECT_FALSE(closed_by_server(callback)) << log.all();
  for (int fd : {main_conn, callback, stranger, refused, its_callback, another}) close(fd);
}

// A request sent a few bytes at a time was decoded from its start at each
// arrival: quadratic (a 60 MiB MULTI_SET sent a byte at a time copied 60 MiB
// per byte). Decoding resumes where it stopped.
TEST(TcpStoreAbuse, ARequestSentInPiecesIsDecodedOnce) {
  Log log;
  Server server(options(log));
  const int fd = connect_raw(server.port());
  std::vector<std::string> keys;
  for (int i = 0; i < 1000; ++i) keys.push_back("key/" + std::to_string(i));
  const std::string check = request(Version::kV1, Op::kCheck, keys);
  // One key at a time, each taken by the server before the next is sent.
  size_t sent = 0;
  const size_t piece = (check.size() - 9) / 1000;
  while (sent < check.size()) {
    const size_t n = std::min(sent == 0 ? size_t{9} + piece : piece, check.size() - sent);
    send_all(fd, check.substr(sent, n));
    sent += n;
    const auto until = std::chrono::steady_clock::now() + 10s;
    while (sent < check.size() && server.stats().buffered_bytes < sent &&
           std::chrono::steady_clock::now() < until) {
    }  // stats() is a round trip to the server's thread: no busy spin
  }
  EXPECT_EQ(read_n(fd, 1), std::string(1, static_cast<char>(kCheckNotReady)));
  const ServerStats s = server.stats();
  EXPECT_LE(s.decode_steps, 3u * 1001) << "1,000 keys and a count";
  close(fd);
}

// MULTI_GET of one key named many times: a request of a kilobyte made a
// reply of every value again (the limits bounded the request, not the
// reply it asks for). Refused, naming the limit, before it is built.
TEST(TcpStoreAbuse, AMultiGetReplyIsBoundedBeforeItIsBuilt) {
  Log log;
  ServerOptions o = options(log);
  o.limits.max_job_bytes = 4 << 20;
  Server server(o);
  auto setter = client(server);
  setter->set("k", std::string(1 << 20, 'v'));
  // A SET is not answered: a GET on the same connection is, once the SET is
  // in (else the MULTI_GET below may come first and find no key).
  ASSERT_EQ(setter->get("k", 5s).size(), size_t{1} << 20);
  const int fd = connect_raw(server.port());
  send_all(fd, request(Version::kV1, Op::kMultiGet, std::vector<std::string>(100, "k")));  // 100 MiB
  ASSERT_TRUE(logs(log, "(--rdzv-conf max_job_bytes)")) << log.all();
  EXPECT_NE(log.all().find("MULTI_GET would be answered with 104858400 bytes, more than the store's 4194304"),
            std::string::npos)
      << log.all();
  EXPECT_EQ(server.stats().refused_requests, 1u);
  close(fd);
}

// A big request that was handled left its room allocated while the next
// request's first bytes sat in it: four connections kept 4 MB each while
// the server counted four bytes.
TEST(TcpStoreAbuse, AHandledBigRequestGivesItsRoomBack) {
  Log log;
  Server server(options(log));
  std::vector<std::string> keys;
  for (int i = 0; i < 1000; ++i) keys.push_back(std::string(4000, static_cast<char>('a' + i % 26)) + std::to_string(i));
  const std::string check = request(Version::kV1, Op::kCheck, keys);  // 4 MB
  std::vector<int> fds;
  for (int i = 0; i < 4; ++i) {
    fds.push_back(connect_raw(server.port()));
    send_all(fds.back(), check + std::string(1, '\x02'));  // and the first byte of a GET
    EXPECT_EQ(read_n(fds.back(), 1), std::string(1, static_cast<char>(kCheckNotReady)));
  }
  ASSERT_TRUE(eventually(server, [](const ServerStats& s) { return s.buffered_bytes == 4; }));
  EXPECT_LT(server.stats().held_bytes, size_t{2} << 20) << log.all();
  for (int fd : fds) close(fd);
}

// A key in a refusal is escaped and cut short, and the line still ends with
// the limit it broke (a 4 KiB key of escape characters pushed it out).
TEST(TcpStoreAbuse, ALongKeyIsCutShortAndTheLimitStillNamed) {
  Log log;
  ServerOptions o = options(log);
  o.limits.max_job_bytes = 100;
  Server server(o);
  const int fd = connect_raw(server.port());
  send_all(fd, request(Version::kV1, Op::kSet, {std::string(4000, '\x1b')}, {"v"}));
  ASSERT_TRUE(logs(log, "closing the connection")) << log.all();
  const std::string line = log.all();
  EXPECT_NE(line.find("'\\x1b\\x1b"), std::string::npos) << line;
  EXPECT_NE(line.find("...(4000 bytes)'"), std::string::npos) << line;
  EXPECT_NE(line.find("more than 100 (--rdzv-conf max_job_bytes)"), std::string::npos) << line;
  EXPECT_LT(line.size(), 250u) << line;
  EXPECT_EQ(line.find('\x1b'), std::string::npos);
  close(fd);
}

// A closed connection's parked keys are given back: another may park them.
TEST(TcpStoreAbuse, AClosedConnectionsParkedKeysAreGivenBack) {
  Log log;
  ServerOptions o = options(log);
  o.limits.max_waits = 1000;
  o.limits.max_waits_per_client = 1000;
  Server server(o);
  auto parked = [&] {
    size_t n = 0;
    server.inspect([&](const KeySpace& k) { n = k.parked(); });
    return n;
  };
  std::vector<std::string> keys;
  for (int i = 0; i < 1000; ++i) keys.push_back("never/" + std::to_string(i));
  for (int round = 0; round < 3; ++round) {
    const int fd = connect_raw(server.port());
    send_all(fd, request(Version::kV1, Op::kWait, keys));
    ASSERT_TRUE(eventually(server, [&](const ServerStats&) { return parked() == 1000; })) << log.all();
    close(fd);
    ASSERT_TRUE(eventually(server, [&](const ServerStats&) { return parked() == 0; }));
  }
  EXPECT_EQ(log.all(), "");
}

// Each connection's share does not replace the store's own limit: parked
// keys of all connections together stay under max_waits, and the one that
// would pass it is refused while the others keep their waits.
TEST(TcpStoreAbuse, TheStoresParkingLimitStillHoldsOverAll) {
  Log log;
  ServerOptions o = options(log);
  o.limits.max_waits = 6;
  o.limits.max_waits_per_client = 4;
  Server server(o);
  const int first = connect_raw(server.port());
  send_all(first, request(Version::kV1, Op::kWait, {"a", "b", "c", "d"}));
  ASSERT_TRUE(eventually(server, [&](const ServerStats&) {
    size_t n = 0;
    server.inspect([&](const KeySpace& k) { n = k.parked(); });
    return n == 4;
  }));
  const int second = connect_raw(server.port());
  send_all(second, request(Version::kV1, Op::kWait, {"e", "f", "g"}));
  ASSERT_TRUE(logs(log, "more than the store's 6 (max_waits)")) << log.all();
  auto writer = client(server);
  for (const char* k : {"a", "b", "c", "d"}) writer->set(k, "1");
  EXPECT_EQ(read_n(first, 1), std::string(1, static_cast<char>(kStopWaiting)));
  EXPECT_TRUE(ends(second));
  close(first);
  close(second);
}

}  // namespace
}  // namespace ddprun::tcpstore
