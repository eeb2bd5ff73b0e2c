#include "transport/tcp/tcp_connection.hpp"

#include <sys/epoll.h>
#include <sys/socket.h>
#include <unistd.h>

#include <algorithm>
#include <array>
#include <bit>
#include <cerrno>
#include <cstring>
#include <exception>

namespace braid::transport::tcp {

namespace {

using State = Request::State;

constexpr std::size_t kHeaderBytes = kFrameHeaderBytes;
constexpr std::size_t kStagingBytes = 16 * 1024;
// Bytes moved per call before other peers get a turn (the transport's lock is held meanwhile).
constexpr std::size_t kIoBudget = 4 << 20;
constexpr int kMaxIov = 64;
// A held (early) P2P message grows by at most this much per read.
constexpr std::size_t kHeldGrowthBytes = 1 << 20;

void encodeHeader(std::uint8_t* out, std::uint64_t tag, std::uint64_t bytes) {
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(out, &tag, 8);
    std::memcpy(out + 8, &bytes, 8);
  } else {
    for (int i = 0; i < 8; ++i) {
      out[i] = static_cast<std::uint8_t>(tag >> (8 * i));
      out[8 + i] = static_cast<std::uint8_t>(bytes >> (8 * i));
    }
  }
}

std::uint64_t decodeU64(const std::uint8_t* in) {
  std::uint64_t v = 0;
  if constexpr (std::endian::native == std::endian::little) {
    std::memcpy(&v, in, 8);
  } else {
    for (int i = 0; i < 8; ++i) v |= static_cast<std::uint64_t>(in[i]) << (8 * i);
  }
  return v;
}

bool isP2P(std::uint64_t tag) {
  return (tag & kP2PTagBit) != 0;
}

std::string lossReason(int err) {
  if (err == 0) return "connection closed by peer";
  if (err == ECONNRESET) return "connection reset by peer";
  if (err == EPIPE) return "connection closed by peer (broken pipe)";
  return errnoText(err);
}

void append(Request*& head, Request*& tail, Request& req) {
  req.next = nullptr;
  if (tail != nullptr)
    tail->next = &req;
  else
    head = &req;
  tail = &req;
}

}  // namespace

FrameHeader decodeFrameHeader(std::span<const std::uint8_t, kFrameHeaderBytes> in) noexcept {
  return FrameHeader{decodeU64(in.data()), decodeU64(in.data() + 8)};
}

void encodeFrameHeader(const FrameHeader& h, std::uint8_t* out) noexcept {
  encodeHeader(out, h.tag, h.bytes);
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
      description_(std::move(description)),
      fd_(std::move(fd)),
      epollFd_(epollFd),
      sink_(&sink) {
  if (!fd_) return;
  staging_.resize(kStagingBytes);
  epoll_event ev{};
  ev.events = EPOLLIN;
  ev.data.u64 = static_cast<std::uint64_t>(peer);
  if (::epoll_ctl(epollFd_, EPOLL_CTL_ADD, fd_.get(), &ev) != 0)
    throw Error(ErrorCode::Internal, "rank " + std::to_string(selfRank) + ": epoll_ctl for " +
                                         description_ + ": " + errnoText(errno));
  registered_ = true;
  events_ = EPOLLIN;
}

Error Connection::lost(int err, const char* during, std::size_t bytes) const {
  std::string text = "rank " + std::to_string(selfRank_) + " lost its connection to " +
                     description_ + ": " + lossReason(err);
  if (during != nullptr)
    text += std::string(" during ") + during + " of " + std::to_string(bytes) + " bytes";
  return Error(ErrorCode::PeerLost, text);
}

Error Connection::mismatch(const Request& expected, std::uint64_t tag, std::size_t bytes) const {
  sink_->mismatchSeen(peer_, expected.tag, tag);
  return Error(ErrorCode::Mismatch, "rank " + std::to_string(selfRank_) + " expected " +
                                        sink_->tagText(expected.tag) + " (" +
                                        std::to_string(expected.bytes) + " bytes) from " +
                                        description_ + " but received " + sink_->tagText(tag) +
                                        " (" + std::to_string(bytes) + " bytes)");
}

// ---- posting ----

void Connection::postSend(Request& req) {
  if (error_) {
    sink_->finish(req, State::Failed, true);
    return;
  }
  const bool idle = sendHead_ == nullptr;
  append(sendHead_, sendTail_, req);
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
  if (isP2P(req.tag)) {
    const auto it = std::find_if(unexpected_.begin(), unexpected_.end(),
                                 [&](const Unexpected& u) { return u.tag == req.tag; });
    if (it != unexpected_.end()) {
      if (it->bytes != req.bytes) {
        const Error e = mismatch(req, it->tag, it->bytes);
        fail(e);
        sink_->finish(req, State::Failed, true);
        return;
      }
      if (!it->data.empty()) std::memcpy(req.data, it->data.data(), it->data.size());
      req.progress = it->data.size();
      const bool complete = it->data.size() == it->bytes;
      if (!complete) {  // still arriving: the rest goes straight into the caller's buffer
        rxUnexpected_ = nullptr;
        rxRequest_ = &req;
      }
      unexpected_.erase(it);
      if (complete) {
        sink_->finish(req, State::Done, false);
        return;
      }
      read();
      return;
    }
  }
  append(recvHead_, recvTail_, req);
  if (!isP2P(req.tag) && stalled_) {
    stalled_ = false;
    updateInterest();
  }
  read();
}

std::string Connection::stallReason(const Request& req) const {
  if (!fd_) return {};
  const std::string peer = "rank " + std::to_string(peer_);
  if (req.isSend) {
    const std::size_t sent = req.progress > kHeaderBytes ? req.progress - kHeaderBytes : 0;
    if (sendHead_ != &req) return "earlier sends to " + peer + " are not written yet";
    return std::to_string(sent) + " of " + std::to_string(req.bytes) + " bytes written; " + peer +
           " does not read (the socket buffer is full)";
  }
  if (rxRequest_ == &req)
    return std::to_string(req.progress) + " of " + std::to_string(req.bytes) + " bytes arrived; " +
           peer + " sent no more";
  if (stalled_ && staged() >= kHeaderBytes) {
    const FrameHeader h = decodeFrameHeader(
        std::span<const std::uint8_t, kHeaderBytes>(staging_.data() + stageBegin_, kHeaderBytes));
    return "ahead of it from " + peer + " waits " + sink_->tagText(h.tag) + " (" +
           std::to_string(h.bytes) + " bytes), which no posted receive of this rank matches";
  }
  if (rxRequest_ != nullptr || rxUnexpected_ != nullptr)
    return "an earlier message from " + peer + " is still arriving";
  std::string text = "nothing for it has arrived from " + peer;
  if (!unexpected_.empty()) {
    text += "; messages from " + peer + " that no receive has taken:";
    for (const Unexpected& u : unexpected_)
      text += " " + sink_->tagText(u.tag) + " (" + std::to_string(u.bytes) + " bytes)";
  }
  return text;
}

// ---- failure ----

void Connection::finishAll(bool connectionError) {
  if (rxRequest_ != nullptr) {
    Request* r = rxRequest_;
    rxRequest_ = nullptr;
    sink_->finish(*r, State::Failed, connectionError);
  }
  for (Request** head : {&sendHead_, &recvHead_}) {
    Request* r = *head;
    *head = nullptr;
    while (r != nullptr) {
      Request* next = r->next;  // read before finish: the owner may reuse r at once
      sink_->finish(*r, State::Failed, connectionError);
      r = next;
    }
  }
  sendTail_ = recvTail_ = nullptr;
  rxUnexpected_ = nullptr;
  unexpected_.clear();
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
                                        description_ + ": " + errnoText(errno)));
    return;
  }
  events_ = want;
}

void Connection::onEof() {
  eof_ = true;
  // Level-triggered EPOLLIN would report the end of the stream forever; staged bytes stay usable.
  if (registered_) ::epoll_ctl(epollFd_, EPOLL_CTL_DEL, fd_.get(), nullptr);
  registered_ = false;
  if (sendHead_ != nullptr) fail(lost(0, "send", sendHead_->bytes));
}

void Connection::completeRx() {
  if (rxRequest_ != nullptr) {
    Request* r = rxRequest_;
    rxRequest_ = nullptr;
    sink_->finish(*r, State::Done, false);
  } else {
    rxUnexpected_ = nullptr;  // complete; held until a receive of its tag is posted
  }
}

// Matches the staged header against the posted receives. False when reading must stop.
bool Connection::matchHeader() {
  const FrameHeader header = decodeFrameHeader(
      std::span<const std::uint8_t, kHeaderBytes>(staging_.data() + stageBegin_, kHeaderBytes));
  const std::uint64_t tag = header.tag;
  const std::uint64_t bytes = header.bytes;
  const bool p2p = isP2P(tag);
  Request* prev = nullptr;
  Request* r = recvHead_;
  for (; r != nullptr; prev = r, r = r->next)
    if (p2p ? r->tag == tag : !isP2P(r->tag)) break;
  if (r == nullptr && !p2p) {
    stalled_ = true;
    updateInterest();
    return false;
  }
  if (r == nullptr) {
    if (bytes > maxHeldFrameBytes()) {
      fail(Error(ErrorCode::Mismatch,
                 "rank " + std::to_string(selfRank_) + " received a frame of " +
                     std::to_string(bytes) + " bytes (" + sink_->tagText(tag) + ") from " +
                     description_ + ": more than this host's memory, a corrupt stream"));
      return false;
    }
    unexpected_.push_back(Unexpected{tag, static_cast<std::size_t>(bytes), {}});
    stageBegin_ += kHeaderBytes;
    if (bytes > 0) rxUnexpected_ = &unexpected_.back();
    return true;
  }
  if (r->tag != tag || r->bytes != bytes) {
    fail(mismatch(*r, tag, bytes));
    return false;
  }
  (prev != nullptr ? prev->next : recvHead_) = r->next;
  if (recvTail_ == r) recvTail_ = prev;
  stageBegin_ += kHeaderBytes;
  if (bytes == 0)
    sink_->finish(*r, State::Done, false);
  else
    rxRequest_ = r;
  return true;
}

// Reads into the held P2P message being received, growing it by what arrives.
Connection::Step Connection::readHeld(std::size_t& budget, bool& drained) {
  Unexpected& u = *rxUnexpected_;
  const std::size_t have = u.data.size();
  const std::size_t want = u.bytes - have;
  try {
    if (staged() > 0) {
      const std::size_t got = std::min(want, staged());
      const auto* from = staging_.data() + stageBegin_;
      u.data.insert(u.data.end(), from, from + got);
      stageBegin_ += got;
    } else {
      if (eof_) {
        fail(lost(0, "recv", u.bytes));
        return Step::Stop;
      }
      if (drained || budget == 0) return Step::Stop;
      const std::size_t ask = std::min({want, budget, kHeldGrowthBytes});
      u.data.resize(have + ask);
      const ssize_t n = ::recv(fd_.get(), u.data.data() + have, ask, MSG_DONTWAIT);
      const int err = errno;
      u.data.resize(have + static_cast<std::size_t>(std::max<ssize_t>(n, 0)));
      if (n < 0) {
        if (err == EINTR) return Step::Continue;
        if (err == EAGAIN || err == EWOULDBLOCK) return Step::Stop;
        fail(lost(err, "recv", u.bytes));
        return Step::Stop;
      }
      if (n == 0) {
        onEof();
        return Step::Continue;
      }
      budget -= static_cast<std::size_t>(n);
      drained = static_cast<std::size_t>(n) < ask;
    }
  } catch (const std::exception&) {  // bad_alloc: this host cannot hold it
    fail(Error(ErrorCode::Internal, "rank " + std::to_string(selfRank_) + " cannot hold " +
                                        sink_->tagText(u.tag) + " (" + std::to_string(u.bytes) +
                                        " bytes) from " + description_ +
                                        " until its receive is posted"));
    return Step::Stop;
  }
  if (u.data.size() == u.bytes) completeRx();
  return Step::Continue;
}

void Connection::read() {
  std::size_t budget = kIoBudget;
  bool drained = false;  // a recv returned less than asked: the socket is most likely empty
  while (fd_ && !error_) {
    if (rxRequest_ == nullptr && rxUnexpected_ != nullptr) {
      if (readHeld(budget, drained) == Step::Stop) return;
      continue;
    }
    if (rxRequest_ != nullptr) {
      std::uint8_t* dst = rxRequest_->data + rxRequest_->progress;
      const std::size_t want = rxRequest_->bytes - rxRequest_->progress;
      const std::size_t frameBytes = rxRequest_->bytes;
      std::size_t got = 0;
      if (staged() > 0) {
        got = std::min(want, staged());
        std::memcpy(dst, staging_.data() + stageBegin_, got);
        stageBegin_ += got;
      } else {
        if (eof_) {
          fail(lost(0, "recv", frameBytes));
          return;
        }
        if (drained || budget == 0) return;
        const std::size_t ask = std::min(want, budget);
        const ssize_t n = ::recv(fd_.get(), dst, ask, MSG_DONTWAIT);
        if (n < 0) {
          if (errno == EINTR) continue;
          if (errno == EAGAIN || errno == EWOULDBLOCK) return;
          fail(lost(errno, "recv", frameBytes));
          return;
        }
        if (n == 0) {
          onEof();
          continue;
        }
        got = static_cast<std::size_t>(n);
        budget -= got;
        drained = got < ask;
      }
      rxRequest_->progress += got;
      if (rxRequest_->progress == rxRequest_->bytes) completeRx();
      continue;
    }
    if (staged() >= kHeaderBytes) {
      if (!matchHeader()) return;
      continue;
    }
    if (eof_) {
      if (recvHead_ != nullptr) fail(lost(0, "recv", recvHead_->bytes));
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
      fail(recvHead_ != nullptr ? lost(err, "recv", recvHead_->bytes) : lost(err, nullptr, 0));
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
  std::size_t budget = kIoBudget;
  while (sendHead_ != nullptr && fd_ && !error_) {
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
    for (Request* r = sendHead_; r != nullptr && count + 2 <= iov.size() && total < budget;
         r = r->next) {
      if (r->progress < kHeaderBytes) {
        std::uint8_t* h = headers[headerCount++].data();
        encodeHeader(h, r->tag, r->bytes);
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
      fail(lost(errno, "send", sendHead_->bytes));
      return;
    }
    std::size_t left = static_cast<std::size_t>(n);
    budget -= std::min(budget, left);
    while (left > 0) {
      Request* r = sendHead_;
      const std::size_t take = std::min(left, kHeaderBytes + r->bytes - r->progress);
      r->progress += take;
      left -= take;
      if (r->progress == kHeaderBytes + r->bytes) {
        sendHead_ = r->next;
        if (sendHead_ == nullptr) sendTail_ = nullptr;
        sink_->finish(*r, State::Done, false);
      }
    }
    if (static_cast<std::size_t>(n) < total) {  // the socket buffer is full
      wantWrite_ = true;
      updateInterest();
      return;
    }
  }
  if (wantWrite_ && sendHead_ == nullptr) {
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
  if ((events & (EPOLLOUT | EPOLLERR | EPOLLHUP)) != 0 && sendHead_ != nullptr) write();
  if ((events & (EPOLLIN | EPOLLERR | EPOLLHUP)) != 0) read();
}

}  // namespace braid::transport::tcp
