// The agent's event log: one JSON object per line with the common fields,
// appended to every file it was given.
#include <gtest/gtest.h>

#include <filesystem>
#include <fstream>
#include <regex>

#include <nlohmann/json.hpp>

#include "agent/output/event_log.h"
#include "channel/event_log.h"
#include "support/job_helpers.h"

namespace ddprun {
namespace {

namespace ev = channel::events;
namespace fs = std::filesystem;

std::vector<std::string> lines_of(const fs::path& f) {
  std::ifstream in(f);
  std::vector<std::string> out;
  std::string l;
  while (std::getline(in, l)) out.push_back(l);
  return out;
}

TEST(EventLog, ALineIsOneObjectWithTheCommonFields) {
  const std::string line = EventLog::format_line("host:12", ev::kSpawn, {{"rank", 3}, {"pid", 99}},
                                                 "2026-11-22T13:48:44.123456Z", 42);
  ASSERT_EQ(line.back(), '\n');
  EXPECT_EQ(line.find('\n'), line.size() - 1);  // one line
  const auto j = nlohmann::json::parse(line);
  EXPECT_EQ(j[ev::kTime], "2026-11-22T13:48:44.123456Z");
  EXPECT_EQ(j[ev::kMonoNs], 42);
  EXPECT_EQ(j[ev::kNode], "host:12");
  EXPECT_EQ(j[ev::kEvent], "spawn");
  EXPECT_EQ(j["rank"], 3);
  EXPECT_EQ(j["pid"], 99);
  // Text from a worker, with new lines and invalid UTF-8, stays one line.
  const std::string msg = EventLog::format_line("n", ev::kFailure, {{"message", "a\nb\xff"}}, "t", 1);
  EXPECT_EQ(msg.find('\n'), msg.size() - 1);
  EXPECT_EQ(nlohmann::json::parse(msg)["message"], "a\nb\xef\xbf\xbd");
}

TEST(EventLog, TimeIsUtcWithMicroseconds) {
  EXPECT_TRUE(std::regex_match(EventLog::utc_now(),
                               std::regex(R"(20\d\d-\d\d-\d\dT\d\d:\d\d:\d\d\.\d{6}Z)")))
      << EventLog::utc_now();
}

TEST(EventLog, AppendsToEveryFileAndNamesOneItCannotOpen) {
  const fs::path dir = ddptest::temp_path("eventlog", "files");
  fs::create_directories(dir);
  {
    std::ofstream(dir / "a.jsonl") << "{\"earlier\":1}\n";
  }
  EventLog log("node-a");
  EXPECT_FALSE(log.enabled());
  log.write(ev::kJobStart, {});  // no file: nothing, no error
  log.add_file((dir / "a.jsonl").string());
  log.add_file((dir / "b.jsonl").string());
  log.write(ev::kJobStart, {{"nproc", 2}});
  log.write(ev::kJobEnd, {{"exit_code", 0}});
  const auto a = lines_of(dir / "a.jsonl");
  const auto b = lines_of(dir / "b.jsonl");
  ASSERT_EQ(a.size(), 3u);  // appended after what was there
  ASSERT_EQ(b.size(), 2u);
  EXPECT_EQ(a[1], b[0]);
  EXPECT_EQ(nlohmann::json::parse(b[0])[ev::kEvent], "job_start");
  EXPECT_EQ(nlohmann::json::parse(b[1])[ev::kEvent], "job_end");
  EXPECT_LE(nlohmann::json::parse(b[0])[ev::kMonoNs].get<int64_t>(),
            nlohmann::json::parse(b[1])[ev::kMonoNs].get<int64_t>());
  try {
    log.add_file((dir / "no" / "such" / "events.jsonl").string());
    FAIL() << "no error";
  } catch (const std::runtime_error& e) {
    EXPECT_NE(std::string(e.what()).find((dir / "no" / "such" / "events.jsonl").string()), std::string::npos)
        << e.what();
  }
  fs::remove_all(dir);
}

}  // namespace
}  // namespace ddprun
