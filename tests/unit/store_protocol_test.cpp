// The TCP store's wire protocol (store/store_protocol.hpp): every request and response type
// encodes and decodes back, truncations are incomplete, bounds hold, random bytes never crash
// the decoder.

#include "store/store_protocol.hpp"

#include <gtest/gtest.h>

#include <braid/error.hpp>
#include <braid/store.hpp>
#include <chrono>
#include <cstdint>
#include <random>
#include <span>
#include <string>
#include <tuple>
#include <vector>

#include "harness/store_helpers.hpp"

namespace braid {
namespace {

namespace proto = store_protocol;
using test::le32;
using test::operator+;

// Appends every message to `wire` and decodes them back frame by frame. A message that does not
// encode, a frame that does not decode complete, or a count that differs fails the test.
template <class Msg, class Append, class Decode>
std::vector<Msg> throughWire(const std::vector<Msg>& msgs, std::vector<std::uint8_t>& wire,
                             Append append, Decode decode) {
  for (const auto& m : msgs) EXPECT_TRUE(append(m, wire));
  std::vector<Msg> back;
  std::size_t at = 0;
  while (at < wire.size()) {
    Msg got;
    const auto r = decode(std::span(wire).subspan(at), got);
    EXPECT_EQ(r.status, proto::DecodeStatus::Complete) << r.error;
    if (r.status != proto::DecodeStatus::Complete) break;
    at += r.frameBytes;
    back.push_back(std::move(got));
  }
  EXPECT_EQ(back.size(), msgs.size());
  return back;
}

std::vector<proto::Request> requestsBack(const std::vector<proto::Request>& reqs,
                                         std::vector<std::uint8_t>& wire) {
  return throughWire(
      reqs, wire, [](const auto& r, auto& w) { return proto::appendRequest(r, w); },
      [](auto in, auto& out) { return proto::decodeRequest(in, out); });
}

TEST(StoreProtocol, RequestsRoundTrip) {
  std::vector<proto::Request> reqs(5);
  reqs[0].type = proto::RequestType::Set;
  reqs[0].keys = {"k"};
  reqs[0].value = {0, 1, 255};
  reqs[1].type = proto::RequestType::Get;
  reqs[1].keys = {""};
  reqs[1].timeoutMs = 123456789012ull;
  reqs[2].type = proto::RequestType::Add;
  reqs[2].keys = {"counter"};
  reqs[2].delta = -42;
  reqs[3].type = proto::RequestType::Wait;
  reqs[3].keys = {"a", "bb", ""};
  reqs[3].timeoutMs = 7;
  reqs[4].type = proto::RequestType::Check;
  std::vector<std::uint8_t> wire;
  const auto back = requestsBack(reqs, wire);
  const auto fields = [](const proto::Request& r) {
    return std::tie(r.type, r.keys, r.value, r.delta, r.timeoutMs);
  };
  for (std::size_t i = 0; i < back.size(); ++i) EXPECT_EQ(fields(back[i]), fields(reqs[i]));
}

TEST(StoreProtocol, OnCloseRequestsRoundTrip) {
  std::vector<proto::Request> reqs(2);
  reqs[0].type = proto::RequestType::OnClose;
  reqs[0].keys = {"braid/0//dead/3"};
  reqs[0].value = {'1', 0, 255};
  reqs[1].type = proto::RequestType::UnClose;
  reqs[1].keys = {"braid/0//revoked"};
  std::vector<std::uint8_t> wire;
  const auto back = requestsBack(reqs, wire);
  for (std::size_t i = 0; i < back.size(); ++i)
    EXPECT_EQ(std::tie(back[i].type, back[i].keys, back[i].value),
              std::tie(reqs[i].type, reqs[i].keys, reqs[i].value));
  proto::Request twoKeys;
  twoKeys.type = proto::RequestType::OnClose;
  twoKeys.keys = {"a", "b"};
  EXPECT_FALSE(proto::appendRequest(twoKeys, wire));
}

TEST(StoreProtocol, ResponsesRoundTrip) {
  std::vector<proto::Response> resps(6);
  resps[0].type = proto::ResponseType::Ok;
  resps[1].type = proto::ResponseType::Value;
  resps[1].value = {9, 8, 7};
  resps[2].type = proto::ResponseType::Integer;
  resps[2].integer = INT64_MIN;
  resps[3].type = proto::ResponseType::Bool;
  resps[3].flag = true;
  resps[4].type = proto::ResponseType::Timeout;
  resps[4].keys = {"x", "y"};
  resps[5].type = proto::ResponseType::Error;
  resps[5].message = "no";
  std::vector<std::uint8_t> wire;
  const auto back = throughWire(
      resps, wire, [](const auto& r, auto& w) { return proto::appendResponse(r, w); },
      [](auto in, auto& out) { return proto::decodeResponse(in, out); });
  const auto fields = [](const proto::Response& r) {
    return std::tie(r.type, r.value, r.integer, r.flag, r.keys, r.message);
  };
  for (std::size_t i = 0; i < back.size(); ++i) EXPECT_EQ(fields(back[i]), fields(resps[i]));
}

TEST(StoreProtocol, EveryTruncationIsIncomplete) {
  proto::Request req;
  req.type = proto::RequestType::Wait;
  req.keys = {"alpha", "beta"};
  std::vector<std::uint8_t> wire;
  ASSERT_TRUE(proto::appendRequest(req, wire));
  for (std::size_t n = 0; n < wire.size(); ++n) {
    proto::Request got;
    const auto r = proto::decodeRequest(std::span(wire).first(n), got);
    EXPECT_EQ(r.status, proto::DecodeStatus::Incomplete) << "prefix of " << n << " bytes";
  }
}

TEST(StoreProtocol, BoundsAreEnforced) {
  proto::Request req;
  req.type = proto::RequestType::Set;
  req.keys = {std::string(proto::kMaxKeyBytes + 1, 'k')};
  std::vector<std::uint8_t> wire;
  EXPECT_FALSE(proto::appendRequest(req, wire));
  EXPECT_TRUE(wire.empty());
  req.keys = {"a", "b"};  // SET takes exactly one key
  EXPECT_FALSE(proto::appendRequest(req, wire));

  proto::Request got;
  // A header announcing more than a frame may hold is rejected before any body arrives.
  EXPECT_EQ(proto::decodeRequest(le32(0xffffffffu), got).status, proto::DecodeStatus::Malformed);
  EXPECT_EQ(proto::decodeRequest(le32(0), got).status, proto::DecodeStatus::Malformed);
  // CHECK claiming 2^31 keys in a 5-byte payload.
  auto huge = le32(5) + std::vector<std::uint8_t>{5} + le32(0x80000000u);
  EXPECT_EQ(proto::decodeRequest(huge, got).status, proto::DecodeStatus::Malformed);
  // SET whose key length exceeds the key bound.
  auto longKey = le32(9) + std::vector<std::uint8_t>{1} + le32(5000) + le32(0);
  EXPECT_EQ(proto::decodeRequest(longKey, got).status, proto::DecodeStatus::Malformed);
  // Trailing bytes after a complete CHECK of zero keys.
  auto trailing = le32(6) + std::vector<std::uint8_t>{5} + le32(0) + std::vector<std::uint8_t>{0};
  EXPECT_EQ(proto::decodeRequest(trailing, got).status, proto::DecodeStatus::Malformed);
  // Unknown type.
  auto unknown = le32(1) + std::vector<std::uint8_t>{77};
  EXPECT_EQ(proto::decodeRequest(unknown, got).status, proto::DecodeStatus::Malformed);
}

TEST(StoreProtocol, RandomBytesNeverCrashTheDecoder) {
  std::mt19937 rng(12345);
  for (int i = 0; i < 20000; ++i) {
    std::vector<std::uint8_t> b(4 + rng() % 64);
    for (auto& x : b) x = static_cast<std::uint8_t>(rng());
    // Small lengths, so that the payload decoder runs on most inputs.
    b[0] = static_cast<std::uint8_t>(rng() % (b.size() - 3));
    b[1] = b[2] = b[3] = 0;
    b[4 % b.size()] = static_cast<std::uint8_t>(1 + rng() % 6);
    proto::Request req;
    proto::Response resp;
    const auto r1 = proto::decodeRequest(b, req);
    const auto r2 = proto::decodeResponse(b, resp);
    if (r1.status == proto::DecodeStatus::Complete) {
      EXPECT_LE(r1.frameBytes, b.size());
    }
    if (r2.status == proto::DecodeStatus::Complete) {
      EXPECT_LE(r2.frameBytes, b.size());
    }
  }
}
TEST(StoreProtocol, DeleteRequestsRoundTrip) {
  std::vector<proto::Request> reqs(3);
  reqs[0].type = proto::RequestType::Delete;
  reqs[0].keys = {"a", "", "braid/0//tcp/addr/7"};
  reqs[1].type = proto::RequestType::NumKeys;
  reqs[2].type = proto::RequestType::DeletePrefix;
  reqs[2].keys = {"braid/0//"};
  std::vector<std::uint8_t> wire;
  const auto back = requestsBack(reqs, wire);
  for (std::size_t i = 0; i < back.size(); ++i)
    EXPECT_EQ(std::tie(back[i].type, back[i].keys), std::tie(reqs[i].type, reqs[i].keys));
  const std::size_t at = wire.size();
  proto::Request bad;
  bad.type = proto::RequestType::NumKeys;
  bad.keys = {"x"};
  EXPECT_FALSE(proto::appendRequest(bad, wire));
  bad.type = proto::RequestType::DeletePrefix;
  bad.keys = {};
  EXPECT_FALSE(proto::appendRequest(bad, wire));
  EXPECT_EQ(at, wire.size()) << "a refused request appends nothing";
}
TEST(StoreProtocol, WaitAnyRoundTripsAndNeedsAKey) {
  std::vector<proto::Request> reqs(2);
  reqs[0].type = proto::RequestType::WaitAny;
  reqs[0].keys = {"braid/liveness/ab/wake", "braid/0//revoked", ""};
  reqs[0].timeoutMs = 86400000;
  reqs[1].type = proto::RequestType::WaitAny;
  reqs[1].keys = {"only"};
  std::vector<std::uint8_t> wire;
  const auto back = requestsBack(reqs, wire);
  for (std::size_t i = 0; i < back.size(); ++i)
    EXPECT_EQ(std::tie(back[i].type, back[i].keys, back[i].timeoutMs),
              std::tie(reqs[i].type, reqs[i].keys, reqs[i].timeoutMs));
  EXPECT_STREQ(proto::toString(proto::RequestType::WaitAny), "WAITANY");
  // None: refused by the encoder, and malformed when a peer sends it anyway (a WAIT frame with
  // no key, retyped).
  proto::Request none;
  none.type = proto::RequestType::WaitAny;
  std::vector<std::uint8_t> out;
  EXPECT_FALSE(proto::appendRequest(none, out));
  EXPECT_TRUE(out.empty());
  none.type = proto::RequestType::Wait;
  ASSERT_TRUE(proto::appendRequest(none, out));
  out[proto::kFrameHeaderBytes] = static_cast<std::uint8_t>(proto::RequestType::WaitAny);
  proto::Request decoded;
  const auto r = proto::decodeRequest(out, decoded);
  EXPECT_EQ(r.status, proto::DecodeStatus::Malformed);
  EXPECT_NE(r.error.find("WAITANY without a key"), std::string::npos) << r.error;
}

}  // namespace
}  // namespace braid
