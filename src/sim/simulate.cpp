#include "sim/simulate.hpp"

#include <algorithm>
#include <braid/error.hpp>
#include <cstdlib>
#include <memory>
#include <string_view>

#include "algo/subgroup.hpp"

namespace braid::sim {

namespace {

constexpr DataType kType = DataType::Float32;
constexpr std::size_t kEs = 4;

bool perRankBlocks(Collective c) {
  switch (c) {
    case Collective::Allgather:
    case Collective::Allgatherv:
    case Collective::ReduceScatter:
    case Collective::ReduceScatterv:
    case Collective::Gather:
    case Collective::Scatter:
    case Collective::Alltoall:
    case Collective::Alltoallv:
      return true;
    default:
      return false;
  }
}

/// Zeroed memory that costs nothing until written (calloc of a large block maps zero pages).
struct Buffer {
  std::unique_ptr<std::uint8_t, decltype(&std::free)> p{nullptr, &std::free};
  explicit Buffer(std::size_t bytes) {
    p.reset(static_cast<std::uint8_t*>(std::calloc(std::max<std::size_t>(bytes, 1), 1)));
    if (!p) throw Error(ErrorCode::Internal, "simulator: out of memory for a buffer");
  }
  std::uint8_t* get() const { return p.get(); }
};

/// Bytes of the send and receive buffers of one rank for `count` elements (per rank where the
/// collective is per rank).
std::pair<std::size_t, std::size_t> bufferBytes(Collective c, std::size_t count, int n) {
  const std::size_t one = count * kEs;
  const std::size_t all = one * static_cast<std::size_t>(n);
  switch (c) {
    case Collective::Allgather:
    case Collective::Allgatherv:
    case Collective::Gather:
      return {one, all};
    case Collective::ReduceScatter:
    case Collective::ReduceScatterv:
    case Collective::Scatter:
      return {all, one};
    case Collective::Alltoall:
    case Collective::Alltoallv:
      return {all, all};
    case Collective::Barrier:
      return {0, 0};
    default:
      return {one, one};
  }
}

}  // namespace

bool needsSharedMemory(const algo::AlgoInfo& a) noexcept {
  return a.needs.sharedMemory;
}

topology::Topology blockedTopology(int ranks, int perHost) {
  if (ranks < 1 || perHost < 1)
    throw Error(ErrorCode::InvalidArgument, "simulator: ranks " + std::to_string(ranks) +
                                                " and ranks per host " + std::to_string(perHost) +
                                                " must be positive");
  if (ranks % perHost == 0) return topology::uniformTopology(ranks / perHost, perHost);
  std::vector<topology::PeerInfo> peers(static_cast<std::size_t>(ranks));
  for (int r = 0; r < ranks; ++r) {
    auto& p = peers[static_cast<std::size_t>(r)];
    p.hostname = "node" + std::to_string(r / perHost);
    p.hostId = p.hostname;
  }
  return topology::buildTopology(std::move(peers));
}

SimResult simulate(const algo::AlgoInfo& algo, const topology::Topology& topo, std::size_t bytes,
                   const SimOptions& opts) {
  const int n = topo.size();
  // The registry's constraints, as selection checks them; the simulated transport has no
  // shared-memory group.
  if (const algo::Constraint why = algo::cannotRun(algo, {n, bytes, false, &topo, false});
      why != algo::Constraint::None)
    throw Error(ErrorCode::InvalidArgument,
                std::string("simulator: ") + toString(algo.coll) + " " + algo.name +
                    " cannot run on " + topo.summary() + ": it " + algo::describe(why, algo) +
                    (why == algo::Constraint::SharedMemory
                         ? "; the simulated transport has no shared-memory group"
                         : "") +
                    " (the library would not select it there)");
  if (opts.root < 0 || opts.root >= n)
    throw Error(ErrorCode::InvalidArgument, "simulator: root " + std::to_string(opts.root) +
                                                " is not a rank of " + std::to_string(n));
  if (opts.chunkBytes == 0 || opts.scratchBytes == 0)
    throw Error(ErrorCode::InvalidArgument, "simulator: chunk and scratch must be positive");
  const auto un = static_cast<std::size_t>(n);
  const bool perRank = perRankBlocks(algo.coll);
  std::size_t count = 0;
  SimResult res;
  if (algo.coll != Collective::Barrier) {
    count = perRank ? bytes / (kEs * un) : bytes / kEs;
    res.bytes = perRank ? count * kEs * un : count * kEs;
    if (bytes > 0 && count == 0)
      throw Error(ErrorCode::InvalidArgument,
                  "simulator: size " + std::to_string(bytes) + " holds no fp32 element" +
                      (perRank ? " per rank (" + std::to_string(n) + " ranks)" : std::string()));
  }
  res.elements = count;
  res.ranks = n;
  res.hosts = topo.numNodes();
  const std::size_t modelChunk = std::min(opts.chunkBytes, opts.scratchBytes / 2);
  res.pieceBytes = opts.pieceBytes;
  if (res.pieceBytes == 0) {
    const tuning::CostModel model(opts.cost, topo, n, std::max<std::size_t>(modelChunk, 1), 0,
                                  opts.scratchBytes);
    res.pieceBytes = model.hierPieceBytes(res.bytes);
  }

  const auto [sendBytes, recvBytes] = bufferBytes(algo.coll, count, n);
  // Shared buffers (one fiber runs at a time: no race; the schedule does not read the data).
  std::unique_ptr<Buffer> sharedSend, sharedRecv, sharedScratch;
  if (!opts.copyPayloads) {
    sharedSend = std::make_unique<Buffer>(sendBytes);
    sharedRecv = std::make_unique<Buffer>(recvBytes);
    sharedScratch = std::make_unique<Buffer>(opts.scratchBytes);
  }
  const std::vector<std::size_t> counts(un, count);
  std::vector<std::size_t> displs(un, 0);
  for (std::size_t i = 1; i < un; ++i) displs[i] = displs[i - 1] + count;

  EngineOptions eo;
  eo.cost = opts.cost;
  eo.copyPayloads = opts.copyPayloads;
  eo.stackBytes = opts.stackBytes;
  Engine engine(topo, eo);
  const std::size_t piece = res.pieceBytes;
  engine.run([&](int r, transport::Transport& tr) {
    std::unique_ptr<Buffer> ownSend, ownRecv, ownScratch;
    if (opts.copyPayloads) {
      ownSend = std::make_unique<Buffer>(sendBytes);
      ownRecv = std::make_unique<Buffer>(recvBytes);
      ownScratch = std::make_unique<Buffer>(opts.scratchBytes);
    }
    std::uint8_t* send = opts.copyPayloads ? ownSend->get() : sharedSend->get();
    std::uint8_t* recv = opts.copyPayloads ? ownRecv->get() : sharedRecv->get();
    std::uint8_t* scratch = opts.copyPayloads ? ownScratch->get() : sharedScratch->get();
    algo::Context ctx{tr,
                      r,
                      n,
                      opts.chunkBytes,
                      std::span<std::uint8_t>(scratch, opts.scratchBytes),
                      transport::Deadline::max(),
                      0x5151ull << 8,
                      /*deterministic=*/false,
                      &topo};
    ctx.pieceBytes = piece;
    algo::ViewGroups views(ctx);  // hierarchies' phases: fixed algorithms on views
    ctx.groups = &views;
    algo::CollArgs args;
    args.coll = algo.coll;
    args.count = count;
    args.dtype = kType;
    args.op = ReduceOp::Sum;
    args.root = opts.root;
    args.send = send;
    args.recv = recv;
    if (algo.coll == Collective::Broadcast) args.send = args.recv;
    if (algo.coll == Collective::Allgatherv || algo.coll == Collective::ReduceScatterv) {
      args.counts = counts;
      args.displs = displs;
    }
    if (algo.coll == Collective::Alltoallv) {
      args.counts = counts;
      args.displs = displs;
      args.recvCounts = counts;
      args.recvDispls = displs;
    }
    algo.run(ctx, args);
  });

  res.perRank.reserve(un);
  res.minBytesPerRank = ~std::uint64_t{0};
  for (int r = 0; r < n; ++r) {
    const RankTraffic& t = engine.traffic(r);
    res.perRank.push_back(t);
    const std::uint64_t b = t.totalSent();
    res.maxBytesPerRank = std::max(res.maxBytesPerRank, b);
    res.minBytesPerRank = std::min(res.minBytesPerRank, b);
    res.totalBytes += b;
    res.maxMessagesPerRank = std::max(res.maxMessagesPerRank, t.totalMessages());
    res.totalMessages += t.totalMessages();
    for (int c = 0; c < topology::kLinkClasses; ++c)
      res.bytesByClass[static_cast<std::size_t>(c)] += t.bytesSent[static_cast<std::size_t>(c)];
  }
  res.steps = engine.steps();
  res.seconds = engine.seconds();
  res.switches = engine.switches();
  return res;
}

}  // namespace braid::sim
