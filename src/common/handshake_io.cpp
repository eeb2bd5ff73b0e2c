#include "common/handshake_io.hpp"

#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <cerrno>
#include <cstring>

#include "common/fd.hpp"

namespace braid::security {

namespace {

int pollMs(HandshakeClock::time_point deadline) {
  const auto left =
      std::chrono::ceil<std::chrono::milliseconds>(deadline - HandshakeClock::now()).count();
  return static_cast<int>(std::clamp<std::int64_t>(left, 0, 1000));
}

// Moves `n` bytes with one send or recv per call of `io`, polling for `events` in between.
// Empty on success, else why not.
template <typename Io>
std::string transfer(int fd, std::size_t n, short events, HandshakeClock::time_point deadline,
                     Io io) {
  std::size_t done = 0;
  while (done < n) {
    const ssize_t got = io(done);
    if (got > 0) {
      done += static_cast<std::size_t>(got);
      continue;
    }
    if (got == 0) return "the peer closed the connection during the handshake";
    if (errno == EINTR) continue;
    if (errno != EAGAIN && errno != EWOULDBLOCK) return errnoText(errno) + " during the handshake";
    if (HandshakeClock::now() >= deadline) return "no handshake answer before the deadline";
    pollfd p{fd, events, 0};
    ::poll(&p, 1, pollMs(deadline));
  }
  return {};
}

std::string sendAll(int fd, const std::vector<std::uint8_t>& bytes,
                    HandshakeClock::time_point deadline) {
  return transfer(fd, bytes.size(), POLLOUT, deadline, [&](std::size_t done) {
    return ::send(fd, bytes.data() + done, bytes.size() - done, MSG_NOSIGNAL | MSG_DONTWAIT);
  });
}

std::string recvInto(int fd, std::vector<std::uint8_t>& buf, std::size_t from,
                     HandshakeClock::time_point deadline) {
  return transfer(fd, buf.size() - from, POLLIN, deadline, [&](std::size_t done) {
    return ::recv(fd, buf.data() + from + done, buf.size() - from - done, MSG_DONTWAIT);
  });
}

}  // namespace

InitiatorOutcome runInitiator(int fd, Initiator& initiator, HandshakeClock::time_point deadline) {
  InitiatorOutcome outcome;
  auto closed = [&](std::string why) {
    outcome.failure = Failure::Closed;
    outcome.error = std::move(why);
    return outcome;
  };
  std::vector<std::uint8_t> out;
  initiator.appendHello(out);
  for (;;) {
    if (!out.empty()) {
      if (auto e = sendAll(fd, out, deadline); !e.empty()) return closed(e);
      out.clear();
    }
    if (initiator.state() != HandshakeState::InProgress) break;
    // Header first, then exactly the body it announces: nothing past the message is read.
    std::vector<std::uint8_t> in(kHandshakeHeaderBytes);
    if (auto e = recvInto(fd, in, 0, deadline); !e.empty()) return closed(e);
    Message m;
    DecodeResult r = decodeMessage(in, m);
    if (r.status == DecodeStatus::Incomplete && r.frameBytes > in.size()) {
      in.resize(r.frameBytes);
      if (auto e = recvInto(fd, in, kHandshakeHeaderBytes, deadline); !e.empty()) return closed(e);
      r = decodeMessage(in, m);
    }
    if (r.status != DecodeStatus::Complete) {
      outcome.failure = Failure::Protocol;
      outcome.error = "not a braid endpoint (" + r.error + ")";
      return outcome;
    }
    initiator.onMessage(m, out);
  }
  if (initiator.state() == HandshakeState::Done) {
    outcome.ok = true;
    outcome.peerContext = initiator.peerContext();
  } else {
    outcome.failure = initiator.failure();
    outcome.error = initiator.error();
  }
  return outcome;
}

ResponderSession::ResponderSession(int fd, Responder responder, HandshakeClock::time_point deadline)
    : fd_(fd), responder_(std::move(responder)), deadline_(deadline) {}

ResponderSession::Progress ResponderSession::fail(Failure f, std::string why) {
  failure_ = f;
  error_ = std::move(why);
  return Progress::Failed;
}

bool ResponderSession::sendNow(const std::vector<std::uint8_t>& bytes) {
  // Handshake messages are a few hundred bytes and the socket is new: its buffer takes them
  // at once unless the peer is misbehaving, which is reason enough to drop it.
  std::size_t sent = 0;
  while (sent < bytes.size()) {
    const ssize_t n =
        ::send(fd_, bytes.data() + sent, bytes.size() - sent, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n > 0) {
      sent += static_cast<std::size_t>(n);
      continue;
    }
    if (n < 0 && errno == EINTR) continue;
    return false;
  }
  return true;
}

ResponderSession::Progress ResponderSession::onReadable() {
  for (;;) {
    // Read the header, then exactly the rest of the message it announces.
    std::size_t want = kHandshakeHeaderBytes;
    if (in_.size() >= kHandshakeHeaderBytes) {
      Message m;
      const DecodeResult r = decodeMessage(in_, m);
      if (r.status == DecodeStatus::Malformed) return fail(Failure::Protocol, r.error);
      if (r.status == DecodeStatus::Complete) {
        std::vector<std::uint8_t> out;
        const HandshakeState s = responder_.onMessage(m, out);
        in_.clear();
        if (!out.empty() && !sendNow(out) && s != HandshakeState::Failed)
          return fail(Failure::Closed, "the peer does not take the handshake reply");
        if (s == HandshakeState::Failed) return fail(responder_.failure(), responder_.error());
        if (s == HandshakeState::Verified) return Progress::Verified;
        continue;
      }
      want = r.frameBytes;
    }
    const std::size_t have = in_.size();
    in_.resize(want);
    const ssize_t n = ::recv(fd_, in_.data() + have, want - have, MSG_DONTWAIT);
    const int err = errno;
    in_.resize(have + static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
    if (n == 0) return fail(Failure::Closed, "closed the connection during the handshake");
    if (n < 0) {
      if (err == EINTR) continue;
      if (err == EAGAIN || err == EWOULDBLOCK) return Progress::Waiting;
      return fail(Failure::Closed, errnoText(err) + " during the handshake");
    }
    sawBytes_ = true;
    if (!checkedMagic_ && in_.size() >= 4) {
      checkedMagic_ = true;
      if (!startsWithHandshakeMagic(in_)) return Progress::NotHandshake;
    }
  }
}

bool ResponderSession::accept() {
  std::vector<std::uint8_t> out;
  responder_.accept(out);
  return sendNow(out);
}

void ResponderSession::reject(RejectReason reason, std::string text) {
  std::vector<std::uint8_t> out;
  responder_.reject(reason, std::move(text), out);
  sendNow(out);
}

}  // namespace braid::security
