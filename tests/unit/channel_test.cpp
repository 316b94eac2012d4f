// The agent <-> worker contract: what one side writes, the other reads.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdio>
#include <fstream>
#include <map>
#include <regex>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "channel/error_file.h"
#include "channel/heartbeat_layout.h"
#include "channel/python_standby.h"
#include "channel/python_startup.h"
#include "channel/standby_message.h"
#include "rendezvous/store/hex.h"

namespace ddprun::channel {
namespace {

TEST(Channel, StandbyMessagesRoundTrip) {
  std::map<std::string, std::string> vars{{"RANK", "3"}, {"EMPTY", ""}, {"EQ", "a=b"}};
  const std::string msg = encode_standby_message(vars);
  EXPECT_TRUE(standby_message_complete(msg));
  EXPECT_FALSE(standby_message_complete(msg.substr(0, msg.size() - 1)));
  std::map<std::string, std::string> got;
  for (const auto& [k, v] : decode_standby_message(msg)) {
    ASSERT_TRUE(v.has_value()) << k;
    got[k] = *v;
  }
  EXPECT_EQ(got, vars);
  EXPECT_TRUE(standby_message_complete(encode_standby_message({})));
  EXPECT_TRUE(decode_standby_message(encode_standby_message({})).empty());
  // Variables to remove travel as bare names.
  const auto with_unset = decode_standby_message(encode_standby_message({{"RANK", "1"}}, {"DDPRUN_HEAL_GENERATION"}));
  ASSERT_EQ(with_unset.size(), 2u);
  EXPECT_EQ(with_unset[0].first, "DDPRUN_HEAL_GENERATION");
  EXPECT_FALSE(with_unset[0].second.has_value());
  EXPECT_EQ(with_unset[1].second, std::optional<std::string>("1"));
}

// The Python standby decodes what the agent encodes, with the bytes and
// the decoder the agent hands it (python_standby.h): a change to either
// side alone fails here.
TEST(Channel, ThePythonStandbyDecodesTheAgentsStandbyMessages) {
  const std::string dir = ::testing::TempDir();
  const std::string program = dir + "/standby_decode.py", message = dir + "/standby_message.bin";
  std::ofstream(program) << python_contract_words() << kPythonStandbyMessage << R"PY(
import sys
msg = open(sys.argv[1], "rb").read()
print(_ddprun_standby_complete(msg), _ddprun_standby_complete(msg[:-1]))
for key, value in _ddprun_standby_entries(msg):
    print(key.hex(), "-" if value is None else "=" + value.hex())
)PY";
  for (const auto& [vars, unset] : std::vector<std::pair<std::map<std::string, std::string>, std::vector<std::string>>>{
           {{{"RANK", "3"}, {"EMPTY", ""}, {"EQ", "a=b"}, {"SPACE", "x y"}}, {"DDPRUN_HEAL_GENERATION"}},
           {{}, {}},
           {{{"RANK", "0"}}, {}}}) {
    const std::string msg = encode_standby_message(vars, unset);
    std::ofstream(message, std::ios::binary) << msg;
    auto says = [](bool b) { return std::string(b ? "True" : "False"); };
    std::string want = says(standby_message_complete(msg)) + " " +
                       says(standby_message_complete(msg.substr(0, msg.size() - 1))) + "\n";
    for (const auto& [key, value] : decode_standby_message(msg)) {
      want += to_hex(key) + " " + (value ? "=" + to_hex(*value) : "-") + "\n";
    }
    std::string got;
    if (FILE* p = popen(("python3 " + program + " " + message + " 2>&1").c_str(), "r")) {
      char buf[256];
      while (fgets(buf, sizeof(buf), p)) got += buf;
      pclose(p);
    }
    EXPECT_EQ(got, want) << "a message of " << vars.size() << " variables and " << unset.size() << " to remove";
  }
}

TEST(Channel, ErrorFilesRoundTripAndTorchrunsFormsAreRead) {
  EXPECT_EQ(error_file_message(error_file_json("std::runtime_error: disk full", 5)),
            "std::runtime_error: disk full");
  EXPECT_EQ(error_file_message(R"({"message": "plain"})"), "plain");
  // PyTorch's @record: the traceback is the useful part.
  EXPECT_EQ(error_file_message(
                R"({"message": {"message": "ValueError: x", "extraInfo": {"py_callstack": "Traceback...\nValueError: x"}}})"),
            "Traceback...\nValueError: x");
  EXPECT_EQ(error_file_message("{}"), "");
  EXPECT_THROW(error_file_message("not json"), std::runtime_error);
}

TEST(Channel, HeartbeatSlotsAreWholeCacheLines) {
  alignas(64) char table[3 * kHeartbeatSlotBytes] = {};
  EXPECT_EQ(heartbeat_file_bytes(3), sizeof(table));
  EXPECT_EQ(kHeartbeatSlotBytes % 64, 0u);
  EXPECT_EQ(reinterpret_cast<char*>(heartbeat_counter(table, 2)) - table, 2 * static_cast<long>(kHeartbeatSlotBytes));
  // Progress sits after the counter, inside its own slot's words.
  const char* block = reinterpret_cast<char*>(progress_block(table, 1));
  EXPECT_EQ(block - table, static_cast<long>(kHeartbeatSlotBytes) + 8);
  EXPECT_LE(block + sizeof(ProgressBlock) - table, static_cast<long>(kHeartbeatSlotBytes + kHeartbeatWordsBytes));
  // The flight record fills the rest of the slot, on a cache line of its own.
  const char* ring = reinterpret_cast<char*>(flight_ring(heartbeat_slot(table, 1)));
  EXPECT_EQ((ring - table) % 64, 0);
  EXPECT_LE(ring + sizeof(FlightRing) - table, 2 * static_cast<long>(kHeartbeatSlotBytes));
}

// The heartbeat slot's layout has one definition, heartbeat_layout.h: the
// Python package reads its words from the header (a link in the source tree,
// a copy in the build tree), writes none of its own, and gets C++'s numbers;
// the Python the agent writes for its workers and standbys takes them from it.
TEST(Channel, PythonSeesTheHeartbeatSlotAsHeartbeatLayoutDefinesIt) {
  alignas(64) char slot[kHeartbeatSlotBytes] = {};
  const auto beats = static_cast<size_t>(reinterpret_cast<char*>(heartbeat_counter(slot, 0)) - slot);
  const std::map<std::string, size_t> cpp{{"SLOT_BYTES", kHeartbeatSlotBytes},
                                          {"_BEATS", beats},
                                          {"_HEAL_READY", kHealReadyOffset},
                                          {"_HEAL_GENERATION", kHealGenerationOffset},
                                          {"_NO_HEAL_COMING", kNoHealComingOffset},
                                          {"_PLACEMENT", kPlacementOffset},
                                          {"_PLACEMENT_WORDS", static_cast<size_t>(kPlacementWords)},
                                          {"_IN_STEP", kInStepOffset}};
  std::ifstream in(DDPRUN_SOURCE_DIR "/python/ddprun/_slot.py");
  ASSERT_TRUE(in) << DDPRUN_SOURCE_DIR "/python/ddprun/_slot.py";
  for (std::string line; std::getline(in, line);) {
    for (const auto& entry : cpp) {
      EXPECT_FALSE(std::regex_search(line, std::regex("^" + entry.first + R"( = [0-9])")))
          << "_slot.py writes a number of its own: " << line;
    }
  }
  // What the package reads, from the source tree and from the build tree's copy.
  for (const std::string dir : {DDPRUN_SOURCE_DIR "/python/ddprun", DDPRUN_BINARY_DIR "/python/ddprun"}) {
    // The package's modules without its __init__ (which imports torch).
    std::string cmd = "python3 -c 'import sys, types; p = types.ModuleType(\"ddprun\"); p.__path__ = [\"" + dir +
                      "\"]; sys.modules[\"ddprun\"] = p; import ddprun._slot as m";
    for (const auto& entry : cpp) cmd += "; print(\"" + entry.first + "\", m." + entry.first + ")";
    cmd += "' 2>&1";
    std::map<std::string, size_t> py;
    std::string out;
    if (FILE* p = popen(cmd.c_str(), "r")) {
      char buf[256];
      while (fgets(buf, sizeof(buf), p)) out += buf;
      pclose(p);
    }
    std::istringstream lines(out);
    for (std::string name, value; lines >> name >> value;) {
      if (std::all_of(value.begin(), value.end(), ::isdigit)) py[name] = std::stoul(value);
    }
    for (const auto& [name, value] : cpp) {
      ASSERT_TRUE(py.count(name)) << dir << "/_slot.py gives no " << name << ":\n" << out;
      EXPECT_EQ(py[name], value) << dir << "/_slot.py's " << name;
    }
  }
  const std::string startup = python_startup(), standby = python_standby();
  const std::string size = std::to_string(kHeartbeatSlotBytes);
  EXPECT_NE(startup.find("_DDPRUN_SLOT_BYTES = " + size + "\n"), std::string::npos);
  EXPECT_NE(startup.find("_DDPRUN_PHASE_OFFSET = " + std::to_string(kPhaseOffset) + "\n"), std::string::npos);
  EXPECT_NE(standby.find("_DDPRUN_SLOT_BYTES = " + size + "\n"), std::string::npos);
  // ... and writes the slot's size once, not again as a number of its own.
  for (const std::string* text : {&startup, &standby}) EXPECT_EQ(text->find(size), text->rfind(size)) << *text;
}

TEST(Channel, ProgressReadsBackWhatWasWritten) {
  alignas(64) char table[2 * kHeartbeatSlotBytes] = {};
  Progress none;
  ASSERT_TRUE(read_progress(progress_block(table, 0), &none));
  EXPECT_EQ(none.flags, 0u);  // a zeroed file: nothing reported
  Progress p;
  p.step = 41;
  p.loss = 0.25;
  p.epoch = 3;
  p.saved_step = 40;
  p.flags = Progress::kHasStep | Progress::kHasLoss | Progress::kHasSaved;
  write_progress(progress_block(table, 1), p);
  write_progress(progress_block(table, 1), p);
  Progress got;
  ASSERT_TRUE(read_progress(progress_block(table, 1), &got));
  EXPECT_EQ(got.step, 41);
  EXPECT_EQ(got.loss, 0.25);
  EXPECT_EQ(got.epoch, 3);
  EXPECT_EQ(got.saved_step, 40);
  EXPECT_EQ(got.flags, p.flags);
  EXPECT_EQ(progress_block(table, 1)->seq, 4u);
  // The other slot and the beat counter are untouched.
  EXPECT_EQ(*heartbeat_counter(table, 1), 0u);
  ASSERT_TRUE(read_progress(progress_block(table, 0), &none));
  EXPECT_EQ(none.flags, 0u);
  // A write under way (odd seq) is never read as a report.
  progress_block(table, 1)->seq = 5;
  EXPECT_FALSE(read_progress(progress_block(table, 1), &got));
}

}  // namespace
}  // namespace ddprun::channel
