// braid's one file-descriptor owner and address helpers (src/common/fd.hpp,
// src/common/socket_address.hpp): a descriptor is closed exactly once whatever path it takes
// (destruction, move, reset, release, close), errno texts name the errno, and host:port text
// parses and prints the same way for the store, the transports and BRAID_STORE.
#include "common/fd.hpp"

#include <fcntl.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <unistd.h>

#include <cerrno>
#include <utility>

#include "common/socket_address.hpp"

namespace braid {
namespace {

bool isOpen(int fd) {
  return ::fcntl(fd, F_GETFD) != -1;
}

int openNull() {
  const int fd = ::open("/dev/null", O_RDONLY | O_CLOEXEC);
  EXPECT_GE(fd, 0);
  return fd;
}

TEST(Fd, ClosesOnDestructionAndIsEmptyByDefault) {
  const Fd none;
  EXPECT_FALSE(none);
  EXPECT_EQ(none.get(), -1);
  int raw = -1;
  {
    const Fd fd(openNull());
    raw = fd.get();
    EXPECT_TRUE(fd);
    EXPECT_TRUE(isOpen(raw));
  }
  EXPECT_FALSE(isOpen(raw));
}

TEST(Fd, MovesOwnershipAndClosesTheOverwrittenDescriptor) {
  Fd a(openNull());
  const int rawA = a.get();
  Fd b(std::move(a));
  EXPECT_FALSE(a);  // NOLINT(bugprone-use-after-move): moved-from is empty by contract
  EXPECT_EQ(b.get(), rawA);
  Fd c(openNull());
  const int rawC = c.get();
  c = std::move(b);  // c's own descriptor is closed, b's moves in
  EXPECT_FALSE(isOpen(rawC));
  EXPECT_EQ(c.get(), rawA);
  EXPECT_TRUE(isOpen(rawA));
  c = std::move(c);  // self-move keeps the descriptor open
  EXPECT_TRUE(isOpen(rawA));
}

TEST(Fd, ReleaseGivesUpAndResetReplaces) {
  Fd fd(openNull());
  const int raw = fd.release();
  EXPECT_FALSE(fd);
  EXPECT_TRUE(isOpen(raw));
  fd.reset(raw);
  EXPECT_EQ(fd.get(), raw);
  fd.reset(raw);  // the same descriptor again: not closed under the owner
  EXPECT_TRUE(isOpen(raw));
  const int other = openNull();
  fd.reset(other);
  EXPECT_FALSE(isOpen(raw));
  EXPECT_EQ(fd.close(), 0);
  EXPECT_FALSE(isOpen(other));
  EXPECT_FALSE(fd);
  EXPECT_EQ(fd.close(), 0);  // empty: nothing to close
}

TEST(Fd, ErrnoTextNamesTheErrnoAndItsDescription) {
  EXPECT_EQ(errnoText(ECONNREFUSED), "ECONNREFUSED (Connection refused)");
  EXPECT_EQ(errnoText(EPIPE), "EPIPE (Broken pipe)");
  EXPECT_NE(errnoText(99999).find("99999"), std::string::npos) << errnoText(99999);
}

TEST(SocketAddress, ParsesHostPortAndBracketedV6) {
  auto a = parseHostPort("127.0.0.1:29500");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->host, "127.0.0.1");
  EXPECT_EQ(a->port, 29500);
  a = parseHostPort("[fe80::1%eth0]:1");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->host, "fe80::1%eth0");
  EXPECT_EQ(a->port, 1);
  a = parseHostPort("node-7.cluster:65535");
  ASSERT_TRUE(a);
  EXPECT_EQ(a->host, "node-7.cluster");
  for (const char* bad : {"", "host", ":80", "host:", "host:65536", "host:-1", "host:80x",
                          "[::1:80", "[]:80", "host:8 0"})
    EXPECT_FALSE(parseHostPort(bad)) << bad;
}

TEST(SocketAddress, FormatsAndDescribesWhatItParses) {
  EXPECT_EQ(formatHostPort("10.0.0.2", 80), "10.0.0.2:80");
  EXPECT_EQ(formatHostPort("::1", 4000), "[::1]:4000");
  const auto back = parseHostPort(formatHostPort("::1", 4000));
  ASSERT_TRUE(back);
  EXPECT_EQ(back->host, "::1");
  sockaddr_in v4{};
  v4.sin_family = AF_INET;
  v4.sin_port = htons(1234);
  v4.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  EXPECT_EQ(describeAddress(reinterpret_cast<sockaddr*>(&v4), sizeof v4), "127.0.0.1:1234");
  EXPECT_EQ(portOf(reinterpret_cast<sockaddr*>(&v4)), 1234);
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  v6.sin6_port = htons(99);
  v6.sin6_addr = in6addr_loopback;
  EXPECT_EQ(describeAddress(reinterpret_cast<sockaddr*>(&v6), sizeof v6), "[::1]:99");
  sockaddr unknown{};
  unknown.sa_family = AF_UNIX;
  EXPECT_EQ(portOf(&unknown), 0);
}

}  // namespace
}  // namespace braid
