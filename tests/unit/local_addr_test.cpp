// The address worker_lib hands to Gloo is checked first: a bad one is a
// one-line ConfigError naming the setting, never a crash inside Gloo.
#include <gtest/gtest.h>

#include "ddp/launch_info.h"
#include "base/local_addr.h"

namespace {

std::string error_for(const std::string& addr) {
  try {
    ddp::check_local_addr(addr, "DDPRUN_LOCAL_ADDR");
  } catch (const ddp::ConfigError& e) {
    return e.what();
  }
  return "";
}

TEST(LocalAddr, ThisMachinesAddressesPass) {
  EXPECT_EQ(error_for("127.0.0.1"), "");
  EXPECT_EQ(error_for("localhost"), "");
}

TEST(LocalAddr, ANameThatDoesNotResolveIsNamed) {
  const std::string e = error_for("nonexistent.invalid");
  EXPECT_EQ(e.rfind("ddp: DDPRUN_LOCAL_ADDR='nonexistent.invalid' does not resolve (", 0), 0u) << e;
  EXPECT_NE(e.find("give ddprun --local-addr an address of this node"), std::string::npos) << e;
  EXPECT_EQ(e.find('\n'), std::string::npos) << e;
}

TEST(LocalAddr, AnAddressOfAnotherMachineIsNamed) {
  // 192.0.2.0/24 is TEST-NET-1: never configured on a real interface.
  const std::string e = error_for("192.0.2.1");
  EXPECT_EQ(e.rfind("ddp: DDPRUN_LOCAL_ADDR='192.0.2.1' is not an address of this node (bind: ", 0), 0u) << e;
  EXPECT_NE(error_for(""), "");
}

}  // namespace
