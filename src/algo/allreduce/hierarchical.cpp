// Hierarchical allreduce: composed from sub-groups, for several hosts with several ranks each,
// pipelined by pieces so the network is kept busy while the hosts' shared memory works.
// Between hosts the network is the bottleneck: this moves 2(M-1)/M x S across it per host
// whatever the number of ranks per host, every local rank carrying 1/L of it in parallel.
//
// With M nodes of L ranks each (Context::topo, uniform), the buffer is cut into P pieces of at
// most Context::pieceBytes (BRAID_HIER_PIECE_SIZE), each piece into L balanced slices. For every
// piece k:
//   1. Inside each node: reduce_scatterv of the piece's L slices (local rank l ends with
//      slice l reduced over its node), a collective of the node's sub-communicator.
//   2. Across nodes: the M ranks with local rank l (one per node) run the ring allreduce's
//      2(M-1) steps (patterns/ring.hpp) on slice l, all L slices in parallel on disjoint rank
//      sets; each step is one message of 1/M of the slice. Between two nodes (M = 2) the pair
//      instead exchanges the whole slice once and both reduce it: the same bytes as the ring's
//      two steps, half the latency.
//   3. Inside each node: allgatherv of the piece's slices, on the node's sub-communicator.
// The pieces overlap (NCCL-style): step 0 of piece k's network phase is posted, then piece
// k+1's reduce-scatter and piece k-1's allgather run in shared memory while it crosses (the
// transports progress posted messages on their own), then piece k's remaining steps run, its
// last one left in flight until its allgather. On each link the order is fixed (... last step
// of k-1, step 0 of k, ...), and every rank issues the in-node phases in the same order
// (RS 0, then RS k+1 and AG k-1 for k = 0 .. P-1, then AG P-1), so messages stay matched.
// The in-node phases are collectives of the node's group (Context::groups, algo/group.hpp):
// a communicator's node sub-communicator selects its own algorithm for them (shm_direct or
// shm_ll on one host), a view runs ring. The network phase posts its messages itself on the
// transport of the slice group (the ranks with this local rank on every node), following ring
// allreduce's schedule step by step, because a blocking collective cannot leave a step in
// flight. Each element is reduced once in its node and once across nodes (one chain), then
// copied, so every rank ends with bitwise the same result.
// Scratch: the first half (64-byte aligned) receives the network's reduce-scatter messages (so a
// piece's network segment, ~piece/(L M), is capped by it); the groups bring their own (a view
// the rest of this one).
// Needs a topology of at least 2 nodes, at least 2 ranks on a node, the same number on every
// node (the row's constraints; selection runs it only then, a direct call throws).
// Bytes on the wire: per rank, 2(L-1)/L x S over shared memory (phases 1 and 3) and
// 2(M-1)/M x S/L over the network (phase 2); per host L x 2(M-1)/M x S/L = 2(M-1)/M x S, the
// cross-host bytes of an allreduce of 2 ranks per slice when M = 2 — independent of L and P.
#include <algorithm>
#include <braid/error.hpp>
#include <limits>
#include <string>
#include <vector>

#include "algo/exchange.hpp"
#include "algo/group.hpp"
#include "algo/patterns/ring.hpp"
#include "kernels/reduce.hpp"

namespace braid::algo {

namespace {

/// One piece of the buffer: its place (elements) and its L slices (relative to the piece).
struct Piece {
  std::size_t offset = 0;
  std::vector<std::size_t> counts;
  std::vector<std::size_t> displs;
};

/// The network phase of one piece on the slice view: ring allreduce of the rank's slice, in
/// place, one message per step. Requests 2p (send) and 2p+1 (receive), p = piece parity, all
/// overlapped (InFlight::sendOverlapped): steps stay in flight while the node works on other
/// pieces, and only the transport's progress thread moves them then.
class NetPhase {
 public:
  NetPhase(Context& net, InFlight<4>& reqs, DataType dt, ReduceOp op)
      : net_(net), reqs_(reqs), dt_(dt), op_(op), es_(dataTypeSize(dt)) {}

  /// Posts step 0 (reduce-scatter) of the piece whose slice starts at `slice`; between two
  /// nodes, the one exchange of the whole slice.
  void start(std::size_t piece, std::uint8_t* slice, std::size_t count) {
    slice_ = slice;
    count_ = count;
    pair_ = 2 * (piece % 2);
    if (net_.size == 2) {
      const int other = 1 - net_.rank;
      reqs_.recvOverlapped(pair_ + 1, other, net_.scratch.data(), count * es_);
      reqs_.sendOverlapped(pair_, other, slice, count * es_);
      return;
    }
    layout_ = patterns::SegmentLayout::even(count, net_.size);
    postReduceScatter(0);
  }

  /// Completes the reduce-scatter and runs the allgather, leaving its last step in flight;
  /// between two nodes, completes the exchange and reduces (node 0's data first on both, so
  /// that they hold bitwise the same result).
  void finish() {
    if (net_.size == 2) {
      reqs_.wait(pair_ + 1);
      reqs_.wait(pair_);
      const std::uint8_t* theirs = net_.scratch.data();
      if (net_.rank == 0)
        kernels::reduceInto(dt_, op_, slice_, theirs, count_);
      else
        kernels::reduce3(dt_, op_, slice_, theirs, slice_, count_);
      return;
    }
    const int steps = net_.size - 1;
    for (int s = 0; s < steps; ++s) {
      if (s > 0) postReduceScatter(s);
      reqs_.wait(pair_ + 1);
      reqs_.wait(pair_);
      const patterns::Range rc =
          layout_.at(patterns::ringReduceScatterRecvSegment(net_.rank, net_.size, s));
      kernels::reduceInto(dt_, op_, slice_ + rc.offset * es_, net_.scratch.data(), rc.count);
    }
    for (int s = 0; s < steps; ++s) {
      const patterns::Range sc =
          layout_.at(patterns::ringAllgatherSendSegment(net_.rank, net_.size, s));
      const patterns::Range rc =
          layout_.at(patterns::ringAllgatherRecvSegment(net_.rank, net_.size, s));
      reqs_.recvOverlapped(pair_ + 1, patterns::ringPrev(net_.rank, net_.size),
                           slice_ + rc.offset * es_, rc.count * es_);
      reqs_.sendOverlapped(pair_, patterns::ringNext(net_.rank, net_.size),
                           slice_ + sc.offset * es_, sc.count * es_);
      if (s + 1 < steps) {
        reqs_.wait(pair_ + 1);
        reqs_.wait(pair_);
      }
    }
  }

 private:
  void postReduceScatter(int s) {
    const patterns::Range sc =
        layout_.at(patterns::ringReduceScatterSendSegment(net_.rank, net_.size, s));
    const patterns::Range rc =
        layout_.at(patterns::ringReduceScatterRecvSegment(net_.rank, net_.size, s));
    reqs_.recvOverlapped(pair_ + 1, patterns::ringPrev(net_.rank, net_.size), net_.scratch.data(),
                         rc.count * es_);
    reqs_.sendOverlapped(pair_, patterns::ringNext(net_.rank, net_.size), slice_ + sc.offset * es_,
                         sc.count * es_);
  }

  Context& net_;
  InFlight<4>& reqs_;
  DataType dt_;
  ReduceOp op_;
  std::size_t es_;
  std::uint8_t* slice_ = nullptr;
  std::size_t count_ = 0;
  std::size_t pair_ = 0;
  patterns::SegmentLayout layout_ = patterns::SegmentLayout::even(0, 1);
};

}  // namespace

void hierarchicalAllreduce(Context& ctx, const CollArgs& a) {
  const topology::Topology* topo =
      &requireNodes(ctx, Collective::Allreduce, "hierarchical", /*uniform=*/true);
  Groups& groups = requireGroups(ctx, Collective::Allreduce, "hierarchical");
  const std::size_t es = dataTypeSize(a.dtype);
  const int local = topo->localRank(ctx.rank);
  const int perNode = topo->maxLocalSize();
  const int nodes = topo->numNodes();
  const auto uL = static_cast<std::size_t>(perNode);
  const auto ul = static_cast<std::size_t>(local);

  // Scratch: the network's receive buffer first, the in-node rings' chunk slots after it.
  std::size_t netBytes = ctx.scratch.size() / 2;
  netBytes = netBytes >= 64 ? netBytes - netBytes % 64 : netBytes - netBytes % es;
  if (netBytes < es)
    throw Error(ErrorCode::InvalidArgument,
                "rank " + std::to_string(ctx.rank) + ": hierarchical allreduce: scratch of " +
                    std::to_string(ctx.scratch.size()) + " bytes cannot hold two " +
                    std::to_string(es) + "-byte elements (raise BRAID_BUFFSIZE)");
  // Elements per piece: at most pieceBytes, and what the network delivers at once fits the
  // receive buffer (a 1/M segment of the slice; between two nodes the whole slice).
  const std::size_t maxPiece =
      (netBytes / es) * uL * (nodes == 2 ? std::size_t{1} : static_cast<std::size_t>(nodes));
  const std::size_t pieceElems = std::clamp<std::size_t>(ctx.pieceBytes / es, 1, maxPiece);
  const std::size_t pieces = (a.count + pieceElems - 1) / pieceElems;
  if (pieces == 0) return;
  const auto upieces = pieces;
  // evenSplit takes an int count of parts.
  if (upieces > static_cast<std::size_t>(std::numeric_limits<int>::max()))
    throw Error(ErrorCode::InvalidArgument,
                "rank " + std::to_string(ctx.rank) + ": hierarchical allreduce: too many pieces (" +
                    std::to_string(upieces) + "), raise BRAID_HIER_PIECE_SIZE");
  const int ipieces = static_cast<int>(upieces);
  auto pieceAt = [&](std::size_t k) {
    const patterns::Range pr = patterns::evenSplit(a.count, ipieces, static_cast<int>(k));
    Piece p;
    p.offset = pr.offset;
    p.counts.resize(uL);
    p.displs.resize(uL);
    for (int l = 0; l < perNode; ++l) {
      const patterns::Range s = patterns::evenSplit(pr.count, perNode, l);
      p.counts[static_cast<std::size_t>(l)] = s.count;
      p.displs[static_cast<std::size_t>(l)] = s.offset;
    }
    return p;
  };

  Group& nodeGroup = groups.node();
  Group& sliceGroup = *groups.slice();  // uniform nodes: every local rank has its slice group
  Context netCtx{sliceGroup.transport(),
                 sliceGroup.rank(),
                 sliceGroup.size(),
                 ctx.chunkBytes,
                 ctx.scratch.first(netBytes),
                 ctx.deadline,
                 ctx.tag,
                 ctx.deterministic,
                 nullptr};

  const std::uint8_t* const send = bytesOf(a.send);
  std::uint8_t* const recv = bytesOf(a.recv);
  auto mySlice = [&](const Piece& p) { return recv + (p.offset + p.displs[ul]) * es; };

  // 1. Reduce-scatter of a piece inside the node; in place when send == recv (ring allows its
  // output to be exactly its own segment of the input).
  auto reduceScatter = [&](const Piece& p) {
    CollArgs rs = a;
    rs.coll = Collective::ReduceScatterv;
    rs.send = send + p.offset * es;
    rs.counts = p.counts;
    rs.displs = p.displs;
    rs.recv = mySlice(p);
    rs.count = p.counts[ul];
    nodeGroup.run(rs);
  };
  // 3. Allgather of a piece's slices inside the node, in place.
  auto allgather = [&](const Piece& p) {
    CollArgs ag = a;
    ag.coll = Collective::Allgatherv;
    ag.send = mySlice(p);
    ag.recv = recv + p.offset * es;
    ag.count = p.counts[ul];
    ag.counts = p.counts;
    ag.displs = p.displs;
    nodeGroup.run(ag);
  };

  InFlight<4> reqs(netCtx);
  NetPhase net(netCtx, reqs, a.dtype, a.op);
  Piece cur = pieceAt(0);
  Piece prev;
  reduceScatter(cur);
  for (std::size_t k = 0; k < upieces; ++k) {
    // 2. Step 0 of piece k crosses the network (behind the last step of piece k-1) ...
    net.start(k, mySlice(cur), cur.counts[ul]);
    // ... while the next piece is reduced and the previous one gathered in the node.
    Piece next;
    if (k + 1 < upieces) {
      next = pieceAt(k + 1);
      reduceScatter(next);
    }
    if (k > 0) {
      const std::size_t pp = 2 * ((k - 1) % 2);
      reqs.wait(pp + 1);
      reqs.wait(pp);
      allgather(prev);
    }
    net.finish();
    prev = std::move(cur);
    cur = std::move(next);
  }
  const std::size_t pp = 2 * ((upieces - 1) % 2);
  reqs.wait(pp + 1);
  reqs.wait(pp);
  allgather(prev);
}

}  // namespace braid::algo
