// The tcpstore server's admission and its log (server.h): at most
// log_burst lines per window, and what was left out told when the window
// ends; accepts paused while the process has no descriptor for them, and
// connections past max_connections turned away, each episode told once.
#include <errno.h>
#include <string.h>
#include <sys/epoll.h>
#include <unistd.h>

#include <cstdio>
#include <string>

#include "tcpstore/peer_text.h"
#include "tcpstore/server.h"
#include "tcpstore/server_parts.h"

namespace ddprun::tcpstore {

void Server::emit(const std::string& line) {
  if (opts_.log) {
    opts_.log(line);
  } else {
    std::fprintf(stderr, "ddprun: tcpstore: %s\n", line.c_str());
  }
}

// A new window once the last one is over; what it left out is told then
// (the loop wakes for it), not with the next line, which may never come.
void Server::roll_log_window(SteadyClock::time_point now) {
  if (now - log_window_start_ < opts_.log_window) return;
  if (log_left_out_ > 0) {
    emit(std::to_string(log_left_out_) + " more line(s) like these were left out in " +
         duration_text(opts_.log_window) + " (at most " + std::to_string(opts_.log_burst) + " are shown)");
  }
  log_window_start_ = now;
  log_window_lines_ = 0;
  log_left_out_ = 0;
}

void Server::log(const std::string& raw) {
  // At most log_burst lines per window: a client that breaks the rules on
  // every connection must not flood the console (or spin a core on it).
  roll_log_window(SteadyClock::now());
  if (log_window_lines_ >= opts_.log_burst) {
    ++log_left_out_;
    ++stats_.log_lines_left_out;
    return;
  }
  ++log_window_lines_;
  ++stats_.log_lines;
  emit(log_safe(raw));
}

void Server::pause_accepting(int err) {
  // The pending connection stays in the listen queue; accept() would fail
  // again at once, so stop watching the socket for accept_pause (the loop's
  // timeout brings it back) instead of spinning. One line per episode.
  accept_paused_until_ = SteadyClock::now() + opts_.accept_pause;
  ++stats_.accept_pauses;
  epoll_event ev{};
  ev.events = 0;
  ev.data.u64 = 0;
  epoll_ctl(epoll_fd_, EPOLL_CTL_MOD, listen_fd_, &ev);
  if (pauses_in_episode_++ == 0) {
    log(std::string("cannot accept connections: ") + strerror(err) + " (serving " + std::to_string(conns_.size()) +
        "; raise the file limit, ulimit -n); accepting pauses " + duration_text(opts_.accept_pause) +
        " at a time until it can");
  }
}

void Server::resume_accepting() {
  if (pauses_in_episode_ == 0) return;
  log("accepting connections again after " + std::to_string(pauses_in_episode_) + " pause(s)");
  pauses_in_episode_ = 0;
}

void Server::turn_away(int fd) {
  // Taken off the queue and closed: a full queue would keep the rest
  // waiting. One line per episode (until a connection is admitted again).
  ++stats_.turned_away;
  if (turned_away_in_episode_++ == 0) {
    log("turning away connections (the first from " + peer_of(fd).first + "): the store serves " +
        std::to_string(conns_.size()) + " connections, its most (max_connections); more are counted, not told");
  }
  close(fd);
}

}  // namespace ddprun::tcpstore
