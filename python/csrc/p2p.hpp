// Point-to-point for the backend: send, recv, and receive-from-any-source on top of braid's
// per-pair, in-order send/recv, over a communicator of its own.
//
// Why a separate communicator: braid orders a collective after every outstanding send/recv of
// its communicator. torch programs freely leave an isend or irecv pending across collectives
// (Gloo allows it), and receive-from-any-source below leaves receives posted that may never be
// matched; on a shared communicator either would stall the next collective.
//
// Wire format: every message is a 16-byte header {payload bytes, tag} followed by the payload,
// both sent back to back under one lock with torch's tag as braid's tag, so per peer and tag
// the messages alternate header, payload. braid matches point-to-point receives by tag (a
// receive takes the first message of its tag; others wait aside), so torch's tags select
// messages as under Gloo: a receive with a tag nobody sent waits (until the group's timeout).
// A receive from a known peer posts its header and payload receives at once (no extra latency)
// and checks the header when both are in. A payload of another size fails its receive alone
// (braid's engine); the payload, still waiting, is then taken off by a receive of its size, so
// the next message of that tag is read from its header again.
//
// Receive from any source, without a probe in braid: keep one header receive of its tag posted
// on every peer, take the first that completes, read the size from it and post that peer's
// payload receive. The header receives that did not win stay posted and are claimed by later
// receives of that tag from their peer (any-source or not): every message starts with a
// header, so nothing is lost.
#pragma once

#include <braid/comm.hpp>
#include <deque>
#include <map>
#include <memory>
#include <mutex>
#include <vector>

#include "work.hpp"

namespace braid_torch {

class P2P : public std::enable_shared_from_this<P2P> {
 public:
  explicit P2P(std::unique_ptr<braid::Comm> comm);
  ~P2P();

  c10::intrusive_ptr<BraidWork> send(const std::shared_ptr<OpQueue>& queue, const at::Tensor& t,
                                     int dst, int tag);
  c10::intrusive_ptr<BraidWork> recv(const std::shared_ptr<OpQueue>& queue, const at::Tensor& t,
                                     int src, int tag);
  c10::intrusive_ptr<BraidWork> recvAnySource(const std::shared_ptr<OpQueue>& queue,
                                              const at::Tensor& t, int tag);
  braid::Comm& comm() { return *comm_; }

  struct Header {
    std::uint64_t bytes = 0;
    std::int64_t tag = 0;
  };
  /// A posted header receive (of one peer and tag).
  struct HeaderSlot {
    Header header;
    braid::Work work;
  };

 private:
  struct AnyRequest {
    std::size_t bytes = 0;
    std::int64_t tag = 0;
    void* dst = nullptr;                 // contiguous destination of the payload
    std::shared_ptr<HeaderSlot> header;  // set once resolved
    braid::Work payload;
    std::shared_ptr<at::Tensor> sink;  // takes a mismatched payload off the wire
    int source = -1;
  };

  using Slots = std::deque<std::shared_ptr<HeaderSlot>>;
  /// Posts a header receive of `tag` on every peer that has none unclaimed.
  void postHeaderSlotsLocked(std::int64_t tag);
  std::shared_ptr<HeaderSlot> postHeaderLocked(int peer, std::int64_t tag);
  /// The unclaimed header receives of (peer, tag), oldest first.
  Slots& unclaimed(int peer, std::int64_t tag) { return unclaimed_[{peer, tag}]; }
  /// Resolves pending any-source requests, oldest first per tag, with header receives that
  /// completed. True when `req` is resolved (its payload receive is posted).
  bool resolve(const std::shared_ptr<AnyRequest>& req);
  /// Takes the payload of a message whose header said `bytes` off the wire (its receive had
  /// another size): a receive of its size into a buffer of its own, `sink`.
  braid::Work takeOffLocked(int peer, std::int64_t tag, std::size_t bytes,
                            std::shared_ptr<at::Tensor>& sink);

  std::unique_ptr<braid::Comm> comm_;
  std::mutex mu_;
  std::map<std::pair<int, std::int64_t>, Slots> unclaimed_;
  std::deque<std::shared_ptr<AnyRequest>> anyQueue_;
  int nextPeer_ = 0;  // round-robin start, so one busy sender cannot starve the others
};

}  // namespace braid_torch
