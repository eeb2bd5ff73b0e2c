#include "transport/shm/shm_channel.hpp"

#include <sys/uio.h>

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <exception>

namespace braid::transport::shm {

namespace {

using State = Request::State;

constexpr std::size_t kUnit = 16;
constexpr std::uint64_t kSingleCopyBit = 1ull << 63;
constexpr std::uint64_t kLaneBit = 1ull << 62;
constexpr std::uint64_t kControlBit = 1ull << 61;
constexpr std::uint64_t kWordFlags = kSingleCopyBit | kLaneBit | kControlBit;
// Request::aux of the channel's own control messages (else aux numbers single-copy sends).
constexpr std::size_t kAuxControl = std::size_t{1} << 63;

bool isControl(const Request& r) {
  return (r.aux & kAuxControl) != 0;
}
bool isSingleCopy(const Request& r) {
  return r.aux != 0 && !isControl(r);
}
// The header units of a message: the header, and the lane's unit when it has a lane.
std::size_t headerBytes(const Request& r) {
  return r.lane != 0 ? 2 * kUnit : kUnit;
}
// process_vm_readv moves at most this much per call (the kernel caps one call near 2 GiB).
constexpr std::size_t kMaxReadPerCall = std::size_t{1} << 30;

std::size_t padded(std::size_t bytes) {
  return (bytes + kUnit - 1) / kUnit * kUnit;
}

void writeUnit(std::uint8_t* ring, std::size_t ringBytes, std::uint64_t pos, std::uint64_t a,
               std::uint64_t b) {
  std::uint8_t* p = ring + pos % ringBytes;
  std::memcpy(p, &a, 8);
  std::memcpy(p + 8, &b, 8);
}

void readUnit(const std::uint8_t* ring, std::size_t ringBytes, std::uint64_t pos, std::uint64_t& a,
              std::uint64_t& b) {
  const std::uint8_t* p = ring + pos % ringBytes;
  std::memcpy(&a, p, 8);
  std::memcpy(&b, p + 8, 8);
}

}  // namespace

Channel::Channel(ChannelConfig config, CompletionSink& sink)
    : cfg_(std::move(config)),
      sink_(&sink),
      inbox_(cfg_.selfRank, cfg_.peerRank, cfg_.description, sink) {}

Error Channel::lost(const char* during, std::size_t bytes) const {
  std::string text = "rank " + std::to_string(cfg_.selfRank) + " lost " + cfg_.description +
                     (exited_ ? ": process " + std::to_string(cfg_.peerPid) + " exited"
                              : std::string(": it closed its shared-memory channel"));
  if (during != nullptr)
    text += std::string(" during ") + during + " of " + std::to_string(bytes) + " bytes";
  return Error(ErrorCode::PeerLost, text);
}

// ---- posting ----

void Channel::postSend(Request& req) {
  if (!active()) {
    sink_->finish(req, State::Failed, static_cast<bool>(error_));
    return;
  }
  if (exited_ || cfg_.out->consumer.closed.load(std::memory_order_acquire) != 0) {
    fail(lost("send", req.bytes));
    sink_->finish(req, State::Failed, true);
    return;
  }
  if (peerGone(req.lane)) {  // nobody will read it
    sink_->finish(req, State::Failed, false);
    return;
  }
  // aux: 0 for a message through the ring, else its number among single-copy messages.
  req.aux = req.bytes > 0 && req.bytes >= cfg_.singleCopyBytes ? ++singleCopiesPosted_ : 0;
  sends_.push(req);
  if (sends_.front() == &req) writeSends();
}

void Channel::postRecv(Request& req) {
  if (!active()) {
    sink_->finish(req, State::Failed, static_cast<bool>(error_));
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
    case engine::Inbox::Posted::Queued:
      if (peerGone(req.lane)) {  // nothing more comes on the lane
        inbox_.withdraw(req);
        sink_->finish(req, State::Failed, false);
        return;
      }
      break;
    case engine::Inbox::Posted::Receiving:
      break;
  }
  progress();
}

// ---- lanes ----

bool Channel::failLane(std::uint64_t lane) {
  if (!active()) return true;
  const Request* front = sends_.front();
  if (front != nullptr && front->lane == lane && front->progress > 0 && !isControl(*front))
    return false;
  for (const Request* r = copies_.front(); r != nullptr; r = r->next)
    if (r->lane == lane) return false;
  if (!inbox_.failLane(lane)) return false;
  sends_.removeIf([lane](const Request& r) { return r.lane == lane && !isControl(r); },
                  [&](Request& r) { sink_->finish(r, State::Failed, false); });
  return true;
}

void Channel::sendLaneGone(std::uint64_t lane, bool aborted) {
  if (!active() || exited_) return;
  Request& r = lanes().control.emplace_back();
  r.isSend = true;
  r.peer = cfg_.peerRank;
  r.tag = aborted ? kLaneAborted : kLaneDestroyed;
  r.lane = lane;
  r.bytes = 0;
  r.aux = kAuxControl;
  r.state.store(State::Pending, std::memory_order_relaxed);
  sends_.push(r);
  if (sends_.front() == &r) writeSends();
}

void Channel::retire(Request& req, State state, bool channelError) {
  if (!isControl(req)) {
    sink_->finish(req, state, channelError);
    return;
  }
  auto& control = lanes().control;
  for (auto it = control.begin(); it != control.end(); ++it)
    if (&*it == &req) {
      control.erase(it);
      return;
    }
}

void Channel::onControl(std::uint64_t kind, std::uint64_t lane) {
  if (kind != kLaneDestroyed && kind != kLaneAborted) {
    fail(Error(ErrorCode::Mismatch,
               "rank " + std::to_string(cfg_.selfRank) + " received an unknown control message " +
                   "(kind " + std::to_string(kind) + ", lane " + std::to_string(lane) + ") from " +
                   cfg_.description + ": a corrupt ring or another braid version"));
    return;
  }
  if (sink_->laneClosed(lane)) return;  // gone on this rank too
  const bool aborted = kind == kLaneAborted;
  lanes().peerGone.emplace(  // the first reason stays (an abort, then the destruction)
      lane, Error(ErrorCode::PeerLost,
                  "rank " + std::to_string(cfg_.selfRank) + ": " + cfg_.description +
                      (lane == 0 ? std::string(" left the communicator that made the shared memory "
                                               "segment, whose children live on")
                                 : " left the communicator on lane " + std::to_string(lane) +
                                       " of the shared memory segment") +
                      " (it was " + (aborted ? "aborted" : "destroyed") +
                      " there) before this operation with it completed; nothing more comes " +
                      "from it on that communicator"));
  inbox_.failLane(lane);  // nothing is arriving now (a header is being read), so none is cut
}

// ---- failure ----

void Channel::closeFlags() {
  if (cfg_.out == nullptr) return;
  cfg_.out->producer.closed.store(1, std::memory_order_release);
  cfg_.in->consumer.closed.store(1, std::memory_order_release);
  notify(*cfg_.peerSlot, cfg_.lightWake);
}

void Channel::finishAll(bool channelError) {
  inbox_.failAll(channelError);
  for (engine::RequestQueue* q : {&sends_, &copies_})
    q->drain([&](Request& r) { retire(r, State::Failed, channelError); });
  rxLeft_ = 0;
}

void Channel::fail(Error error) {
  if (error_ || abandoned_) return;
  error_ = std::move(error);
  closeFlags();
  finishAll(true);
}

void Channel::abandon() {
  if (abandoned_) return;
  abandoned_ = true;
  closeFlags();
  finishAll(false);
}

void Channel::close() {
  closeFlags();
}

void Channel::peerExited() {
  exited_ = true;
}

std::string Channel::stallReason(const Request& req) const {
  if (cfg_.out == nullptr) return {};
  const std::string peer = "rank " + std::to_string(cfg_.peerRank);
  const auto progress = [&] {
    return std::to_string(std::min(req.progress, req.bytes)) + " of " + std::to_string(req.bytes) +
           " bytes";
  };
  if (req.isSend) {
    const std::uint64_t tail = cfg_.out->consumer.tail.load(std::memory_order_acquire);
    const std::uint64_t head = cfg_.out->producer.head.load(std::memory_order_acquire);
    if (isSingleCopy(req) && sends_.front() != &req)
      return "the message is in the ring; " + peer + " has not read it (no matching receive)";
    return "the ring to " + peer + " holds " + std::to_string(head - tail) + " unread bytes of " +
           std::to_string(cfg_.ringBytes) + "; " + progress() + " written";
  }
  if (inbox_.receivingRequest() == &req) return progress() + " arrived; " + peer + " sent no more";
  const std::uint64_t head = cfg_.in->producer.head.load(std::memory_order_acquire);
  if (head == tail_) {
    return "nothing from " + peer + " waits in the ring (it has not sent it)" +
           inbox_.heldText(peer);
  }
  if (inbox_.receiving()) return "the ring from " + peer + " is busy with an earlier message";
  std::uint64_t tag = 0, word = 0;
  readUnit(cfg_.inRing, cfg_.ringBytes, tail_, tag, word);
  const std::size_t bytes = static_cast<std::size_t>(word & ~kWordFlags);
  return "ahead of it in the ring from " + peer + " waits " + sink_->tagText(tag) + " (" +
         std::to_string(bytes) + " bytes), which no posted receive of this rank matches";
}

// ---- progress ----

bool Channel::progress() {
  if (!active()) return false;
  bool moved = writeSends();
  moved = reapSingleCopies() || moved;
  bool read = readIncoming();
  moved = moved || read;
  if (!active()) return true;
  // The closed flags sit on lines the peer writes all the time: look only when stuck.
  if ((!sends_.empty() || !copies_.empty()) && !moved &&
      (exited_ || cfg_.out->consumer.closed.load(std::memory_order_acquire) != 0)) {
    const Request* r = !sends_.empty() ? sends_.front() : copies_.front();
    fail(lost("send", r->bytes));
    return true;
  }
  if ((inbox_.hasPosted() || inbox_.receivingRequest() != nullptr) && !read &&
      (exited_ || cfg_.in->producer.closed.load(std::memory_order_acquire) != 0)) {
    // A peer publishes its last data before it closes: read once more after seeing the flag,
    // and if nothing comes, nothing will.
    read = readIncoming();
    if (!active() || read) return true;
    if (inbox_.hasPosted() || inbox_.receivingRequest() != nullptr) {
      const Request* r =
          inbox_.receivingRequest() != nullptr ? inbox_.receivingRequest() : inbox_.firstPosted();
      fail(lost("recv", r->bytes));
      return true;
    }
  }
  return moved;
}

bool Channel::needsBackground(bool attendedToo) const {
  if (!active()) return false;
  if (attendedToo) return !sends_.empty() || inbox_.anyPostedAtLeast(cfg_.slotBytes, true);
  // Requests whose poster is about to wait for them (Request::attended) move in its waits.
  for (const Request* r = sends_.front(); r != nullptr; r = r->next)
    if (!r->attended) return true;
  return inbox_.anyPostedAtLeast(cfg_.slotBytes, false);
}

// ---- sending ----

bool Channel::writeSends() {
  const std::size_t cap = cfg_.ringBytes;
  bool moved = false;
  auto freeBytes = [&](std::size_t need) {
    std::size_t free = cap - static_cast<std::size_t>(head_ - tailSeen_);
    if (free < need) {
      tailSeen_ = cfg_.out->consumer.tail.load(std::memory_order_acquire);
      free = cap - static_cast<std::size_t>(head_ - tailSeen_);
    }
    return free;
  };
  auto publish = [&] {
    cfg_.out->producer.head.store(head_, std::memory_order_release);
    notify(*cfg_.peerSlot, cfg_.lightWake);
    moved = true;
  };
  while (!sends_.empty()) {
    Request& r = *sends_.front();
    const bool single = isSingleCopy(r);
    const std::size_t head = headerBytes(r);
    const std::size_t total = head + (single ? kUnit : padded(r.bytes));
    bool unpublished = false;
    if (r.progress == 0) {
      const std::size_t need = head + (single ? kUnit : 0);
      if (freeBytes(need) < need) break;
      writeUnit(cfg_.outRing, cap, head_, r.tag,
                r.bytes | (single ? kSingleCopyBit : 0) | (r.lane != 0 ? kLaneBit : 0) |
                    (isControl(r) ? kControlBit : 0));
      if (r.lane != 0) writeUnit(cfg_.outRing, cap, head_ + kUnit, r.lane, 0);
      if (single)
        writeUnit(cfg_.outRing, cap, head_ + head, reinterpret_cast<std::uintptr_t>(r.data), 0);
      head_ += need;
      r.progress = need;
      unpublished = true;
    }
    // Payload, at most one slot per publication so the peer copies out while we fill.
    while (r.progress < total) {
      const std::size_t free = freeBytes(kUnit);
      if (free == 0) break;
      const std::size_t offset = r.progress - head;  // into the padded payload
      const std::size_t n = std::min(
          {total - r.progress, free, cap - static_cast<std::size_t>(head_ % cap), cfg_.slotBytes});
      const std::size_t real = r.bytes > offset ? std::min(n, r.bytes - offset) : 0;
      std::memcpy(cfg_.outRing + head_ % cap, r.data + offset, real);
      head_ += n;
      r.progress += n;
      publish();
      unpublished = false;
    }
    if (unpublished) publish();
    if (r.progress < total) break;  // the ring is full
    sends_.pop();
    if (single)
      copies_.push(r);  // done once the peer has read it
    else
      retire(r, State::Done, false);
  }
  return moved;
}

bool Channel::reapSingleCopies() {
  if (copies_.empty()) return false;
  const std::uint64_t done = cfg_.out->consumer.rendezvousDone.load(std::memory_order_acquire);
  bool moved = false;
  while (!copies_.empty() && copies_.front()->aux <= done) {
    sink_->finish(*copies_.pop(), State::Done, false);
    moved = true;
  }
  return moved;
}

// ---- receiving ----

void Channel::publishTail() {
  cfg_.in->consumer.tail.store(tail_, std::memory_order_release);
  notify(*cfg_.peerSlot, cfg_.lightWake);
}

bool Channel::readIncoming() {
  const std::size_t cap = cfg_.ringBytes;
  bool moved = false;
  while (active()) {
    std::size_t avail = static_cast<std::size_t>(headSeen_ - tail_);
    if (avail == 0) {
      headSeen_ = cfg_.in->producer.head.load(std::memory_order_acquire);
      avail = static_cast<std::size_t>(headSeen_ - tail_);
      if (avail == 0) break;
    }
    if (!inbox_.receiving()) {
      if (!readHeader()) break;
      moved = true;
      continue;
    }
    const std::size_t n =
        std::min({rxLeft_, avail, cap - static_cast<std::size_t>(tail_ % cap), cfg_.slotBytes});
    const std::uint8_t* src = cfg_.inRing + tail_ % cap;
    // Into the matched request, or into a held P2P message that grows by what arrives.
    const std::size_t real = std::min(n, inbox_.rxRemaining());
    std::uint8_t* dst = inbox_.rxSpace(real);
    if (dst == nullptr) {
      fail(inbox_.cannotHold());
      break;
    }
    std::memcpy(dst, src, real);
    inbox_.rxCommit(real);
    tail_ += n;
    rxLeft_ -= n;
    publishTail();
    moved = true;
    if (rxLeft_ == 0) inbox_.rxComplete();
  }
  return moved;
}

// Matches the header at the tail against the posted receives and consumes it (and, for a
// single-copy message, reads the payload). False when reading must stop here.
bool Channel::readHeader() {
  const std::size_t cap = cfg_.ringBytes;
  std::uint64_t tag = 0, word = 0;
  readUnit(cfg_.inRing, cap, tail_, tag, word);
  const bool single = (word & kSingleCopyBit) != 0;
  const std::size_t bytes = static_cast<std::size_t>(word & ~kWordFlags);
  // The sender publishes every header unit at once, so the lane's is there too.
  std::uint64_t lane = 0;
  std::size_t head = kUnit;
  if ((word & kLaneBit) != 0) {
    std::uint64_t unused = 0;
    readUnit(cfg_.inRing, cap, tail_ + kUnit, lane, unused);
    head = 2 * kUnit;
  }
  if ((word & kControlBit) != 0) {
    tail_ += head;
    publishTail();
    onControl(tag, lane);
    return active();
  }
  std::optional<Error> mismatch;
  switch (inbox_.arrive(tag, bytes, SIZE_MAX, mismatch, lane, holdAside_,
                        lane != 0 && sink_->laneClosed(lane))) {
    case engine::Inbox::Arrival::Stall:  // waits in the ring until its receive is posted
    case engine::Inbox::Arrival::TooLarge:
      return false;
    case engine::Inbox::Arrival::Mismatch:
      fail(*mismatch);
      return false;
    case engine::Inbox::Arrival::Done:  // an empty message (never single-copy)
      tail_ += head;
      publishTail();
      return true;
    case engine::Inbox::Arrival::Receiving:
      break;
  }
  if (single) {
    std::uint64_t address = 0, unused = 0;
    readUnit(cfg_.inRing, cap, tail_ + head, address, unused);
    std::uint8_t* dst = inbox_.rxSpace(bytes);
    if (dst == nullptr) {  // bad_alloc / length_error: a corrupt or absurd header
      fail(inbox_.cannotHold());
      return false;
    }
    // A failed read fails the receiving request with the rest.
    if (!readRemote(dst, address, bytes, tag)) return false;
    inbox_.rxCommit(bytes);
    tail_ += head + kUnit;
    cfg_.in->consumer.rendezvousDone.fetch_add(1, std::memory_order_release);
    publishTail();
    inbox_.rxComplete();
    return true;
  }
  tail_ += head;
  publishTail();
  rxLeft_ = padded(bytes);
  return true;
}

// Copies a single-copy payload straight from the sender's buffer. The sender marks its
// producer line closed before it lets go of its buffers (abort, timeout, destruction), so a
// read that races with that is detected afterwards and discarded, like a seqlock reader.
bool Channel::readRemote(std::uint8_t* dst, std::uint64_t address, std::size_t bytes,
                         std::uint64_t tag) {
  std::size_t done = 0;
  int err = 0;
  while (done < bytes) {
    const std::size_t ask = std::min(bytes - done, kMaxReadPerCall);
    iovec local{dst + done, ask};
    iovec remote{reinterpret_cast<void*>(static_cast<std::uintptr_t>(address + done)), ask};
    const ssize_t n = ::process_vm_readv(cfg_.peerPid, &local, 1, &remote, 1, 0);
    if (n < 0 && errno == EINTR) continue;
    if (n <= 0) {
      err = n < 0 ? errno : EFAULT;
      break;
    }
    done += static_cast<std::size_t>(n);
  }
  std::atomic_thread_fence(std::memory_order_acquire);
  const bool senderLeft = exited_ || cfg_.in->producer.closed.load(std::memory_order_acquire) != 0;
  if (done == bytes && !senderLeft) return true;
  if (senderLeft || err == ESRCH) {
    if (err == ESRCH) exited_ = true;
    fail(lost("recv", bytes));
  } else {
    fail(Error(ErrorCode::Internal, "rank " + std::to_string(cfg_.selfRank) + " could not read " +
                                        sink_->tagText(tag) + " (" + std::to_string(bytes) +
                                        " bytes) from " + cfg_.description +
                                        " with process_vm_readv: " + errnoText(err)));
  }
  return false;
}

}  // namespace braid::transport::shm
