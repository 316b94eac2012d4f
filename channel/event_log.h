// The agent's event log: one JSON object per line, in --log-dir
// (<run dir>/events.jsonl) and, with --trace, in the trace folder
// (<node>/events.jsonl), where the merger turns them into instant events on
// an agent track. Written by agent/, read by trace/ and by tests: both name
// events and fields only through these constants.
//
// Every line has: "time" (UTC, ISO 8601 with microseconds), "mono_ns"
// (CLOCK_MONOTONIC of the agent's host), "node" (the agent's node id) and
// "event" (one of the names below); the rest depends on the event.
#pragma once

namespace ddprun::channel::events {

// Field names every line has.
inline constexpr const char* kTime = "time";
inline constexpr const char* kMonoNs = "mono_ns";
inline constexpr const char* kNode = "node";
inline constexpr const char* kEvent = "event";

// Events (their own fields in the comment).
inline constexpr const char* kJobStart = "job_start";     // run_id, nproc, program
inline constexpr const char* kRound = "round";            // round, node_rank, num_nodes, world_size, restart_count, lost_nodes
inline constexpr const char* kSpawn = "spawn";            // attempt, rank, local_rank, pid, standby (bool)
inline constexpr const char* kExit = "exit";              // attempt, rank, local_rank, pid, exit_code | signal
inline constexpr const char* kFailure = "failure";        // attempt, rank, local_rank, exit_code | signal, root_cause, message
inline constexpr const char* kHang = "hang";              // attempt, rank, local_rank, silent_s, verdict, stacks_file
inline constexpr const char* kSlow = "slow";              // attempt, rank, local_rank, silent_s, detail (silent, but busy: not hung)
inline constexpr const char* kStraggler = "straggler";    // attempt, rank, local_rank, score, last_share, late_ms
inline constexpr const char* kStragglerNode = "straggler_node";  // attempt, node_rank, score, handed_over (bool), detail
inline constexpr const char* kHeal = "heal";              // attempt, rank, local_rank, pid (the replacement's), generation, heals
inline constexpr const char* kReplicas = "replicas";      // attempt, step, verdict (repaired | no_majority | by_design), detail; replace: the rank replaced for it
inline constexpr const char* kTakeover = "takeover";      // attempt, generation, node_rank, detail
inline constexpr const char* kShrink = "shrink";          // attempt, generation, node_rank, num_nodes, world_size, first_rank, detail
inline constexpr const char* kGrow = "grow";              // attempt, generation, node_rank, num_nodes, world_size, first_rank, detail
inline constexpr const char* kPeerHeal = "peer_heal";     // attempt, generation, detail (another node replaced a failed worker)
inline constexpr const char* kRefused = "refused";        // attempt, detail (a late node that runs another program)
inline constexpr const char* kAdmitted = "admitted";      // attempt, detail (a late node whose arguments differ)
inline constexpr const char* kRestart = "restart";        // attempt, restart_count, max_restarts, reason
inline constexpr const char* kNodeLost = "node_lost";     // nodes
inline constexpr const char* kControlPlane = "control_plane";  // node, term, previous_node, previous_term, takeovers
inline constexpr const char* kCheckpointSaved = "checkpoint_saved";       // attempt, rank, step
inline constexpr const char* kCheckpointRestored = "checkpoint_restored"; // attempt, rank, step
inline constexpr const char* kJobEnd = "job_end";         // exit_code, detail
// The node's first rank's progress, at most once a second while its step moves
// (`ddprun report` draws the step rate from it).
inline constexpr const char* kProgress = "progress";      // attempt, rank, step, samples

// Field values: "signal" is the signal's name ("SIGTERM"); "failure" has
// neither exit_code nor signal for a worker ddprun judged hung (its
// "message" says why); "root_cause" is true (the failure the summary names).

inline constexpr const char* kFileName = "events.jsonl";

}  // namespace ddprun::channel::events
