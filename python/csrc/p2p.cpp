#include "p2p.hpp"

#include <c10/util/Exception.h>

#include <algorithm>
#include <stdexcept>
#include <string>
#include <thread>

#include "tensor_util.hpp"

namespace braid_torch {

namespace {

constexpr auto kByte = braid::DataType::Uint8;

/// braid's tag for torch's: headers and payloads travel under the torch tag itself (all 32 bits).
std::uint32_t wireTag(std::int64_t tag) {
  return static_cast<std::uint32_t>(tag);
}

/// Spins briefly, then sleeps with a growing nap: for waits that can only poll.
class Backoff {
 public:
  void pause() {
    if (++rounds_ < 64) {
      std::this_thread::yield();
      return;
    }
    std::this_thread::sleep_for(nap_);
    nap_ = std::min(nap_ * 2, std::chrono::microseconds(500));
  }

 private:
  int rounds_ = 0;
  std::chrono::microseconds nap_{10};
};

std::string headerMismatch(const char* what, int peer, std::size_t bytes, std::int64_t tag,
                           const P2P::Header& h) {
  return std::string("braid: ") + what + " expected " + std::to_string(bytes) + " bytes with tag " +
         std::to_string(tag) + " but the next message with tag " + std::to_string(tag) +
         " from rank " + std::to_string(peer) + " has " + std::to_string(h.bytes) + " bytes (tag " +
         std::to_string(h.tag) + " in its header)";
}

}  // namespace

P2P::P2P(std::unique_ptr<braid::Comm> comm) : comm_(std::move(comm)) {}

// The communicator goes first: its transport may still write into posted header slots.
P2P::~P2P() {
  comm_.reset();
}

std::shared_ptr<P2P::HeaderSlot> P2P::postHeaderLocked(int peer, std::int64_t tag) {
  auto slot = std::make_shared<HeaderSlot>();
  slot->work = comm_->recvAsync(&slot->header, sizeof(Header), kByte, peer, wireTag(tag));
  return slot;
}

void P2P::postHeaderSlotsLocked(std::int64_t tag) {
  const int me = comm_->rank();
  for (int p = 0; p < comm_->size(); ++p) {
    if (p == me) continue;
    Slots& q = unclaimed(p, tag);
    if (q.empty()) q.push_back(postHeaderLocked(p, tag));
  }
}

braid::Work P2P::takeOffLocked(int peer, std::int64_t tag, std::size_t bytes,
                               std::shared_ptr<at::Tensor>& sink) {
  sink = std::make_shared<at::Tensor>(at::empty({static_cast<std::int64_t>(bytes)}, at::kByte));
  return comm_->recvAsync(bytes ? sink->data_ptr() : nullptr, bytes, kByte, peer, wireTag(tag));
}

c10::intrusive_ptr<BraidWork> P2P::send(const std::shared_ptr<OpQueue>& queue, const at::Tensor& t,
                                        int dst, int tag) {
  // The payload is captured now: torch says the tensor must not change until the send completes.
  at::Tensor buf = t.contiguous();
  const std::size_t bytes = byteSize(buf);
  auto header = std::make_shared<Header>(Header{bytes, tag});
  braid::Work wh, wp;
  {
    std::lock_guard<std::mutex> lk(mu_);  // a header and its payload stay adjacent in their tag
    wh = comm_->sendAsync(header.get(), sizeof(Header), kByte, dst, wireTag(tag));
    wp = comm_->sendAsync(bytes ? buf.data_ptr() : nullptr, bytes, kByte, dst, wireTag(tag));
  }
  auto self = shared_from_this();
  return c10::make_intrusive<BraidWork>(
      queue, c10d::OpType::SEND, "braid:send", std::vector<at::Tensor>{t},
      std::vector<at::Tensor>{},
      [wh, wp, buf, header, self] {
        if (!wh.test() || !wp.test()) return false;
        wh.wait();
        wp.wait();
        return true;
      },
      [wh, wp, buf, header, self] {
        wh.wait();
        wp.wait();
      });
}

c10::intrusive_ptr<BraidWork> P2P::recv(const std::shared_ptr<OpQueue>& queue, const at::Tensor& t,
                                        int src, int tag) {
  const std::size_t bytes = byteSize(t);
  OutStage out(t);
  std::shared_ptr<HeaderSlot> header;
  braid::Work payload;
  {
    std::lock_guard<std::mutex> lk(mu_);
    Slots& q = unclaimed(src, tag);
    if (!q.empty()) {  // a header receive left by a receive-from-any-source: it is ours now
      header = q.front();
      q.pop_front();
    } else {
      header = postHeaderLocked(src, tag);
    }
    payload = comm_->recvAsync(out.ptr(), bytes, kByte, src, wireTag(tag));
  }
  auto self = shared_from_this();
  auto finish = [header, payload, out, bytes, tag, src, self] {
    header->work.wait();
    const Header& h = header->header;
    if (h.bytes != bytes) {
      // The payload receive fails alone (Mismatch) and the payload waits: take it off, so that
      // the next message of this tag is read from its header.
      std::shared_ptr<at::Tensor> sink;
      braid::Work off;
      {
        std::lock_guard<std::mutex> lk(self->mu_);
        off = self->takeOffLocked(src, tag, h.bytes, sink);
      }
      try {
        payload.wait();
      } catch (const std::exception&) {
      }
      off.wait();
    }
    TORCH_CHECK(h.bytes == bytes && h.tag == tag, headerMismatch("recv", src, bytes, tag, h));
    payload.wait();
    out.commit();
  };
  auto work = c10::make_intrusive<BraidWork>(
      queue, c10d::OpType::RECV, "braid:recv", std::vector<at::Tensor>{t},
      std::vector<at::Tensor>{t},
      [header, payload, bytes, finish, self] {
        if (!header->work.test()) return false;
        if (header->header.bytes == bytes && !payload.test()) return false;
        finish();
        return true;
      },
      [finish, self] { finish(); });
  work->setSourceRank(src);
  return work;
}
bool P2P::resolve(const std::shared_ptr<AnyRequest>& req) {
  std::lock_guard<std::mutex> lk(mu_);
  const int n = comm_->size();
  std::vector<std::int64_t> waiting;  // tags whose oldest request found no message: later wait
  for (auto it = anyQueue_.begin(); it != anyQueue_.end();) {
    AnyRequest& r = **it;
    if (std::find(waiting.begin(), waiting.end(), r.tag) != waiting.end()) {
      ++it;
      continue;
    }
    postHeaderSlotsLocked(r.tag);  // peers whose header receive a plain recv claimed meanwhile
    int winner = -1;
    for (int i = 0; i < n && winner < 0; ++i) {
      const int p = (nextPeer_ + i) % n;
      if (p == comm_->rank()) continue;
      Slots& q = unclaimed(p, r.tag);
      if (!q.empty() && q.front()->work.test()) winner = p;
    }
    if (winner < 0) {
      waiting.push_back(r.tag);
      ++it;
      continue;
    }
    Slots& q = unclaimed(winner, r.tag);
    auto front = *it;
    it = anyQueue_.erase(it);
    front->header = q.front();
    front->source = winner;
    q.pop_front();
    nextPeer_ = (winner + 1) % n;
    try {
      front->header->work.wait();  // rethrows a failed header receive (e.g. the peer is gone)
    } catch (...) {
      front->payload = braid::Work();
      continue;  // the request's finish() rethrows it
    }
    const Header& h = front->header->header;
    if (h.bytes == front->bytes && h.tag == front->tag) {
      front->payload = comm_->recvAsync(front->bytes ? front->dst : nullptr, front->bytes, kByte,
                                        winner, wireTag(front->tag));
    } else {
      // Take the payload off anyway, so this peer's next header of the tag is read as one.
      front->payload = takeOffLocked(winner, front->tag, h.bytes, front->sink);
    }
  }
  return req->header != nullptr;
}

c10::intrusive_ptr<BraidWork> P2P::recvAnySource(const std::shared_ptr<OpQueue>& queue,
                                                 const at::Tensor& t, int tag) {
  TORCH_CHECK(comm_->size() > 1, "braid: receive from any source in a group of one rank");
  OutStage out(t);
  auto req = std::make_shared<AnyRequest>();
  req->bytes = byteSize(t);
  req->tag = tag;
  req->dst = out.ptr();
  {
    std::lock_guard<std::mutex> lk(mu_);
    anyQueue_.push_back(req);
    postHeaderSlotsLocked(tag);
  }
  auto self = shared_from_this();
  // Set right after construction; read when the work completes, to report the sender.
  auto holder = std::make_shared<BraidWork*>(nullptr);
  auto finish = [req, out, holder] {
    req->header->work.wait();
    TORCH_CHECK(req->header->header.bytes == req->bytes && req->header->header.tag == req->tag,
                headerMismatch("receive from any source", req->source, req->bytes, req->tag,
                               req->header->header));
    req->payload.wait();
    out.commit();
    (*holder)->setSourceRank(req->source);
  };
  auto work = c10::make_intrusive<BraidWork>(
      queue, c10d::OpType::RECVANYSOURCE, "braid:recvAnySource", std::vector<at::Tensor>{t},
      std::vector<at::Tensor>{t},
      [self, req, finish] {
        if (!self->resolve(req) || !req->payload.test()) return false;
        finish();
        return true;
      },
      [self, req, finish] {
        Backoff backoff;
        while (!self->resolve(req)) backoff.pause();
        finish();
      });
  *holder = work.get();
  return work;
}

}  // namespace braid_torch
