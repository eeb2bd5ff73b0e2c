// Connection security, pure parts: SHA-256 and HMAC-SHA256 against the published vectors, the
// handshake's messages and state machines (mutual proof, replay, reflection, one-sided keys),
// and the address whitelist.
#include <arpa/inet.h>
#include <gtest/gtest.h>
#include <netinet/in.h>

#include <braid/error.hpp>
#include <braid/options.hpp>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>
#include <string>
#include <vector>

#include "common/address_filter.hpp"
#include "common/crypto.hpp"
#include "common/handshake.hpp"

namespace braid::security {
namespace {

using Bytes = std::vector<std::uint8_t>;

Bytes bytesOf(std::string_view s) {
  return Bytes(s.begin(), s.end());
}

Bytes fromHex(std::string_view hex) {
  Bytes out;
  EXPECT_TRUE(crypto::fromHex(hex, out)) << hex;
  return out;
}

std::string hexOf(std::span<const std::uint8_t> b) {
  return crypto::toHex(b);
}

TEST(Hex, RoundTripsAndRejectsWhatIsNotHex) {
  const Bytes all = [] {
    Bytes b;
    for (int i = 0; i < 256; ++i) b.push_back(static_cast<std::uint8_t>(i));
    return b;
  }();
  Bytes back;
  ASSERT_TRUE(crypto::fromHex(crypto::toHex(all), back));
  EXPECT_EQ(back, all);
  ASSERT_TRUE(crypto::fromHex("00FFa5", back));
  EXPECT_EQ(back, (Bytes{0x00, 0xff, 0xa5}));
  for (const char* bad : {"", "0", "abc", "0g", "zz", " 00", "00 "}) {
    back = {1};
    EXPECT_FALSE(crypto::fromHex(bad, back)) << '"' << bad << '"';
    EXPECT_TRUE(back.empty()) << '"' << bad << '"';
  }
}

// ---------------------------------------------------------------------------------------------
// SHA-256: FIPS 180-2 appendix B vectors, plus the empty message.

TEST(Sha256, Fips180Vectors) {
  EXPECT_EQ(hexOf(crypto::sha256(bytesOf("abc"))),
            "ba7816bf8f01cfea414140de5dae2223b00361a396177a9cb410ff61f20015ad");
  EXPECT_EQ(hexOf(crypto::sha256(bytesOf(""))),
            "e3b0c44298fc1c149afbf4c8996fb92427ae41e4649b934ca495991b7852b855");
  EXPECT_EQ(
      hexOf(crypto::sha256(bytesOf("abcdbcdecdefdefgefghfghighijhijkijkljklmklmnlmnomnopnopq"))),
      "248d6a61d20638b8e5c026930c3e6039a33ce45964ff2167f6ecedd419db06c1");
  const Bytes million(1000000, 'a');
  EXPECT_EQ(hexOf(crypto::sha256(million)),
            "cdc76e5c9914fb9281a1c7e284d73e67f1809a48a497200e046d39ccc7112cd0");
}

TEST(Sha256, PaddingBoundaries) {
  // Lengths around the 55/56/64-byte padding edges, checked against an incremental hash fed
  // one byte at a time (a different path through update()).
  const std::string_view expected[] = {
      // sha256 of 55, 56, 63, 64 and 65 'a's
      "9f4390f8d30c2dd92ec9f095b65e2b9ae9b0a925a5258e241c9f1e910f734318",
      "b35439a4ac6f0948b6d6f9e3c6af0f5f590ce20f1bde7090ef7970686ec6738a",
      "7d3e74a05d7db15bce4ad9ec0658ea98e3f06eeecf16b4c6fff2da457ddc2f34",
      "ffe054fe7ae0cb6dc65c3af9b61d5209f439851db43d0ba5997337df154668eb",
      "635361c48bb9eab14198e76ea8ab7f1a41685d6ad62aa9146d301d4f17eb0ae0",
  };
  const std::size_t lengths[] = {55, 56, 63, 64, 65};
  for (int i = 0; i < 5; ++i) {
    const Bytes msg(lengths[i], 'a');
    EXPECT_EQ(hexOf(crypto::sha256(msg)), expected[i]) << lengths[i] << " bytes";
    crypto::Sha256 h;
    for (std::uint8_t b : msg) h.update(std::span<const std::uint8_t>(&b, 1));
    EXPECT_EQ(hexOf(h.finish()), expected[i]) << lengths[i] << " bytes, byte by byte";
  }
}

TEST(Sha256, IncrementalEqualsOneShot) {
  std::mt19937 rng(7);
  for (int round = 0; round < 50; ++round) {
    Bytes msg(rng() % 700);
    for (auto& b : msg) b = static_cast<std::uint8_t>(rng());
    crypto::Sha256 h;
    std::size_t at = 0;
    while (at < msg.size()) {
      const std::size_t n = std::min<std::size_t>(rng() % 130, msg.size() - at);
      h.update(std::span<const std::uint8_t>(msg.data() + at, n));
      at += n;
    }
    EXPECT_EQ(h.finish(), crypto::sha256(msg)) << msg.size() << " bytes";
  }
}

// ---------------------------------------------------------------------------------------------
// HMAC-SHA256: RFC 4231 test cases 1-7.

struct HmacCase {
  Bytes key;
  Bytes data;
  std::string mac;  // hex; case 5 is truncated to 128 bits
};

TEST(HmacSha256, Rfc4231Vectors) {
  const Bytes key131(131, 0xaa);
  const std::vector<HmacCase> cases = {
      {Bytes(20, 0x0b), bytesOf("Hi There"),
       "b0344c61d8db38535ca8afceaf0bf12b881dc200c9833da726e9376c2e32cff7"},
      {bytesOf("Jefe"), bytesOf("what do ya want for nothing?"),
       "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843"},
      {Bytes(20, 0xaa), Bytes(50, 0xdd),
       "773ea91e36800e46854db8ebd09181a72959098b3ef8c122d9635514ced565fe"},
      {fromHex("0102030405060708090a0b0c0d0e0f10111213141516171819"), Bytes(50, 0xcd),
       "82558a389a443c0ea4cc819899f2083a85f0faa3e578f8077a2e3ff46729665b"},
      {Bytes(20, 0x0c), bytesOf("Test With Truncation"), "a3b6167473100ee06e0c796c2955552b"},
      {key131, bytesOf("Test Using Larger Than Block-Size Key - Hash Key First"),
       "60e431591ee0b67f0d8a26aacbf5b77f8e0bc6213728c5140546040f0ee37f54"},
      {key131,
       bytesOf("This is a test using a larger than block-size key and a larger than block-size "
               "data. The key needs to be hashed before being used by the HMAC algorithm."),
       "9b09ffa71b942fcb27635fbcd5b0e944bfdc63644f0713938a7f51535c3a35e2"},
  };
  for (std::size_t i = 0; i < cases.size(); ++i) {
    const auto mac = hexOf(crypto::hmacSha256(cases[i].key, cases[i].data));
    EXPECT_EQ(mac.substr(0, cases[i].mac.size()), cases[i].mac) << "RFC 4231 case " << i + 1;
  }
}

TEST(HmacSha256, StringKeyAndIncrementalUpdates) {
  crypto::HmacSha256 mac(std::string_view("Jefe"));
  mac.update(std::string_view("what do ya "));
  mac.update(std::string_view("want for nothing?"));
  EXPECT_EQ(hexOf(mac.finish()),
            "5bdcc146bf60754e6a042426089575c75a003f089d2739839dec58b964ec3843");
}

TEST(Crypto, ConstantTimeCompareAndRandomBytes) {
  const Bytes a = {1, 2, 3}, b = {1, 2, 3}, c = {1, 2, 4}, d = {1, 2};
  EXPECT_TRUE(crypto::equalConstantTime(a, b));
  EXPECT_FALSE(crypto::equalConstantTime(a, c));
  EXPECT_FALSE(crypto::equalConstantTime(a, d));
  Bytes r1(32), r2(32);
  crypto::randomBytes(r1);
  crypto::randomBytes(r2);
  EXPECT_NE(r1, r2);
  EXPECT_NE(r1, Bytes(32, 0));
}

// ---------------------------------------------------------------------------------------------
// Handshake messages

Message sample(MessageType t) {
  Message m;
  m.type = t;
  m.service = Service::Transport;
  m.flags = kFlagAuthenticated;
  for (std::size_t i = 0; i < kNonceBytes; ++i) m.nonce[i] = static_cast<std::uint8_t>(i + 1);
  for (std::size_t i = 0; i < kMacBytes; ++i) m.mac[i] = static_cast<std::uint8_t>(200 - i);
  if (t == MessageType::Hello || t == MessageType::Reply) m.context = {1, 0, 0, 0, 4, 0, 0, 0};
  if (t == MessageType::Reject) {
    m.reason = RejectReason::Auth;
    m.text = "no";
  }
  return m;
}

TEST(HandshakeMessages, RoundTripAndEveryTruncationIsIncomplete) {
  for (auto t : {MessageType::Hello, MessageType::Reply, MessageType::Proof, MessageType::Accept,
                 MessageType::Reject}) {
    const Message m = sample(t);
    Bytes wire;
    appendMessage(m, wire);
    wire.push_back(0x77);  // a byte of the next message: left alone
    Message got;
    const auto r = decodeMessage(wire, got);
    ASSERT_EQ(r.status, DecodeStatus::Complete) << toString(t) << ": " << r.error;
    EXPECT_EQ(r.frameBytes, wire.size() - 1);
    EXPECT_EQ(got.type, t);
    EXPECT_EQ(got.service, Service::Transport);
    if (t == MessageType::Hello || t == MessageType::Reply) {
      EXPECT_EQ(got.nonce, m.nonce);
      EXPECT_EQ(got.context, m.context);
    }
    if (t == MessageType::Reply || t == MessageType::Proof) {
      EXPECT_EQ(got.mac, m.mac);
    }
    if (t == MessageType::Reject) {
      EXPECT_EQ(got.reason, RejectReason::Auth);
      EXPECT_EQ(got.text, "no");
    }
    for (std::size_t n = 0; n + 1 < wire.size(); ++n) {
      Message partial;
      const auto p = decodeMessage(std::span(wire).first(n), partial);
      EXPECT_EQ(p.status, DecodeStatus::Incomplete) << toString(t) << " cut at " << n;
    }
  }
}

TEST(HandshakeMessages, MalformedFieldsAreRejected) {
  auto header = [](std::uint32_t magic, std::uint8_t version, std::uint8_t type, std::uint8_t flags,
                   std::uint8_t service, std::uint32_t body) {
    Bytes h;
    for (int i = 0; i < 4; ++i) h.push_back(static_cast<std::uint8_t>(magic >> (8 * i)));
    h.insert(h.end(), {version, type, flags, service});
    for (int i = 0; i < 4; ++i) h.push_back(static_cast<std::uint8_t>(body >> (8 * i)));
    h.resize(h.size() + std::min<std::uint32_t>(body, 4096), 0);
    return h;
  };
  const std::vector<std::pair<const char*, Bytes>> bad = {
      {"magic", header(0x12345678, 1, 1, 0, 1, 32)},
      {"version", header(kHandshakeMagic, 9, 1, 0, 1, 32)},
      {"type 0", header(kHandshakeMagic, 1, 0, 0, 1, 32)},
      {"type 6", header(kHandshakeMagic, 1, 6, 0, 1, 32)},
      {"flags", header(kHandshakeMagic, 1, 1, 0x80, 1, 32)},
      {"service", header(kHandshakeMagic, 1, 1, 0, 7, 32)},
      {"huge body", header(kHandshakeMagic, 1, 1, 0, 1, 0xffffffff)},
      {"body over bound", header(kHandshakeMagic, 1, 1, 0, 1, kMaxBodyBytes + 1)},
      {"short hello", header(kHandshakeMagic, 1, 1, 0, 1, 31)},
      {"hello context over bound", header(kHandshakeMagic, 1, 1, 0, 1, 32 + kMaxContextBytes + 1)},
      {"short reply", header(kHandshakeMagic, 1, 2, 0, 1, 63)},
      {"proof size", header(kHandshakeMagic, 1, 3, 0, 1, 33)},
      {"accept body", header(kHandshakeMagic, 1, 4, 0, 1, 1)},
      {"empty reject", header(kHandshakeMagic, 1, 5, 0, 1, 0)},
      {"reject reason", header(kHandshakeMagic, 1, 5, 0, 1, 1)},  // reason byte 0
  };
  for (const auto& [what, wire] : bad) {
    Message m;
    const auto r = decodeMessage(wire, m);
    EXPECT_EQ(r.status, DecodeStatus::Malformed) << what;
    EXPECT_FALSE(r.error.empty()) << what;
  }
}

TEST(HandshakeMessages, RandomBytesNeverCrashTheDecoder) {
  std::mt19937 rng(11);
  for (int i = 0; i < 20000; ++i) {
    Bytes b(rng() % 400);
    for (auto& x : b) x = static_cast<std::uint8_t>(rng());
    if (b.size() >= 12 && i % 2 == 0) {  // half of them with a valid header shape
      b[0] = 'B', b[1] = 'R', b[2] = 'A', b[3] = 'H', b[4] = 1;
      b[5] = static_cast<std::uint8_t>(1 + rng() % 5);
      b[6] = static_cast<std::uint8_t>(rng() % 2);
      b[7] = static_cast<std::uint8_t>(1 + rng() % 2);
      const std::uint32_t body = static_cast<std::uint32_t>(b.size() - 12);
      for (int k = 0; k < 4; ++k) b[8 + k] = static_cast<std::uint8_t>(body >> (8 * k));
    }
    Message m;
    const auto r = decodeMessage(b, m);
    if (r.status == DecodeStatus::Complete) {
      EXPECT_LE(r.frameBytes, b.size());
    }
  }
}

// ---------------------------------------------------------------------------------------------
// Handshake state machines, wired back to back.

struct Outcome {
  HandshakeState initiator;
  HandshakeState responder;
  Failure initiatorFailure;
  Failure responderFailure;
  std::string initiatorError;
  std::string responderError;
  Bytes initiatorSaw;  // the responder's context, as the initiator got it
  Bytes responderSaw;
  std::vector<Bytes> fromInitiator;  // every message the initiator sent, for replay tests
};

// Delivers every message of `bytes` to `onMessage` in order; the decoded messages are complete.
template <typename OnMessage>
void deliver(const Bytes& bytes, OnMessage&& onMessage) {
  std::size_t at = 0;
  while (at < bytes.size()) {
    Message m;
    const auto r = decodeMessage(std::span(bytes).subspan(at), m);
    ASSERT_EQ(r.status, DecodeStatus::Complete) << r.error;
    at += r.frameBytes;
    onMessage(m);
  }
}

Outcome converse(Initiator& i, Responder& r, bool acceptWhenVerified = true) {
  Outcome o;
  Bytes toResponder, toInitiator;
  i.appendHello(toResponder);
  for (int round = 0; round < 8 && (!toResponder.empty() || !toInitiator.empty()); ++round) {
    if (!toResponder.empty()) o.fromInitiator.push_back(toResponder);
    Bytes back;
    deliver(toResponder, [&](const Message& m) {
      if (r.onMessage(m, back) == HandshakeState::Verified) {
        if (acceptWhenVerified) r.accept(back);
      }
    });
    toResponder.clear();
    toInitiator = std::move(back);
    Bytes forth;
    deliver(toInitiator, [&](const Message& m) { i.onMessage(m, forth); });
    toInitiator.clear();
    toResponder = std::move(forth);
  }
  o.initiator = i.state();
  o.responder = r.state();
  o.initiatorFailure = i.failure();
  o.responderFailure = r.failure();
  o.initiatorError = i.error();
  o.responderError = r.error();
  o.initiatorSaw = i.peerContext();
  o.responderSaw = r.peerContext();
  return o;
}

const Bytes kCtxI = {1, 0, 0, 0, 2, 0, 0, 0};
const Bytes kCtxR = {0, 0, 0, 0, 2, 0, 0, 0};

TEST(Handshake, SameKeyAuthenticatesBothWays) {
  Initiator i("job-secret", Service::Transport, kCtxI);
  Responder r("job-secret", Service::Transport, kCtxR);
  const Outcome o = converse(i, r);
  EXPECT_EQ(o.initiator, HandshakeState::Done) << o.initiatorError;
  EXPECT_EQ(o.responder, HandshakeState::Done) << o.responderError;
  EXPECT_EQ(o.initiatorSaw, kCtxR);
  EXPECT_EQ(o.responderSaw, kCtxI);
  EXPECT_EQ(o.fromInitiator.size(), 2u);  // Hello, Proof
}

TEST(Handshake, NoKeyOnEitherSideIsOneRoundTrip) {
  Initiator i("", Service::Store, {});
  Responder r("", Service::Store, {});
  const Outcome o = converse(i, r);
  EXPECT_EQ(o.initiator, HandshakeState::Done);
  EXPECT_EQ(o.responder, HandshakeState::Done);
  EXPECT_EQ(o.fromInitiator.size(), 1u);  // Hello only
}

TEST(Handshake, DifferentKeysFailOnBothSides) {
  Initiator i("key-one", Service::Transport, kCtxI);
  Responder r("key-two", Service::Transport, kCtxR);
  const Outcome o = converse(i, r);
  EXPECT_EQ(o.initiator, HandshakeState::Failed);
  EXPECT_EQ(o.initiatorFailure, Failure::Auth);
  EXPECT_NE(o.initiatorError.find("keys differ"), std::string::npos) << o.initiatorError;
  EXPECT_EQ(o.responder, HandshakeState::Failed);
  EXPECT_EQ(o.responderFailure, Failure::Auth) << o.responderError;
}

TEST(Handshake, KeyOnOneSideOnlyFailsAsAuth) {
  {
    Initiator i("", Service::Store, {});
    Responder r("secret", Service::Store, {});
    const Outcome o = converse(i, r);
    EXPECT_EQ(o.initiatorFailure, Failure::Auth);
    EXPECT_NE(o.initiatorError.find("authentication required"), std::string::npos)
        << o.initiatorError;
    EXPECT_EQ(o.responderFailure, Failure::Auth);
  }
  {
    Initiator i("secret", Service::Store, {});
    Responder r("", Service::Store, {});
    const Outcome o = converse(i, r);
    EXPECT_EQ(o.initiatorFailure, Failure::Auth);
    EXPECT_NE(o.initiatorError.find("no BRAID_AUTH_KEY"), std::string::npos) << o.initiatorError;
    EXPECT_EQ(o.responderFailure, Failure::Auth);
  }
}

TEST(Handshake, ReplayedTranscriptFails) {
  Initiator i("secret", Service::Transport, kCtxI);
  Responder r("secret", Service::Transport, kCtxR);
  const Outcome recorded = converse(i, r);
  ASSERT_EQ(recorded.responder, HandshakeState::Done);
  ASSERT_EQ(recorded.fromInitiator.size(), 2u);
  // An eavesdropper replays the initiator's Hello and Proof to a fresh responder: its nonce is
  // new, so the recorded proof no longer matches.
  Responder fresh("secret", Service::Transport, kCtxR);
  Bytes out;
  deliver(recorded.fromInitiator[0], [&](const Message& m) { fresh.onMessage(m, out); });
  EXPECT_EQ(fresh.state(), HandshakeState::InProgress);
  deliver(recorded.fromInitiator[1], [&](const Message& m) { fresh.onMessage(m, out); });
  EXPECT_EQ(fresh.state(), HandshakeState::Failed);
  EXPECT_EQ(fresh.failure(), Failure::Auth);
}

TEST(Handshake, ResponderProofCannotBeReflected) {
  // A stranger without the key connects, gets the responder's Reply, and sends its MAC back as
  // the initiator's Proof: the role label makes it wrong.
  Responder r("secret", Service::Transport, kCtxR);
  Message hello;
  hello.type = MessageType::Hello;
  hello.flags = kFlagAuthenticated;
  hello.service = Service::Transport;
  hello.context = kCtxI;
  Bytes out;
  r.onMessage(hello, out);
  Message reply;
  ASSERT_EQ(decodeMessage(out, reply).status, DecodeStatus::Complete);
  ASSERT_EQ(reply.type, MessageType::Reply);
  Message proof;
  proof.type = MessageType::Proof;
  proof.flags = kFlagAuthenticated;
  proof.service = Service::Transport;
  proof.mac = reply.mac;
  out.clear();
  EXPECT_EQ(r.onMessage(proof, out), HandshakeState::Failed);
  EXPECT_EQ(r.failure(), Failure::Auth);
}

TEST(Handshake, TamperedContextFails) {
  // A man in the middle rewrites the rank in the Hello: the responder's proof covers what it
  // received, so the initiator rejects it.
  Initiator i("secret", Service::Transport, kCtxI);
  Responder r("secret", Service::Transport, kCtxR);
  Bytes hello;
  i.appendHello(hello);
  Message m;
  ASSERT_EQ(decodeMessage(hello, m).status, DecodeStatus::Complete);
  m.context[0] = 7;
  Bytes reply, proof;
  r.onMessage(m, reply);
  deliver(reply, [&](const Message& x) { i.onMessage(x, proof); });
  EXPECT_EQ(i.state(), HandshakeState::Failed);
  EXPECT_EQ(i.failure(), Failure::Auth);
}

TEST(Handshake, WrongServiceAndOutOfOrderMessages) {
  {
    Initiator i("", Service::Transport, kCtxI);
    Responder r("", Service::Store, {});
    const Outcome o = converse(i, r);
    EXPECT_EQ(o.responder, HandshakeState::Failed);
    EXPECT_EQ(o.initiator, HandshakeState::Failed);
    EXPECT_NE(o.initiatorFailure, Failure::Auth);
  }
  {
    Responder r("secret", Service::Store, {});
    Message proof;
    proof.type = MessageType::Proof;
    Bytes out;
    EXPECT_EQ(r.onMessage(proof, out), HandshakeState::Failed);
    EXPECT_EQ(r.failure(), Failure::Protocol);
  }
  {
    Initiator i("secret", Service::Store, {});
    Message accept;
    accept.type = MessageType::Accept;
    accept.service = Service::Store;
    Bytes out;
    EXPECT_EQ(i.onMessage(accept, out), HandshakeState::Failed);  // Accept before any proof
    EXPECT_EQ(i.failure(), Failure::Protocol);
  }
}

TEST(Handshake, ResponderCanRefuseAVerifiedPeer) {
  Initiator i("secret", Service::Transport, kCtxI);
  Responder r("secret", Service::Transport, kCtxR);
  Bytes toR, toI, more;
  i.appendHello(toR);
  deliver(toR, [&](const Message& m) { r.onMessage(m, toI); });
  deliver(toI, [&](const Message& m) { i.onMessage(m, more); });
  toI.clear();
  deliver(more, [&](const Message& m) { r.onMessage(m, toI); });
  ASSERT_EQ(r.state(), HandshakeState::Verified);
  r.reject(RejectReason::Refused, "duplicate rank", toI);
  more.clear();
  deliver(toI, [&](const Message& m) { i.onMessage(m, more); });
  EXPECT_EQ(i.state(), HandshakeState::Failed);
  EXPECT_EQ(i.failure(), Failure::Refused);
  EXPECT_NE(i.error().find("duplicate rank"), std::string::npos) << i.error();
}

// ---------------------------------------------------------------------------------------------
// Whitelist

TEST(AddressFilter, ParsesAddressesAndNetworks) {
  EXPECT_TRUE(parseNetwork("10.0.0.1"));
  EXPECT_TRUE(parseNetwork("10.0.0.0/8"));
  EXPECT_TRUE(parseNetwork(" 192.168.1.0/24 "));
  EXPECT_TRUE(parseNetwork("::1"));
  EXPECT_TRUE(parseNetwork("fd00::/8"));
  EXPECT_TRUE(parseNetwork("0.0.0.0/0"));
  for (const char* bad : {"", "10.0.0.1/33", "::1/129", "10.0.0/24", "host.example", "10.0.0.1/",
                          "10.0.0.1/x", "fe80::1%eth0", "10.0.0.1/-1", "1.2.3.4.5"})
    EXPECT_FALSE(parseNetwork(bad)) << "'" << bad << "'";
}

TEST(AddressFilter, MatchesExactlyTheListedNetworks) {
  const AddressFilter f({"10.1.2.3", "192.168.0.0/16", "fd00:abcd::/32", "::1"});
  EXPECT_TRUE(f.active());
  EXPECT_TRUE(f.allows("10.1.2.3"));
  EXPECT_FALSE(f.allows("10.1.2.4"));
  EXPECT_TRUE(f.allows("192.168.200.7"));
  EXPECT_FALSE(f.allows("192.169.0.1"));
  EXPECT_TRUE(f.allows("fd00:abcd:1::5"));
  EXPECT_FALSE(f.allows("fd00:abce::5"));
  EXPECT_TRUE(f.allows("::1"));
  EXPECT_FALSE(f.allows("127.0.0.1")) << "loopback is not implied";
  EXPECT_TRUE(f.allows("::ffff:10.1.2.3")) << "an IPv4-mapped peer is its IPv4 address";
  EXPECT_FALSE(f.allows("garbage"));

  const AddressFilter odd({"10.0.0.128/25"});
  EXPECT_TRUE(odd.allows("10.0.0.200"));
  EXPECT_FALSE(odd.allows("10.0.0.127"));

  const AddressFilter everyone;
  EXPECT_FALSE(everyone.active());
  EXPECT_TRUE(everyone.allows("203.0.113.9"));
  EXPECT_THROW(AddressFilter({"not-an-address"}), Error);
}

TEST(AddressFilter, MatchesSocketAddresses) {
  const AddressFilter f({"127.0.0.1", "::1"});
  sockaddr_in v4{};
  v4.sin_family = AF_INET;
  ::inet_pton(AF_INET, "127.0.0.1", &v4.sin_addr);
  EXPECT_TRUE(f.allows(reinterpret_cast<sockaddr*>(&v4), sizeof v4));
  ::inet_pton(AF_INET, "127.0.0.2", &v4.sin_addr);
  EXPECT_FALSE(f.allows(reinterpret_cast<sockaddr*>(&v4), sizeof v4));
  sockaddr_in6 v6{};
  v6.sin6_family = AF_INET6;
  ::inet_pton(AF_INET6, "::ffff:127.0.0.1", &v6.sin6_addr);
  EXPECT_TRUE(f.allows(reinterpret_cast<sockaddr*>(&v6), sizeof v6));
  ::inet_pton(AF_INET6, "::2", &v6.sin6_addr);
  EXPECT_FALSE(f.allows(reinterpret_cast<sockaddr*>(&v6), sizeof v6));
  EXPECT_FALSE(f.allows(reinterpret_cast<sockaddr*>(&v4), 2)) << "a truncated address";
}

TEST(AddressFilter, WhitelistFileSyntax) {
  const auto entries = parseWhitelist(
      "# cluster hosts\n10.0.0.1\n\n  10.0.1.0/24   # rack 2\r\n::1\n#127.0.0.1\n", "hosts.txt");
  EXPECT_EQ(entries, (std::vector<std::string>{"10.0.0.1", "10.0.1.0/24", "::1"}));
  try {
    parseWhitelist("10.0.0.1\n10.0.0.300\n", "hosts.txt");
    ADD_FAILURE() << "a bad entry was accepted";
  } catch (const Error& e) {
    EXPECT_EQ(e.code(), ErrorCode::InvalidArgument);
    EXPECT_NE(e.detail().find("hosts.txt:2"), std::string::npos) << e.what();
  }
  EXPECT_THROW(parseWhitelist("# nobody\n\n", "empty.txt"), Error);
  EXPECT_THROW(readWhitelistFile("/nonexistent/braid-whitelist"), Error);
}

TEST(AddressFilter, OptionsFromEnvironment) {
  const auto path = std::filesystem::temp_directory_path() /
                    ("braid_auth_test_whitelist_" + std::to_string(::getpid()));
  {
    std::ofstream f(path);
    f << "10.0.0.0/8\n127.0.0.1\n";
  }
  ::setenv("BRAID_AUTH_KEY", "s3cret", 1);
  ::setenv("BRAID_WHITELIST", path.c_str(), 1);
  const Options o = Options::fromEnv();
  EXPECT_EQ(o.security.authKey, "s3cret");
  EXPECT_EQ(o.security.allowedPeers, (std::vector<std::string>{"10.0.0.0/8", "127.0.0.1"}));
  ::setenv("BRAID_WHITELIST", "/nonexistent/braid-whitelist", 1);
  try {
    Options::fromEnv();
    ADD_FAILURE() << "an unreadable whitelist was accepted";
  } catch (const Error& e) {
    EXPECT_NE(e.detail().find("BRAID_WHITELIST=/nonexistent/braid-whitelist"), std::string::npos)
        << e.what();
  }
  ::unsetenv("BRAID_AUTH_KEY");
  ::unsetenv("BRAID_WHITELIST");
  EXPECT_TRUE(Options::fromEnv().security.authKey.empty());
  std::filesystem::remove(path);
}

}  // namespace
}  // namespace braid::security
