// ddprun's own log lines and the progress status line (a terminal only):
// a log sink, placed first on the logger when logging is set up (before any
// thread exists, since a logger's sink list may not change while threads
// log), that wipes the status line before each line. The agent points it at
// its console while the status line shows, and away again after; the
// pointer is atomic, so any thread may log meanwhile.
#pragma once

#include <atomic>
#include <memory>
#include <mutex>

#include <spdlog/sinks/base_sink.h>

#include "agent/output/console.h"

namespace ddprun {

class StatusWipingSink : public spdlog::sinks::base_sink<std::mutex> {
 public:
  void wipe(Console* console) { console_.store(console, std::memory_order_release); }

 protected:
  void sink_it_(const spdlog::details::log_msg&) override {
    if (Console* c = console_.load(std::memory_order_acquire)) c->hide_status();
  }
  void flush_() override {}

 private:
  std::atomic<Console*> console_{nullptr};
};

}  // namespace ddprun
