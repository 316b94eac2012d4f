// rendezvous/store/host_port.h: the one HOST:PORT parser.
#include <gtest/gtest.h>

#include "rendezvous/store/host_port.h"

namespace {

using ddprun::HostPort;
using ddprun::HostPortError;
using ddprun::parse_port;
using ddprun::split_host_port;

HostPort split_ok(std::string_view text) {
  HostPort hp;
  EXPECT_EQ(split_host_port(text, hp), HostPortError::kNone) << text;
  return hp;
}

TEST(HostPort, SplitsTheFormsUsersWrite) {
  HostPort a = split_ok("node-1:29400");
  EXPECT_EQ(a.host, "node-1");
  EXPECT_EQ(a.port, "29400");
  EXPECT_FALSE(a.bracketed);
  HostPort b = split_ok("node-1");
  EXPECT_EQ(b.host, "node-1");
  EXPECT_EQ(b.port, "");
  HostPort c = split_ok("[fe80::1]:2379");
  EXPECT_EQ(c.host, "fe80::1");
  EXPECT_EQ(c.port, "2379");
  EXPECT_TRUE(c.bracketed);
  EXPECT_EQ(c.text(1), "[fe80::1]:2379");
  HostPort d = split_ok("[::1]");
  EXPECT_EQ(d.host, "::1");
  EXPECT_EQ(d.text(29400), "[::1]:29400");
  HostPort e = split_ok("fe80::1:29400");  // unbracketed: the last ':' splits
  EXPECT_EQ(e.host, "fe80::1");
  EXPECT_EQ(e.port, "29400");
  EXPECT_EQ(split_ok("host:").port, "");
}

TEST(HostPort, NamesWhatIsWrong) {
  HostPort hp;
  hp.host = "kept";
  EXPECT_EQ(split_host_port("[fe80::1", hp), HostPortError::kUnclosedBracket);
  EXPECT_EQ(split_host_port("[fe80::1]29400", hp), HostPortError::kNotHostPort);
  EXPECT_EQ(split_host_port(":29400", hp), HostPortError::kNotHostPort);
  EXPECT_EQ(split_host_port("[]:29400", hp), HostPortError::kNotHostPort);
  EXPECT_EQ(split_host_port("", hp), HostPortError::kNotHostPort);
  EXPECT_EQ(hp.host, "kept") << "a failed split wrote its output";
}

TEST(HostPort, PortsAreDigitsInRange) {
  EXPECT_EQ(parse_port("1"), 1);
  EXPECT_EQ(parse_port("65535"), 65535);
  EXPECT_EQ(parse_port("0", 0), 0);
  for (const char* bad : {"0", "65536", "", "80a", "-1", "+80", " 80", "123456", "99999"}) {
    EXPECT_FALSE(parse_port(bad).has_value()) << "'" << bad << "'";
  }
}

}  // namespace
