// The public operations: each validates its arguments (core/validate.hpp), builds a tagged Op
// and hands it to the communicator's ordering (Comm::Impl::runBlocking / runAsync in comm.cpp).
#include <algorithm>
#include <braid/comm.hpp>
#include <numeric>

#include "core/comm_impl.hpp"
#include "core/tag.hpp"
#include "core/validate.hpp"

namespace braid {
// ---------------------------------------------------------------- operations

namespace {

// Builds the Op for each public call after validating it (core/validate.cpp).
struct OpBuilder {
  Comm::Impl& impl;

  Op collective(Collective c, const void* send, void* recv, std::size_t count, DataType t,
                Reduction op, int root) {
    Op o;
    o.args.coll = c;
    o.args.send = send;
    o.args.recv = recv;
    o.args.count = count;
    o.args.dtype = t;
    o.args.op = op.op;
    o.args.root = root;
    o.factor = op.factor;
    return o;
  }

  void tagCollective(Op& o) {
    const Collective c = o.args.coll;
    o.desc.coll = c;
    o.desc.dtype = o.args.dtype;
    o.desc.op = o.args.op;
    o.desc.root = o.args.root;
    o.desc.countKey = core::countKey(c, o.args.count, o.counts);
    if (c == Collective::Allgatherv || c == Collective::ReduceScatterv ||
        c == Collective::Alltoallv)
      o.desc.count = std::accumulate(o.counts.begin(), o.counts.end(), std::uint64_t{0});
    else
      o.desc.count = o.args.count;
    o.desc.seq = impl.collectiveSeq.fetch_add(1, std::memory_order_relaxed);
    o.tag = core::collectiveTag(c, o.args.dtype, o.args.op, o.args.root, o.desc.seq,
                                o.desc.countKey, impl.commHash, impl.opts.opFingerprint);
    impl.opIssued(o);
  }
};

std::vector<std::size_t> packedDispls(std::span<const std::size_t> counts) {
  std::vector<std::size_t> d(counts.size());
  std::size_t off = 0;
  for (std::size_t i = 0; i < counts.size(); ++i) {
    d[i] = off;
    off += counts[i];
  }
  return d;
}

}  // namespace

// Each make_* validates and returns the tagged Op.
namespace {

// Tags the op in place: the make_* functions then return their local (no extra move of the
// ~300-byte Op on the per-call path).
void finish(Comm::Impl& impl, Op& o) {
  OpBuilder{impl}.tagCollective(o);
}

}  // namespace

Op Comm::Impl::internalOp(const algo::CollArgs& a) {
  Op o;
  o.args = a;
  o.counts.assign(a.counts.begin(), a.counts.end());
  o.displs.assign(a.displs.begin(), a.displs.end());
  const std::size_t es = dataTypeSize(a.dtype);
  switch (a.coll) {
    case Collective::Allgatherv:
    case Collective::ReduceScatterv:
      o.bytes = std::accumulate(o.counts.begin(), o.counts.end(), std::size_t{0}) * es;
      break;
    case Collective::Allgather:
    case Collective::ReduceScatter:
      o.bytes = a.count * es * static_cast<std::size_t>(size);
      break;
    default:
      o.bytes = a.count * es;
  }
  finish(*this, o);
  return o;
}

static Op makeAllreduce(Comm::Impl& impl, const void* send, void* recv, std::size_t count,
                        DataType t, Reduction op) {
  core::Validator v(impl.rank, impl.size, Collective::Allreduce, impl.id);
  v.dtype(t).reduction(t, op);
  std::size_t bytes = v.bytes("count", count, t, 1);
  v.buffer("send", send, bytes).buffer("recv", recv, bytes).noPartialOverlap(send, recv, bytes);
  Op o = OpBuilder{impl}.collective(Collective::Allreduce, send, recv, count, t, op, 0);
  o.bytes = bytes;
  finish(impl, o);
  return o;
}

void Comm::allreduce(const void* send, void* recv, std::size_t count, DataType t, Reduction op) {
  impl_->runBlocking(makeAllreduce(*impl_, send, recv, count, t, op));
}
Work Comm::allreduceAsync(const void* send, void* recv, std::size_t count, DataType t,
                          Reduction op) {
  return impl_->runAsync(makeAllreduce(*impl_, send, recv, count, t, op));
}

static Op makeReduce(Comm::Impl& impl, const void* send, void* recv, std::size_t count, DataType t,
                     Reduction op, int root) {
  core::Validator v(impl.rank, impl.size, Collective::Reduce, impl.id);
  v.dtype(t).reduction(t, op).root(root);
  std::size_t bytes = v.bytes("count", count, t, 1);
  v.buffer("send", send, bytes);
  if (impl.rank == root) v.buffer("recv", recv, bytes).noPartialOverlap(send, recv, bytes);
  Op o = OpBuilder{impl}.collective(Collective::Reduce, send, recv, count, t, op, root);
  o.bytes = bytes;
  finish(impl, o);
  return o;
}

void Comm::reduce(const void* send, void* recv, std::size_t count, DataType t, Reduction op,
                  int root) {
  impl_->runBlocking(makeReduce(*impl_, send, recv, count, t, op, root));
}
Work Comm::reduceAsync(const void* send, void* recv, std::size_t count, DataType t, Reduction op,
                       int root) {
  return impl_->runAsync(makeReduce(*impl_, send, recv, count, t, op, root));
}

static Op makeBroadcast(Comm::Impl& impl, void* buf, std::size_t count, DataType t, int root) {
  core::Validator v(impl.rank, impl.size, Collective::Broadcast, impl.id);
  v.dtype(t).root(root);
  std::size_t bytes = v.bytes("count", count, t, 1);
  v.buffer("buf", buf, bytes);
  Op o = OpBuilder{impl}.collective(Collective::Broadcast, buf, buf, count, t, ReduceOp::Sum, root);
  o.bytes = bytes;
  finish(impl, o);
  return o;
}

void Comm::broadcast(void* buf, std::size_t count, DataType t, int root) {
  impl_->runBlocking(makeBroadcast(*impl_, buf, count, t, root));
}
Work Comm::broadcastAsync(void* buf, std::size_t count, DataType t, int root) {
  return impl_->runAsync(makeBroadcast(*impl_, buf, count, t, root));
}

static Op makeAllgather(Comm::Impl& impl, const void* send, void* recv, std::size_t count,
                        DataType t) {
  core::Validator v(impl.rank, impl.size, Collective::Allgather, impl.id);
  v.dtype(t);
  std::size_t bytes = v.bytes("count", count, t, 1);
  std::size_t total = v.bytes("count", count, t, static_cast<std::size_t>(impl.size));
  v.buffer("send", send, bytes).buffer("recv", recv, total);
  Op o = OpBuilder{impl}.collective(Collective::Allgather, send, recv, count, t, ReduceOp::Sum, 0);
  o.bytes = total;
  finish(impl, o);
  return o;
}

void Comm::allgather(const void* send, void* recv, std::size_t count, DataType t) {
  impl_->runBlocking(makeAllgather(*impl_, send, recv, count, t));
}
Work Comm::allgatherAsync(const void* send, void* recv, std::size_t count, DataType t) {
  return impl_->runAsync(makeAllgather(*impl_, send, recv, count, t));
}

static Op makeAllgatherv(Comm::Impl& impl, const void* send, void* recv,
                         std::span<const std::size_t> counts, std::span<const std::size_t> displs,
                         DataType t) {
  core::Validator v(impl.rank, impl.size, Collective::Allgatherv, impl.id);
  v.dtype(t).perRank("counts", counts.size(), false).perRank("displs", displs.size(), true);
  std::vector<std::size_t> d = displs.empty()
                                   ? packedDispls(counts)
                                   : std::vector<std::size_t>(displs.begin(), displs.end());
  std::size_t extent = v.extent("counts", counts, d, t);
  std::size_t mine = counts.size() > static_cast<std::size_t>(impl.rank)
                         ? v.bytes("counts[rank]", counts[impl.rank], t, 1)
                         : 0;
  v.buffer("send", send, mine).buffer("recv", recv, extent);
  Op o = OpBuilder{impl}.collective(Collective::Allgatherv, send, recv, 0, t, ReduceOp::Sum, 0);
  o.counts.assign(counts.begin(), counts.end());
  o.displs = std::move(d);
  o.bytes = std::accumulate(counts.begin(), counts.end(), std::size_t{0}) * dataTypeSize(t);
  finish(impl, o);
  return o;
}

void Comm::allgatherv(const void* send, void* recv, std::span<const std::size_t> counts,
                      std::span<const std::size_t> displs, DataType t) {
  impl_->runBlocking(makeAllgatherv(*impl_, send, recv, counts, displs, t));
}
Work Comm::allgathervAsync(const void* send, void* recv, std::span<const std::size_t> counts,
                           std::span<const std::size_t> displs, DataType t) {
  return impl_->runAsync(makeAllgatherv(*impl_, send, recv, counts, displs, t));
}

static Op makeReduceScatter(Comm::Impl& impl, const void* send, void* recv, std::size_t count,
                            DataType t, Reduction op) {
  core::Validator v(impl.rank, impl.size, Collective::ReduceScatter, impl.id);
  v.dtype(t).reduction(t, op);
  std::size_t bytes = v.bytes("count", count, t, 1);
  std::size_t total = v.bytes("count", count, t, static_cast<std::size_t>(impl.size));
  v.buffer("send", send, total).buffer("recv", recv, bytes);
  Op o = OpBuilder{impl}.collective(Collective::ReduceScatter, send, recv, count, t, op, 0);
  o.bytes = total;
  finish(impl, o);
  return o;
}

void Comm::reduceScatter(const void* send, void* recv, std::size_t count, DataType t,
                         Reduction op) {
  impl_->runBlocking(makeReduceScatter(*impl_, send, recv, count, t, op));
}
Work Comm::reduceScatterAsync(const void* send, void* recv, std::size_t count, DataType t,
                              Reduction op) {
  return impl_->runAsync(makeReduceScatter(*impl_, send, recv, count, t, op));
}

static Op makeReduceScatterv(Comm::Impl& impl, const void* send, void* recv,
                             std::span<const std::size_t> counts, DataType t, Reduction op) {
  core::Validator v(impl.rank, impl.size, Collective::ReduceScatterv, impl.id);
  v.dtype(t).reduction(t, op).perRank("counts", counts.size(), false);
  std::vector<std::size_t> d = packedDispls(counts);
  std::size_t extent = v.extent("counts", counts, d, t);
  std::size_t mine = v.bytes("counts[rank]", counts[impl.rank], t, 1);
  v.buffer("send", send, extent).buffer("recv", recv, mine);
  Op o = OpBuilder{impl}.collective(Collective::ReduceScatterv, send, recv, 0, t, op, 0);
  o.counts.assign(counts.begin(), counts.end());
  o.displs = std::move(d);
  o.bytes = extent;
  finish(impl, o);
  return o;
}

void Comm::reduceScatterv(const void* send, void* recv, std::span<const std::size_t> counts,
                          DataType t, Reduction op) {
  impl_->runBlocking(makeReduceScatterv(*impl_, send, recv, counts, t, op));
}
Work Comm::reduceScattervAsync(const void* send, void* recv, std::span<const std::size_t> counts,
                               DataType t, Reduction op) {
  return impl_->runAsync(makeReduceScatterv(*impl_, send, recv, counts, t, op));
}

static Op makeGather(Comm::Impl& impl, const void* send, void* recv, std::size_t count, DataType t,
                     int root) {
  core::Validator v(impl.rank, impl.size, Collective::Gather, impl.id);
  v.dtype(t).root(root);
  std::size_t bytes = v.bytes("count", count, t, 1);
  std::size_t total = v.bytes("count", count, t, static_cast<std::size_t>(impl.size));
  v.buffer("send", send, bytes);
  if (impl.rank == root) v.buffer("recv", recv, total);
  Op o = OpBuilder{impl}.collective(Collective::Gather, send, recv, count, t, ReduceOp::Sum, root);
  o.bytes = total;
  finish(impl, o);
  return o;
}

void Comm::gather(const void* send, void* recv, std::size_t count, DataType t, int root) {
  impl_->runBlocking(makeGather(*impl_, send, recv, count, t, root));
}
Work Comm::gatherAsync(const void* send, void* recv, std::size_t count, DataType t, int root) {
  return impl_->runAsync(makeGather(*impl_, send, recv, count, t, root));
}

static Op makeScatter(Comm::Impl& impl, const void* send, void* recv, std::size_t count, DataType t,
                      int root) {
  core::Validator v(impl.rank, impl.size, Collective::Scatter, impl.id);
  v.dtype(t).root(root);
  std::size_t bytes = v.bytes("count", count, t, 1);
  std::size_t total = v.bytes("count", count, t, static_cast<std::size_t>(impl.size));
  if (impl.rank == root) v.buffer("send", send, total);
  v.buffer("recv", recv, bytes);
  Op o = OpBuilder{impl}.collective(Collective::Scatter, send, recv, count, t, ReduceOp::Sum, root);
  o.bytes = total;
  finish(impl, o);
  return o;
}

void Comm::scatter(const void* send, void* recv, std::size_t count, DataType t, int root) {
  impl_->runBlocking(makeScatter(*impl_, send, recv, count, t, root));
}
Work Comm::scatterAsync(const void* send, void* recv, std::size_t count, DataType t, int root) {
  return impl_->runAsync(makeScatter(*impl_, send, recv, count, t, root));
}

static Op makeAlltoall(Comm::Impl& impl, const void* send, void* recv, std::size_t count,
                       DataType t) {
  core::Validator v(impl.rank, impl.size, Collective::Alltoall, impl.id);
  v.dtype(t);
  std::size_t total = v.bytes("count", count, t, static_cast<std::size_t>(impl.size));
  v.buffer("send", send, total).buffer("recv", recv, total).noPartialOverlap(send, recv, total);
  if (send == recv && total > 0)
    throw Error(ErrorCode::InvalidArgument, impl.where(Collective::Alltoall) +
                                                ": in-place alltoall is not supported "
                                                "(send and recv are the same buffer)");
  Op o = OpBuilder{impl}.collective(Collective::Alltoall, send, recv, count, t, ReduceOp::Sum, 0);
  o.bytes = total;
  finish(impl, o);
  return o;
}

void Comm::alltoall(const void* send, void* recv, std::size_t count, DataType t) {
  impl_->runBlocking(makeAlltoall(*impl_, send, recv, count, t));
}
Work Comm::alltoallAsync(const void* send, void* recv, std::size_t count, DataType t) {
  return impl_->runAsync(makeAlltoall(*impl_, send, recv, count, t));
}

static Op makeAlltoallv(Comm::Impl& impl, const void* send, std::span<const std::size_t> sendCounts,
                        std::span<const std::size_t> sendDispls, void* recv,
                        std::span<const std::size_t> recvCounts,
                        std::span<const std::size_t> recvDispls, DataType t) {
  core::Validator v(impl.rank, impl.size, Collective::Alltoallv, impl.id);
  v.dtype(t)
      .perRank("sendCounts", sendCounts.size(), false)
      .perRank("sendDispls", sendDispls.size(), true)
      .perRank("recvCounts", recvCounts.size(), false)
      .perRank("recvDispls", recvDispls.size(), true);
  std::vector<std::size_t> sd =
      sendDispls.empty() ? packedDispls(sendCounts)
                         : std::vector<std::size_t>(sendDispls.begin(), sendDispls.end());
  std::vector<std::size_t> rd =
      recvDispls.empty() ? packedDispls(recvCounts)
                         : std::vector<std::size_t>(recvDispls.begin(), recvDispls.end());
  std::size_t sendExtent = v.extent("sendCounts", sendCounts, sd, t);
  std::size_t recvExtent = v.extent("recvCounts", recvCounts, rd, t);
  v.buffer("send", send, sendExtent).buffer("recv", recv, recvExtent);
  if (send == recv && sendExtent > 0)
    throw Error(ErrorCode::InvalidArgument,
                impl.where(Collective::Alltoallv) + ": in-place alltoallv is not supported");
  Op o = OpBuilder{impl}.collective(Collective::Alltoallv, send, recv, 0, t, ReduceOp::Sum, 0);
  o.counts.assign(sendCounts.begin(), sendCounts.end());
  o.displs = std::move(sd);
  o.recvCounts.assign(recvCounts.begin(), recvCounts.end());
  o.recvDispls = std::move(rd);
  o.bytes = std::max(sendExtent, recvExtent);
  finish(impl, o);
  return o;
}

void Comm::alltoallv(const void* send, std::span<const std::size_t> sendCounts,
                     std::span<const std::size_t> sendDispls, void* recv,
                     std::span<const std::size_t> recvCounts,
                     std::span<const std::size_t> recvDispls, DataType t) {
  impl_->runBlocking(
      makeAlltoallv(*impl_, send, sendCounts, sendDispls, recv, recvCounts, recvDispls, t));
}
Work Comm::alltoallvAsync(const void* send, std::span<const std::size_t> sendCounts,
                          std::span<const std::size_t> sendDispls, void* recv,
                          std::span<const std::size_t> recvCounts,
                          std::span<const std::size_t> recvDispls, DataType t) {
  return impl_->runAsync(
      makeAlltoallv(*impl_, send, sendCounts, sendDispls, recv, recvCounts, recvDispls, t));
}

static Op makeBarrier(Comm::Impl& impl) {
  Op o = OpBuilder{impl}.collective(Collective::Barrier, nullptr, nullptr, 0, DataType::Uint8,
                                    ReduceOp::Sum, 0);
  finish(impl, o);
  return o;
}

void Comm::barrier() {
  impl_->runBlocking(makeBarrier(*impl_));
}
Work Comm::barrierAsync() {
  return impl_->runAsync(makeBarrier(*impl_));
}

static Op makeP2P(Comm::Impl& impl, Collective c, const void* buf, std::size_t count, DataType t,
                  int peer, std::uint32_t tag) {
  core::Validator v(impl.rank, impl.size, c, impl.id);
  v.dtype(t).peer(peer);
  std::size_t bytes = v.bytes("count", count, t, 1);
  v.buffer("buf", buf, bytes);
  Op o;
  o.args.coll = c;
  o.args.send = buf;
  o.args.recv = const_cast<void*>(buf);
  o.args.count = count;
  o.args.dtype = t;
  o.peer = peer;
  o.tag = core::p2pTag(t, tag);
  o.bytes = bytes;
  o.desc.coll = c;
  o.desc.dtype = t;
  o.desc.peer = peer;
  o.desc.userTag = tag;
  o.desc.count = count;
  impl.opIssued(o);
  return o;
}

void Comm::send(const void* buf, std::size_t count, DataType t, int peer, std::uint32_t tag) {
  impl_->runBlocking(makeP2P(*impl_, Collective::Send, buf, count, t, peer, tag));
}
Work Comm::sendAsync(const void* buf, std::size_t count, DataType t, int peer, std::uint32_t tag) {
  return impl_->runAsync(makeP2P(*impl_, Collective::Send, buf, count, t, peer, tag));
}
void Comm::recv(void* buf, std::size_t count, DataType t, int peer, std::uint32_t tag) {
  impl_->runBlocking(makeP2P(*impl_, Collective::Recv, buf, count, t, peer, tag));
}
Work Comm::recvAsync(void* buf, std::size_t count, DataType t, int peer, std::uint32_t tag) {
  return impl_->runAsync(makeP2P(*impl_, Collective::Recv, buf, count, t, peer, tag));
}

}  // namespace braid
