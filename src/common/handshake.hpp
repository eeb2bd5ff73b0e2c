// The connection handshake of the store and the TCP transport: pure message encoding and two
// state machines, no sockets (handshake_io.hpp drives them over a socket), so it can be fuzzed
// and tested alone.
//
// Every message: a 12-byte header, then a body of at most kMaxBodyBytes.
//
//   header  u32 magic "BRAH" | u8 version | u8 type | u8 flags | u8 service | u32 body bytes
//   Hello   nonce[32] context          initiator -> responder (flags: Authenticated)
//   Reply   nonce[32] mac[32] context  responder -> initiator (flags: Authenticated)
//   Proof   mac[32]                    initiator -> responder
//   Accept  (empty)                    responder -> initiator
//   Reject  u8 reason, text            either way, then the connection closes
//
// All integers are little-endian; `context` is what the service binds into the handshake (the
// transport's rank and world size, nothing for the store), at most kMaxContextBytes.
//
// With a key K on both sides (mutual challenge-response, fresh nonces from both sides):
//
//   I -> R  Hello  {Ni, ctxI}
//   R -> I  Reply  {Nr, macR = HMAC(K, "braid-auth-v1 responder" | service | Ni | Nr | ctxI |
//   ctxR),
//                   ctxR}                                  I checks macR: R holds K
//   I -> R  Proof  {macI = HMAC(K, "braid-auth-v1 initiator" | service | Nr | Ni | ctxI | ctxR)}
//   R -> I  Accept                                         R checked macI: I holds K
//
// (contexts enter the MACs length-prefixed). A recorded transcript does not replay: the other
// side's nonce is new each time. The role label keeps one side's proof from being reflected as
// the other's. Without a key: Hello, then Reply (or Reject), nonces and MACs zero. A key on one
// side only fails on both sides as an authentication failure, with a message saying which
// side lacks it. Only the handshake is protected: the stream after it is neither encrypted
// nor integrity-checked (docs/security.md).
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>
#include <vector>

#include "common/crypto.hpp"

namespace braid::security {

inline constexpr std::uint32_t kHandshakeMagic = 0x48415242;  // "BRAH" on the wire
inline constexpr std::uint8_t kHandshakeVersion = 1;
inline constexpr std::size_t kHandshakeHeaderBytes = 12;
inline constexpr std::size_t kNonceBytes = 32;
inline constexpr std::size_t kMacBytes = crypto::kSha256Bytes;
inline constexpr std::size_t kMaxContextBytes = 256;
inline constexpr std::size_t kMaxReasonBytes = 256;
inline constexpr std::size_t kMaxBodyBytes = kNonceBytes + kMacBytes + kMaxContextBytes;
inline constexpr std::uint8_t kFlagAuthenticated = 1;

enum class Service : std::uint8_t { Store = 1, Transport = 2 };
enum class MessageType : std::uint8_t { Hello = 1, Reply = 2, Proof = 3, Accept = 4, Reject = 5 };
enum class RejectReason : std::uint8_t { Auth = 1, Refused = 2 };

using Nonce = std::array<std::uint8_t, kNonceBytes>;
using Mac = crypto::Digest;

const char* toString(Service s) noexcept;
const char* toString(MessageType t) noexcept;

struct Message {
  MessageType type = MessageType::Hello;
  std::uint8_t flags = 0;
  Service service = Service::Store;
  Nonce nonce{};                                ///< Hello, Reply
  Mac mac{};                                    ///< Reply, Proof
  std::vector<std::uint8_t> context;            ///< Hello, Reply (at most kMaxContextBytes)
  RejectReason reason = RejectReason::Refused;  ///< Reject
  std::string text;                             ///< Reject (at most kMaxReasonBytes)
};

/// True when `bytes` (at least 4 of them) open with the handshake magic: how an endpoint that
/// also speaks an older protocol tells a handshake from a request.
bool startsWithHandshakeMagic(std::span<const std::uint8_t> bytes) noexcept;

enum class DecodeStatus {
  Complete,    ///< one message decoded; frameBytes is its size
  Incomplete,  ///< more bytes needed; frameBytes is the message's size once the header is in
  Malformed,   ///< the bytes break the format; error says how
};

struct DecodeResult {
  DecodeStatus status = DecodeStatus::Incomplete;
  std::size_t frameBytes = 0;
  std::string error;
};

/// Decodes the message at the start of `bytes` (bytes past it are left alone). Every field is
/// checked: magic, version, type, service, the body size against its type, context and reason
/// lengths against their bounds.
DecodeResult decodeMessage(std::span<const std::uint8_t> bytes, Message& out);
/// Appends one message; a context or text over its bound is cut to it.
void appendMessage(const Message& m, std::vector<std::uint8_t>& out);

/// What an authenticating side proves: HMAC(key, role label | service | nonces | contexts).
Mac computeProof(std::string_view key, MessageType role, Service service,
                 const Nonce& initiatorNonce, const Nonce& responderNonce,
                 std::span<const std::uint8_t> initiatorContext,
                 std::span<const std::uint8_t> responderContext);

enum class HandshakeState {
  InProgress,  ///< waiting for the peer's next message
  Verified,    ///< (responder) the peer is authenticated; accept() or reject() it
  Done,        ///< the connection is established
  Failed,      ///< see failure() and error(); the connection must be closed
};

enum class Failure {
  None,
  Auth,      ///< keys differ, or only one side has one
  Refused,   ///< the responder turned the peer down for a reason of its own (rank, service)
  Protocol,  ///< not a braid handshake, or a message out of order
  Closed,    ///< (socket drivers) the connection broke or timed out
};

/// The side that connected.
class Initiator {
 public:
  /// `key` empty: no authentication. The nonce comes from getrandom unless given.
  Initiator(std::string key, Service service, std::vector<std::uint8_t> context);
  Initiator(std::string key, Service service, std::vector<std::uint8_t> context,
            const Nonce& nonce);

  /// The first message.
  void appendHello(std::vector<std::uint8_t>& out) const;
  /// Handles one message from the responder, appending what to send back to `out`.
  HandshakeState onMessage(const Message& m, std::vector<std::uint8_t>& out);

  HandshakeState state() const noexcept { return state_; }
  Failure failure() const noexcept { return failure_; }
  const std::string& error() const noexcept { return error_; }
  /// The responder's context (once Done).
  const std::vector<std::uint8_t>& peerContext() const noexcept { return peerContext_; }

 private:
  HandshakeState fail(Failure f, std::string why);

  enum class Stage { AwaitReply, AwaitAccept, Finished };
  std::string key_;
  Service service_;
  std::vector<std::uint8_t> context_;
  Nonce nonce_;
  Stage stage_ = Stage::AwaitReply;
  HandshakeState state_ = HandshakeState::InProgress;
  Failure failure_ = Failure::None;
  std::string error_;
  std::vector<std::uint8_t> peerContext_;
};

/// The side that accepted.
class Responder {
 public:
  Responder(std::string key, Service service, std::vector<std::uint8_t> context);
  Responder(std::string key, Service service, std::vector<std::uint8_t> context,
            const Nonce& nonce);

  /// Handles one message from the initiator, appending what to send back to `out`.
  HandshakeState onMessage(const Message& m, std::vector<std::uint8_t>& out);
  /// Once Verified: admits the peer (Done).
  void accept(std::vector<std::uint8_t>& out);
  /// Once Verified: turns the peer down (Failed, Refused).
  void reject(RejectReason reason, std::string text, std::vector<std::uint8_t>& out);

  HandshakeState state() const noexcept { return state_; }
  Failure failure() const noexcept { return failure_; }
  const std::string& error() const noexcept { return error_; }
  /// The initiator's context (once Verified).
  const std::vector<std::uint8_t>& peerContext() const noexcept { return peerContext_; }

 private:
  HandshakeState fail(Failure f, std::string why);
  HandshakeState refuse(Failure f, RejectReason reason, std::string toPeer, std::string why,
                        std::vector<std::uint8_t>& out);

  enum class Stage { AwaitHello, AwaitProof, AwaitDecision, Finished };
  std::string key_;
  Service service_;
  std::vector<std::uint8_t> context_;
  Nonce nonce_;
  Nonce peerNonce_{};
  Stage stage_ = Stage::AwaitHello;
  HandshakeState state_ = HandshakeState::InProgress;
  Failure failure_ = Failure::None;
  std::string error_;
  std::vector<std::uint8_t> peerContext_;
};

}  // namespace braid::security
