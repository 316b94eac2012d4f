// The heartbeat slot across the language boundary: the agent (C++,
// HeartbeatTable) writes a Python worker's slot and python/ddprun/_slot.py
// reads it back word for word; the worker writes and the agent reads.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <string>

#include "agent/health/heartbeat_table.h"

namespace {

namespace fs = std::filesystem;

// Runs `script` (Python, stdlib only) with the slot file and slot number as
// its arguments; its stdout.
std::string run_python(const std::string& script, const std::string& file, int slot) {
  const fs::path dir = fs::temp_directory_path() / ("ddprun-slot-interop-" + std::to_string(getpid()));
  fs::create_directories(dir);
  const fs::path py = dir / "reader.py";
  std::ofstream(py) << script;
  const std::string cmd = "python3 " + py.string() + " " + file + " " + std::to_string(slot) + " 2>&1";
  std::string out;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[512];
    while (size_t n = fread(buf, 1, sizeof(buf), p)) out.append(buf, n);
    pclose(p);
  }
  fs::remove_all(dir);
  return out;
}

TEST(SlotInterop, APythonWorkerAndTheAgentReadEachOthersWordsFieldByField) {
  const std::string file =
      (fs::temp_directory_path() / ("ddprun-slot-interop-" + std::to_string(getpid()) + ".hb")).string();
  ddprun::HeartbeatTable table(file, 3);
  // The agent's words for the worker in slot 1.
  table.set_heal_generation(1, 7);
  table.set_no_heal_coming(1, true);
  table.set_placement(1, /*generation=*/9, /*rank=*/5, /*world_size=*/8, /*node_rank=*/2, /*num_nodes=*/4);
  // The worker's side, as a Python worker has it (no torch: _slot.py alone).
  // (The package's modules without its __init__, which imports torch.)
  const std::string script = R"(import sys, types
package = types.ModuleType("ddprun")
package.__path__ = [")" DDPRUN_SOURCE_DIR R"(/python/ddprun"]
sys.modules["ddprun"] = package
import ddprun._slot as slot
s = slot.Slot(sys.argv[1], int(sys.argv[2]))
print("generation", s.generation(), "no_heal", int(s.no_heal_coming()),
      "placement", " ".join(str(w.value) for w in s._placement))
for _ in range(3):
    s.beat()
s.set_heal_ready(True)
s.set_in_step(True)
s.report_replicas(40, 3, 2, 1, 40, 2, 20, "rank 1's parameters differ from ranks 0, 2 at step 40 \u00e9")
)";
  const std::string out = run_python(script, file, 1);
  EXPECT_NE(out.find("generation 7 no_heal 1 placement 9 5 8 2 4"), std::string::npos) << out;
  // The worker's words, as the agent reads them; its neighbours untouched.
  EXPECT_EQ(table.read(1), 3u) << out;
  EXPECT_TRUE(table.heal_ready(1));
  EXPECT_TRUE(table.in_step(1));
  // What its comparison of the replicas found, as the agent reads it.
  ddprun::channel::ReplicaReport r;
  ASSERT_TRUE(table.replicas(1, &r));
  EXPECT_EQ(r.agreed_step, 40);
  EXPECT_EQ(r.checks, 3u);
  EXPECT_EQ(r.verdicts, 2u);
  EXPECT_EQ(r.verdict, static_cast<uint32_t>(ddprun::channel::ReplicaVerdict::kRepaired));
  EXPECT_EQ(r.verdict_step, 40);
  EXPECT_EQ(r.self, static_cast<uint32_t>(ddprun::channel::ReplicaSelf::kReplace));
  EXPECT_EQ(r.every, 20u);
  EXPECT_EQ(std::string(r.text), "rank 1's parameters differ from ranks 0, 2 at step 40 \xc3\xa9");
  for (int other : {0, 2}) {
    ASSERT_TRUE(table.replicas(other, &r));
    EXPECT_EQ(r.verdicts, 0u) << "slot " << other;
    EXPECT_EQ(table.read(other), 0u) << "slot " << other;
    EXPECT_FALSE(table.heal_ready(other)) << "slot " << other;
    EXPECT_FALSE(table.in_step(other)) << "slot " << other;
    EXPECT_EQ(table.heal_generation(other), 0u) << "slot " << other;
  }
}

}  // namespace
