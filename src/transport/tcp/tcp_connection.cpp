#include "transport/tcp/tcp_connection.hpp"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <exception>

#include "common/little_endian.hpp"

namespace braid::transport::tcp {

namespace {

using State = Request::State;
using engine::isP2P;

constexpr std::size_t kHeaderBytes = kFrameHeaderBytes;
constexpr std::size_t kStagingBytes = 16 * 1024;
// Bytes moved per call before other peers get a turn (the transport's lock is held meanwhile).
constexpr std::size_t kIoBudget = 4 << 20;
// At most this much per sendmsg while the connection also receives (both directions at once).
// A sendmsg holds the socket's lock while it copies; the peer's segments (and the ACKs of our
// own) that arrive meanwhile wait in the socket's backlog until the call ends, so one long
// call stalls the other direction. Short calls, each followed by a read, keep both flowing
// (docs/benchmarks.md, "TCP both directions at once").
constexpr std::size_t kDuplexWriteBytes = 256 << 10;
constexpr int kMaxIov = 64;
// A held (early) P2P message grows by at most this much per read.
constexpr std::size_t kHeldGrowthBytes = 1 << 20;

void encodeHeader(std::uint8_t* out, std::uint64_t tag, std::uint64_t bytes, std::uint64_t lane) {
  storeLe64(out, tag);
  storeLe64(out + 8, bytes);
  storeLe64(out + 16, lane);
}

std::string lossReason(int err) {
  if (err == 0) return "connection closed by peer";
  if (err == ECONNRESET) return "connection reset by peer";
  if (err == EPIPE) return "connection closed by peer (broken pipe)";
  return errnoText(err);
}

}  // namespace

FrameHeader decodeFrameHeader(std::span<const std::uint8_t, kFrameHeaderBytes> in) noexcept {
  return FrameHeader{loadLe64(in.data()), loadLe64(in.data() + 8), loadLe64(in.data() + 16)};
}

void encodeFrameHeader(const FrameHeader& h, std::uint8_t* out) noexcept {
  encodeHeader(out, h.tag, h.bytes, h.lane);
}

std::uint64_t maxHeldFrameBytes() noexcept {
  static const std::uint64_t kBytes = [] {
    const long pages = ::sysconf(_SC_PHYS_PAGES);
    const long pageBytes = ::sysconf(_SC_PAGESIZE);
    if (pages <= 0 || pageBytes <= 0) return std::uint64_t{1} << 40;
    return static_cast<std::uint64_t>(pages) * static_cast<std::uint64_t>(pageBytes);
  }();
  return kBytes;
}

Connection::Connection(int selfRank, int peer, std::string description, Fd fd, int epollFd,
                       CompletionSink& sink)
    : selfRank_(selfRank),
      peer_(peer),
      fd_(std::move(fd)),
      epollFd_(epollFd),
      sink_(&sink),
      inbox_(selfRank, peer, std::move(description), sink) {
  if (!fd_) return;
  staging_.resize(kStagingBytes);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = static_cast<std::uint64_t>(peer);
  if (::epoll_ctl(epollFd_, EPOLL_CTL_ADD, fd_.get(), &ev) != 0)
    throw Error(ErrorCode::Internal, "rank " + std::to_string(selfRank) + ": epoll_ctl for " +
                                         inbox_.description() + ": " + errnoText(errno));
  registered_ = true;
  events_ = EPOLLIN;
}

void Connection::attach(Fd fd, std::string description) {
  inbox_.setDescription(std::move(description));
  if (error_ || !fd) return;
  fd_ = std::move(fd);
  staging_.resize(kStagingBytes);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = static_cast<std::uint64_t>(peer_);
  if (::epoll_ctl(epollFd_, EPOLL_CTL_ADD, fd_.get(), &ev) != 0) {
    fail(Error(ErrorCode::Internal, "rank " + std::to_string(selfRank_) + ": epoll_ctl for " +
                                        inbox_.description() + ": " + errnoText(errno)));
    return;
  }
  registered_ = true;
  events_ = EPOLLIN;
  if (!sends_.empty()) write();
  read();
}

Error Connection::lost(int err, const char* during, std::size_t bytes) const {
  std::string text = "rank " + std::to_string(selfRank_) + " lost its connection to " +
                     description() + ": " + lossReason(err);
  if (during != nullptr)
    text += std::string(" during ") + during + " of " + std::to_string(bytes) + " bytes";
  return Error(ErrorCode::PeerLost, text);
}

// ---- posting ----

void Connection::postSend(Request& req) {
  if (error_) {
    sink_->finish(req, State::Failed, true);
    return;
  }
  if (req.lane != 0 && peerGone_.count(req.lane) != 0) {  // nobody will read it
    sink_->finish(req, State::Failed, false);
    return;
  }
  const bool idle = sends_.empty();
  sends_.push(req);
  if (eof_) {  // the peer closed its socket: it will never read this
    fail(lost(0, "send", req.bytes));
    return;
  }
  if (idle) write();
}

void Connection::postRecv(Request& req) {
  if (error_) {
    sink_->finish(req, State::Failed, true);
    return;
  }
  std::optional<Error> mismatch;
  switch (inbox_.post(req, mismatch)) {
    case engine::Inbox::Posted::Mismatch:
      fail(*mismatch);
      sink_->finish(req, State::Failed, true);
      return;
    case engine::Inbox::Posted::Done:
    case engine::Inbox::Posted::Failed:
      return;
    case engine::Inbox::Posted::Receiving:
      read();
      return;
    case engine::Inbox::Posted::Queued:
      if (req.lane != 0 && peerGone_.count(req.lane) != 0) {  // nothing more comes on the lane
        inbox_.withdraw(req);
        sink_->finish(req, State::Failed, false);
        return;
      }
      break;
  }
  // A stalled frame is looked at again: it is this receive's, or now held aside for its own.
  if (stalled_) {
    stalled_ = false;
    updateInterest();
  }
  read();
}

bool Connection::failLane(std::uint64_t lane) {
  if (error_) return true;
  const Request* front = sends_.front();
  if (front != nullptr && front->lane == lane && front->progress > 0) return false;
  if (!inbox_.failLane(lane)) return false;
  sends_.removeIf([lane](const Request& r) { return r.lane == lane; },
                  [&](Request& r) { retire(r, State::Failed, false); });
  if (wantWrite_ && sends_.empty()) {
    wantWrite_ = false;
    updateInterest();
  }
  return true;
}

std::string Connection::stallReason(const Request& req) const {
  if (!fd_) return {};
  const std::string peer = "rank " + std::to_string(peer_);
  if (req.isSend) {
    const std::size_t sent = req.progress > kHeaderBytes ? req.progress - kHeaderBytes : 0;
    if (sends_.front() != &req) return "earlier sends to " + peer + " are not written yet";
    return std::to_string(sent) + " of " + std::to_string(req.bytes) + " bytes written; " + peer +
           " does not read (the socket buffer is full)";
  }
  if (inbox_.receivingRequest() == &req)
    return std::to_string(req.progress) + " of " + std::to_string(req.bytes) + " bytes arrived; " +
           peer + " sent no more";
  if (stalled_ && staged() >= kHeaderBytes) {
    const FrameHeader h = decodeFrameHeader(
        std::span<const std::uint8_t, kHeaderBytes>(staging_.data() + stageBegin_, kHeaderBytes));
    return "ahead of it from " + peer + " waits " + sink_->tagText(h.tag) + " (" +
           std::to_string(h.bytes) + " bytes), which no posted receive of this rank matches";
  }
  if (inbox_.receiving()) return "an earlier message from " + peer + " is still arriving";
  return "nothing for it has arrived from " + peer + inbox_.heldText(peer);
}

void Connection::sendLaneGone(std::uint64_t lane, bool aborted) {
  if (!fd_ || error_ || eof_) return;
  Request& r = control_.emplace_back();
  r.isSend = true;
  r.peer = peer_;
  r.tag = aborted ? kLaneAborted : kLaneDestroyed;
  r.lane = lane;
  r.bytes = 0;
  r.aux = kAuxControlFrame;
  r.state.store(State::Pending, std::memory_order_relaxed);
  const bool idle = sends_.empty();
  sends_.push(r);
  if (idle) write();
}

void Connection::retire(Request& req, State state, bool connectionError) {
  if ((req.aux & kAuxControlFrame) == 0) {
    sink_->finish(req, state, connectionError);
    return;
  }
  for (auto it = control_.begin(); it != control_.end(); ++it)
    if (&*it == &req) {
      control_.erase(it);
      return;
    }
}

void Connection::onControl(const FrameHeader& header) {
  if ((header.tag != kLaneDestroyed && header.tag != kLaneAborted) || header.lane == 0) {
    fail(Error(ErrorCode::Mismatch,
               "rank " + std::to_string(selfRank_) + " received an unknown control frame (kind " +
                   std::to_string(header.tag) + ", lane " + std::to_string(header.lane) +
                   ") from " + description() + ": a corrupt stream or another braid version"));
    return;
  }
  if (sink_->laneClosed(header.lane)) return;  // gone on this rank too
  const bool aborted = header.tag == kLaneAborted;
  peerGone_.emplace(  // the first reason stays (an abort, then the destruction)
      header.lane,
      Error(ErrorCode::PeerLost,
            "rank " + std::to_string(selfRank_) + ": " + description() + " left the communicator " +
                "on lane " + std::to_string(header.lane) + " of the shared connections (it was " +
                (aborted ? "aborted" : "destroyed") + " there) before this operation with it " +
                "completed; nothing more comes from it on that communicator"));
  // Nothing of the lane is arriving (a header is being read), so none is cut.
  inbox_.failLane(header.lane);
}

// ---- failure ----

void Connection::finishAll(bool connectionError) {
  inbox_.failAll(connectionError);
  sends_.drain([&](Request& r) { retire(r, State::Failed, connectionError); });
  stageBegin_ = stageEnd_ = 0;
  stalled_ = false;
  wantWrite_ = false;
}

void Connection::closeSocket() {
  if (!fd_) return;
  if (registered_) ::epoll_ctl(epollFd_, EPOLL_CTL_DEL, fd_.get(), nullptr);
  registered_ = false;
  // shutdown first so the peer sees the end of the stream right away.
  ::shutdown(fd_.get(), SHUT_RDWR);
  fd_.reset();
}

void Connection::fail(Error error) {
  if (error_) return;
  error_ = std::move(error);
  closeSocket();
  finishAll(true);
  sink_->connectionFailed(*error_);
}

void Connection::abandon() {
  closeSocket();
  finishAll(false);
}

// ---- reading ----

void Connection::updateInterest() {
  if (!registered_) return;
  const std::uint32_t want = (stalled_ ? 0u : static_cast<std::uint32_t>(EPOLLIN)) |
                             (wantWrite_ ? static_cast<std::uint32_t>(EPOLLOUT) : 0u);
  if (want == events_) return;
  epoll_event ev{};
  ev.events = want;
  ev.data.u64 = static_cast<std::uint64_t>(peer_);
  if (::epoll_ctl(epollFd_, EPOLL_CTL_MOD, fd_.get(), &ev) != 0) {
    fail(Error(ErrorCode::Internal, "rank " + std::to_string(selfRank_) + ": epoll_ctl for " +
                                        description() + ": " + errnoText(errno)));
    return;
  }
  events_ = want;
}

void Connection::onEof() {
  eof_ = true;
  // Level-triggered EPOLLIN would report the end of the stream forever; staged bytes stay usable.
  if (registered_) ::epoll_ctl(epollFd_, EPOLL_CTL_DEL, fd_.get(), nullptr);
  registered_ = false;
  if (!sends_.empty()) fail(lost(0, "send", sends_.front()->bytes));
}

// Matches the staged header against the posted receives. False when reading must stop.
bool Connection::matchHeader() {
  const FrameHeader header = decodeFrameHeader(
      std::span<const std::uint8_t, kHeaderBytes>(staging_.data() + stageBegin_, kHeaderBytes));
  if (header.bytes == kControlFrameBytes) {
    stageBegin_ += kHeaderBytes;
    onControl(header);
    return !error_;
  }
  const std::uint64_t tag = header.tag;
  const std::uint64_t bytes = header.bytes;
  std::optional<Error> mismatch;
  // A header announcing more than this host's memory is corrupt (or hostile).
  const std::uint64_t maxHeld = maxHeldFrameBytes();
  const auto arrival =
      bytes > maxHeld
          ? engine::Inbox::Arrival::TooLarge
          : inbox_.arrive(tag, static_cast<std::size_t>(bytes), static_cast<std::size_t>(maxHeld),
                          mismatch, header.lane, true, sink_->laneClosed(header.lane));
  switch (arrival) {
    case engine::Inbox::Arrival::Stall:
      stalled_ = true;
      updateInterest();
      return false;
    case engine::Inbox::Arrival::TooLarge:
      fail(Error(ErrorCode::Mismatch,
                 "rank " + std::to_string(selfRank_) + " received a frame of " +
                     std::to_string(bytes) + " bytes (" + sink_->tagText(tag) + ") from " +
                     description() + ": more than this host's memory, a corrupt stream"));
      return false;
    case engine::Inbox::Arrival::Mismatch:
      fail(*mismatch);
      return false;
    case engine::Inbox::Arrival::Done:
    case engine::Inbox::Arrival::Receiving:
      break;
  }
  stageBegin_ += kHeaderBytes;
  return true;
}

void Connection::read() {
  std::size_t budget = kIoBudget;
  bool drained = false;  // a recv returned less than asked: the socket is most likely empty
  while (fd_ && !error_) {
    if (inbox_.receiving()) {
      // The payload goes straight into the matched request, or into a held P2P message that
      // grows by what arrives.
      const std::size_t frameBytes = inbox_.rxBytes();
      const std::size_t want = inbox_.rxRemaining();
      if (staged() > 0) {
        const std::size_t got = std::min(want, staged());
        std::uint8_t* dst = inbox_.rxSpace(got);
        if (dst == nullptr) {
          fail(inbox_.cannotHold());
          return;
        }
        std::memcpy(dst, staging_.data() + stageBegin_, got);
        stageBegin_ += got;
        inbox_.rxCommit(got);
      } else {
        if (eof_) {
          fail(lost(0, "recv", frameBytes));
          return;
        }
        if (drained || budget == 0) return;
        std::size_t ask = std::min(want, budget);
        if (inbox_.receivingRequest() == nullptr) ask = std::min(ask, kHeldGrowthBytes);
        std::uint8_t* dst = inbox_.rxSpace(ask);
        if (dst == nullptr) {
          fail(inbox_.cannotHold());
          return;
        }
        const ssize_t n = ::recv(fd_.get(), dst, ask, MSG_DONTWAIT);
        const int err = errno;
        inbox_.rxCommit(static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
        if (n < 0) {
          if (err == EINTR) continue;
          if (err == EAGAIN || err == EWOULDBLOCK) return;
          fail(lost(err, "recv", frameBytes));
          return;
        }
        if (n == 0) {
          onEof();
          continue;
        }
        budget -= static_cast<std::size_t>(n);
        drained = static_cast<std::size_t>(n) < ask;
      }
      if (inbox_.rxRemaining() == 0) inbox_.rxComplete();
      continue;
    }
    if (staged() >= kHeaderBytes) {
      if (!matchHeader()) return;
      continue;
    }
    if (eof_) {
      if (inbox_.hasPosted()) fail(lost(0, "recv", inbox_.firstPosted()->bytes));
      return;
    }
    if (drained || budget == 0) return;
    if (stageBegin_ > 0) {  // keep the partial header, make room behind it
      std::memmove(staging_.data(), staging_.data() + stageBegin_, staged());
      stageEnd_ = staged();
      stageBegin_ = 0;
    }
    const std::size_t ask = staging_.size() - stageEnd_;
    const ssize_t n = ::recv(fd_.get(), staging_.data() + stageEnd_, ask, MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) return;
      const int err = errno;
      fail(inbox_.hasPosted() ? lost(err, "recv", inbox_.firstPosted()->bytes)
                              : lost(err, nullptr, 0));
      return;
    }
    if (n == 0) {
      onEof();
      continue;
    }
    stageEnd_ += static_cast<std::size_t>(n);
    budget -= std::min(budget, static_cast<std::size_t>(n));
    drained = static_cast<std::size_t>(n) < ask;
  }
}

// ---- writing ----

void Connection::write() {
  const bool duplex = inbox_.receiving() || inbox_.hasPosted();
  std::size_t budget = duplex ? kDuplexWriteBytes : kIoBudget;
  while (!sends_.empty() && fd_ && !error_) {
    if (budget == 0) {  // more to send, but let the other peers have a turn first
      wantWrite_ = true;
      updateInterest();
      return;
    }
    std::array<iovec, kMaxIov> iov;
    std::array<std::array<std::uint8_t, kHeaderBytes>, kMaxIov / 2> headers;
    std::size_t count = 0;
    std::size_t headerCount = 0;
    std::size_t total = 0;
    for (Request* r = sends_.front(); r != nullptr && count + 2 <= iov.size() && total < budget;
         r = r->next) {
      if (r->progress < kHeaderBytes) {
        std::uint8_t* h = headers[headerCount++].data();
        encodeHeader(h, r->tag, (r->aux & kAuxControlFrame) != 0 ? kControlFrameBytes : r->bytes,
                     r->lane);
        iov[count++] = {h + r->progress, kHeaderBytes - r->progress};
        total += kHeaderBytes - r->progress;
      }
      const std::size_t sent = r->progress > kHeaderBytes ? r->progress - kHeaderBytes : 0;
      if (r->bytes > sent) {
        const std::size_t len = std::min(r->bytes - sent, budget);
        iov[count++] = {r->data + sent, len};
        total += len;
      }
    }
    msghdr msg{};
    msg.msg_iov = iov.data();
    msg.msg_iovlen = count;
    const ssize_t n = ::sendmsg(fd_.get(), &msg, MSG_NOSIGNAL | MSG_DONTWAIT);
    if (n < 0) {
      if (errno == EINTR) continue;
      if (errno == EAGAIN || errno == EWOULDBLOCK) {
        wantWrite_ = true;
        updateInterest();
        return;
      }
      fail(lost(errno, "send", sends_.front()->bytes));
      return;
    }
    std::size_t left = static_cast<std::size_t>(n);
    budget -= std::min(budget, left);
    while (left > 0) {
      Request* r = sends_.front();
      const std::size_t take = std::min(left, kHeaderBytes + r->bytes - r->progress);
      r->progress += take;
      left -= take;
      if (r->progress == kHeaderBytes + r->bytes) retire(*sends_.pop(), State::Done, false);
    }
    if (static_cast<std::size_t>(n) < total) {  // the socket buffer is full
      wantWrite_ = true;
      updateInterest();
      return;
    }
  }
  if (wantWrite_ && sends_.empty()) {
    wantWrite_ = false;
    updateInterest();
  }
}

void Connection::handleEvents(std::uint32_t events) {
  if (!registered_ || error_) return;  // a stale event of this round
  if ((events & (EPOLLERR | EPOLLHUP)) != 0 && stalled_) {
    // Nothing can be read while stalled, and the hang-up would be reported again and again.
    int err = 0;
    socklen_t len = sizeof err;
    ::getsockopt(fd_.get(), SOL_SOCKET, SO_ERROR, &err, &len);
    fail(lost(err, nullptr, 0));
    return;
  }
  if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) != 0 && !sends_.empty()) write();
  if ((events & (EPOLLIN | EPOLLERR | EPOLLHUP)) != 0) read();
}

}  // namespace braid::transport::tcp
