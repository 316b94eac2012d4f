// The agent's temporary folder ($TMPDIR/ddprun-<run id>-XXXXXX: the
// heartbeat file, and the workers' files when there is no --log-dir). An
// agent removes its own when it ends; one that was SIGKILLed (or lost its
// machine's power) cannot. Each folder therefore names its owner (the file
// "owner": pid and pid namespace), and a new agent removes the folders of
// owners that are gone. Only this user's folders, and only those whose
// owner lived in this pid namespace (another container's pids mean nothing
// here), are touched.
#pragma once

#include <string>

namespace ddprun {

// Makes this agent's folder under `base` for `run_id`; throws
// std::runtime_error naming the folder. disposable: the agent removes it
// when it ends (it names its owner, so that a later agent removes it if this
// one cannot); a folder that keeps the workers' log files for the user has
// no owner file and is never swept.
std::string make_temp_dir(const std::string& base, const std::string& run_id, bool disposable);

// Where temporary files go: $TMPDIR, else /tmp.
std::string temp_base();

// Removes the ddprun-* folders under `base` whose owner process is gone
// from this pid namespace; returns how many.
int remove_stale_temp_dirs(const std::string& base);

}  // namespace ddprun
