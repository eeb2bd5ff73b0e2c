// Linear gather and scatter: the root talks to every other rank directly.
//
// Gather: every non-root rank sends its block to the root, which receives block j straight into
// offset j * count of its output (up to kWindow receives in flight). Scatter mirrors it: the
// root sends block j to rank j. The root's own block is a local copy (none in place: gather's
// send == recv + root * count, scatter's recv == send + root * count).
// Steps: 1 (the root serialises N-1 messages). Bytes on the wire: the root receives (gather) or
// sends (scatter) (N-1)/N x its buffer; every other rank sends or receives count elements.
#include "algo/exchange.hpp"

namespace braid::algo {

namespace {

constexpr std::size_t kWindow = 8;

/// The root's side: one message per other rank, peers root+1, root+2, ... so that concurrent
/// gathers to different roots do not all hit rank 0 first.
template <typename Post>
void rootExchange(Context& ctx, int root, Post post) {
  InFlight<kWindow> reqs(ctx);
  for (int i = 1; i < ctx.size; ++i) {
    const std::size_t req = static_cast<std::size_t>(i - 1) % kWindow;
    reqs.wait(req);
    post(reqs, req, (root + i) % ctx.size);
  }
  reqs.waitAll();
}

}  // namespace

void linearGather(Context& ctx, const CollArgs& a) {
  const std::size_t bytes = a.count * dataTypeSize(a.dtype);
  if (ctx.rank == a.root) {
    std::uint8_t* const out = bytesOf(a.recv);
    copyBytes(out + static_cast<std::size_t>(a.root) * bytes, a.send, bytes);
    if (bytes == 0) return;
    rootExchange(ctx, a.root, [&](InFlight<kWindow>& reqs, std::size_t req, int peer) {
      reqs.recv(req, peer, out + static_cast<std::size_t>(peer) * bytes, bytes);
    });
  } else if (bytes > 0) {
    InFlight<1> reqs(ctx);
    reqs.send(0, a.root, a.send, bytes);
    reqs.wait(0);
  }
}

void linearScatter(Context& ctx, const CollArgs& a) {
  const std::size_t bytes = a.count * dataTypeSize(a.dtype);
  if (ctx.rank == a.root) {
    const std::uint8_t* const in = bytesOf(a.send);
    copyBytes(a.recv, in + static_cast<std::size_t>(a.root) * bytes, bytes);
    if (bytes == 0) return;
    rootExchange(ctx, a.root, [&](InFlight<kWindow>& reqs, std::size_t req, int peer) {
      reqs.send(req, peer, in + static_cast<std::size_t>(peer) * bytes, bytes);
    });
  } else if (bytes > 0) {
    InFlight<1> reqs(ctx);
    reqs.recv(0, a.root, a.recv, bytes);
    reqs.wait(0);
  }
}

}  // namespace braid::algo
