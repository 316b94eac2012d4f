// Tells the rendezvous how training goes, for `ddprun status`: a thread of
// its own that reads the progress block of global rank 0's heartbeat slot
// once a second and, when it changed, reports it (ReportProgress), with the
// heal generation the agent last told that worker (on one node the agent
// names heals itself, and `ddprun status` counts them from this). Only the
// agent whose workers include global rank 0 reports progress (rank 0 is the
// rank that programs log and checkpoint from). Across nodes every agent
// also reports its collectives (set_collectives) in the same call: one
// call a second per node, for the job-wide straggler scores of nodes and
// other nodes' hang verdicts. With the progress goes what rank 0's slot says
// of the comparisons of the replicas (--verify-every). The agent's I/O loop
// never waits on the network for it.
#pragma once

#include <chrono>
#include <condition_variable>
#include <cstdint>
#include <mutex>
#include <string>
#include <thread>

#include "agent/health/heartbeat_table.h"
#include "agent/health/straggler_scores.h"
#include "rendezvous/client/client.h"

namespace ddprun {

struct StatusReporterOptions {
  std::string job_id;
  std::string node_id;
  std::chrono::milliseconds interval{1000};  // at most one report per interval
  std::chrono::milliseconds call_timeout{1000};
};

class StatusReporter {
 public:
  // table must outlive the reporter.
  StatusReporter(RendezvousClient& client, const HeartbeatTable& table,
                 StatusReporterOptions options);
  ~StatusReporter();  // stops the thread (after a call in flight, at most call_timeout)
  StatusReporter(const StatusReporter&) = delete;
  StatusReporter& operator=(const StatusReporter&) = delete;

  // Workers of `round` run; this node's local rank `slot` is global rank
  // `global_rank` (report only when that is 0; slot < 0: nothing to report).
  void watch(int64_t round, int slot, int global_rank);
  // The workers are gone: nothing to read until the next watch().
  void unwatch();
  // This node's slowest rank (straggler scores), sent with the progress.
  void set_slowest(std::optional<StragglerScores::Slowest> slowest);
  // This node's collectives as they stand (sent at the next report, its age
  // counted from now).
  void set_collectives(NodeCollectives collectives);

 private:
  void loop();
  // Whether p (in heal generation g) is news.
  bool changed(const channel::Progress& p, uint32_t g) const;

  RendezvousClient& client_;
  const HeartbeatTable& table_;
  StatusReporterOptions options_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool stop_ = false;
  int64_t round_ = 0;
  int slot_ = -1;
  int global_rank_ = 0;
  std::optional<StragglerScores::Slowest> slowest_;
  // The last report sent (the loop's own).
  channel::Progress last_{};
  std::optional<StragglerScores::Slowest> last_slowest_;
  uint32_t last_generation_ = 0;
  uint32_t last_replica_verdicts_ = 0;
  bool sent_any_ = false;
  std::optional<NodeCollectives> collectives_;  // not sent yet
  std::chrono::steady_clock::time_point collectives_at_{};
  std::thread thread_;
};

}  // namespace ddprun
