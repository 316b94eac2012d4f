// The World that ddp::init() makes (ddp/world.h): connected to its job
// through the job's store. Its CPU communicator belongs to a heal
// generation (0 at the start); a newer generation named by the agent aborts
// it (HealWatcher), and reconnect() connects the next one under its own
// store keys, at the ranks the agent placed this worker at. The NCCL
// communicator connects on first use, with an id shared through the same
// keys.
#pragma once

#include <atomic>
#include <chrono>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "ddp/world.h"

namespace ddp {

class SwappableCommunicator;
class HealWatcher;

class JobWorld final : public World {
 public:
  // Connects cpu() (a replacement: into its heal generation or a newer
  // one). Throws CollectiveError or ddprun::StoreError.
  JobWorld(LaunchInfo info, std::shared_ptr<ddprun::Store> store, std::chrono::milliseconds timeout,
           double progress_print_seconds = 10);
  ~JobWorld() override;

  Communicator& cpu() override;
  Communicator& cuda() override;
  void tell_receive_bytes(int64_t bytes) override;
  std::shared_ptr<ReceivePool> take_receive_pool() override;
  ddprun::Store& store() override { return *user_store_; }
  std::unique_ptr<Communicator> connect_group(const std::string& name, const std::vector<int>& ranks,
                                              Device device = Device::kCPU) override;
  uint32_t generation() const override { return generation_; }
  void disconnect() override;
  void reconnect(uint32_t generation) override;
  void set_in_step(bool in_step) override;

 private:
  // The world's CPU communicator of heal generation `generation`, with the
  // ranks the agent placed this worker at (its heartbeat slot), if it did.
  std::unique_ptr<Communicator> connect_generation(uint32_t generation);
  std::unique_ptr<Communicator> connect_nccl();
  // The keys of this World's generation: the round's at the start (g = 0),
  // heal<g>/ below them after heal g.
  std::shared_ptr<ddprun::Store> generation_keys() const;

  std::shared_ptr<ddprun::Store> store_;
  std::shared_ptr<ddprun::Store> round_store_;
  uint32_t generation_ = 0;
  std::shared_ptr<ddprun::Store> generation_store_;  // round_store_ below heal<g>/ (g > 0)
  std::unique_ptr<ddprun::Store> group_store_;
  std::unique_ptr<ddprun::Store> user_store_;
  std::shared_ptr<ReceivePool> receive_pool_;
  std::unique_ptr<SwappableCommunicator> cpu_;
  std::mutex cuda_mu_;
  std::unique_ptr<SwappableCommunicator> cuda_;
  // With heals: aborts cpu_'s connection when a newer generation is named
  // (last: stopped before the communicators go).
  std::unique_ptr<HealWatcher> heal_watcher_;
  std::atomic<bool> in_step_{false};
};

}  // namespace ddp
