// A thread that runs jobs one after another, in the order they were
// submitted: the Reducer's collectives (overlapping backward while the
// communicator still sees one call at a time) and the Checkpointer's writes.
#pragma once

#include <condition_variable>
#include <deque>
#include <functional>
#include <future>
#include <mutex>
#include <thread>

namespace ddp {

class SerialWorker {
 public:
  SerialWorker() : thread_([this] { loop(); }) {}
  ~SerialWorker() {
    {
      std::lock_guard lock(mu_);
      stop_ = true;
    }
    wake_.notify_one();
    thread_.join();
  }
  SerialWorker(const SerialWorker&) = delete;
  SerialWorker& operator=(const SerialWorker&) = delete;

  // The future holds the job's exception, if it throws.
  std::future<void> submit(std::function<void()> job) {
    std::packaged_task<void()> task(std::move(job));
    auto done = task.get_future();
    {
      std::lock_guard lock(mu_);
      jobs_.push_back(std::move(task));
    }
    wake_.notify_one();
    return done;
  }

 private:
  void loop() {
    while (true) {
      std::packaged_task<void()> task;
      {
        std::unique_lock lock(mu_);
        wake_.wait(lock, [this] { return stop_ || !jobs_.empty(); });
        if (jobs_.empty()) return;  // stopping, and nothing left to do
        task = std::move(jobs_.front());
        jobs_.pop_front();
      }
      task();
    }
  }

  std::mutex mu_;
  std::condition_variable wake_;
  std::deque<std::packaged_task<void()>> jobs_;
  bool stop_ = false;
  std::thread thread_;  // last: starts once the rest is ready
};

}  // namespace ddp
