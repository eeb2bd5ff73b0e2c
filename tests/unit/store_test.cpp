// The TCP store's server and client end to end over loopback: round trips, blocking gets,
// timeouts, many clients, malformed frames, lost servers, ONCLOSE keys. Every blocking call in
// here has a timeout of a few seconds at most, so a broken store fails a test instead of hanging
// it.

#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <signal.h>
#include <sys/socket.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <atomic>
#include <braid/error.hpp>
#include <braid/store.hpp>
#include <chrono>
#include <cstring>
#include <functional>
#include <future>
#include <map>
#include <memory>
#include <numeric>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include "harness/errors.hpp"
#include "harness/raw_connection.hpp"
#include "harness/store_helpers.hpp"
#include "store/all_gather.hpp"
#include "store/memory_store.hpp"
#include "store/store_protocol.hpp"

namespace braid {
namespace {

namespace proto = store_protocol;
using Clock = std::chrono::steady_clock;
using std::chrono::milliseconds;
using test::connectTo;
using test::kConnect;
using test::kLong;
using test::le32;
using test::since;
using test::thrownBy;
using test::operator+;
// A raw TCP connection to the server, for sending what no TcpStore would.
using RawClient = test::RawConnection;

// ONCLOSE (docs/reliability.md): the key is set when the registering connection closes, by a
// destructor, by disconnect() while a GET is parked, or by the process being killed; UNCLOSE
// drops a registration; a client with one never reconnects.
TEST(TcpStore, OnCloseSetsTheKeyWhenTheConnectionCloses) {
  using namespace std::chrono_literals;
  TcpStoreServer server("127.0.0.1", 0);
  TcpStore reader("127.0.0.1", server.port(), 2000ms);
  {
    TcpStore a("127.0.0.1", server.port(), 2000ms);
    a.setOnClose("gone/a", {'x', 'y'});
    a.setOnClose("kept", {'1'});
    a.cancelOnClose("kept");
    a.cancelOnClose("never-registered");
    a.set("plain", {'p'});
    EXPECT_FALSE(reader.check({"gone/a"}));
  }
  EXPECT_EQ(reader.get("gone/a", 5000ms), (std::vector<std::uint8_t>{'x', 'y'}));
  EXPECT_FALSE(reader.check({"kept"}));
  EXPECT_TRUE(reader.check({"plain"}));

  auto b = std::make_unique<TcpStore>("127.0.0.1", server.port(), 2000ms);
  auto c = b->connectAgain();
  c->setOnClose("gone/c", {'1'});
  std::string parkedError;
  std::thread parked([&] {
    try {
      c->get("never", std::chrono::hours(1));
    } catch (const Error& e) {
      parkedError = e.what();
    }
  });
  std::this_thread::sleep_for(50ms);
  c->disconnect();
  parked.join();
  EXPECT_NE(parkedError.find("PeerLost"), std::string::npos) << parkedError;
  EXPECT_EQ(reader.getString("gone/c", 5000ms), "1");
  try {
    c->set("after", {'1'});
    ADD_FAILURE() << "a client with an ONCLOSE reconnected";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::PeerLost) << e.what();
  }
  EXPECT_FALSE(reader.check({"after"}));
  b->set("b", {'1'});  // the first connection is unaffected
  EXPECT_TRUE(reader.check({"b"}));

  // Killed: the kernel closes the socket.
  std::fflush(stdout);
  const pid_t pid = ::fork();
  if (pid == 0) {
    TcpStore k("127.0.0.1", server.port(), 2000ms);
    k.setOnClose("gone/killed", {'k'});
    k.set("ready", {'1'});
    for (;;) ::pause();
  }
  reader.get("ready", 5000ms);
  EXPECT_FALSE(reader.check({"gone/killed"}));
  ::kill(pid, SIGKILL);
  ::waitpid(pid, nullptr, 0);
  EXPECT_EQ(reader.getString("gone/killed", 5000ms), "k");
}

TEST(TcpStore, ServerOnPortZeroGetsARealPort) {
  TcpStoreServer server("127.0.0.1", 0);
  EXPECT_NE(server.port(), 0);
  auto store = connectTo(server);
  EXPECT_EQ(store->localAddress(), "127.0.0.1");
}

TEST(TcpStore, SetGetRoundTripsBinaryValues) {
  TcpStoreServer server("127.0.0.1", 0);
  auto store = connectTo(server);

  store->set("empty", {});
  EXPECT_TRUE(store->get("empty", kLong).empty());

  std::vector<std::uint8_t> all(256);
  std::iota(all.begin(), all.end(), 0);
  store->set("all bytes", all);
  EXPECT_EQ(store->get("all bytes", kLong), all);

  std::vector<std::uint8_t> big(1 << 20);
  std::mt19937 rng(7);
  for (auto& b : big) b = static_cast<std::uint8_t>(rng());
  store->set("big", big);
  EXPECT_EQ(store->get("big", kLong), big);

  store->set("all bytes", {1});  // overwrite
  EXPECT_EQ(store->get("all bytes", kLong), std::vector<std::uint8_t>{1});

  store->setString("s", std::string("with\0nul", 8));
  EXPECT_EQ(store->getString("s", kLong), std::string("with\0nul", 8));

  // Another client sees the same data.
  auto other = connectTo(server);
  EXPECT_EQ(other->get("big", kLong), big);
}

TEST(TcpStore, GetBlocksUntilAnotherClientSets) {
  TcpStoreServer server("127.0.0.1", 0);
  auto reader = connectTo(server);
  auto writer = connectTo(server);
  const auto start = Clock::now();
  std::thread t([&] {
    std::this_thread::sleep_for(milliseconds(200));
    writer->setString("late", "here");
  });
  const std::string v = reader->getString("late", kLong);
  const auto waited = since(start);
  t.join();
  EXPECT_EQ(v, "here");
  EXPECT_GE(waited, milliseconds(150));
  EXPECT_LT(waited, milliseconds(3000));
}

TEST(TcpStore, GetTimeoutNamesTheKey) {
  TcpStoreServer server("127.0.0.1", 0);
  auto store = connectTo(server);
  const auto start = Clock::now();
  const Error e = thrownBy([&] { store->get("missing/key", milliseconds(300)); });
  const auto waited = since(start);
  EXPECT_EQ(e.code(), ErrorCode::Timeout);
  EXPECT_NE(e.detail().find("missing/key"), std::string::npos) << e.what();
  EXPECT_NE(e.detail().find(std::to_string(server.port())), std::string::npos) << e.what();
  EXPECT_GE(waited, milliseconds(250));
  EXPECT_LT(waited, milliseconds(1500));
  // The connection stays usable after a timeout.
  store->setString("k", "v");
  EXPECT_EQ(store->getString("k", kLong), "v");
  // A zero timeout answers at once.
  EXPECT_EQ(thrownBy([&] { store->get("missing", milliseconds(0)); }).code(), ErrorCode::Timeout);
}

TEST(TcpStore, AddFromEightThreadsIsExact) {
  TcpStoreServer server("127.0.0.1", 0);
  constexpr int kThreads = 8;
  constexpr int kAdds = 1000;
  std::vector<std::vector<std::int64_t>> seen(kThreads);
  std::vector<std::thread> threads;
  std::atomic<int> failures{0};
  for (int t = 0; t < kThreads; ++t) {
    threads.emplace_back([&, t] {
      try {
        auto store = connectTo(server);
        for (int i = 0; i < kAdds; ++i) seen[t].push_back(store->add("counter", 1));
      } catch (const std::exception& e) {
        ADD_FAILURE() << e.what();
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  ASSERT_EQ(failures.load(), 0);
  auto store = connectTo(server);
  EXPECT_EQ(store->add("counter", 0), kThreads * kAdds);
  // Every increment returned a distinct intermediate total.
  std::vector<std::int64_t> all;
  for (const auto& s : seen) all.insert(all.end(), s.begin(), s.end());
  std::sort(all.begin(), all.end());
  std::vector<std::int64_t> want(kThreads * kAdds);
  std::iota(want.begin(), want.end(), 1);
  EXPECT_EQ(all, want);
}

TEST(TcpStore, OneClientIsThreadSafe) {
  TcpStoreServer server("127.0.0.1", 0);
  auto store = connectTo(server);
  std::vector<std::thread> threads;
  for (int t = 0; t < 4; ++t)
    threads.emplace_back([&, t] {
      for (int i = 0; i < 200; ++i) {
        store->add("shared", 2);
        store->setString("t" + std::to_string(t), std::to_string(i));
      }
    });
  for (auto& t : threads) t.join();
  EXPECT_EQ(store->add("shared", 0), 4 * 200 * 2);
  EXPECT_EQ(store->getString("t3", kLong), "199");
}

TEST(TcpStore, AddSemantics) {
  TcpStoreServer server("127.0.0.1", 0);
  auto store = connectTo(server);
  EXPECT_EQ(store->add("n", -5), -5);
  EXPECT_EQ(store->add("n", 7), 2);
  EXPECT_TRUE(store->check({"n"}));
  EXPECT_EQ(store->get("n", kLong).size(), 8u);  // stored as an 8-byte counter
  store->setString("text", "abc");
  const Error e = thrownBy([&] { store->add("text", 1); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(e.detail().find("text"), std::string::npos) << e.what();
  EXPECT_EQ(store->add("n", 1), 3);  // the connection survives a refused ADD
}

// addIfReachable (a communicator's cleanup at destroy): with the server up it is add(), also
// when it has to reconnect; once the server is gone it fails at once
// with PeerLost instead of retrying for the client's 30 s connect timeout; a server that is
// there but never answers costs at most the call's own bound.
TEST(TcpStore, AddIfReachableGivesUpWhenTheServerIsGone) {
  auto server = std::make_unique<TcpStoreServer>("127.0.0.1", 0);
  const std::uint16_t port = server->port();
  TcpStore store("127.0.0.1", port, milliseconds(30000), milliseconds(30000));
  EXPECT_EQ(store.add("left", 1), 1);
  EXPECT_EQ(store.addIfReachable("left", 1, milliseconds(5000)), 2);
  // A dropped connection fails the request in flight once; the next one reconnects.
  store.disconnect();
  EXPECT_EQ(thrownBy([&] { store.add("other", 1); }).code(), ErrorCode::PeerLost);
  EXPECT_EQ(store.addIfReachable("left", 1, milliseconds(5000)), 3);
  store.disconnect();
  EXPECT_EQ(thrownBy([&] { store.add("other", 1); }).code(), ErrorCode::PeerLost);
  server.reset();
  auto t0 = Clock::now();
  Error e = thrownBy([&] { store.addIfReachable("left", 1, milliseconds(20000)); });
  EXPECT_EQ(e.code(), ErrorCode::PeerLost) << e.what();
  EXPECT_NE(e.detail().find("refused"), std::string::npos) << e.what();
  EXPECT_LT(since(t0).count(), 5000);
  // A listener that never answers: bounded by the call's timeout, not the connect timeout.
  const int mute = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  ASSERT_GE(mute, 0);
  const int one = 1;
  ::setsockopt(mute, SOL_SOCKET, SO_REUSEADDR, &one, sizeof one);
  sockaddr_in at{};
  at.sin_family = AF_INET;
  at.sin_port = htons(port);
  at.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  if (::bind(mute, reinterpret_cast<sockaddr*>(&at), sizeof at) != 0 || ::listen(mute, 4) != 0) {
    ::close(mute);
    GTEST_SKIP() << "the port was taken meanwhile";
  }
  t0 = Clock::now();
  e = thrownBy([&] { store.addIfReachable("left", 1, milliseconds(500)); });
  EXPECT_NE(e.code(), ErrorCode::Internal) << e.what();
  EXPECT_LT(since(t0).count(), 5000);
  ::close(mute);
}

TEST(TcpStore, WaitAndCheck) {
  TcpStoreServer server("127.0.0.1", 0);
  auto store = connectTo(server);
  auto writer = connectTo(server);
  EXPECT_TRUE(store->check({}));
  store->wait({}, milliseconds(0));
  EXPECT_FALSE(store->check({"a", "b"}));
  store->setString("a", "1");
  EXPECT_TRUE(store->check({"a"}));
  EXPECT_FALSE(store->check({"a", "b"}));

  std::thread t([&] {
    std::this_thread::sleep_for(milliseconds(100));
    writer->setString("b", "2");
    writer->add("c", 1);
  });
  const auto start = Clock::now();
  store->wait({"a", "b", "c"}, kLong);
  EXPECT_GE(since(start), milliseconds(50));
  t.join();
  EXPECT_TRUE(store->check({"a", "b", "c"}));

  const Error e = thrownBy([&] { store->wait({"a", "zz", "b", "yy"}, milliseconds(200)); });
  EXPECT_EQ(e.code(), ErrorCode::Timeout);
  EXPECT_NE(e.detail().find("'zz'"), std::string::npos) << e.what();
  EXPECT_NE(e.detail().find("'yy'"), std::string::npos) << e.what();
  EXPECT_EQ(e.detail().find("'a'"), std::string::npos)
      << "names only the missing keys: " << e.what();
}

// WAITANY answers the index of the first of its keys present: at once, when one is set by
// another client (parked until then, under every key), or TIMEOUT naming them all. A waiter
// answered through one key is gone from the others' waiter lists.
TEST(TcpStore, WaitAnyAnswersTheFirstKeyPresent) {
  TcpStoreServer server("127.0.0.1", 0);
  auto store = connectTo(server);
  auto writer = connectTo(server);
  store->setString("b", "1");
  store->setString("c", "1");
  EXPECT_EQ(store->waitAny({"a", "c", "b"}, kLong), 1u);
  EXPECT_EQ(store->waitAny({"b"}, milliseconds(0)), 0u);

  for (int round = 0; round < 3; ++round) {
    const std::string late = "late" + std::to_string(round);
    std::thread t([&] {
      std::this_thread::sleep_for(milliseconds(100));
      writer->setString(late, "x");
    });
    const auto start = Clock::now();
    EXPECT_EQ(store->waitAny({"x", "y", late, "z"}, kLong), 2u);
    EXPECT_GE(since(start), milliseconds(50));
    t.join();
  }
  // The keys it also waited on are set afterwards: nothing is answered twice, and the
  // connection goes on in step.
  writer->setString("x", "1");
  writer->setString("z", "1");
  EXPECT_EQ(store->getString("x", kLong), "1");
  EXPECT_EQ(store->waitAny({"y", "z"}, kLong), 1u);

  const Error e = thrownBy([&] { store->waitAny({"m", "n"}, milliseconds(200)); });
  EXPECT_EQ(e.code(), ErrorCode::Timeout);
  EXPECT_NE(e.detail().find("WAITANY"), std::string::npos) << e.what();
  EXPECT_NE(e.detail().find("'n'"), std::string::npos) << e.what();
  const Error none = thrownBy([&] { store->waitAny({}, kLong); });
  EXPECT_EQ(none.code(), ErrorCode::InvalidArgument);
  EXPECT_NE(none.detail().find("no key"), std::string::npos) << none.what();

  // Disconnected while parked: fails at once; another client's waits are undisturbed.
  auto parked = connectTo(server);
  std::thread d([&] {
    std::this_thread::sleep_for(milliseconds(100));
    parked->disconnect();
  });
  EXPECT_THROW(parked->waitAny({"never", "nor"}, kLong), Error);
  d.join();
  writer->setString("never", "1");
  EXPECT_EQ(store->waitAny({"nor", "never"}, kLong), 1u);
  EXPECT_GE(server.connectionCount(), 2u);
}

TEST(TcpStore, ManyClientsRendezvous) {
  TcpStoreServer server("127.0.0.1", 0);
  constexpr int kClients = 32;
  std::vector<std::string> keys;
  for (int i = 0; i < kClients; ++i) keys.push_back("rank" + std::to_string(i));
  std::atomic<int> failures{0};
  std::vector<std::thread> threads;
  for (int i = 0; i < kClients; ++i) {
    threads.emplace_back([&, i] {
      try {
        auto store = connectTo(server);
        store->setString(keys[i], "addr-of-" + std::to_string(i));
        store->wait(keys, kLong);
        for (int j = 0; j < kClients; ++j)
          if (store->getString(keys[j], kLong) != "addr-of-" + std::to_string(j)) ++failures;
        store->add("done", 1);
      } catch (const std::exception& e) {
        ADD_FAILURE() << "client " << i << ": " << e.what();
        ++failures;
      }
    });
  }
  for (auto& t : threads) t.join();
  EXPECT_EQ(failures.load(), 0);
  EXPECT_EQ(connectTo(server)->add("done", 0), kClients);
}

TEST(TcpStore, ConnectToClosedPortTimesOutNamingTheAddress) {
  std::uint16_t port = 0;
  {
    TcpStoreServer gone("127.0.0.1", 0);
    port = gone.port();
  }
  const auto start = Clock::now();
  const Error e = thrownBy([&] { TcpStore("127.0.0.1", port, milliseconds(300)); });
  const auto waited = since(start);
  EXPECT_EQ(e.code(), ErrorCode::Timeout);
  EXPECT_NE(e.detail().find("127.0.0.1:" + std::to_string(port)), std::string::npos) << e.what();
  EXPECT_NE(e.detail().find("ECONNREFUSED"), std::string::npos) << e.what();
  EXPECT_GE(waited, milliseconds(250));
  EXPECT_LT(waited, milliseconds(1500));
}

TEST(TcpStore, UnresolvableHostTimesOut) {
  const Error e = thrownBy([&] { TcpStore("no-such-host.invalid", 1, milliseconds(200)); });
  EXPECT_EQ(e.code(), ErrorCode::Timeout);
  EXPECT_NE(e.detail().find("no-such-host.invalid:1"), std::string::npos) << e.what();
}

TEST(TcpStore, ServerDestroyedWhileClientWaits) {
  auto server = std::make_unique<TcpStoreServer>("127.0.0.1", 0);
  auto store = connectTo(*server);
  auto result = std::async(std::launch::async, [&]() -> Error {
    return thrownBy([&] { store->get("never", milliseconds(3000)); });
  });
  std::this_thread::sleep_for(milliseconds(200));
  const auto start = Clock::now();
  server.reset();
  ASSERT_EQ(result.wait_for(milliseconds(2000)), std::future_status::ready)
      << "the client did not notice the server going away";
  const Error e = result.get();
  EXPECT_LT(since(start), milliseconds(2000));
  EXPECT_EQ(e.code(), ErrorCode::PeerLost) << e.what();
  EXPECT_NE(e.detail().find("never"), std::string::npos) << e.what();
  EXPECT_NE(e.detail().find("GET"), std::string::npos) << e.what();
}

TEST(TcpStore, MuteServerIsBoundedByTheOpTimeout) {
  // A listening socket that accepts (via the backlog) and never answers.
  int fd = ::socket(AF_INET, SOCK_STREAM | SOCK_CLOEXEC, 0);
  sockaddr_in addr{};
  addr.sin_family = AF_INET;
  addr.sin_addr.s_addr = htonl(INADDR_LOOPBACK);
  ASSERT_EQ(::bind(fd, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  ASSERT_EQ(::listen(fd, 4), 0);
  socklen_t len = sizeof addr;
  ::getsockname(fd, reinterpret_cast<sockaddr*>(&addr), &len);
  TcpStore store("127.0.0.1", ntohs(addr.sin_port), kConnect, milliseconds(300));
  const auto start = Clock::now();
  const Error e = thrownBy([&] { store.setString("k", "v"); });
  EXPECT_EQ(e.code(), ErrorCode::Timeout);
  EXPECT_NE(e.detail().find("SET 'k'"), std::string::npos) << e.what();
  EXPECT_LT(since(start), milliseconds(1500));
  ::close(fd);
}

TEST(TcpStore, HostnamesAndIpv6) {
  TcpStoreServer v4("127.0.0.1", 0);
  TcpStore byName("localhost", v4.port(), kConnect);
  byName.setString("k", "v");
  EXPECT_EQ(byName.getString("k", kLong), "v");

  std::unique_ptr<TcpStoreServer> v6;
  try {
    v6 = std::make_unique<TcpStoreServer>("::1", 0);
  } catch (const Error& e) {
    GTEST_SKIP() << "no IPv6 loopback here: " << e.what();
  }
  TcpStore store("::1", v6->port(), kConnect);
  store.setString("k6", "v6");
  EXPECT_EQ(store.getString("k6", kLong), "v6");
  EXPECT_EQ(store.localAddress(), "::1");
}

TEST(TcpStore, MalformedFramesCloseOnlyTheirConnection) {
  TcpStoreServer server("127.0.0.1", 0);
  auto good = connectTo(server);
  good->setString("before", "1");
  // A good client parked in a GET while the bad ones misbehave.
  auto waiting = connectTo(server);
  auto parked = std::async(std::launch::async, [&] { return waiting->getString("after", kLong); });

  const std::vector<std::vector<std::uint8_t>> bad = {
      le32(0xffffffffu),                                                // huge frame length
      le32(0),                                                          // empty frame
      le32(1) + std::vector<std::uint8_t>{99},                          // unknown type
      le32(9) + std::vector<std::uint8_t>{1} + le32(100000) + le32(0),  // key over 4 KiB
      le32(5) + std::vector<std::uint8_t>{5} + le32(1000000),           // a million keys
      le32(16) + std::vector<std::uint8_t>(16, 0xab),                   // garbage payload
  };
  for (std::size_t i = 0; i < bad.size(); ++i) {
    RawClient raw(server.port());
    ASSERT_TRUE(raw.connected());
    ASSERT_TRUE(raw.send(bad[i]));
    EXPECT_TRUE(raw.closedByPeer(milliseconds(2000))) << "bad frame #" << i << " not rejected";
  }
  {
    // Half a frame, then gone.
    RawClient raw(server.port());
    ASSERT_TRUE(raw.connected());
    ASSERT_TRUE(raw.send(le32(1000) + std::vector<std::uint8_t>{1, 2, 3}));
  }

  EXPECT_EQ(good->getString("before", kLong), "1");
  good->setString("after", "2");
  ASSERT_EQ(parked.wait_for(milliseconds(3000)), std::future_status::ready);
  EXPECT_EQ(parked.get(), "2");
  EXPECT_EQ(connectTo(server)->add("still serving", 1), 1);
}

TEST(TcpStore, ClientDisconnectingWhileParkedDoesNotDisturbOthers) {
  TcpStoreServer server("127.0.0.1", 0);
  {
    RawClient raw(server.port());
    proto::Request req;
    req.type = proto::RequestType::Get;
    req.keys = {"x"};
    req.timeoutMs = 60000;
    std::vector<std::uint8_t> wire;
    ASSERT_TRUE(proto::appendRequest(req, wire));
    ASSERT_TRUE(raw.send(wire));
    std::this_thread::sleep_for(milliseconds(50));
  }  // gone while parked
  auto store = connectTo(server);
  store->setString("x", "1");
  EXPECT_EQ(store->getString("x", kLong), "1");
}

// A client that pipelines requests behind a parked GET and does not read its (large) replies for
// a while: the replies come back complete and in order, and other clients are served meanwhile.
TEST(TcpStore, PipelinedRequestsAndSlowReaders) {
  TcpStoreServer server("127.0.0.1", 0);
  // Generous bounds: a stuck server would never answer, and under a sanitizer on a loaded
  // machine encoding 96 MiB of replies takes seconds.
  auto store = connectTo(server, milliseconds(60000));
  std::vector<std::uint8_t> big(8 << 20);
  std::mt19937 rng(3);
  for (auto& b : big) b = static_cast<std::uint8_t>(rng());
  store->set("big", big);

  RawClient raw(server.port());
  ASSERT_TRUE(raw.connected());
  std::vector<std::uint8_t> wire;
  proto::Request req;
  req.type = proto::RequestType::Get;
  req.timeoutMs = 5000;
  req.keys = {"later"};  // parks
  ASSERT_TRUE(proto::appendRequest(req, wire));
  req.keys = {"big"};
  // 96 MiB of replies: more than the server buffers before it stops reading from a connection.
  constexpr int kBigGets = 12;
  for (int i = 0; i < kBigGets; ++i) ASSERT_TRUE(proto::appendRequest(req, wire));
  req = proto::Request{};
  req.type = proto::RequestType::Add;
  req.keys = {"n"};
  req.delta = 3;
  ASSERT_TRUE(proto::appendRequest(req, wire));
  ASSERT_TRUE(raw.send(wire));

  std::this_thread::sleep_for(milliseconds(50));
  store->setString("later", "now");  // unparks; the replies back up behind the raw socket
  std::this_thread::sleep_for(milliseconds(100));
  EXPECT_EQ(store->add("other", 1), 1);  // the server is not stuck on the slow reader
  EXPECT_EQ(store->getString("later", kLong), "now");

  std::vector<std::uint8_t> in;
  std::vector<proto::Response> replies;
  const auto deadline = Clock::now() + milliseconds(60000);
  while (replies.size() < kBigGets + 2 && Clock::now() < deadline) {
    std::uint8_t buf[65536];
    const ssize_t n = raw.recvSome(buf, sizeof buf, milliseconds(500));
    if (n <= 0) continue;
    in.insert(in.end(), buf, buf + n);
    for (;;) {
      proto::Response resp;
      const auto r = proto::decodeResponse(in, resp);
      if (r.status != proto::DecodeStatus::Complete) break;
      replies.push_back(std::move(resp));
      in.erase(in.begin(), in.begin() + static_cast<std::ptrdiff_t>(r.frameBytes));
    }
  }
  ASSERT_EQ(replies.size(), kBigGets + 2u);
  EXPECT_EQ(replies[0].type, proto::ResponseType::Value);
  EXPECT_EQ(replies[0].value, std::vector<std::uint8_t>({'n', 'o', 'w'}));
  for (int i = 1; i <= kBigGets; ++i) {
    EXPECT_EQ(replies[i].type, proto::ResponseType::Value);
    EXPECT_TRUE(replies[i].value == big) << "reply " << i;
  }
  EXPECT_EQ(replies.back().type, proto::ResponseType::Integer);
  EXPECT_EQ(replies.back().integer, 3);
}

TEST(TcpStore, OversizedArgumentsAreRejectedByTheClient) {
  TcpStoreServer server("127.0.0.1", 0);
  auto store = connectTo(server);
  const Error e = thrownBy([&] { store->setString(std::string(5000, 'k'), "v"); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
  store->setString("ok", "v");  // and the connection is unharmed
  EXPECT_EQ(store->getString("ok", kLong), "v");
}
}  // namespace
}  // namespace braid
