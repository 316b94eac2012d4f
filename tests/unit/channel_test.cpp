// The agent <-> worker contract: what one side writes, the other reads.
#include <gtest/gtest.h>

#include "channel/error_file.h"
#include "channel/heartbeat_layout.h"
#include "channel/standby_message.h"

namespace ddprun::channel {
namespace {

TEST(Channel, StandbyMessagesRoundTrip) {
  std::map<std::string, std::string> vars{{"RANK", "3"}, {"EMPTY", ""}, {"EQ", "a=b"}};
  const std::string msg = encode_standby_message(vars);
  EXPECT_TRUE(standby_message_complete(msg));
  EXPECT_FALSE(standby_message_complete(msg.substr(0, msg.size() - 1)));
  auto back = decode_standby_message(msg);
  std::map<std::string, std::string> got(back.begin(), back.end());
  EXPECT_EQ(got, vars);
  EXPECT_TRUE(standby_message_complete(encode_standby_message({})));
  EXPECT_TRUE(decode_standby_message(encode_standby_message({})).empty());
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
  EXPECT_EQ(reinterpret_cast<char*>(heartbeat_counter(table, 2)) - table, 128);
}

}  // namespace
}  // namespace ddprun::channel
