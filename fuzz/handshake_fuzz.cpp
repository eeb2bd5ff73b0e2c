// libFuzzer target: the connection handshake (common/handshake.hpp) and the transport's rank
// context, as an accepting endpoint meets them from a stranger: the message decoder, the
// responder and initiator state machines fed whatever decodes, and the non-blocking responder
// session reading the bytes from a real socket in whatever pieces they come.
#include <sys/socket.h>
#include <unistd.h>

#include <cstdint>
#include <cstdlib>
#include <span>
#include <vector>

#include "common/handshake.hpp"
#include "common/handshake_io.hpp"
#include "transport/tcp/tcp_bootstrap.hpp"

namespace sec = braid::security;

namespace {

void check(bool ok) {
  if (!ok) std::abort();
}

// Fixed nonces, so that seeds made by make_seeds.cpp with the same ones reach the verified path.
sec::Nonce nonce(std::uint8_t fill) {
  sec::Nonce n;
  n.fill(fill);
  return n;
}

void roundTrip(const sec::Message& m) {
  std::vector<std::uint8_t> again;
  sec::appendMessage(m, again);
  sec::Message back;
  const auto r = sec::decodeMessage(again, back);
  check(r.status == sec::DecodeStatus::Complete && r.frameBytes == again.size());
  check(back.type == m.type && back.flags == m.flags && back.service == m.service);
}

void stateMachines(std::span<const std::uint8_t> bytes) {
  sec::Responder responder("fuzz-key", sec::Service::Transport,
                           braid::transport::tcp::encodeRankContext(0, 4), nonce(0x22));
  sec::Initiator initiator("fuzz-key", sec::Service::Transport,
                           braid::transport::tcp::encodeRankContext(1, 4), nonce(0x11));
  sec::Responder open("", sec::Service::Store, {}, nonce(0));
  std::size_t at = 0;
  while (at < bytes.size()) {
    sec::Message m;
    const auto r = sec::decodeMessage(bytes.subspan(at), m);
    if (r.status != sec::DecodeStatus::Complete) {
      check(r.status == sec::DecodeStatus::Incomplete || !r.error.empty());
      check(r.frameBytes <= sec::kHandshakeHeaderBytes + sec::kMaxBodyBytes);
      return;
    }
    check(r.frameBytes <= bytes.size() - at);
    check(m.context.size() <= sec::kMaxContextBytes && m.text.size() <= sec::kMaxReasonBytes);
    roundTrip(m);
    std::vector<std::uint8_t> out;
    if (responder.onMessage(m, out) == sec::HandshakeState::Verified) {
      const auto ctx = braid::transport::tcp::decodeRankContext(responder.peerContext());
      if (ctx) check(ctx->rank >= 0 && ctx->rank < ctx->size);
      responder.accept(out);
      check(responder.state() == sec::HandshakeState::Done);
    }
    initiator.onMessage(m, out);
    if (open.onMessage(m, out) == sec::HandshakeState::Verified) open.accept(out);
    at += r.frameBytes;
  }
}

// The bytes through a socket to a ResponderSession, as an acceptor reads them.
void session(std::span<const std::uint8_t> bytes) {
  int fds[2];
  if (::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds) != 0) return;
  const auto deadline = sec::HandshakeClock::now() + std::chrono::seconds(10);
  sec::ResponderSession s(
      fds[0],
      sec::Responder("fuzz-key", sec::Service::Transport,
                     braid::transport::tcp::encodeRankContext(0, 4), nonce(0x22)),
      deadline);
  // Deliver in two pieces, so a message split across reads is covered too.
  const std::size_t half = bytes.empty() ? 0 : bytes[0] % (bytes.size() + 1);
  using Progress = sec::ResponderSession::Progress;
  Progress p = Progress::Waiting;
  for (std::span<const std::uint8_t> piece : {bytes.first(half), bytes.subspan(half)}) {
    if (!piece.empty() && ::send(fds[1], piece.data(), piece.size(), MSG_NOSIGNAL) < 0) break;
    if (piece.data() == bytes.subspan(half).data()) ::shutdown(fds[1], SHUT_WR);
    p = s.onReadable();
    if (p != Progress::Waiting) break;
  }
  if (p == Progress::Verified) s.accept();
  if (p == Progress::NotHandshake) check(s.takeBuffered().size() >= 4);
  ::close(fds[0]);
  ::close(fds[1]);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::span<const std::uint8_t> bytes(data, size);
  stateMachines(bytes);
  session(bytes);
  if (size == braid::transport::tcp::kRankContextBytes)
    braid::transport::tcp::decodeRankContext(bytes);
  return 0;
}
