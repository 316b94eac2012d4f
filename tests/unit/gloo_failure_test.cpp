// Gloo's error texts (as gloo 2022 and later word them) become messages that
// say what happened to whom.
#include <gtest/gtest.h>

#include "comm/gloo_failure.h"

namespace {

using namespace std::chrono_literals;

const std::vector<std::string> kEndpoints{"[10.0.0.1]:1111", "", "[10.0.0.3]:3333", "[10.0.0.4]:4444"};

std::string message(const std::string& gloo) {
  return ddp::gloo_failure_message("all_reduce", 1, 4, 30000ms, gloo, kEndpoints);
}

TEST(GlooFailure, AClosedConnectionNamesThePeerByRank) {
  const std::string m = message("[gloo/transport/tcp/pair.cc:598] Connection closed by peer [10.0.0.3]:3333");
  EXPECT_EQ(m.rfind("ddp: all_reduce on rank 1 of 4: peer rank 2 closed the connection (", 0), 0u) << m;
  EXPECT_NE(m.find("Connection closed by peer [10.0.0.3]:3333"), std::string::npos) << m;
}

TEST(GlooFailure, AResetConnectionIsNotCalledATimeout) {
  const std::string m = message("[pair.cc:589] Read error [10.0.0.4]:4444: Connection reset by peer");
  EXPECT_EQ(m.rfind("ddp: all_reduce on rank 1 of 4: peer rank 3 reset the connection (connection reset", 0), 0u)
      << m;
  EXPECT_EQ(m.find("timed out"), std::string::npos) << m;
  EXPECT_EQ(ddp::classify_gloo_failure("writev [10.0.0.1]:1111: Broken pipe"), ddp::GlooFailureKind::kPeerReset);
}

TEST(GlooFailure, AnUnknownAddressIsNamedAsIs) {
  const std::string m = message("[pair.cc:598] Connection closed by peer [10.9.9.9]:9");
  EXPECT_EQ(m.rfind("ddp: all_reduce on rank 1 of 4: a peer ([10.9.9.9]:9) closed the connection", 0), 0u) << m;
}

// The far end of a socket the peer opened is an ephemeral port nobody
// published; with one peer only, it is named all the same.
TEST(GlooFailure, InAWorldOfTwoAnUnknownAddressIsTheOtherRank) {
  const std::string m = ddp::gloo_failure_message("all_reduce", 0, 2, std::chrono::milliseconds(30000),
                                                  "[pair.cc:598] Connection closed by peer [127.0.0.1]:65450",
                                                  {"", "[127.0.0.1]:40000"});
  EXPECT_EQ(m.rfind("ddp: all_reduce on rank 0 of 2: peer rank 1 closed the connection", 0), 0u) << m;
}

TEST(GlooFailure, ATimeoutSaysHowLongAndWhichSettingToChange) {
  const std::string m = message("[unbound_buffer.cc:81] Timed out waiting 30000ms for recv operation to complete");
  EXPECT_EQ(m.rfind("ddp: all_reduce on rank 1 of 4 timed out after 30000 ms (set by ddp::InitOptions::timeout "
                    "or DDPRUN_TIMEOUT_S;",
                    0),
            0u)
      << m;
  EXPECT_EQ(ddp::classify_gloo_failure("Application timeout caused pair closure"), ddp::GlooFailureKind::kTimeout);
}

TEST(GlooFailure, AFailedCheckKeepsTheContext) {
  const std::string m = message("[enforce fail at gloo/allgather.cc:39] out->size == in->size * context->size");
  EXPECT_EQ(m.rfind("ddp: all_reduce on rank 1 of 4 failed (timeout 30000 ms, ", 0), 0u) << m;
  EXPECT_NE(m.find("enforce fail at gloo/allgather.cc:39"), std::string::npos) << m;
}

}  // namespace
