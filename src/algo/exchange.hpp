// What every algorithm file shares: posting the operation's messages, keeping their requests
// safe when an operation fails half-way, chunk sizing against the scratch memory, and copies.
#pragma once

#include <algorithm>
#include <array>
#include <braid/error.hpp>
#include <braid/types.hpp>
#include <cstddef>
#include <cstdint>
#include <cstring>
#include <exception>
#include <memory>
#include <new>
#include <string>

#include "algo/algorithm.hpp"
#include "algo/patterns/segments.hpp"
#include "kernels/copy.hpp"
#include "kernels/reduce.hpp"
#include "transport/transport.hpp"

namespace braid::algo {

/// A fixed set of requests on the algorithm's stack. When an operation fails half-way (timeout,
/// lost peer, mismatch), requests may still be posted, and the peers would wait for messages
/// that never come. So the destructor aborts the transport when it runs during unwinding or
/// finds a request still pending: the transport then stops touching the requests before the
/// stack frees them, and the peers fail fast with Error(PeerLost) instead of waiting for their
/// deadline. A failed collective therefore leaves the transport aborted; errors raised before
/// the first InFlight exists (argument checks) leave it intact.
template <std::size_t N>
class InFlight {
 public:
  explicit InFlight(Context& ctx) : ctx_(ctx), uncaught_(std::uncaught_exceptions()) {}
  InFlight(const InFlight&) = delete;
  InFlight& operator=(const InFlight&) = delete;
  ~InFlight() {
    bool abandon = std::uncaught_exceptions() > uncaught_;
    for (std::size_t k = 0; k < used_; ++k)
      abandon = abandon || slot(order_[k])->state.load(std::memory_order_acquire) ==
                               transport::Request::State::Pending;
    if (abandon) {
      try {
        ctx_.tr.abort("rank " + std::to_string(ctx_.rank) + " failed an operation (tag " +
                      std::to_string(ctx_.tag) + ") with messages in flight");
      } catch (...) {  // NOLINT(bugprone-empty-catch): nothing more to do while unwinding
      }
    }
    for (std::size_t k = 0; k < used_; ++k) slot(order_[k])->~Request();
  }

  transport::Request& operator[](std::size_t i) noexcept { return at(i); }

  // The algorithm waits for every request it posts before it returns (transport::Request::
  // attended): no transport's background thread needs to move them.
  void send(std::size_t i, int peer, const void* data, std::size_t bytes) {
    ctx_.tr.postSend(peer, data, bytes, ctx_.tag, marked(i, true));
  }
  void recv(std::size_t i, int peer, void* data, std::size_t bytes) {
    ctx_.tr.postRecv(peer, data, bytes, ctx_.tag, marked(i, true));
  }
  /// Requests the caller overlaps with work of its own before it waits for them: a whole
  /// collective of another group (the hierarchical allreduce's network steps while the node
  /// reduces the next piece), or a reduction while the peer only sends and leaves its CPU idle
  /// (a reduce's children). Left unattended, so that a transport's progress thread moves them
  /// meanwhile (docs/benchmarks.md, "The progress thread and the algorithms' own requests").
  void sendOverlapped(std::size_t i, int peer, const void* data, std::size_t bytes) {
    ctx_.tr.postSend(peer, data, bytes, ctx_.tag, marked(i, false));
  }
  void recvOverlapped(std::size_t i, int peer, void* data, std::size_t bytes) {
    ctx_.tr.postRecv(peer, data, bytes, ctx_.tag, marked(i, false));
  }
  /// Waits for request i if it was posted and has not been waited for yet.
  void wait(std::size_t i) {
    if (!made_[i]) return;
    transport::Request& r = *slot(i);
    if (r.state.load(std::memory_order_acquire) == transport::Request::State::Idle) return;
    ctx_.tr.wait(r, ctx_.deadline);
    r.state.store(transport::Request::State::Idle, std::memory_order_release);
  }
  /// Waits for every request made, in index order.
  void waitAll() {
    if (used_ == 0) return;
    if (used_ == 1) {
      wait(order_[0]);
      return;
    }
    for (std::size_t i = 0; i < N; ++i) wait(i);
  }

 private:
  // Requests are made on first use: an algorithm sized for the widest tree (66 slots) posts
  // one or two of them for 2 ranks, and zeroing all of them cost a small broadcast more than
  // its transport did (docs/benchmarks.md). order_ lists the ones made, so that the destructor
  // looks at those only.
  transport::Request* slot(std::size_t i) noexcept {
    return std::launder(
        reinterpret_cast<transport::Request*>(raw_ + i * sizeof(transport::Request)));
  }
  transport::Request& at(std::size_t i) noexcept {
    if (!made_[i]) {
      ::new (raw_ + i * sizeof(transport::Request)) transport::Request();
      made_[i] = true;
      order_[used_++] = i;
    }
    return *slot(i);
  }
  transport::Request& marked(std::size_t i, bool attended) noexcept {
    transport::Request& r = at(i);
    r.attended = attended;
    return r;
  }

  Context& ctx_;
  int uncaught_;
  std::size_t used_ = 0;
  std::array<bool, N> made_{};
  std::array<std::size_t, N> order_;  // the first used_ entries: the slots made, in that order
  alignas(transport::Request) std::byte raw_[N * sizeof(transport::Request)];
};

/// InFlight for a number of requests known only at run time (e.g. one per peer): allocated
/// once per operation, same abort-on-failure contract as InFlight.
class InFlightSet {
 public:
  InFlightSet(Context& ctx, std::size_t n)
      : ctx_(ctx),
        uncaught_(std::uncaught_exceptions()),
        n_(n),
        reqs_(std::make_unique<transport::Request[]>(n)) {}
  InFlightSet(const InFlightSet&) = delete;
  InFlightSet& operator=(const InFlightSet&) = delete;
  ~InFlightSet() {
    bool abandon = std::uncaught_exceptions() > uncaught_;
    for (std::size_t i = 0; i < n_; ++i)
      abandon = abandon || reqs_[i].state.load(std::memory_order_acquire) ==
                               transport::Request::State::Pending;
    if (!abandon) return;
    try {
      ctx_.tr.abort("rank " + std::to_string(ctx_.rank) + " failed an operation (tag " +
                    std::to_string(ctx_.tag) + ") with messages in flight");
    } catch (...) {  // NOLINT(bugprone-empty-catch): nothing more to do while unwinding
    }
  }

  void send(std::size_t i, int peer, const void* data, std::size_t bytes) {
    reqs_[i].attended = true;  // as InFlight's
    ctx_.tr.postSend(peer, data, bytes, ctx_.tag, reqs_[i]);
  }
  void recv(std::size_t i, int peer, void* data, std::size_t bytes) {
    reqs_[i].attended = true;
    ctx_.tr.postRecv(peer, data, bytes, ctx_.tag, reqs_[i]);
  }
  void wait(std::size_t i) {
    transport::Request& r = reqs_[i];
    if (r.state.load(std::memory_order_acquire) == transport::Request::State::Idle) return;
    ctx_.tr.wait(r, ctx_.deadline);
    r.state.store(transport::Request::State::Idle, std::memory_order_release);
  }
  void waitAll() {
    for (std::size_t i = 0; i < n_; ++i) wait(i);
  }

 private:
  Context& ctx_;
  int uncaught_;
  std::size_t n_;
  std::unique_ptr<transport::Request[]> reqs_;
};

inline std::uint8_t* bytesOf(void* p) noexcept {
  return static_cast<std::uint8_t*>(p);
}
inline const std::uint8_t* bytesOf(const void* p) noexcept {
  return static_cast<const std::uint8_t*>(p);
}

/// memmove when the buffers differ (in-place callers pass the same pointer).
inline void copyBytes(void* dst, const void* src, std::size_t bytes) noexcept {
  if (bytes > 0 && dst != src) std::memmove(dst, src, bytes);
}

/// Whether a direct collective of group `g` (one host) in which every rank writes an output of
/// `outputBytes` (allgather, allreduce, alltoall, broadcast) writes it with non-temporal
/// stores: when the outputs of all ranks together reach the group's threshold
/// (SharedMemoryGroup::streamingBytes: every rank writing at once, measured on the machine for
/// this many ranks, transport/shm/shm_streaming.hpp), so that they would not stay cached until
/// read anyway (docs/benchmarks.md, "Shared memory vs Open MPI": 2 ranks at 8 MiB, alltoall
/// 1.4-2.1 -> 2.8-3.2 GB/s and broadcast 7-10 -> 14-16 GB/s busbw on Zen 1; "Streaming stores
/// measured by the group": where the outputs stay cached, streaming them cost up to 2.3x).
inline bool streamsOutput(const transport::SharedMemoryGroup& g, std::size_t outputBytes) noexcept {
  const std::size_t threshold = g.streamingBytes();
  return threshold != 0 && outputBytes * static_cast<std::size_t>(g.size()) >= threshold;
}

/// The same by the process's threshold (kernels::streamingThresholdBytes(): one core's copies,
/// measured), for a collective with one writer, the reduce's root, whose output the group's
/// measurement of every rank writing at once does not describe; on a Zen 5 guest the group's
/// threshold gained the reduce nothing and once cost it 1.18x at 16 MiB (docs/benchmarks.md,
/// "Streaming stores measured by the group").
inline bool streamsOutput(std::size_t outputBytes, int ranks) noexcept {
  const std::size_t threshold = kernels::streamingThresholdBytes();
  return threshold != 0 && outputBytes * static_cast<std::size_t>(ranks) >= threshold;
}

/// memcpy into an output, with non-temporal stores when `stream` (no overlap).
inline void copyOut(bool stream, void* dst, const void* src, std::size_t bytes) noexcept {
  if (stream)
    kernels::copyStreaming(dst, src, bytes);
  else
    std::memcpy(dst, src, bytes);
}

/// Sums `count` elements of `own` and of `peers` inputs (peer(1) .. peer(peers)) block by block
/// in a 16 KiB stack buffer and hands each block to emit(byteOffset, block, bytes), which copies
/// it where it goes. For a sum that ends in a staging area peers read: summed there directly,
/// every vector store first waits for a peer's copy of its line to be invalidated, while
/// memcpy writes whole lines (2 ranks, far placement, 2 MiB reduce: 7.7 -> 14.4 GB/s;
/// docs/benchmarks.md).
template <class Peer, class Emit>
void sumInBlocks(DataType t, ReduceOp op, const std::uint8_t* own, Peer&& peer, int peers,
                 std::size_t count, Emit&& emit) {
  constexpr std::size_t kBlockBytes = 16 * 1024;
  alignas(64) std::uint8_t block[kBlockBytes];
  const std::size_t es = dataTypeSize(t);
  const std::size_t per = kBlockBytes / es;
  for (std::size_t i = 0; i < count; i += per) {
    const std::size_t m = std::min(per, count - i);
    const std::size_t at = i * es;
    kernels::reduce3(t, op, block, own + at, peer(1) + at, m);
    for (int s = 2; s <= peers; ++s) kernels::reduceInto(t, op, block, peer(s) + at, m);
    emit(at, static_cast<const std::uint8_t*>(block), m * es);
  }
}

/// Elements per pipeline chunk for an algorithm that keeps `slots` chunks in scratch
/// (slots == 0: it needs no scratch). Every rank computes the same value.
inline std::size_t chunkElems(const Context& ctx, std::size_t slots, std::size_t elemSize) {
  const std::size_t ce =
      patterns::chunkElements(ctx.chunkBytes, ctx.scratch.size(), slots, elemSize);
  if (slots > 0 && ctx.scratch.size() < slots * ce * elemSize)
    throw Error(ErrorCode::InvalidArgument, "rank " + std::to_string(ctx.rank) + ": scratch of " +
                                                std::to_string(ctx.scratch.size()) +
                                                " bytes cannot hold " + std::to_string(slots) +
                                                " chunks of one " + std::to_string(elemSize) +
                                                "-byte element (raise BRAID_BUFFSIZE)");
  return ce;
}

/// Scratch slot `i` of `slotBytes` bytes.
inline std::uint8_t* scratchSlot(const Context& ctx, std::size_t i,
                                 std::size_t slotBytes) noexcept {
  return ctx.scratch.data() + i * slotBytes;
}

}  // namespace braid::algo
