// A function run on a thread of its own every `every`, until the object
// goes: the destructor wakes the thread and joins it at once (a run in
// progress finishes first). A timer, not a wait for anything.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <thread>

namespace ddprun {

class PeriodicTask {
 public:
  PeriodicTask(std::chrono::milliseconds every, std::function<void()> run);
  ~PeriodicTask();
  PeriodicTask(const PeriodicTask&) = delete;
  PeriodicTask& operator=(const PeriodicTask&) = delete;

 private:
  void loop();
  std::chrono::milliseconds every_;
  std::function<void()> run_;
  std::mutex mu_;
  std::condition_variable stop_cv_;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace ddprun
