// BRAID_SOCKET_IFNAME's matcher (NCCL's syntax) and the choice of the data listener's address,
// as pure functions over a fabricated interface list; the variables' parsing.
#include "transport/tcp/interfaces.hpp"

#include <gtest/gtest.h>

#include <braid/braid.hpp>
#include <cstdlib>
#include <string>
#include <vector>

namespace braid::transport::tcp {
namespace {

TEST(IfnameMatcher, PrefixList) {
  EXPECT_TRUE(ifnameMatches("eth", "eth0"));
  EXPECT_TRUE(ifnameMatches("eth", "eth"));
  EXPECT_TRUE(ifnameMatches("eth", "eth10"));
  EXPECT_FALSE(ifnameMatches("eth", "et"));
  EXPECT_FALSE(ifnameMatches("eth", "veth0"));  // a prefix, not a substring
  EXPECT_TRUE(ifnameMatches("ib,eth", "eth1"));
  EXPECT_TRUE(ifnameMatches("ib,eth", "ib0"));
  EXPECT_FALSE(ifnameMatches("ib,eth", "lo"));
  EXPECT_TRUE(ifnameMatches("eth0", "eth01"));  // prefix: eth0 matches eth01
}

TEST(IfnameMatcher, Exclude) {
  EXPECT_FALSE(ifnameMatches("^docker", "docker0"));
  EXPECT_TRUE(ifnameMatches("^docker", "eth0"));
  EXPECT_TRUE(ifnameMatches("^docker", "lo"));
  EXPECT_FALSE(ifnameMatches("^docker,lo", "lo"));
  EXPECT_FALSE(ifnameMatches("^docker,lo", "docker1"));
  EXPECT_TRUE(ifnameMatches("^docker,lo", "eth0"));
  EXPECT_FALSE(ifnameMatches("^eth", "eth12"));
}

TEST(IfnameMatcher, Exact) {
  EXPECT_TRUE(ifnameMatches("=eth0", "eth0"));
  EXPECT_FALSE(ifnameMatches("=eth0", "eth01"));
  EXPECT_FALSE(ifnameMatches("=eth0", "eth"));
  EXPECT_TRUE(ifnameMatches("=eth0,ib1", "ib1"));
  EXPECT_FALSE(ifnameMatches("=eth0,ib1", "ib10"));
}

TEST(IfnameMatcher, ExcludeExact) {
  EXPECT_FALSE(ifnameMatches("^=eth0", "eth0"));
  EXPECT_TRUE(ifnameMatches("^=eth0", "eth01"));
  EXPECT_TRUE(ifnameMatches("^=eth0", "lo"));
  EXPECT_FALSE(ifnameMatches("^=eth0,lo", "lo"));
  EXPECT_TRUE(ifnameMatches("^=eth0,lo", "lo1"));
  // '=' before '^' is not the combination: the list is then the literal name "^eth0".
  EXPECT_FALSE(ifnameMatches("=^eth0", "eth0"));
  EXPECT_TRUE(ifnameMatches("=^eth0", "^eth0"));
}

TEST(IfnameMatcher, EmptyListsMatchEverything) {
  EXPECT_TRUE(ifnameMatches("", "eth0"));
  EXPECT_TRUE(ifnameMatches("^", "eth0"));
  EXPECT_TRUE(ifnameMatches("=", "lo"));
  EXPECT_TRUE(ifnameMatches("^=", "lo"));
  EXPECT_TRUE(ifnameMatches(",,", "lo"));
  // Empty entries are dropped, the others still count.
  EXPECT_TRUE(ifnameMatches("eth,,ib", "ib0"));
  EXPECT_FALSE(ifnameMatches("eth,,ib", "lo"));
  EXPECT_FALSE(ifnameMatches("^,lo,", "lo"));
}

TEST(IfnameMatcher, Parse) {
  const IfnameFilter f = parseIfnameFilter("^=a,b,,c");
  EXPECT_TRUE(f.exclude);
  EXPECT_TRUE(f.exact);
  EXPECT_EQ(f.names, (std::vector<std::string>{"a", "b", "c"}));
  const IfnameFilter g = parseIfnameFilter("eth");
  EXPECT_FALSE(g.exclude);
  EXPECT_FALSE(g.exact);
  EXPECT_EQ(g.names, (std::vector<std::string>{"eth"}));
}

std::vector<InterfaceAddress> fabricated() {
  return {
      {"lo", 4, "127.0.0.1", true, false},
      {"eth0", 4, "10.1.2.3", false, false},
      {"docker0", 4, "172.17.0.1", false, false},
      {"ib0", 4, "192.168.5.6", false, false},
      {"lo", 6, "::1", true, false},
      {"eth0", 6, "fe80::1", false, true},
      {"eth0", 6, "fd00::3", false, false},
      {"ib0", 6, "fe80::2", false, true},
  };
}

std::string errorOf(const ListenSelection& s, const std::string& storeLocal) {
  try {
    chooseListenAddress(s, fabricated(), storeLocal, 3);
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    return e.what();
  }
  return "";
}

TEST(ListenAddress, DefaultIsTheStoreReachingAddress) {
  EXPECT_EQ(chooseListenAddress({}, fabricated(), "10.1.2.3", 0).address, "10.1.2.3");
  EXPECT_EQ(chooseListenAddress({}, fabricated(), "127.0.0.1", 0).address, "127.0.0.1");
  EXPECT_EQ(chooseListenAddress({}, fabricated(), "fd00::3", 0).address, "fd00::3");
  // No store socket (an in-process store): loopback.
  EXPECT_EQ(chooseListenAddress({}, fabricated(), "", 0).address, "127.0.0.1");
}

TEST(ListenAddress, ExplicitAddressWins) {
  const ListenChoice c = chooseListenAddress({"10.9.9.9", "ib", 0}, fabricated(), "10.1.2.3", 0);
  EXPECT_EQ(c.address, "10.9.9.9");
  EXPECT_NE(c.reason.find("BRAID_LISTEN_ADDR"), std::string::npos);
  EXPECT_NE(errorOf({"10.9.9.9", "", 6}, "10.1.2.3").find("BRAID_LISTEN_ADDR"), std::string::npos);
}

TEST(ListenAddress, IfnamePicksTheFirstMatchingInterface) {
  EXPECT_EQ(chooseListenAddress({"", "ib", 0}, fabricated(), "10.1.2.3", 0).address, "192.168.5.6");
  EXPECT_EQ(chooseListenAddress({"", "eth,ib", 0}, fabricated(), "", 0).address, "10.1.2.3");
  EXPECT_EQ(chooseListenAddress({"", "=lo", 0}, fabricated(), "10.1.2.3", 0).address, "127.0.0.1");
  // Exclusion lists prefer an interface other than loopback even when lo comes first.
  EXPECT_EQ(chooseListenAddress({"", "^docker", 0}, fabricated(), "", 0).address, "10.1.2.3");
  EXPECT_EQ(chooseListenAddress({"", "^eth,lo", 0}, fabricated(), "", 0).address, "172.17.0.1");
  const ListenChoice c = chooseListenAddress({"", "ib", 0}, fabricated(), "", 0);
  EXPECT_NE(c.reason.find("ib0"), std::string::npos);
}

TEST(ListenAddress, IfnameWithFamily) {
  EXPECT_EQ(chooseListenAddress({"", "eth", 6}, fabricated(), "10.1.2.3", 0).address, "fd00::3");
  EXPECT_EQ(chooseListenAddress({"", "lo", 6}, fabricated(), "", 0).address, "::1");
  EXPECT_EQ(chooseListenAddress({"", "eth", 4}, fabricated(), "", 0).address, "10.1.2.3");
  // ib0 has only a link-local IPv6 address: unusable.
  const std::string e = errorOf({"", "ib", 6}, "10.1.2.3");
  EXPECT_NE(e.find("BRAID_SOCKET_IFNAME='ib'"), std::string::npos) << e;
  EXPECT_NE(e.find("IPv6"), std::string::npos) << e;
}

TEST(ListenAddress, UnmatchedIfnameNamesVariableValueRankAndInterfaces) {
  const std::string e = errorOf({"", "wlan", 0}, "10.1.2.3");
  EXPECT_NE(e.find("BRAID_SOCKET_IFNAME='wlan'"), std::string::npos) << e;
  EXPECT_NE(e.find("rank 3"), std::string::npos) << e;
  for (const char* name : {"lo (127.0.0.1", "eth0 (10.1.2.3", "docker0", "ib0"})
    EXPECT_NE(e.find(name), std::string::npos) << name << " in " << e;
  EXPECT_NE(errorOf({"", "^=lo,eth0,docker0,ib0", 0}, "").find("rank 3"), std::string::npos);
}

TEST(ListenAddress, FamilyWithoutIfname) {
  // The store-reaching address fits the family: it is used.
  EXPECT_EQ(chooseListenAddress({"", "", 4}, fabricated(), "10.1.2.3", 0).address, "10.1.2.3");
  // Store on loopback: that family's loopback.
  EXPECT_EQ(chooseListenAddress({"", "", 6}, fabricated(), "127.0.0.1", 0).address, "::1");
  EXPECT_EQ(chooseListenAddress({"", "", 6}, fabricated(), "", 0).address, "::1");
  EXPECT_EQ(chooseListenAddress({"", "", 4}, fabricated(), "::1", 0).address, "127.0.0.1");
  // Store over the network in the other family: the first routable address of this one.
  EXPECT_EQ(chooseListenAddress({"", "", 6}, fabricated(), "10.1.2.3", 0).address, "fd00::3");
  EXPECT_EQ(chooseListenAddress({"", "", 4}, fabricated(), "fd00::3", 0).address, "10.1.2.3");
  const std::vector<InterfaceAddress> v4only = {{"eth0", 4, "10.1.2.3", false, false}};
  try {
    chooseListenAddress({"", "", 6}, v4only, "10.1.2.3", 5);
    ADD_FAILURE() << "no IPv6 address, no error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find("BRAID_SOCKET_FAMILY"), std::string::npos) << e.what();
    EXPECT_NE(std::string(e.what()).find("rank 5"), std::string::npos) << e.what();
  }
}

TEST(ListenAddress, RealInterfacesIncludeLoopback) {
  bool lo4 = false;
  for (const InterfaceAddress& ia : localInterfaceAddresses())
    lo4 = lo4 || (ia.loopback && ia.family == 4 && ia.address == "127.0.0.1");
  EXPECT_TRUE(lo4);
  EXPECT_EQ(addressFamily("127.0.0.1"), 4);
  EXPECT_EQ(addressFamily("::1"), 6);
  EXPECT_EQ(addressFamily("localhost"), 0);
}

class NetworkEnvTest : public ::testing::Test {
 protected:
  void SetUp() override { clear(); }
  void TearDown() override { clear(); }
  static void clear() {
    for (const char* v :
         {"BRAID_SOCKET_IFNAME", "BRAID_SOCKET_FAMILY", "BRAID_PORT_RANGE", "BRAID_STORE",
          "BRAID_RANK", "RANK", "OMPI_COMM_WORLD_RANK", "SLURM_PROCID"})
      unsetenv(v);
  }
  static std::string errorOf() {
    try {
      Options::fromEnv();
    } catch (const Error& e) {
      return e.what();
    }
    return "";
  }
};

TEST_F(NetworkEnvTest, Defaults) {
  const Options o = Options::fromEnv();
  EXPECT_EQ(o.socketIfname, "");
  EXPECT_EQ(o.socketFamily, 0);
  EXPECT_EQ(o.portRangeLow, 0);
  EXPECT_EQ(o.portRangeHigh, 0);
  int listed = 0;
  for (const auto& v : environmentVariables())
    for (const char* n : {"BRAID_SOCKET_IFNAME", "BRAID_SOCKET_FAMILY", "BRAID_PORT_RANGE"})
      listed += v.name == std::string(n);
  EXPECT_EQ(listed, 3);
}

TEST_F(NetworkEnvTest, Ifname) {
  setenv("BRAID_SOCKET_IFNAME", "^=docker0,lo", 1);
  EXPECT_EQ(Options::fromEnv().socketIfname, "^=docker0,lo");
}

TEST_F(NetworkEnvTest, Family) {
  for (const char* v : {"AF_INET", "af_inet", "4", "ipv4", "IPv4"}) {
    setenv("BRAID_SOCKET_FAMILY", v, 1);
    EXPECT_EQ(Options::fromEnv().socketFamily, 4) << v;
  }
  for (const char* v : {"AF_INET6", "6", "ipv6", "IPV6"}) {
    setenv("BRAID_SOCKET_FAMILY", v, 1);
    EXPECT_EQ(Options::fromEnv().socketFamily, 6) << v;
  }
  setenv("BRAID_SOCKET_FAMILY", "AF_UNIX", 1);
  EXPECT_NE(errorOf().find("BRAID_SOCKET_FAMILY='AF_UNIX'"), std::string::npos) << errorOf();
}

TEST_F(NetworkEnvTest, PortRange) {
  setenv("BRAID_PORT_RANGE", "40000-40010", 1);
  Options o = Options::fromEnv();
  EXPECT_EQ(o.portRangeLow, 40000);
  EXPECT_EQ(o.portRangeHigh, 40010);
  setenv("BRAID_PORT_RANGE", "50000-50000", 1);
  o = Options::fromEnv();
  EXPECT_EQ(o.portRangeLow, 50000);
  EXPECT_EQ(o.portRangeHigh, 50000);
  for (const char* bad : {"40000", "40010-40000", "0-10", "1-65536", "a-b", "1-2-3", "-5", "5-"}) {
    setenv("BRAID_PORT_RANGE", bad, 1);
    EXPECT_NE(errorOf().find("BRAID_PORT_RANGE"), std::string::npos) << bad;
  }
}

TEST_F(NetworkEnvTest, Ipv6StoreAddress) {
  setenv("BRAID_STORE", "[::1]:29500", 1);
  LaunchInfo li = LaunchInfo::fromEnv();
  EXPECT_EQ(li.storeHost, "::1");
  EXPECT_EQ(li.storePort, 29500);
  setenv("BRAID_STORE", "[fd00::2]:1", 1);
  li = LaunchInfo::fromEnv();
  EXPECT_EQ(li.storeHost, "fd00::2");
  EXPECT_EQ(li.storePort, 1);
  unsetenv("BRAID_STORE");
}

}  // namespace
}  // namespace braid::transport::tcp
