#include "common/handshake.hpp"

#include <algorithm>
#include <cstring>

namespace braid::security {

namespace {

constexpr std::string_view kResponderLabel = "braid-auth-v1 responder";
constexpr std::string_view kInitiatorLabel = "braid-auth-v1 initiator";

void putU32(std::vector<std::uint8_t>& out, std::uint32_t v) {
  for (int i = 0; i < 4; ++i) out.push_back(static_cast<std::uint8_t>(v >> (8 * i)));
}

std::uint32_t loadU32(const std::uint8_t* p) {
  std::uint32_t v = 0;
  for (int i = 0; i < 4; ++i) v |= static_cast<std::uint32_t>(p[i]) << (8 * i);
  return v;
}

DecodeResult malformed(std::string why) {
  DecodeResult r;
  r.status = DecodeStatus::Malformed;
  r.error = std::move(why);
  return r;
}

Nonce freshNonce() {
  Nonce n;
  crypto::randomBytes(n);
  return n;
}

// A context is at most kMaxContextBytes; longer ones are a caller's bug, cut rather than sent.
std::vector<std::uint8_t> bounded(std::vector<std::uint8_t> context) {
  if (context.size() > kMaxContextBytes) context.resize(kMaxContextBytes);
  return context;
}

}  // namespace

const char* toString(Service s) noexcept {
  switch (s) {
    case Service::Store:
      return "store";
    case Service::Transport:
      return "transport";
  }
  return "unknown service";
}

const char* toString(MessageType t) noexcept {
  switch (t) {
    case MessageType::Hello:
      return "Hello";
    case MessageType::Reply:
      return "Reply";
    case MessageType::Proof:
      return "Proof";
    case MessageType::Accept:
      return "Accept";
    case MessageType::Reject:
      return "Reject";
  }
  return "unknown message";
}

bool startsWithHandshakeMagic(std::span<const std::uint8_t> bytes) noexcept {
  return bytes.size() >= 4 && loadU32(bytes.data()) == kHandshakeMagic;
}

DecodeResult decodeMessage(std::span<const std::uint8_t> bytes, Message& out) {
  DecodeResult r;
  if (bytes.size() < kHandshakeHeaderBytes) return r;
  const std::uint8_t* h = bytes.data();
  if (loadU32(h) != kHandshakeMagic) return malformed("not a braid handshake");
  if (h[4] != kHandshakeVersion)
    return malformed("handshake version " + std::to_string(h[4]) + ", this build speaks " +
                     std::to_string(kHandshakeVersion));
  const std::uint8_t type = h[5];
  if (type < static_cast<std::uint8_t>(MessageType::Hello) ||
      type > static_cast<std::uint8_t>(MessageType::Reject))
    return malformed("unknown handshake message type " + std::to_string(type));
  const std::uint8_t flags = h[6];
  if ((flags & ~kFlagAuthenticated) != 0)
    return malformed("unknown handshake flags " + std::to_string(flags));
  const std::uint8_t service = h[7];
  if (service != static_cast<std::uint8_t>(Service::Store) &&
      service != static_cast<std::uint8_t>(Service::Transport))
    return malformed("unknown service " + std::to_string(service));
  const std::uint32_t body = loadU32(h + 8);
  if (body > kMaxBodyBytes)
    return malformed("handshake message of " + std::to_string(body) + " bytes exceeds " +
                     std::to_string(kMaxBodyBytes));
  r.frameBytes = kHandshakeHeaderBytes + body;
  if (bytes.size() < r.frameBytes) return r;

  out = Message{};
  out.type = static_cast<MessageType>(type);
  out.flags = flags;
  out.service = static_cast<Service>(service);
  const std::span<const std::uint8_t> b = bytes.subspan(kHandshakeHeaderBytes, body);
  auto context = [&](std::size_t at) -> bool {
    if (b.size() - at > kMaxContextBytes) return false;
    out.context.assign(b.begin() + static_cast<std::ptrdiff_t>(at), b.end());
    return true;
  };
  switch (out.type) {
    case MessageType::Hello:
      if (b.size() < kNonceBytes) return malformed("truncated Hello");
      std::memcpy(out.nonce.data(), b.data(), kNonceBytes);
      if (!context(kNonceBytes)) return malformed("Hello context exceeds its bound");
      break;
    case MessageType::Reply:
      if (b.size() < kNonceBytes + kMacBytes) return malformed("truncated Reply");
      std::memcpy(out.nonce.data(), b.data(), kNonceBytes);
      std::memcpy(out.mac.data(), b.data() + kNonceBytes, kMacBytes);
      if (!context(kNonceBytes + kMacBytes)) return malformed("Reply context exceeds its bound");
      break;
    case MessageType::Proof:
      if (b.size() != kMacBytes) return malformed("a Proof must be exactly one MAC");
      std::memcpy(out.mac.data(), b.data(), kMacBytes);
      break;
    case MessageType::Accept:
      if (!b.empty()) return malformed("an Accept has no body");
      break;
    case MessageType::Reject:
      if (b.empty()) return malformed("truncated Reject");
      if (b[0] != static_cast<std::uint8_t>(RejectReason::Auth) &&
          b[0] != static_cast<std::uint8_t>(RejectReason::Refused))
        return malformed("unknown Reject reason " + std::to_string(b[0]));
      out.reason = static_cast<RejectReason>(b[0]);
      if (b.size() - 1 > kMaxReasonBytes) return malformed("Reject text exceeds its bound");
      out.text.assign(reinterpret_cast<const char*>(b.data() + 1), b.size() - 1);
      break;
  }
  r.status = DecodeStatus::Complete;
  return r;
}

void appendMessage(const Message& m, std::vector<std::uint8_t>& out) {
  std::vector<std::uint8_t> body;
  const std::size_t contextBytes = std::min(m.context.size(), kMaxContextBytes);
  switch (m.type) {
    case MessageType::Hello:
      body.insert(body.end(), m.nonce.begin(), m.nonce.end());
      body.insert(body.end(), m.context.begin(), m.context.begin() + contextBytes);
      break;
    case MessageType::Reply:
      body.insert(body.end(), m.nonce.begin(), m.nonce.end());
      body.insert(body.end(), m.mac.begin(), m.mac.end());
      body.insert(body.end(), m.context.begin(), m.context.begin() + contextBytes);
      break;
    case MessageType::Proof:
      body.insert(body.end(), m.mac.begin(), m.mac.end());
      break;
    case MessageType::Accept:
      break;
    case MessageType::Reject: {
      body.push_back(static_cast<std::uint8_t>(m.reason));
      const std::size_t n = std::min(m.text.size(), kMaxReasonBytes);
      body.insert(body.end(), m.text.begin(), m.text.begin() + static_cast<std::ptrdiff_t>(n));
      break;
    }
  }
  putU32(out, kHandshakeMagic);
  out.push_back(kHandshakeVersion);
  out.push_back(static_cast<std::uint8_t>(m.type));
  out.push_back(m.flags & kFlagAuthenticated);
  out.push_back(static_cast<std::uint8_t>(m.service));
  putU32(out, static_cast<std::uint32_t>(body.size()));
  out.insert(out.end(), body.begin(), body.end());
}

Mac computeProof(std::string_view key, MessageType role, Service service,
                 const Nonce& initiatorNonce, const Nonce& responderNonce,
                 std::span<const std::uint8_t> initiatorContext,
                 std::span<const std::uint8_t> responderContext) {
  crypto::HmacSha256 mac(key);
  std::vector<std::uint8_t> lengths;
  // Each side proves over "the other's nonce, then its own" (the responder answers Reply, the
  // initiator answers Proof); the label keeps the two roles' MACs apart.
  const bool responder = role == MessageType::Reply;
  mac.update(responder ? kResponderLabel : kInitiatorLabel);
  const std::uint8_t fixed[2] = {0, static_cast<std::uint8_t>(service)};
  mac.update(std::span<const std::uint8_t>(fixed, 2));
  mac.update(responder ? initiatorNonce : responderNonce);
  mac.update(responder ? responderNonce : initiatorNonce);
  putU32(lengths, static_cast<std::uint32_t>(initiatorContext.size()));
  mac.update(lengths);
  mac.update(initiatorContext);
  lengths.clear();
  putU32(lengths, static_cast<std::uint32_t>(responderContext.size()));
  mac.update(lengths);
  mac.update(responderContext);
  return mac.finish();
}

// ---- initiator ----

Initiator::Initiator(std::string key, Service service, std::vector<std::uint8_t> context)
    : Initiator(std::move(key), service, std::move(context), freshNonce()) {}

Initiator::Initiator(std::string key, Service service, std::vector<std::uint8_t> context,
                     const Nonce& nonce)
    : key_(std::move(key)),
      service_(service),
      context_(bounded(std::move(context))),
      nonce_(nonce) {
  if (key_.empty()) nonce_.fill(0);
}

void Initiator::appendHello(std::vector<std::uint8_t>& out) const {
  Message m;
  m.type = MessageType::Hello;
  m.flags = key_.empty() ? 0 : kFlagAuthenticated;
  m.service = service_;
  m.nonce = nonce_;
  m.context = context_;
  appendMessage(m, out);
}

HandshakeState Initiator::fail(Failure f, std::string why) {
  stage_ = Stage::Finished;
  state_ = HandshakeState::Failed;
  failure_ = f;
  error_ = std::move(why);
  return state_;
}

HandshakeState Initiator::onMessage(const Message& m, std::vector<std::uint8_t>& out) {
  if (stage_ == Stage::Finished) return state_;
  if (m.type == MessageType::Reject)
    return fail(m.reason == RejectReason::Auth ? Failure::Auth : Failure::Refused,
                "the peer refused the connection: " + m.text);
  if (m.service != service_)
    return fail(Failure::Protocol, std::string("the peer is a braid ") + toString(m.service) +
                                       " endpoint, not a " + toString(service_) + " endpoint");
  if (stage_ == Stage::AwaitAccept) {
    if (m.type != MessageType::Accept)
      return fail(Failure::Protocol,
                  std::string("expected Accept, the peer sent ") + toString(m.type));
    stage_ = Stage::Finished;
    return state_ = HandshakeState::Done;
  }
  if (m.type != MessageType::Reply)
    return fail(Failure::Protocol,
                std::string("expected Reply, the peer sent ") + toString(m.type));
  const bool peerAuthenticates = (m.flags & kFlagAuthenticated) != 0;
  if (key_.empty()) {
    if (peerAuthenticates)
      return fail(Failure::Auth,
                  "the peer requires authentication and this process has no BRAID_AUTH_KEY");
    peerContext_ = m.context;
    stage_ = Stage::Finished;
    return state_ = HandshakeState::Done;
  }
  if (!peerAuthenticates)
    return fail(Failure::Auth,
                "the peer does not authenticate (it has no BRAID_AUTH_KEY) but this process has "
                "one");
  const Mac expected =
      computeProof(key_, MessageType::Reply, service_, nonce_, m.nonce, context_, m.context);
  if (!crypto::equalConstantTime(expected, m.mac)) {
    // Tell the responder why this side leaves, so its log says more than "closed".
    Message reject;
    reject.type = MessageType::Reject;
    reject.service = service_;
    reject.reason = RejectReason::Auth;
    reject.text = "the responder's proof does not match the initiator's BRAID_AUTH_KEY";
    appendMessage(reject, out);
    return fail(Failure::Auth,
                "the peer's proof does not match this process's BRAID_AUTH_KEY (the keys differ)");
  }
  peerContext_ = m.context;
  Message proof;
  proof.type = MessageType::Proof;
  proof.flags = kFlagAuthenticated;
  proof.service = service_;
  proof.mac =
      computeProof(key_, MessageType::Proof, service_, nonce_, m.nonce, context_, m.context);
  appendMessage(proof, out);
  stage_ = Stage::AwaitAccept;
  return state_;
}

// ---- responder ----

Responder::Responder(std::string key, Service service, std::vector<std::uint8_t> context)
    : Responder(std::move(key), service, std::move(context), freshNonce()) {}

Responder::Responder(std::string key, Service service, std::vector<std::uint8_t> context,
                     const Nonce& nonce)
    : key_(std::move(key)),
      service_(service),
      context_(bounded(std::move(context))),
      nonce_(nonce) {
  if (key_.empty()) nonce_.fill(0);
}

HandshakeState Responder::fail(Failure f, std::string why) {
  stage_ = Stage::Finished;
  state_ = HandshakeState::Failed;
  failure_ = f;
  error_ = std::move(why);
  return state_;
}

HandshakeState Responder::refuse(Failure f, RejectReason reason, std::string toPeer,
                                 std::string why, std::vector<std::uint8_t>& out) {
  Message reject;
  reject.type = MessageType::Reject;
  reject.service = service_;
  reject.reason = reason;
  reject.text = std::move(toPeer);
  appendMessage(reject, out);
  return fail(f, std::move(why));
}

HandshakeState Responder::onMessage(const Message& m, std::vector<std::uint8_t>& out) {
  if (stage_ == Stage::Finished || stage_ == Stage::AwaitDecision) return state_;
  if (m.type == MessageType::Reject)
    return fail(m.reason == RejectReason::Auth ? Failure::Auth : Failure::Refused,
                "the peer refused: " + m.text);
  if (stage_ == Stage::AwaitProof) {
    if (m.type != MessageType::Proof)
      return fail(Failure::Protocol, std::string("expected Proof, got ") + toString(m.type));
    const Mac expected = computeProof(key_, MessageType::Proof, service_, peerNonce_, nonce_,
                                      peerContext_, context_);
    if (m.service != service_ || !crypto::equalConstantTime(expected, m.mac))
      return refuse(Failure::Auth, RejectReason::Auth, "authentication failed",
                    "wrong proof: the peer does not hold this job's BRAID_AUTH_KEY", out);
    stage_ = Stage::AwaitDecision;
    return state_ = HandshakeState::Verified;
  }
  if (m.type != MessageType::Hello)
    return fail(Failure::Protocol, std::string("expected Hello, got ") + toString(m.type));
  if (m.service != service_)
    return refuse(Failure::Protocol, RejectReason::Refused,
                  std::string("this is a braid ") + toString(service_) + " endpoint",
                  std::string("a ") + toString(m.service) + " client reached this " +
                      toString(service_) + " endpoint",
                  out);
  const bool peerAuthenticates = (m.flags & kFlagAuthenticated) != 0;
  if (!key_.empty() && !peerAuthenticates)
    return refuse(Failure::Auth, RejectReason::Auth,
                  "authentication required: this job sets BRAID_AUTH_KEY",
                  "the peer has no BRAID_AUTH_KEY", out);
  if (key_.empty() && peerAuthenticates)
    return refuse(Failure::Auth, RejectReason::Auth,
                  "this endpoint has no BRAID_AUTH_KEY: set the same key on every rank",
                  "the peer uses BRAID_AUTH_KEY and this endpoint has none", out);
  peerNonce_ = m.nonce;
  peerContext_ = m.context;
  if (key_.empty()) {
    stage_ = Stage::AwaitDecision;
    return state_ = HandshakeState::Verified;
  }
  Message reply;
  reply.type = MessageType::Reply;
  reply.flags = kFlagAuthenticated;
  reply.service = service_;
  reply.nonce = nonce_;
  reply.mac =
      computeProof(key_, MessageType::Reply, service_, peerNonce_, nonce_, peerContext_, context_);
  reply.context = context_;
  appendMessage(reply, out);
  stage_ = Stage::AwaitProof;
  return state_;
}

void Responder::accept(std::vector<std::uint8_t>& out) {
  if (stage_ != Stage::AwaitDecision) return;
  Message m;
  m.service = service_;
  if (key_.empty()) {
    m.type = MessageType::Reply;  // without a key the Reply is the acceptance
    m.context = context_;
  } else {
    m.type = MessageType::Accept;
    m.flags = kFlagAuthenticated;
  }
  appendMessage(m, out);
  stage_ = Stage::Finished;
  state_ = HandshakeState::Done;
}

void Responder::reject(RejectReason reason, std::string text, std::vector<std::uint8_t>& out) {
  if (stage_ != Stage::AwaitDecision) return;
  std::string why = "refused: " + text;
  refuse(Failure::Refused, reason, std::move(text), std::move(why), out);
}

}  // namespace braid::security
