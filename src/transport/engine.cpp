#include "transport/engine.hpp"

#include <algorithm>
#include <cstring>
#include <exception>

namespace braid::transport::engine {

namespace {

Error mismatchText(const CompletionSink& sink, int selfRank, const std::string& peerDescription,
                   const Request& expected, std::uint64_t tag, std::size_t bytes) {
  return Error(ErrorCode::Mismatch,
               "rank " + std::to_string(selfRank) + " expected " + sink.tagText(expected.tag) +
                   " (" + std::to_string(expected.bytes) + " bytes) from " + peerDescription +
                   " but received " + sink.tagText(tag) + " (" + std::to_string(bytes) + " bytes)");
}

}  // namespace

Error mismatchError(const CompletionSink& sink, int selfRank, int peerRank,
                    const std::string& peerDescription, const Request& expected, std::uint64_t tag,
                    std::size_t bytes) {
  sink.mismatchSeenOnLane(peerRank, expected.tag, tag, expected.lane);
  return mismatchText(sink, selfRank, peerDescription, expected, tag, bytes);
}

Error timeoutError(int selfRank, const Request& req, const std::string& peerDescription,
                   const std::string& why) {
  std::string what = req.isSend ? "a send of " + std::to_string(req.bytes) + " bytes to "
                                : "a recv of " + std::to_string(req.bytes) + " bytes from ";
  what += peerDescription;
  if (!why.empty()) what += ": " + why;
  return Error(ErrorCode::Timeout,
               "rank " + std::to_string(selfRank) + " timed out waiting for " + what);
}

void throwUnreachable(const char* op, int rank, int size, int peer, const char* scope,
                      const std::string& note) {
  throw Error(ErrorCode::InvalidArgument,
              std::string(op) + ": rank " + std::to_string(rank) + " cannot address peer " +
                  std::to_string(peer) + scope + " (size " + std::to_string(size) + note + ")");
}

void throwNullBuffer(const char* op, std::size_t bytes, const std::string& peer) {
  throw Error(ErrorCode::InvalidArgument,
              std::string(op) + ": null buffer for " + std::to_string(bytes) + " bytes, " + peer);
}

void throwStillPending(const char* op, const std::string& peer) {
  throw Error(ErrorCode::InvalidArgument,
              std::string(op) + ": the request is still pending (" + peer + ")");
}

// ---- Inbox ----

Inbox::Posted Inbox::post(Request& req, std::optional<Error>& error) {
  const bool p2p = isP2P(req.tag);
  if (!held_.empty()) {
    const auto it = std::find_if(held_.begin(), held_.end(), [&](const Held& h) {
      return !h.discard && h.lane == req.lane && (p2p ? h.tag == req.tag : !isP2P(h.tag));
    });
    if (it != held_.end()) {
      if (p2p && it->bytes != req.bytes) {  // this receive fails; the message waits for the next
        failAlone(req, it->tag, it->bytes);
        return Posted::Failed;
      }
      if (it->bytes != req.bytes || it->tag != req.tag) {
        error = mismatchError(*sink_, self_, peer_, description_, req, it->tag, it->bytes);
        return Posted::Mismatch;
      }
      if (!it->data.empty()) std::memcpy(req.data, it->data.data(), it->data.size());
      req.progress = it->data.size();
      const bool complete = it->data.size() == it->bytes;
      if (!complete) {  // still arriving: the rest goes straight into the caller's buffer
        rxHeld_ = nullptr;
        rxRequest_ = &req;
      }
      held_.erase(it);
      if (!complete) return Posted::Receiving;
      sink_->finish(req, State::Done, false);
      return Posted::Done;
    }
  }
  recvs_.push(req);
  return Posted::Queued;
}

Request* Inbox::failOtherSizes(Request*& prev, Request* r, std::uint64_t tag, std::size_t bytes,
                               std::uint64_t lane) {
  while (r != nullptr) {
    if (r->lane != lane || r->tag != tag) {
      prev = r;
      r = r->next;
    } else if (r->bytes != bytes) {  // fails alone; the message goes on to the next
      Request* next = r->next;
      recvs_.unlink(prev, *r);
      failAlone(*r, tag, bytes);
      r = next;
    } else {
      return r;
    }
  }
  return nullptr;
}

// The observer is not told: it hears of mismatches that break the stream (the ranks called
// different collectives), which this is not.
void Inbox::failAlone(Request& req, std::uint64_t tag, std::size_t bytes) {
  sink_->finishAlone(req, mismatchText(*sink_, self_, description_, req, tag, bytes));
}

Inbox::Arrival Inbox::arrive(std::uint64_t tag, std::size_t bytes, std::size_t maxHeldBytes,
                             std::optional<Error>& error, std::uint64_t lane,
                             bool holdWhileOthersWait, bool discard) {
  const bool p2p = isP2P(tag);
  Request* prev = nullptr;
  Request* r = discard ? nullptr : recvs_.front();
  for (; r != nullptr; prev = r, r = r->next)
    if (r->lane == lane && (p2p ? r->tag == tag : !isP2P(r->tag))) break;
  if (p2p && r != nullptr && r->bytes != bytes) [[unlikely]]
    r = failOtherSizes(prev, r, tag, bytes, lane);
  if (r == nullptr) {
    if (!p2p && !discard && !(holdWhileOthersWait && !recvs_.empty())) return Arrival::Stall;
    if (bytes > maxHeldBytes) return Arrival::TooLarge;
    if (discard && bytes == 0) return Arrival::Done;
    Held& h = held_.emplace_back();
    h.tag = tag;
    h.lane = lane;
    h.bytes = bytes;
    h.discard = discard;
    if (bytes == 0) return Arrival::Done;
    rxHeld_ = &h;
    return Arrival::Receiving;
  }
  if (r->tag != tag || r->bytes != bytes) {
    error = mismatchError(*sink_, self_, peer_, description_, *r, tag, bytes);
    return Arrival::Mismatch;
  }
  recvs_.unlink(prev, *r);
  if (bytes == 0) {
    sink_->finish(*r, State::Done, false);
    return Arrival::Done;
  }
  r->progress = 0;
  rxRequest_ = r;
  return Arrival::Receiving;
}

std::size_t Inbox::rxRemaining() const noexcept {
  if (rxRequest_ != nullptr) return rxRequest_->bytes - rxRequest_->progress;
  if (rxHeld_ != nullptr) return rxHeld_->bytes - rxHeld_->data.size();
  return 0;
}

std::size_t Inbox::rxBytes() const noexcept {
  if (rxRequest_ != nullptr) return rxRequest_->bytes;
  if (rxHeld_ != nullptr) return rxHeld_->bytes;
  return 0;
}

std::uint8_t* Inbox::rxSpace(std::size_t want) noexcept {
  const std::size_t n = std::min(want, rxRemaining());
  if (rxRequest_ != nullptr) return rxRequest_->data + rxRequest_->progress;
  const std::size_t have = rxHeld_->data.size();
  try {
    rxHeld_->data.resize(have + n);
  } catch (const std::exception&) {  // bad_alloc: this host cannot hold it
    return nullptr;
  }
  heldAsked_ = n;
  return rxHeld_->data.data() + have;
}

void Inbox::rxCommit(std::size_t n) noexcept {
  if (rxRequest_ != nullptr) {
    rxRequest_->progress += n;
    return;
  }
  // rxSpace grew the held message by heldAsked_ bytes: keep only what was written.
  rxHeld_->data.resize(rxHeld_->data.size() - (heldAsked_ - std::min(n, heldAsked_)));
  heldAsked_ = 0;
}

void Inbox::rxComplete() {
  if (rxRequest_ != nullptr) {
    Request* r = rxRequest_;
    rxRequest_ = nullptr;
    sink_->finish(*r, State::Done, false);
  } else if (rxHeld_ != nullptr && rxHeld_->discard) {  // of a closed lane
    const Held* done = rxHeld_;
    rxHeld_ = nullptr;
    held_.remove_if([&](const Held& h) { return &h == done; });
  } else {
    rxHeld_ = nullptr;  // complete; held until a receive of its tag is posted
  }
}

Error Inbox::cannotHold() const {
  const std::uint64_t tag = rxHeld_ != nullptr ? rxHeld_->tag : 0;
  const std::size_t bytes = rxHeld_ != nullptr ? rxHeld_->bytes : 0;
  return Error(ErrorCode::Internal, "rank " + std::to_string(self_) + " cannot hold " +
                                        sink_->tagText(tag) + " (" + std::to_string(bytes) +
                                        " bytes) from " + description_ +
                                        " until its receive is posted");
}

bool Inbox::anyPostedAtLeast(std::size_t bytes, bool attendedToo) const noexcept {
  auto counts = [&](const Request* r) {
    return r->bytes >= bytes && (attendedToo || !r->attended);
  };
  if (rxRequest_ != nullptr && counts(rxRequest_)) return true;
  for (const Request* r = recvs_.front(); r != nullptr; r = r->next)
    if (counts(r)) return true;
  return false;
}

std::string Inbox::heldText(const std::string& peer) const {
  if (held_.empty()) return {};
  std::string text = "; messages from " + peer + " that no receive has taken:";
  for (const Held& h : held_)
    text += " " + sink_->tagText(h.tag) + " (" + std::to_string(h.bytes) + " bytes)";
  return text;
}

void Inbox::failAll(bool peerError) {
  if (rxRequest_ != nullptr) {
    Request* r = rxRequest_;
    rxRequest_ = nullptr;
    sink_->finish(*r, State::Failed, peerError);
  }
  recvs_.drain([&](Request& r) { sink_->finish(r, State::Failed, peerError); });
  rxHeld_ = nullptr;
  held_.clear();
}

bool Inbox::failLane(std::uint64_t lane) {
  if (rxRequest_ != nullptr && rxRequest_->lane == lane) return false;
  recvs_.removeIf([lane](const Request& r) { return r.lane == lane; },
                  [&](Request& r) { sink_->finish(r, State::Failed, false); });
  return true;
}

void Inbox::dropLane(std::uint64_t lane) {
  for (auto it = held_.begin(); it != held_.end();) {
    if (it->lane != lane) {
      ++it;
    } else if (&*it == rxHeld_) {
      it->discard = true;
      ++it;
    } else {
      it = held_.erase(it);
    }
  }
}

// ---- Engine ----

void Engine::publishAlone(Request& req, Error error) {
  const auto it = std::find_if(ownErrors_.begin(), ownErrors_.end(),
                               [&](const OwnError& e) { return e.req == &req; });
  if (it != ownErrors_.end())
    ownErrors_.erase(it);
  else if (ownErrors_.size() == kMaxOwnErrors)
    ownErrors_.erase(ownErrors_.begin());
  ownErrors_.push_back(OwnError{&req, std::move(error)});
  req.aux = kAuxOwnError;
  req.next = nullptr;
  completed_ = true;
  req.state.store(State::Failed, std::memory_order_release);
}

void Engine::throwFailure(const Request& req, const std::optional<Error>& peerError,
                          const std::string& peerDescription) const {
  if ((req.aux & kAuxOwnError) != 0) {
    const auto it = std::find_if(ownErrors_.begin(), ownErrors_.end(),
                                 [&](const OwnError& e) { return e.req == &req; });
    if (it != ownErrors_.end()) throw it->error;
  }
  if ((req.aux & kAuxTransportError) != 0 && failed_) throw *failed_;
  if (peerError) throw *peerError;
  if (failed_) throw *failed_;
  throw Error(ErrorCode::Internal, "rank " + std::to_string(rank_) + ": a request to " +
                                       peerDescription + " failed without an error");
}

}  // namespace braid::transport::engine
