// Every registered algorithm x world size x count x dtype x op x in-place, ranks as threads over
// the inproc transport, with a 64-byte chunk and 4 KiB of scratch so every pipelining path runs.
// Expected values come from tests/harness/data (plain double arithmetic, not braid's kernels).
//
// A case runs where its row's constraints hold (algo::cannotRun, as selection checks them) in
// this harness: the ranks get a topology of two nodes (blocked, ceil(N/2) + floor(N/2) ranks),
// so the hierarchical rows run composed at N = 4, 8 (uniform) and broadcast / reduce also at 3,
// 5, 7; the inproc transport has no shared-memory group, so shm_direct and shm_ll run here at
// N = 1 only; tests/comm/shm_direct_test.cpp and shm_ll_test.cpp sweep them over a real group
// at every N. No row runs another algorithm in its place (rows that cannot run throw).
//
// The cross-product is trimmed to stay fast on two cores: the Sizes suite runs every world size
// and count with two dtype/op pairs; the Types suite runs every dtype and op at two sizes.
#include <gtest/gtest.h>

#include <algorithm>
#include <atomic>
#include <cstring>
#include <iterator>
#include <span>
#include <sstream>
#include <string>
#include <vector>

#include "harness/data.hpp"
#include "rank_threads.hpp"

namespace braid::test {
namespace {

using algo::AlgoInfo;
using algo::CollArgs;
using algo::Context;

struct Case {
  const AlgoInfo* algo = nullptr;
  int size = 1;
  std::size_t count = 0;
  DataType dtype = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  bool inPlace = false;
  bool allRoots = false;  // rooted collectives: roots 0, n/2 and n-1 instead of n-1 alone
  std::size_t chunkBytes = 64;
  std::size_t scratchBytes = 4096;
};

bool isReduction(Collective c) {
  return c == Collective::Allreduce || c == Collective::Reduce || c == Collective::ReduceScatter ||
         c == Collective::ReduceScatterv;
}
bool isRooted(Collective c) {
  return c == Collective::Reduce || c == Collective::Broadcast || c == Collective::Gather ||
         c == Collective::Scatter;
}
bool hasInPlace(Collective c) {
  return c != Collective::Alltoall && c != Collective::Alltoallv && c != Collective::Barrier;
}

/// The harness's topology for N ranks: two nodes, ranks blocked, ceil(N/2) on the first
/// (one node for N = 1).
const topology::Topology* harnessTopology(int n) {
  static std::vector<topology::Topology> topos = [] {
    std::vector<topology::Topology> t;
    for (int size = 0; size <= 8; ++size) {
      std::vector<topology::PeerInfo> peers(static_cast<std::size_t>(size));
      for (int r = 0; r < size; ++r) {
        auto& p = peers[static_cast<std::size_t>(r)];
        p.hostname = r < (size + 1) / 2 ? "a" : "b";
        p.hostId = p.hostname;
      }
      t.push_back(size == 0 ? topology::Topology() : topology::buildTopology(peers));
    }
    return t;
  }();
  return n >= 1 && n <= 8 ? &topos[static_cast<std::size_t>(n)] : nullptr;
}

std::string caseName(const Case& c) {
  std::ostringstream s;
  s << toString(c.algo->coll) << "_" << c.algo->name << "_n" << c.size << "_c" << c.count << "_"
    << toString(c.dtype) << "_" << toString(c.op) << (c.inPlace ? "_inplace" : "")
    << (c.chunkBytes != 64 ? "_chunk" + std::to_string(c.chunkBytes) : "");
  return s.str();
}
enum class Suite { Sizes, Types, Large };

/// One gtest case: an algorithm at one world size; it loops over its counts, dtypes, ops and
/// in-place variants (one process per gtest case keeps ctest fast).
struct Group {
  const AlgoInfo* algo = nullptr;
  int size = 1;
  Suite suite = Suite::Sizes;
};
std::string paramName(const testing::TestParamInfo<Group>& info) {
  return std::string(toString(info.param.algo->coll)) + "_" + info.param.algo->name + "_n" +
         std::to_string(info.param.size);
}
void PrintTo(const Group& g, std::ostream* os) {
  *os << toString(g.algo->coll) << " " << g.algo->name << " n=" << g.size;
}

constexpr double kSentinel = 77;

/// Block sizes of the v-collectives: some empty, others longer than count.
std::size_t varyingCount(std::size_t count, int j) {
  if (count == 0 || j % 3 == 1) return 0;
  return count + static_cast<std::size_t>(j);
}
/// Alltoallv: elements rank a sends to rank b.
std::size_t pairCount(std::size_t count, int a, int b) {
  if (count == 0 || (a + 2 * b) % 3 == 0) return 0;
  return count + static_cast<std::size_t>(a + b);
}
/// Displacements: packed, or with `gap` unused elements after every block.
std::vector<std::size_t> displsOf(const std::vector<std::size_t>& counts, std::size_t gap) {
  std::vector<std::size_t> d(counts.size());
  std::size_t off = 0;
  for (std::size_t j = 0; j < counts.size(); ++j) {
    d[j] = off;
    off += counts[j] + gap;
  }
  return d;
}
std::size_t extentOf(const std::vector<std::size_t>& counts, const std::vector<std::size_t>& d) {
  std::size_t e = 0;
  for (std::size_t j = 0; j < counts.size(); ++j) e = std::max(e, d[j] + counts[j]);
  return e;
}

/// Collects element mismatches of one rank: how many, and the first few.
class Checker {
 public:
  void expect(const char* what, std::size_t i, double got, double want) {
    if (got == want) return;
    if (++bad_ <= 3) out_ << " " << what << "[" << i << "]=" << got << " want " << want << ";";
  }
  std::string report() const {
    if (bad_ == 0) return "";
    return std::to_string(bad_) + " wrong elements:" + out_.str();
  }

 private:
  std::size_t bad_ = 0;
  std::ostringstream out_;
};

class AlgoSweep : public testing::TestWithParam<Group> {
 protected:
  Case cur_;  // the case being run

  /// Runs `body` on every rank; body returns the rank's mismatch report ("" when correct).
  void run(const std::function<std::string(Context&)>& body) {
    const Case& c = cur_;
    RankSetup setup;
    setup.size = c.size;
    setup.chunkBytes = c.chunkBytes;
    setup.scratchBytes = c.scratchBytes;
    setup.topo = harnessTopology(c.size);
    std::vector<std::string> reports(static_cast<std::size_t>(c.size));
    auto errors = runRanks(
        setup, [&](Context& ctx) { reports[static_cast<std::size_t>(ctx.rank)] = body(ctx); });
    for (int r = 0; r < c.size; ++r) {
      const auto ur = static_cast<std::size_t>(r);
      if (errors[ur]) ADD_FAILURE() << "rank " << r << " threw: " << errorText(errors[ur]);
      if (!reports[ur].empty()) ADD_FAILURE() << "rank " << r << ": " << reports[ur];
    }
  }

  double value(int rank, std::size_t i) const {
    const Case& c = cur_;
    return testValue(c.dtype, isReduction(c.algo->coll) ? c.op : ReduceOp::Sum, rank, i);
  }
  /// Expected reduction over all ranks of element i.
  std::vector<double> expectedReductions(std::size_t n) const {
    const Case& c = cur_;
    std::vector<double> exp(n);
    std::vector<double> v(static_cast<std::size_t>(c.size));
    for (std::size_t i = 0; i < n; ++i) {
      for (int r = 0; r < c.size; ++r) v[static_cast<std::size_t>(r)] = value(r, i);
      exp[i] = expectedReduce(c.dtype, c.op, v);
    }
    return exp;
  }
  CollArgs args() const {
    const Case& c = cur_;
    CollArgs a;
    a.coll = c.algo->coll;
    a.count = c.count;
    a.dtype = c.dtype;
    a.op = c.op;
    return a;
  }
  std::vector<int> roots() const {
    const Case& c = cur_;
    if (!isRooted(c.algo->coll)) return {0};
    if (!c.allRoots) return {c.size - 1};
    std::vector<int> r{0};
    for (int root : {c.size / 2, c.size - 1})
      if (root != r.back()) r.push_back(root);
    return r;
  }
  Buffer filled(std::size_t n, double v) const {
    Buffer b(cur_.dtype, n);
    for (std::size_t i = 0; i < n; ++i) b.set(i, v);
    return b;
  }

  void allreduce();
  void reduce(int root);
  void broadcast(int root);
  void allgather();
  void allgatherv();
  void reduceScatter();
  void reduceScatterv();
  void gather(int root);
  void scatter(int root);
  void alltoall();
  void alltoallv();
  void barrier();
};

void AlgoSweep::allreduce() {
  const Case& c = cur_;
  const auto exp = expectedReductions(c.count);
  run([&](Context& ctx) {
    Buffer in(c.dtype, c.count);
    for (std::size_t i = 0; i < c.count; ++i) in.set(i, value(ctx.rank, i));
    Buffer out = filled(c.count, kSentinel);
    CollArgs a = args();
    a.send = in.data();
    a.recv = c.inPlace ? in.data() : out.data();
    c.algo->run(ctx, a);
    const Buffer& res = c.inPlace ? in : out;
    Checker chk;
    for (std::size_t i = 0; i < c.count; ++i) chk.expect("recv", i, res.get(i), exp[i]);
    return chk.report();
  });
}

void AlgoSweep::reduce(int root) {
  const Case& c = cur_;
  const auto exp = expectedReductions(c.count);
  run([&](Context& ctx) {
    Buffer in(c.dtype, c.count);
    for (std::size_t i = 0; i < c.count; ++i) in.set(i, value(ctx.rank, i));
    Buffer out = filled(c.count, kSentinel);
    CollArgs a = args();
    a.root = root;
    a.send = in.data();
    // Non-root ranks may pass a null recv.
    a.recv = c.inPlace ? in.data() : (ctx.rank == root ? out.data() : nullptr);
    c.algo->run(ctx, a);
    Checker chk;
    if (ctx.rank == root) {
      const Buffer& res = c.inPlace ? in : out;
      for (std::size_t i = 0; i < c.count; ++i) chk.expect("recv", i, res.get(i), exp[i]);
    }
    return chk.report();
  });
}

void AlgoSweep::broadcast(int root) {
  const Case& c = cur_;
  run([&](Context& ctx) {
    Buffer buf = filled(c.count, kSentinel);
    Buffer src(c.dtype, c.count);
    for (std::size_t i = 0; i < c.count; ++i) src.set(i, value(root, i));
    CollArgs a = args();
    a.root = root;
    a.send = buf.data();
    a.recv = buf.data();
    if (ctx.rank == root) {
      if (c.inPlace)
        buf = src;
      else
        a.send = src.data();  // a root send buffer distinct from recv is copied too
    }
    c.algo->run(ctx, a);
    Checker chk;
    for (std::size_t i = 0; i < c.count; ++i) chk.expect("buf", i, buf.get(i), value(root, i));
    return chk.report();
  });
}

void AlgoSweep::allgather() {
  const Case& c = cur_;
  const auto n = static_cast<std::size_t>(c.size);
  run([&](Context& ctx) {
    const auto me = static_cast<std::size_t>(ctx.rank);
    Buffer in(c.dtype, c.count);
    for (std::size_t i = 0; i < c.count; ++i) in.set(i, value(ctx.rank, i));
    Buffer out = filled(n * c.count, kSentinel);
    CollArgs a = args();
    a.send = in.data();
    a.recv = out.data();
    if (c.inPlace) {
      for (std::size_t i = 0; i < c.count; ++i) out.set(me * c.count + i, value(ctx.rank, i));
      a.send = out.at(me * c.count);
    }
    c.algo->run(ctx, a);
    Checker chk;
    for (int j = 0; j < c.size; ++j) {
      for (std::size_t i = 0; i < c.count; ++i) {
        const std::size_t k = static_cast<std::size_t>(j) * c.count + i;
        chk.expect("recv", k, out.get(k), value(j, i));
      }
    }
    return chk.report();
  });
}

void AlgoSweep::allgatherv() {
  const Case& c = cur_;
  std::vector<std::size_t> counts(static_cast<std::size_t>(c.size));
  for (int j = 0; j < c.size; ++j) counts[static_cast<std::size_t>(j)] = varyingCount(c.count, j);
  // Odd world sizes use explicit displacements with gaps, even ones packed (no displs).
  const bool gapped = c.size % 2 == 1;
  const auto displs = displsOf(counts, gapped ? 2 : 0);
  const std::size_t extent = extentOf(counts, displs);
  run([&](Context& ctx) {
    const auto me = static_cast<std::size_t>(ctx.rank);
    Buffer in(c.dtype, counts[me]);
    for (std::size_t i = 0; i < counts[me]; ++i) in.set(i, value(ctx.rank, i));
    Buffer out = filled(extent, kSentinel);
    CollArgs a = args();
    a.counts = counts;
    if (gapped) a.displs = displs;
    a.send = in.data();
    a.recv = out.data();
    if (c.inPlace) {
      for (std::size_t i = 0; i < counts[me]; ++i) out.set(displs[me] + i, value(ctx.rank, i));
      a.send = out.at(displs[me]);
    }
    c.algo->run(ctx, a);
    Checker chk;
    std::vector<char> covered(extent, 0);
    for (int j = 0; j < c.size; ++j) {
      const auto uj = static_cast<std::size_t>(j);
      for (std::size_t i = 0; i < counts[uj]; ++i) {
        chk.expect("recv", displs[uj] + i, out.get(displs[uj] + i), value(j, i));
        covered[displs[uj] + i] = 1;
      }
    }
    for (std::size_t k = 0; k < extent; ++k)
      if (!covered[k]) chk.expect("gap", k, out.get(k), kSentinel);
    return chk.report();
  });
}

void AlgoSweep::reduceScatter() {
  const Case& c = cur_;
  const auto n = static_cast<std::size_t>(c.size);
  const auto exp = expectedReductions(n * c.count);
  run([&](Context& ctx) {
    const auto me = static_cast<std::size_t>(ctx.rank);
    Buffer in(c.dtype, n * c.count);
    for (std::size_t i = 0; i < n * c.count; ++i) in.set(i, value(ctx.rank, i));
    Buffer out = filled(c.count, kSentinel);
    CollArgs a = args();
    a.send = in.data();
    a.recv = c.inPlace ? in.at(me * c.count) : out.data();
    c.algo->run(ctx, a);
    Checker chk;
    for (std::size_t i = 0; i < c.count; ++i) {
      const double got = c.inPlace ? in.get(me * c.count + i) : out.get(i);
      chk.expect("recv", i, got, exp[me * c.count + i]);
    }
    return chk.report();
  });
}

void AlgoSweep::reduceScatterv() {
  const Case& c = cur_;
  std::vector<std::size_t> counts(static_cast<std::size_t>(c.size));
  for (int j = 0; j < c.size; ++j) counts[static_cast<std::size_t>(j)] = varyingCount(c.count, j);
  const bool gapped = c.size % 2 == 1;
  const auto displs = displsOf(counts, gapped ? 1 : 0);
  const std::size_t extent = extentOf(counts, displs);
  const auto exp = expectedReductions(extent);
  run([&](Context& ctx) {
    const auto me = static_cast<std::size_t>(ctx.rank);
    Buffer in(c.dtype, extent);
    for (std::size_t i = 0; i < extent; ++i) in.set(i, value(ctx.rank, i));
    Buffer out = filled(counts[me], kSentinel);
    CollArgs a = args();
    a.counts = counts;
    if (gapped) a.displs = displs;
    a.send = in.data();
    a.recv = c.inPlace ? in.at(displs[me]) : out.data();
    c.algo->run(ctx, a);
    Checker chk;
    for (std::size_t i = 0; i < counts[me]; ++i) {
      const double got = c.inPlace ? in.get(displs[me] + i) : out.get(i);
      chk.expect("recv", i, got, exp[displs[me] + i]);
    }
    return chk.report();
  });
}

void AlgoSweep::gather(int root) {
  const Case& c = cur_;
  const auto n = static_cast<std::size_t>(c.size);
  run([&](Context& ctx) {
    Buffer in(c.dtype, c.count);
    for (std::size_t i = 0; i < c.count; ++i) in.set(i, value(ctx.rank, i));
    Buffer out = filled(n * c.count, kSentinel);
    CollArgs a = args();
    a.root = root;
    a.send = in.data();
    a.recv = ctx.rank == root ? out.data() : nullptr;
    const auto ur = static_cast<std::size_t>(root);
    if (c.inPlace && ctx.rank == root) {
      for (std::size_t i = 0; i < c.count; ++i) out.set(ur * c.count + i, value(root, i));
      a.send = out.at(ur * c.count);
    }
    c.algo->run(ctx, a);
    Checker chk;
    if (ctx.rank == root) {
      for (int j = 0; j < c.size; ++j) {
        for (std::size_t i = 0; i < c.count; ++i) {
          const std::size_t k = static_cast<std::size_t>(j) * c.count + i;
          chk.expect("recv", k, out.get(k), value(j, i));
        }
      }
    }
    return chk.report();
  });
}

void AlgoSweep::scatter(int root) {
  const Case& c = cur_;
  const auto n = static_cast<std::size_t>(c.size);
  run([&](Context& ctx) {
    const auto me = static_cast<std::size_t>(ctx.rank);
    Buffer in(c.dtype, n * c.count);
    for (std::size_t i = 0; i < n * c.count; ++i) in.set(i, value(root, i));
    Buffer out = filled(c.count, kSentinel);
    CollArgs a = args();
    a.root = root;
    a.send = ctx.rank == root ? in.data() : nullptr;  // only the root's send is read
    a.recv = out.data();
    const bool inPlace = c.inPlace && ctx.rank == root;
    if (inPlace) a.recv = in.at(me * c.count);
    c.algo->run(ctx, a);
    Checker chk;
    for (std::size_t i = 0; i < c.count; ++i) {
      const double got = inPlace ? in.get(me * c.count + i) : out.get(i);
      chk.expect("recv", i, got, value(root, me * c.count + i));
    }
    return chk.report();
  });
}

void AlgoSweep::alltoall() {
  const Case& c = cur_;
  const auto n = static_cast<std::size_t>(c.size);
  run([&](Context& ctx) {
    const auto me = static_cast<std::size_t>(ctx.rank);
    Buffer in(c.dtype, n * c.count);
    for (std::size_t i = 0; i < n * c.count; ++i) in.set(i, value(ctx.rank, i));
    Buffer out = filled(n * c.count, kSentinel);
    CollArgs a = args();
    a.send = in.data();
    a.recv = out.data();
    c.algo->run(ctx, a);
    Checker chk;
    for (int j = 0; j < c.size; ++j) {
      for (std::size_t i = 0; i < c.count; ++i) {
        const std::size_t k = static_cast<std::size_t>(j) * c.count + i;
        chk.expect("recv", k, out.get(k), value(j, me * c.count + i));
      }
    }
    return chk.report();
  });
}

void AlgoSweep::alltoallv() {
  const Case& c = cur_;
  const bool gapped = c.size % 2 == 1;
  constexpr std::size_t kStride = 7919;  // value index of element i of the block a -> b
  run([&](Context& ctx) {
    const auto n = static_cast<std::size_t>(c.size);
    std::vector<std::size_t> sendCounts(n), recvCounts(n);
    for (int j = 0; j < c.size; ++j) {
      sendCounts[static_cast<std::size_t>(j)] = pairCount(c.count, ctx.rank, j);
      recvCounts[static_cast<std::size_t>(j)] = pairCount(c.count, j, ctx.rank);
    }
    const auto sendDispls = displsOf(sendCounts, gapped ? 1 : 0);
    const auto recvDispls = displsOf(recvCounts, gapped ? 2 : 0);
    const std::size_t sendExtent = extentOf(sendCounts, sendDispls);
    const std::size_t recvExtent = extentOf(recvCounts, recvDispls);
    Buffer in = filled(sendExtent, kSentinel);
    for (std::size_t j = 0; j < n; ++j)
      for (std::size_t i = 0; i < sendCounts[j]; ++i)
        in.set(sendDispls[j] + i, value(ctx.rank, j * kStride + i));
    Buffer out = filled(recvExtent, kSentinel);
    CollArgs a = args();
    a.send = in.data();
    a.recv = out.data();
    a.counts = sendCounts;
    a.recvCounts = recvCounts;
    if (gapped) {
      a.displs = sendDispls;
      a.recvDispls = recvDispls;
    }
    c.algo->run(ctx, a);
    Checker chk;
    std::vector<char> covered(recvExtent, 0);
    const auto me = static_cast<std::size_t>(ctx.rank);
    for (std::size_t j = 0; j < n; ++j) {
      for (std::size_t i = 0; i < recvCounts[j]; ++i) {
        const std::size_t k = recvDispls[j] + i;
        chk.expect("recv", k, out.get(k), value(static_cast<int>(j), me * kStride + i));
        covered[k] = 1;
      }
    }
    for (std::size_t k = 0; k < recvExtent; ++k)
      if (!covered[k]) chk.expect("gap", k, out.get(k), kSentinel);
    return chk.report();
  });
}

void AlgoSweep::barrier() {
  const Case& c = cur_;
  std::atomic<int> arrived{0};
  run([&](Context& ctx) {
    arrived.fetch_add(1);
    c.algo->run(ctx, args());
    const int seen = arrived.load();
    return seen == c.size ? std::string()
                          : "left the barrier after only " + std::to_string(seen) + " arrived";
  });
}

constexpr int kSizes[] = {1, 2, 3, 4, 5, 7, 8};
constexpr int kTypeSizes[] = {3, 4};
constexpr int kLargeSizes[] = {4, 5};
// 5003 fp32 elements are 313 chunks of 64 bytes and five times the 4 KiB scratch.
constexpr std::size_t kCounts[] = {0, 1, 7, 13, 257, 1031, 5003};

/// The nccl-tests size of a case, as the communicator computes it for selection.
std::size_t selectionBytes(const Case& c) {
  const std::size_t es = dataTypeSize(c.dtype);
  const auto n = static_cast<std::size_t>(c.size);
  switch (c.algo->coll) {
    case Collective::Allgather:
    case Collective::ReduceScatter:
    case Collective::Alltoall:
    case Collective::Gather:
    case Collective::Scatter:
      return c.count * es * n;
    case Collective::Allgatherv:
    case Collective::ReduceScatterv: {
      std::size_t total = 0;
      for (int j = 0; j < c.size; ++j) total += varyingCount(c.count, j);
      return total * es;
    }
    case Collective::Alltoallv:
    case Collective::Barrier:
      return 0;
    default:
      return c.count * es;
  }
}

/// Whether the case's row can run in this harness (no shared-memory group, the two-node
/// topology, not deterministic).
bool runnable(const Case& c) {
  return algo::cannotRun(*c.algo, {c.size, selectionBytes(c), false, harnessTopology(c.size),
                                   false}) == algo::Constraint::None;
}

std::vector<Case> allCasesOf(const Group& g) {
  std::vector<Case> cases;
  const Collective coll = g.algo->coll;
  const int n = g.size;
  switch (g.suite) {
    case Suite::Sizes: {
      // Every count with two dtype/op pairs, every root.
      std::vector<std::pair<DataType, ReduceOp>> kinds;
      if (coll == Collective::Barrier)
        kinds = {{DataType::Uint8, ReduceOp::Sum}};
      else if (isReduction(coll))
        kinds = {{DataType::Float32, ReduceOp::Sum}, {DataType::Int32, ReduceOp::Max}};
      else
        kinds = {{DataType::Float32, ReduceOp::Sum}, {DataType::Int8, ReduceOp::Sum}};
      for (std::size_t count : kCounts) {
        if (coll == Collective::Barrier && count > 0) continue;
        for (auto [dt, op] : kinds) {
          for (bool inPlace : {false, true}) {
            if (inPlace && !hasInPlace(coll)) continue;
            cases.push_back({g.algo, n, count, dt, op, inPlace, true});
          }
        }
      }
      break;
    }
    case Suite::Types: {
      // Every dtype and op at two counts (one chunk, several chunks).
      std::vector<ReduceOp> ops{ReduceOp::Sum};
      if (isReduction(coll)) ops = {ReduceOp::Sum, ReduceOp::Prod, ReduceOp::Min, ReduceOp::Max};
      for (std::size_t count : {std::size_t{13}, std::size_t{257}}) {
        for (DataType dt : kAllDataTypes) {
          for (ReduceOp op : ops) {
            for (bool inPlace : {false, true}) {
              if (inPlace && !hasInPlace(coll)) continue;
              cases.push_back({g.algo, n, count, dt, op, inPlace, false});
            }
          }
        }
      }
      break;
    }
    case Suite::Large: {
      // The communicator's default chunk (256 KiB) and scratch (4 MiB), several chunks.
      Case c{g.algo, n, 300007, DataType::Float32, ReduceOp::Sum, false, false};
      c.chunkBytes = 256 * 1024;
      c.scratchBytes = 4 * 1024 * 1024;
      cases.push_back(c);
      break;
    }
  }
  return cases;
}

std::vector<Case> casesOf(const Group& g) {
  std::vector<Case> cases = allCasesOf(g);
  cases.erase(
      std::remove_if(cases.begin(), cases.end(), [](const Case& c) { return !runnable(c); }),
      cases.end());
  return cases;
}

std::vector<Group> groups(Suite suite, std::span<const int> sizes) {
  std::vector<Group> out;
  for (const AlgoInfo& algo : algo::registry()) {
    if (suite != Suite::Sizes && algo.coll == Collective::Barrier) continue;
    for (int n : sizes)
      if (!casesOf({&algo, n, suite}).empty()) out.push_back({&algo, n, suite});
  }
  return out;
}

// Which rows the sweep covers: every row somewhere (shm rows at N = 1; their sweep over a real
// group is tests/comm), the hierarchical rows composed at several N, and never a row where
// its constraints fail (a direct call there throws: RowsThatCannotRunThrow below).
TEST(AlgoSweepCoverage, EveryRowWhereItsConstraintsHold) {
  for (const AlgoInfo& algo : algo::registry()) {
    std::vector<int> sizes;
    for (int n : kSizes)
      if (!casesOf({&algo, n, Suite::Sizes}).empty()) sizes.push_back(n);
    EXPECT_FALSE(sizes.empty()) << toString(algo.coll) << " " << algo.name;
    if (std::string(algo.name) == "hierarchical") {
      const bool uniform = algo.needs.uniformNodes;
      EXPECT_EQ(sizes, uniform ? std::vector<int>({4, 8}) : std::vector<int>({3, 4, 5, 7, 8}))
          << toString(algo.coll);
    } else if (algo.needs.sharedMemory) {
      EXPECT_EQ(sizes, std::vector<int>({1})) << toString(algo.coll) << " " << algo.name;
    } else {
      EXPECT_EQ(sizes.size(), std::size(kSizes)) << toString(algo.coll) << " " << algo.name;
    }
  }
}

// An algorithm entered against its row's constraints throws Error(InvalidArgument) naming the
// algorithm and the constraint on every rank; it never runs another algorithm instead.
TEST(AlgoSweepCoverage, RowsThatCannotRunThrow) {
  for (const AlgoInfo& algo : algo::registry()) {
    for (int n : {2, 3}) {
      Case c{&algo, n, 13, DataType::Float32, ReduceOp::Sum, false, false};
      if (runnable(c)) continue;
      SCOPED_TRACE(std::string(toString(algo.coll)) + " " + algo.name + " n=" + std::to_string(n));
      RankSetup setup;
      setup.size = n;
      setup.topo = harnessTopology(n);
      const std::size_t elems = 13 * static_cast<std::size_t>(n) * 4;  // room for every layout
      std::vector<std::size_t> counts(static_cast<std::size_t>(n), 13);
      std::vector<std::size_t> displs = displsOf(counts, 0);
      auto errors = runRanks(setup, [&](Context& ctx) {
        std::vector<float> in(elems, 1.0f), out(elems, 0.0f);
        CollArgs a;
        a.coll = algo.coll;
        a.count = 13;
        a.send = in.data();
        a.recv = out.data();
        a.counts = counts;
        a.displs = displs;
        a.recvCounts = counts;
        a.recvDispls = displs;
        algo.run(ctx, a);
      });
      for (int r = 0; r < n; ++r) {
        const std::string w = errorText(errors[static_cast<std::size_t>(r)]);
        EXPECT_NE(w.find("'" + std::string(algo.name) + "' cannot run"), std::string::npos)
            << "rank " << r << ": " << w;
        EXPECT_NE(w.find("needs"), std::string::npos) << w;
        EXPECT_NE(w.find("rank " + std::to_string(r)), std::string::npos) << w;
      }
    }
  }
}

TEST_P(AlgoSweep, MatchesExpected) {
  for (const Case& c : casesOf(GetParam())) {
    cur_ = c;
    for (int root : roots()) {
      SCOPED_TRACE(caseName(c) + " root " + std::to_string(root));
      switch (c.algo->coll) {
        case Collective::Allreduce:
          allreduce();
          break;
        case Collective::Reduce:
          reduce(root);
          break;
        case Collective::Broadcast:
          broadcast(root);
          break;
        case Collective::Allgather:
          allgather();
          break;
        case Collective::Allgatherv:
          allgatherv();
          break;
        case Collective::ReduceScatter:
          reduceScatter();
          break;
        case Collective::ReduceScatterv:
          reduceScatterv();
          break;
        case Collective::Gather:
          gather(root);
          break;
        case Collective::Scatter:
          scatter(root);
          break;
        case Collective::Alltoall:
          alltoall();
          break;
        case Collective::Alltoallv:
          alltoallv();
          break;
        case Collective::Barrier:
          barrier();
          break;
        default:
          FAIL() << "no sweep for " << toString(c.algo->coll);
      }
    }
    if (HasFailure()) return;  // one failing case is enough to read
  }
}

// The added dtypes (bool, int16, unsigned 16/32/64, float8, complex) and ops (bitwise) through
// every reduction algorithm, bit-exactly against harness/data's extendedExpected: a focused
// subset (world sizes 3 and 4, counts 1, 13 and 257) instead of the full grid. Avg and
// PremulSum are the communicator's (a divide after, a premultiply before the algorithm's sum):
// tests/comm/collectives_test.cpp covers them.
class AlgoSweepExtended : public testing::TestWithParam<Group> {};

bool isAddedDtype(DataType t) {
  return std::find(std::begin(kExtendedDataTypes), std::end(kExtendedDataTypes), t) !=
         std::end(kExtendedDataTypes);
}

TEST_P(AlgoSweepExtended, AddedDtypesAndOpsMatchExpected) {
  const Group g = GetParam();
  const Collective coll = g.algo->coll;
  const int n = g.size;
  for (std::size_t count : {std::size_t{1}, std::size_t{13}, std::size_t{257}}) {
    for (int ti = 0; ti < kNumDataTypes; ++ti) {
      const auto t = static_cast<DataType>(ti);
      const std::size_t es = dataTypeSize(t);
      for (ReduceOp op : kEveryReduceOp) {
        const bool addedOp = op == ReduceOp::BAnd || op == ReduceOp::BOr || op == ReduceOp::BXor;
        if (!isSupported(t, op) || op == ReduceOp::Avg || op == ReduceOp::PremulSum ||
            !(isAddedDtype(t) || addedOp))
          continue;
        const std::string what = std::string(toString(coll)) + " " + g.algo->name +
                                 " n=" + std::to_string(n) + " " + toString(t) + " " +
                                 toString(op) + " count=" + std::to_string(count);
        const std::size_t inCount = coll == Collective::ReduceScatter ? count * n : count;
        const int root = n - 1;
        std::vector<std::string> reports(static_cast<std::size_t>(n));
        Case probe{g.algo, n, count, t, op, false, false};
        if (!runnable(probe)) continue;
        RankSetup setup;
        setup.size = n;
        setup.topo = harnessTopology(n);
        auto errors = runRanks(setup, [&](Context& ctx) {
          const int me = ctx.rank;
          std::vector<std::uint8_t> in(inCount * es + 1), out(count * es + 1, 0xa5);
          for (std::size_t i = 0; i < inCount; ++i) extendedInput(t, op, me, i, in.data() + i * es);
          CollArgs a;
          a.coll = coll;
          a.count = count;
          a.dtype = t;
          a.op = op;
          a.root = root;
          a.send = in.data();
          a.recv = coll == Collective::Reduce && me != root ? nullptr : out.data();
          g.algo->run(ctx, a);
          if (coll == Collective::Reduce && me != root) return;
          const std::size_t first = coll == Collective::ReduceScatter ? count * me : 0;
          std::vector<std::uint8_t> e(es);
          std::size_t bad = 0;
          for (std::size_t i = 0; i < count; ++i) {
            extendedExpected(t, op, n, first + i, e.data());
            if (std::memcmp(out.data() + i * es, e.data(), es) != 0 && bad++ == 0)
              reports[static_cast<std::size_t>(me)] = "element " + std::to_string(i) + " wrong";
          }
          if (bad) reports[static_cast<std::size_t>(me)] += " (" + std::to_string(bad) + " in all)";
        });
        for (int r = 0; r < n; ++r) {
          const auto ur = static_cast<std::size_t>(r);
          if (errors[ur])
            ADD_FAILURE() << what << " rank " << r << " threw: " << errorText(errors[ur]);
          if (!reports[ur].empty()) ADD_FAILURE() << what << " rank " << r << ": " << reports[ur];
        }
        if (HasFailure()) return;
      }
    }
  }
}

std::vector<Group> reductionGroups() {
  std::vector<Group> out;
  for (const AlgoInfo& algo : algo::registry()) {
    if (algo.coll != Collective::Allreduce && algo.coll != Collective::Reduce &&
        algo.coll != Collective::ReduceScatter)
      continue;
    for (int n : {3, 4})
      if (!casesOf({&algo, n, Suite::Types}).empty()) out.push_back({&algo, n, Suite::Types});
  }
  return out;
}

INSTANTIATE_TEST_SUITE_P(Extended, AlgoSweepExtended, testing::ValuesIn(reductionGroups()),
                         paramName);

INSTANTIATE_TEST_SUITE_P(Sizes, AlgoSweep, testing::ValuesIn(groups(Suite::Sizes, kSizes)),
                         paramName);
INSTANTIATE_TEST_SUITE_P(Types, AlgoSweep, testing::ValuesIn(groups(Suite::Types, kTypeSizes)),
                         paramName);
INSTANTIATE_TEST_SUITE_P(Large, AlgoSweep, testing::ValuesIn(groups(Suite::Large, kLargeSizes)),
                         paramName);

}  // namespace
}  // namespace braid::test
