// The TCP store's admission: authenticated clients are served, clients with the wrong key (or
// none) get Error(Auth) and nothing else, strangers that send garbage, replay the raw protocol
// or stay silent are dropped and logged while the real clients carry on, and a whitelist that
// does not list loopback keeps loopback clients out.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <braid/error.hpp>
#include <braid/store.hpp>
#include <chrono>
#include <future>
#include <string>
#include <thread>
#include <vector>

#include "common/handshake.hpp"
#include "harness/errors.hpp"
#include "harness/raw_connection.hpp"
#include "store/store_protocol.hpp"

namespace braid {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using test::thrownBy;
// A raw TCP connection, for what no TcpStore would send.
using Stranger = test::RawConnection;
using Clock = std::chrono::steady_clock;
using Bytes = std::vector<std::uint8_t>;

SecurityOptions keyed(std::string key) {
  SecurityOptions s;
  s.authKey = std::move(key);
  return s;
}

std::unique_ptr<TcpStore> client(const TcpStoreServer& server, const SecurityOptions& s,
                                 milliseconds connect = 2000ms) {
  return std::make_unique<TcpStore>("127.0.0.1", server.port(), connect, 5000ms, s);
}

TEST(StoreAuth, ClientsWithTheKeyAreServed) {
  TcpStoreServer server("127.0.0.1", 0, keyed("job-key"));
  auto a = client(server, keyed("job-key"));
  auto b = client(server, keyed("job-key"));
  a->setString("k", "v");
  EXPECT_EQ(b->getString("k", 2000ms), "v");
  EXPECT_EQ(b->add("n", 5), 5);
}

TEST(StoreAuth, WrongKeyFailsWithAuthNamingTheStore) {
  TcpStoreServer server("127.0.0.1", 0, keyed("job-key"));
  testing::internal::CaptureStderr();
  const auto start = Clock::now();
  const Error e = thrownBy([&] { client(server, keyed("other-key")); });
  EXPECT_LT(Clock::now() - start, 1500ms) << "an auth failure is not retried";
  std::this_thread::sleep_for(100ms);  // the server logs on its own thread
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(e.code(), ErrorCode::Auth) << e.what();
  EXPECT_NE(e.detail().find("store at 127.0.0.1:" + std::to_string(server.port())),
            std::string::npos)
      << e.what();
  EXPECT_NE(e.detail().find("keys differ"), std::string::npos) << e.what();
  EXPECT_NE(log.find("dropped connection from 127.0.0.1:"), std::string::npos) << log;
  // The store still serves the job.
  EXPECT_EQ(client(server, keyed("job-key"))->add("n", 1), 1);
}

TEST(StoreAuth, KeylessClientGetsNothingFromAnAuthenticatedStore) {
  TcpStoreServer server("127.0.0.1", 0, keyed("job-key"));
  auto keyed_ = client(server, keyed("job-key"));
  keyed_->setString("secret", "42");
  testing::internal::CaptureStderr();
  auto keyless = client(server, SecurityOptions());
  const Error e = thrownBy([&] { keyless->getString("secret", 1000ms); });
  std::this_thread::sleep_for(100ms);
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(e.code(), ErrorCode::Auth) << e.what();
  EXPECT_NE(e.detail().find("authentication required"), std::string::npos) << e.what();
  // The raw protocol, without any handshake, is dropped too.
  Stranger raw(server.port());
  ASSERT_TRUE(raw.connected());
  store_protocol::Request req;
  req.type = store_protocol::RequestType::Get;
  req.keys = {"secret"};
  Bytes wire;
  ASSERT_TRUE(store_protocol::appendRequest(req, wire));
  ASSERT_TRUE(raw.send(wire));
  EXPECT_TRUE(raw.closedByPeer(2000ms));
}

TEST(StoreAuth, KeyedClientRefusesAnUnauthenticatedStore) {
  TcpStoreServer server("127.0.0.1", 0);
  testing::internal::CaptureStderr();
  const Error e = thrownBy([&] { client(server, keyed("job-key")); });
  std::this_thread::sleep_for(100ms);
  testing::internal::GetCapturedStderr();
  EXPECT_EQ(e.code(), ErrorCode::Auth) << e.what();
  EXPECT_NE(e.detail().find("no BRAID_AUTH_KEY"), std::string::npos) << e.what();
}

TEST(StoreAuth, StrangersAreDroppedWhileTheJobGoesOn) {
  SecurityOptions s = keyed("job-key");
  s.handshakeTimeout = 300ms;
  TcpStoreServer server("127.0.0.1", 0, s);
  auto good = client(server, s);
  auto waiting = client(server, s);
  auto parked = std::async(std::launch::async, [&] { return waiting->getString("go", 5000ms); });
  testing::internal::CaptureStderr();

  // Silent strangers: they hold a connection and say nothing.
  std::vector<std::unique_ptr<Stranger>> silent;
  for (int i = 0; i < 5; ++i) silent.push_back(std::make_unique<Stranger>(server.port()));
  // A client arriving meanwhile is served at once.
  const auto start = Clock::now();
  EXPECT_EQ(client(server, s)->add("meanwhile", 1), 1);
  EXPECT_LT(Clock::now() - start, 250ms) << "silent strangers held up a real client";

  // Garbage, a forged Hello followed by a made-up proof, and a truncated handshake.
  {
    Stranger garbage(server.port());
    ASSERT_TRUE(garbage.send(Bytes(64, 0xab)));
    EXPECT_TRUE(garbage.closedByPeer(2000ms));
  }
  {
    Stranger forger(server.port());
    security::Initiator fake("guessed-key", security::Service::Store, {});
    Bytes hello;
    fake.appendHello(hello);
    ASSERT_TRUE(forger.send(hello));
    security::Message proof;
    proof.type = security::MessageType::Proof;
    proof.flags = security::kFlagAuthenticated;
    proof.service = security::Service::Store;
    proof.mac.fill(0x5a);
    Bytes wire;
    security::appendMessage(proof, wire);
    std::this_thread::sleep_for(20ms);
    ASSERT_TRUE(forger.send(wire));
    EXPECT_TRUE(forger.closedByPeer(2000ms));
  }
  {
    Stranger half(server.port());
    Bytes hello;
    security::Initiator("job-key", security::Service::Store, {}).appendHello(hello);
    hello.resize(hello.size() / 2);
    ASSERT_TRUE(half.send(hello));
    EXPECT_TRUE(half.closedByPeer(2000ms)) << "a half handshake outlived handshakeTimeout";
  }
  for (auto& st : silent) EXPECT_TRUE(st->closedByPeer(2000ms)) << "a silent stranger stayed";

  good->setString("go", "yes");
  ASSERT_EQ(parked.wait_for(3s), std::future_status::ready);
  EXPECT_EQ(parked.get(), "yes");
  EXPECT_EQ(good->add("meanwhile", 1), 2);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("not a braid handshake"), std::string::npos) << log;
  EXPECT_NE(log.find("wrong proof"), std::string::npos) << log;
  EXPECT_NE(log.find("no handshake within 300 ms"), std::string::npos) << log;
  EXPECT_NE(log.find("[braid WARN] store server 127.0.0.1:" + std::to_string(server.port())),
            std::string::npos)
      << log;
}

TEST(StoreAuth, WhitelistWithoutLoopbackKeepsLoopbackOut) {
  SecurityOptions s;
  s.allowedPeers = {"10.11.12.13", "192.168.0.0/16"};
  TcpStoreServer server("127.0.0.1", 0, s);
  testing::internal::CaptureStderr();
  // Without a key the Hello's answer is read with the first request: it fails at once.
  auto keyless = client(server, SecurityOptions(), 500ms);
  const Error e = thrownBy([&] { keyless->setString("k", "v"); });
  EXPECT_EQ(e.code(), ErrorCode::PeerLost) << e.what();
  EXPECT_NE(e.detail().find("BRAID_WHITELIST"), std::string::npos) << e.what();
  // With a key the handshake runs while connecting, retried until the connect timeout.
  s.authKey = "job-key";
  TcpStoreServer keyedServer("127.0.0.1", 0, s);
  const auto start = Clock::now();
  const Error timeout = thrownBy([&] { client(keyedServer, keyed("job-key"), 500ms); });
  const auto took = Clock::now() - start;
  std::this_thread::sleep_for(50ms);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_EQ(timeout.code(), ErrorCode::Timeout) << timeout.what();
  EXPECT_GE(took, 500ms);
  EXPECT_LT(took, 3s);
  EXPECT_NE(timeout.detail().find("BRAID_WHITELIST"), std::string::npos) << timeout.what();
  EXPECT_NE(log.find("dropped connection from 127.0.0.1:"), std::string::npos) << log;
  EXPECT_NE(log.find("address not in BRAID_WHITELIST"), std::string::npos) << log;

  s.allowedPeers.push_back("127.0.0.1");
  TcpStoreServer open("127.0.0.1", 0, s);
  EXPECT_EQ(client(open, keyed("job-key"))->add("n", 2), 2);
}

TEST(StoreAuth, DropLogIsRateLimited) {
  SecurityOptions s = keyed("job-key");
  TcpStoreServer server("127.0.0.1", 0, s);
  testing::internal::CaptureStderr();
  for (int i = 0; i < 60; ++i) {
    Stranger garbage(server.port());
    garbage.send(Bytes(16, 0xcd));
    garbage.closedByPeer(2000ms);
  }
  const std::string log = testing::internal::GetCapturedStderr();
  std::size_t lines = 0;
  for (char c : log) lines += c == '\n';
  EXPECT_GE(lines, 20u);
  EXPECT_LE(lines, 21u) << log;
}

}  // namespace
}  // namespace braid
