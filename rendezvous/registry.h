// The state behind the rendezvous service, one entry per job: its rounds, its
// key-value store and the NCCL id of its current round. No gRPC here: the
// handler validates requests and calls this; tests call it directly.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <optional>
#include <string>

#include "rendezvous/memory_store.h"
#include "rendezvous/round.h"

namespace ddprun {

struct JoinResult {
  Assignment assignment;
  std::string nccl_id;        // empty when not asked for or unavailable
  std::string nccl_id_error;  // why it is empty although asked for
};

// The join did not complete in time. Says how far the round got.
class JoinTimeout : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

// The rendezvous is shutting down.
class RegistryClosed : public std::runtime_error {
 public:
  using std::runtime_error::runtime_error;
};

class JobRegistry {
 public:
  using IdSource = std::function<std::string()>;

  // id_source makes NCCL unique ids (make_nccl_unique_id in production).
  explicit JobRegistry(IdSource id_source);

  // Joins the job's next round and blocks until it closes or timeout passes.
  JoinResult join(const std::string& job_id, const NodeSpec& node, const RoundSettings& settings,
                  std::chrono::milliseconds timeout);

  // The job's store, created on first use. Valid as long as the registry.
  Store& store(const std::string& job_id);

  // Wakes every blocked join and store call with an error.
  void close();

 private:
  struct Job {
    std::optional<RoundState> rounds;
    MemoryStore store;
    int64_t nccl_round = -1;
    std::string nccl_id;
    std::string nccl_error;
  };
  Job& job_locked(const std::string& job_id);
  void ensure_nccl_id_locked(Job& job);

  IdSource id_source_;
  std::mutex mu_;
  std::condition_variable changed_;
  std::map<std::string, std::unique_ptr<Job>> jobs_;
  bool closed_ = false;
};

}  // namespace ddprun
