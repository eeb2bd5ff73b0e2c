// The TCP store server's memory bound (issue 25, case 2): what it stores plus what it buffers in
// partial request frames is bounded in total (SecurityOptions::storeMaxBytes) and, while the
// store has no key, per client host (storeMaxPeerBytes). A request beyond a bound is refused
// with an error the client sees (TcpStore throws InvalidArgument naming the bound) and a logged
// WARN, and the connection stays usable. Before, every connection could buffer a 64 MiB frame
// and SETs under new keys were kept for ever: a stranger grew rank 0 to gigabytes.
//
// Raw clients connect from different loopback addresses (127.0.0.2, 127.0.0.3, ...: all of
// 127/8 is loopback on Linux) to be different hosts to the per-host bound.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>
#include <poll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <braid/error.hpp>
#include <braid/store.hpp>
#include <chrono>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <thread>
#include <vector>

#include "harness/errors.hpp"
#include "harness/raw_connection.hpp"
#include "store/store_protocol.hpp"

namespace braid {
namespace {

using namespace std::chrono_literals;
using std::chrono::milliseconds;
using Clock = std::chrono::steady_clock;
using Bytes = std::vector<std::uint8_t>;
namespace proto = store_protocol;
using test::thrownBy;

constexpr std::size_t kMiB = std::size_t{1} << 20;

SecurityOptions bounded(std::size_t total, std::size_t perPeer, std::string key = "") {
  SecurityOptions s;
  s.authKey = std::move(key);
  s.storeMaxBytes = total;
  s.storeMaxPeerBytes = perPeer;
  return s;
}

std::unique_ptr<TcpStore> client(const TcpStoreServer& server, const SecurityOptions& s) {
  return std::make_unique<TcpStore>("127.0.0.1", server.port(), 2000ms, 10000ms, s);
}

// A raw-protocol client (the unauthenticated store serves clients that skip the handshake),
// connecting from 127.0.0.<host>.
class RawClient : public test::RawConnection {
 public:
  RawClient(std::uint16_t port, int host) : RawConnection(port, host) {}

  // The next response, or nullopt when none arrives within `within` (or the server closed).
  std::optional<proto::Response> response(milliseconds within = 5000ms) {
    const auto deadline = Clock::now() + within;
    while (Clock::now() < deadline) {
      proto::Response resp;
      const auto r = proto::decodeResponse(in_, resp);
      if (r.status == proto::DecodeStatus::Complete) {
        in_.erase(in_.begin(), in_.begin() + static_cast<std::ptrdiff_t>(r.frameBytes));
        return resp;
      }
      if (r.status == proto::DecodeStatus::Malformed) return std::nullopt;
      std::uint8_t buf[65536];
      const ssize_t n = recvSome(buf, sizeof buf, 20ms);
      if (n == 0) return std::nullopt;
      if (n > 0) in_.insert(in_.end(), buf, buf + n);
    }
    return std::nullopt;
  }

 private:
  Bytes in_;
};

Bytes setFrame(const std::string& key, std::size_t valueBytes) {
  proto::Request req;
  req.type = proto::RequestType::Set;
  req.keys = {key};
  req.value.assign(valueBytes, 0x5a);
  Bytes out;
  EXPECT_TRUE(proto::appendRequest(req, out));
  return out;
}

TEST(StoreBound, SetsBeyondTheTotalBoundAreRefusedAndTheClientCarriesOn) {
  const SecurityOptions s = bounded(8 * kMiB, 8 * kMiB, "job-key");
  TcpStoreServer server("127.0.0.1", 0, s);
  auto c = client(server, s);
  const std::vector<std::uint8_t> three(3 * kMiB, 7);
  testing::internal::CaptureStderr();
  c->set("a", three);
  c->set("b", three);
  const Error e = thrownBy([&] { c->set("c", three); });
  EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
  EXPECT_NE(std::string(e.what()).find("BRAID_STORE_MAX_BYTES"), std::string::npos) << e.what();
  EXPECT_NE(std::string(e.what()).find("refused"), std::string::npos) << e.what();
  // The same connection goes on: reads (a full store still serves them), and room made by a
  // smaller value lets a new key in. (A SET's frame is held while it is read, next to the value
  // it replaces, so an overwrite needs room for the frame too.)
  EXPECT_EQ(c->get("a", 1000ms), three);
  EXPECT_FALSE(c->check({"c"}));
  EXPECT_THROW(c->set("a", three), Error);
  c->set("b", std::vector<std::uint8_t>(10, 1));
  c->set("a", three);
  c->set("c", three);
  EXPECT_EQ(c->get("c", 1000ms), three);
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("refused a request from 127.0.0.1:"), std::string::npos) << log;
}

TEST(StoreBound, KeysCreatedByAddCountToo) {
  const SecurityOptions s = bounded(1 * kMiB, 1 * kMiB, "job-key");
  TcpStoreServer server("127.0.0.1", 0, s);
  auto c = client(server, s);
  testing::internal::CaptureStderr();
  int created = 0;
  bool refused = false;
  for (; created < 100000 && !refused; ++created) {
    try {
      c->add("counter/" + std::to_string(created), 1);
    } catch (const Error& e) {
      EXPECT_NE(std::string(e.what()).find("BRAID_STORE_MAX_BYTES"), std::string::npos) << e.what();
      refused = true;
    }
  }
  testing::internal::GetCapturedStderr();
  EXPECT_TRUE(refused) << created << " counters created under a 1 MiB bound";
  // Every entry costs at least its 64 bytes of overhead: at most 16384 fit.
  EXPECT_LE(created, 16385);
  EXPECT_EQ(c->add("counter/0", 5), 6);  // an existing counter still counts
}

// Partial frames: an unauthenticated host's frames are admitted only while they fit its bound;
// the one that does not gets an ERROR at once, its bytes are thrown away as they come, and its
// connection serves the next request. Other hosts are not affected until the total bound.
TEST(StoreBound, PartialFramesArePerHostAndTotalBounded) {
  const SecurityOptions s = bounded(10 * kMiB, 4 * kMiB);
  TcpStoreServer server("127.0.0.1", 0, s);
  testing::internal::CaptureStderr();
  const Bytes big = setFrame("big", 3 * kMiB);
  // Host .2: a 3 MiB frame, half sent, is admitted (and held).
  RawClient first(server.port(), 2);
  ASSERT_TRUE(first.connected());
  ASSERT_TRUE(first.send(big.data(), big.size() / 2));
  std::this_thread::sleep_for(100ms);
  EXPECT_EQ(first.response(200ms), std::nullopt) << "answered before the frame was complete";
  // Host .2 again: another 3 MiB frame would hold 6 MiB for that host: refused at its header.
  RawClient second(server.port(), 2);
  ASSERT_TRUE(second.send(big.data(), 64));
  auto refusal = second.response();
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->type, proto::ResponseType::Error);
  EXPECT_NE(refusal->message.find("BRAID_STORE_MAX_PEER_BYTES"), std::string::npos)
      << refusal->message;
  EXPECT_NE(refusal->message.find("127.0.0.2"), std::string::npos) << refusal->message;
  // The rest of the refused frame is thrown away; then the connection is in step again.
  ASSERT_TRUE(second.send(big.data() + 64, big.size() - 64));
  ASSERT_TRUE(second.send(setFrame("small", 10)));
  auto ok = second.response();
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->type, proto::ResponseType::Ok) << ok->message;
  // Hosts .3 and .4 have their own 4 MiB; the total bound (10 MiB) stops host .5.
  RawClient third(server.port(), 3), fourth(server.port(), 4), fifth(server.port(), 5);
  ASSERT_TRUE(third.send(big.data(), big.size() / 2));
  ASSERT_TRUE(fourth.send(big.data(), big.size() / 2));
  std::this_thread::sleep_for(100ms);
  ASSERT_TRUE(fifth.send(big.data(), 64));
  refusal = fifth.response();
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->type, proto::ResponseType::Error);
  EXPECT_NE(refusal->message.find("BRAID_STORE_MAX_BYTES"), std::string::npos) << refusal->message;
  // Completing the admitted frames stores them (the reservation becomes the entry).
  ASSERT_TRUE(first.send(big.data() + big.size() / 2, big.size() - big.size() / 2));
  ok = first.response();
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->type, proto::ResponseType::Ok) << ok->message;
  const std::string log = testing::internal::GetCapturedStderr();
  EXPECT_NE(log.find("refused a request from 127.0.0.2:"), std::string::npos) << log;
  EXPECT_NE(log.find("refused a request from 127.0.0.5:"), std::string::npos) << log;
}

// A closed connection gives back what it held: host .2 fills its bound with a partial frame,
// leaves, and can then store as much again.
TEST(StoreBound, WhatALeavingClientHeldIsReleased) {
  const SecurityOptions s = bounded(64 * kMiB, 4 * kMiB);
  TcpStoreServer server("127.0.0.1", 0, s);
  testing::internal::CaptureStderr();
  const Bytes big = setFrame("big", 3 * kMiB);
  for (int round = 0; round < 3; ++round) {
    {
      RawClient partial(server.port(), 2);
      ASSERT_TRUE(partial.send(big.data(), big.size() - 10));
      std::this_thread::sleep_for(50ms);
    }
    std::this_thread::sleep_for(50ms);  // the server notices the close
  }
  RawClient c(server.port(), 2);
  ASSERT_TRUE(c.send(big));
  auto ok = c.response();
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->type, proto::ResponseType::Ok) << ok->message;
  // Stored now: 3 MiB of host .2's 4 MiB; a second 3 MiB key is refused. Overwriting the first
  // with a smaller value gives the difference back, and the second key fits then.
  ASSERT_TRUE(c.send(setFrame("big2", 3 * kMiB)));
  auto refusal = c.response();
  ASSERT_TRUE(refusal.has_value());
  EXPECT_EQ(refusal->type, proto::ResponseType::Error);
  ASSERT_TRUE(c.send(setFrame("big", kMiB / 2)));
  ok = c.response();
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->type, proto::ResponseType::Ok) << ok->message;
  ASSERT_TRUE(c.send(setFrame("big2", 3 * kMiB)));
  ok = c.response();
  ASSERT_TRUE(ok.has_value());
  EXPECT_EQ(ok->type, proto::ResponseType::Ok) << ok->message;
  testing::internal::GetCapturedStderr();
}

// With a key the per-host bound does not apply (every client proved the key): one host may use
// the whole total.
TEST(StoreBound, AuthenticatedClientsAreBoundedInTotalOnly) {
  const SecurityOptions s = bounded(16 * kMiB, 2 * kMiB, "job-key");
  TcpStoreServer server("127.0.0.1", 0, s);
  auto c = client(server, s);
  for (int i = 0; i < 4; ++i) c->set("k" + std::to_string(i), std::vector<std::uint8_t>(3 * kMiB));
  EXPECT_TRUE(c->check({"k0", "k1", "k2", "k3"}));
}

}  // namespace
}  // namespace braid
