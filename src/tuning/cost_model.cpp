#include "tuning/cost_model.hpp"

#include <algorithm>
#include <bit>
#include <cmath>
#include <cstdio>
#include <functional>

#include "algo/algorithm.hpp"
#include "algo/patterns/bruck.hpp"
#include "algo/patterns/double_tree.hpp"
#include "algo/patterns/doubling.hpp"
#include "algo/patterns/tree.hpp"

namespace braid::tuning {
namespace {

// "8 B", "1 KiB", "1200 B", "1.50 MiB": exact multiples without decimals, exact bytes below
// 64 KiB.
std::string bytesText(std::size_t b) {
  const char* units[] = {"B", "KiB", "MiB", "GiB", "TiB"};
  int u = 0;
  double v = static_cast<double>(b);
  while (v >= 1024 && u < 4) {
    v /= 1024;
    ++u;
  }
  if (v != std::floor(v) && b < (std::size_t{64} << 10)) return std::to_string(b) + " B";
  char buf[64];
  std::snprintf(buf, sizeof buf, "%.*f %s", v == std::floor(v) ? 0 : 2, v, units[u]);
  return buf;
}

int log2Exact(int p) {
  return std::countr_zero(static_cast<unsigned>(p));
}

}  // namespace

// ---------------------------------------------------------------- the model

int CostModel::sizeClass(std::size_t bytes) noexcept {
  if (bytes <= 1) return 0;
  return std::min(kClasses - 1, static_cast<int>(std::bit_width(bytes - 1)));
}

std::size_t CostModel::classBytes(int sizeClass) noexcept {
  return std::size_t{1} << std::clamp(sizeClass, 0, kClasses - 1);
}

CostModel::CostModel(CostParams params, const topology::Topology& topo, int worldSize,
                     std::size_t chunkBytes, std::size_t pieceBytes, std::size_t scratchBytes)
    : params_(std::move(params)),
      n_(std::max(1, worldSize)),
      chunk_(std::max<std::size_t>(1, chunkBytes)),
      piece_(pieceBytes) {
  for (auto& c : choice_) c.store(0, std::memory_order_relaxed);
  for (auto& l : logged_) l.store(0, std::memory_order_relaxed);
  const bool useTopo = topo.size() == n_;
  auto nodeOf = [&](int r) { return useTopo ? topo.nodeOf(r) : 0; };
  if (useTopo) {
    nodes_ = topo.numNodes();
    perNode_ = topo.maxLocalSize();
    uniform_ = topo.uniform();
  } else {
    perNode_ = n_;
  }
  // The hierarchical allreduce's cap (src/algo/allreduce/hierarchical.cpp): the network's
  // receive buffer is the first half of the scratch, 64-byte aligned.
  std::size_t netBytes = scratchBytes / 2;
  if (netBytes >= 64) netBytes -= netBytes % 64;
  pieceCap_ = std::max<std::size_t>(1, netBytes) * static_cast<std::size_t>(perNode_) *
              static_cast<std::size_t>(nodes_ == 2 ? 1 : nodes_);
  const int n = n_;
  std::vector<int> perHost(static_cast<std::size_t>(nodes_));
  // The most ranks of one host whose peer (peerOf(r), -1: none) is on another host.
  auto crossing = [&](const std::function<int(int)>& peerOf) {
    if (nodes_ < 2) return 0;
    std::fill(perHost.begin(), perHost.end(), 0);
    for (int r = 0; r < n; ++r) {
      const int p = peerOf(r);
      if (p >= 0 && p != r && nodeOf(p) != nodeOf(r))
        ++perHost[static_cast<std::size_t>(nodeOf(r))];
    }
    return *std::max_element(perHost.begin(), perHost.end());
  };
  using algo::patterns::wrap;
  ringCross_ = crossing([&](int r) { return n > 1 ? wrap(r + 1, n) : -1; });
  const int pow2 = algo::patterns::floorPow2(n);
  const int extra = n - pow2;
  foldCross_ = crossing([&](int r) { return r < 2 * extra && r % 2 == 0 ? r + 1 : -1; });
  for (int k = 0; (1 << k) < pow2; ++k)
    xorCross_.push_back(crossing([&](int r) {
      const auto f = algo::patterns::foldToPowerOfTwo(r, n);
      if (f.folded()) return -1;
      return algo::patterns::unfoldRank(f.vrank ^ (1 << k), n);
    }));
  for (int k = 0; k < algo::patterns::bruckSteps(n); ++k) {
    bruckGatherCross_.push_back(
        crossing([&](int r) { return algo::patterns::bruckAllgatherSendPeer(r, n, k); }));
    bruckA2aCross_.push_back(
        crossing([&](int r) { return algo::patterns::bruckAlltoallSendPeer(r, n, k); }));
  }
  // Pairwise: N-1 steps of O(N); beyond 2048 ranks assume every step leaves every host.
  for (int s = 1; s < n; ++s)
    pairwiseCross_.push_back(n <= 2048 ? crossing([&](int r) { return wrap(r + s, n); })
                                       : (nodes_ > 1 ? perNode_ : 0));
  if (nodes_ > 1) {
    std::vector<int> up(perHost.size()), down(perHost.size());
    for (int w = 0; w < 2; ++w)
      for (int r = 0; r < n; ++r) {
        const auto links = algo::patterns::doubleBinaryTree(r, n, w);
        if (links.parent >= 0 && nodeOf(links.parent) != nodeOf(r)) {
          ++up[static_cast<std::size_t>(nodeOf(r))];
          ++down[static_cast<std::size_t>(nodeOf(links.parent))];
        }
      }
    treeCross_ = std::max(*std::max_element(up.begin(), up.end()),
                          *std::max_element(down.begin(), down.end()));
    for (std::size_t h = 0; h < up.size(); ++h)
      treeEgress_ = std::max(treeEgress_, up[h] + down[h]);
  }
  const auto root = algo::patterns::binomialTree(0, n, 0);
  for (int i = 0; i < root.numChildren; ++i)
    binomialRootChildNet_.push_back(nodeOf(root.children[static_cast<std::size_t>(i)]) !=
                                    nodeOf(0));
  binomialDepth_ = algo::patterns::ceilLog2(n);
}

bool CostModel::decides() const noexcept {
  return nodes_ > 1 || params_.origin != "defaults";
}

double CostModel::step(int crossing, double bytes, double reduceBytes) const {
  const LinkCost l = link(crossing);
  return l.alpha + std::max(1, crossing) * bytes * l.beta + reduceBytes * params_.gamma;
}

namespace {
const char* where(int crossing) {
  return crossing > 0 ? "net" : "shm";
}
// Appends "3 net x2 steps of 1 KiB"; a piece equal to the last one but for its count adds to
// that count instead.
void addSteps(std::string& why, int count, int crossing, const std::string& what) {
  if (count <= 0) return;
  std::string piece = std::string(where(crossing));
  if (crossing > 1) piece += " x" + std::to_string(crossing);
  piece += " " + what;
  const auto start = why.rfind(" + ") == std::string::npos ? 0 : why.rfind(" + ") + 3;
  const auto space = why.find(' ', start);
  if (!why.empty() && space != std::string::npos &&
      why.compare(space + 1, std::string::npos, piece) == 0) {
    const int last = std::stoi(why.substr(start, space - start));
    why = why.substr(0, start) + std::to_string(last + count) + " " + piece;
    return;
  }
  if (!why.empty()) why += " + ";
  why += std::to_string(count) + " " + piece;
}
}  // namespace

double CostModel::ringSteps(int steps, int crossing, double bytes, double reduceBytes,
                            std::string& why) const {
  addSteps(why, steps, crossing, "steps of " + bytesText(static_cast<std::size_t>(bytes)));
  return steps * step(crossing, bytes, reduceBytes);
}

std::optional<double> CostModel::allreduce(std::string_view algo, double s,
                                           std::string& why) const {
  const int n = n_;
  const int pow2 = algo::patterns::floorPow2(n);
  const bool folds = pow2 != n;
  auto ring = [&] {
    return ringSteps(n - 1, ringCross_, s / n, s / n, why) +
           ringSteps(n - 1, ringCross_, s / n, 0, why);
  };
  if (algo == "ring") return ring();
  if (algo == "recursive_doubling") {
    double t = 0;
    if (folds) t += ringSteps(1, foldCross_, s, s, why) + ringSteps(1, foldCross_, s, 0, why);
    for (std::size_t k = 0; k < xorCross_.size(); ++k) t += ringSteps(1, xorCross_[k], s, s, why);
    return t;
  }
  if (algo == "halving_doubling") {
    double t = 0;
    if (folds) t += ringSteps(1, foldCross_, s, s, why) + ringSteps(1, foldCross_, s, 0, why);
    const int rounds = static_cast<int>(xorCross_.size());
    for (int k = 0; k < rounds; ++k) {  // halving: distance and bytes shrink
      const int m = pow2 >> (k + 1);
      const double bytes = s * m / pow2;
      t += ringSteps(1, xorCross_[static_cast<std::size_t>(log2Exact(m))], bytes, bytes, why);
    }
    for (int k = 0; k < rounds; ++k) {  // doubling: they grow back
      const double bytes = s * (1 << k) / pow2;
      t += ringSteps(1, xorCross_[static_cast<std::size_t>(k)], bytes, 0, why);
    }
    return t;
  }
  if (algo == "double_binary_tree") {
    // Both trees at once, half the buffer each, chunk-pipelined up (reduce) then down: a rank
    // interior in one tree moves two chunks per stage; a host link carries its crossing edges.
    const double half = s / 2;
    const double cc = std::min(static_cast<double>(chunk_), half);
    const int chunks = std::max(1, static_cast<int>(std::ceil(half / static_cast<double>(chunk_))));
    const int stages = binomialDepth_ + chunks - 1;
    const LinkCost l = link(treeCross_);
    addSteps(why, 2 * stages, treeCross_,
             "tree stages of " + bytesText(static_cast<std::size_t>(cc)));
    const double fixed = stages * (2 * l.alpha + 2 * cc * params_.gamma);
    if (treeEgress_ == 0)  // one host: an interior rank moves two chunks up and down per stage
      return fixed + stages * 2 * 2 * cc * l.beta;
    // Across hosts the busiest host link carries each crossing edge's half once, up or down
    // (treeEgress_ halves), and a chunk needs 2 x depth hops up and down, one per stage, so
    // with few chunks the critical path, not the link's total, bounds the time (measured on 2
    // hosts x 2 ranks: within 3-21 % from 64 KiB to 4 MiB; docs/plan.md).
    const double path = (2.0 * binomialDepth_ + chunks - 1) * cc;
    return fixed + std::max(treeEgress_ * half, path) * l.beta;
  }
  if (algo == "hierarchical") {
    if (!hierarchical()) return ring();
    // The piece the communicator runs at this size: decided at the size class's upper end.
    const double piece =
        pieceFor(static_cast<double>(classBytes(sizeClass(static_cast<std::size_t>(s)))));
    return hierarchicalAllreduce(s, piece, why);
  }
  return std::nullopt;
}

// Pipelined by pieces (src/algo/allreduce/hierarchical.cpp): each piece's network phase
// overlaps the in-node phases of its neighbours, so a piece costs the longer of the two, plus
// one piece's in-node phases to fill and drain the pipeline.
double CostModel::hierarchicalAllreduce(double s, double piece, std::string& why) const {
  const int l = perNode_;
  const int m = nodes_;
  const double pieces = std::max(1.0, std::ceil(s / piece));
  const double slice = s / pieces / l;
  std::string per;
  const double rs = ringSteps(l - 1, 0, slice, slice, per);
  // Two nodes exchange the whole slice once; more run the ring's 2(M-1) steps.
  const double net = m == 2 ? ringSteps(1, l, slice, slice, per)
                            : ringSteps(m - 1, l, slice / m, slice / m, per) +
                                  ringSteps(m - 1, l, slice / m, 0, per);
  const double ag = ringSteps(l - 1, 0, slice, 0, per);
  if (pieces == 1) {
    why += (why.empty() ? "" : " + ") + per;
    return rs + net + ag;
  }
  why += (why.empty() ? "" : " + ") + std::to_string(static_cast<long long>(pieces)) +
         " overlapped pieces of " + bytesText(static_cast<std::size_t>(s / pieces)) + " (" + per +
         ")";
  return rs + ag + pieces * std::max(net, rs + ag);
}

// The fixed piece, or the best candidate: more pieces hide more of the in-node phases behind
// the network but pay every step's latency once more per piece.
double CostModel::pieceFor(double s) const {
  const double cap = static_cast<double>(pieceCap_);
  if (piece_ > 0) return std::min(static_cast<double>(piece_), cap);
  double best = std::min(65536.0, cap);
  double bestTime = -1;
  for (double c = best;; c = std::min(2 * c, cap)) {
    std::string ignored;
    const double t = hierarchicalAllreduce(s, c, ignored);
    if (bestTime < 0 || t < bestTime) {
      best = c;
      bestTime = t;
    }
    if (c >= cap || c >= s) break;  // larger pieces: the same single piece
  }
  return best;
}

std::size_t CostModel::hierPieceBytes(std::size_t bytes) const {
  if (!hierarchical()) return piece_ > 0 ? piece_ : pieceCap_;
  return static_cast<std::size_t>(pieceFor(static_cast<double>(classBytes(sizeClass(bytes)))));
}

std::optional<double> CostModel::reduceScatter(std::string_view algo, double s,
                                               std::string& why) const {
  const int n = n_;
  const double block = s / n;
  auto ring = [&] { return ringSteps(n - 1, ringCross_, block, block, why); };
  if (algo == "ring") return ring();
  if (algo == "halving_doubling") {
    const int pow2 = algo::patterns::floorPow2(n);
    double t = 0;
    if (pow2 != n) t += ringSteps(1, foldCross_, s, s, why);
    for (int k = 0; k < static_cast<int>(xorCross_.size()); ++k) {
      const int m = pow2 >> (k + 1);
      const double bytes = s * m / pow2;
      t += ringSteps(1, xorCross_[static_cast<std::size_t>(log2Exact(m))], bytes, bytes, why);
    }
    if (pow2 != n) t += ringSteps(1, foldCross_, block, 0, why);
    return t;
  }
  if (algo == "hierarchical") {
    // Reduce-scatter inside the host, then across hosts among equal local ranks.
    if (!hierarchical()) return ring();
    const int l = perNode_;
    return ringSteps(l - 1, 0, s / l, s / l, why) + ringSteps(nodes_ - 1, l, block, block, why);
  }
  return std::nullopt;
}

std::optional<double> CostModel::allgather(std::string_view algo, double s,
                                           std::string& why) const {
  const int n = n_;
  const double block = s / n;
  auto ring = [&] { return ringSteps(n - 1, ringCross_, block, 0, why); };
  if (algo == "ring") return ring();
  if (algo == "bruck") {
    // ceil(log2 N) steps, then the output rotated into place: one local copy of all of it.
    double t = s * params_.shm.beta;
    for (std::size_t k = 0; k < bruckGatherCross_.size(); ++k)
      t += ringSteps(1, bruckGatherCross_[k],
                     block * algo::patterns::bruckAllgatherBlocks(n, static_cast<int>(k)), 0, why);
    why += " + local rotation of " + bytesText(static_cast<std::size_t>(s));
    return t;
  }
  if (algo == "hierarchical") {
    // Across hosts among equal local ranks, then inside the host.
    if (!hierarchical()) return ring();
    const int l = perNode_;
    return ringSteps(nodes_ - 1, l, block, 0, why) + ringSteps(l - 1, 0, block * nodes_, 0, why);
  }
  return std::nullopt;
}

double CostModel::binomial(int ranks, bool network, double s, bool reduce) const {
  // Pipelined binomial tree from its root: latency once per level and once per chunk, the
  // root's link carries every chunk once per child.
  if (ranks <= 1) return 0;
  const LinkCost l = network ? params_.net : params_.shm;
  const int depth = algo::patterns::ceilLog2(ranks);
  const double cc = std::min(static_cast<double>(chunk_), s);
  const int chunks = std::max(1, static_cast<int>(std::ceil(s / static_cast<double>(chunk_))));
  return (depth + chunks - 1) * l.alpha +
         chunks * depth * cc * (l.beta + (reduce ? params_.gamma : 0));
}

std::optional<double> CostModel::rootedTree(std::string_view algo, double s, bool reduce,
                                            std::string& why) const {
  if (algo == "binomial_tree") {
    const double cc = std::min(static_cast<double>(chunk_), s);
    const int chunks = std::max(1, static_cast<int>(std::ceil(s / static_cast<double>(chunk_))));
    bool anyNet = false;
    double perChunk = 0;
    for (bool net : binomialRootChildNet_) {
      const LinkCost l = net ? params_.net : params_.shm;
      perChunk += cc * (l.beta + (reduce ? params_.gamma : 0));
      anyNet = anyNet || net;
    }
    const LinkCost l = anyNet ? params_.net : params_.shm;
    addSteps(why, binomialDepth_ + chunks - 1, anyNet ? 1 : 0,
             "tree stages of " + bytesText(static_cast<std::size_t>(cc)));
    return (binomialDepth_ + chunks - 1) * l.alpha + chunks * perChunk;
  }
  if (algo == "hierarchical") {
    // src/algo/broadcast/hierarchical.cpp and reduce/hierarchical.cpp, with L ranks per host
    // (the model's layouts are uniform, so P = L slices): the slices go between the root and
    // its host's ranks over shared memory (L - 1 messages of S/L), cross the network on L
    // binomial trees over the hosts at once (each host link carries L trees' chunks), and are
    // allgathered (broadcast) or reduce-scattered (reduce) inside every host as a ring.
    if (nodes_ < 2 || perNode_ < 2 || !uniform_) return rootedTree("binomial_tree", s, reduce, why);
    const int l = perNode_;
    const double slice = s / l;
    const double local = (l - 1) * step(0, slice, 0);
    const int depth = algo::patterns::ceilLog2(nodes_);
    const double cc = std::min(static_cast<double>(chunk_), slice);
    const int chunks =
        std::max(1, static_cast<int>(std::ceil(slice / static_cast<double>(chunk_))));
    const double trees =
        (depth + chunks - 1) * params_.net.alpha +
        chunks * depth * cc * (l * params_.net.beta + (reduce ? params_.gamma : 0));
    addSteps(why, l - 1, 0, "root messages of " + bytesText(static_cast<std::size_t>(slice)));
    addSteps(why, depth + chunks - 1, l,
             "tree stages of " + bytesText(static_cast<std::size_t>(cc)));
    const double ringPart = ringSteps(l - 1, 0, slice, reduce ? slice : 0, why);
    return local + trees + ringPart;
  }
  return std::nullopt;
}

std::optional<double> CostModel::alltoall(std::string_view algo, double s, std::string& why) const {
  const int n = n_;
  const double block = s / n;
  if (algo == "pairwise") {
    double t = 0;
    int net = 0;
    for (int c : pairwiseCross_) {
      t += step(c, block, 0);
      net += c > 0 ? 1 : 0;
    }
    addSteps(why, net, 1, "steps of " + bytesText(static_cast<std::size_t>(block)));
    addSteps(why, n - 1 - net, 0, "steps of " + bytesText(static_cast<std::size_t>(block)));
    return t;
  }
  if (algo == "bruck") {
    // Every step packs the moving blocks and unpacks what arrives; a final local rotation.
    double t = s * params_.shm.beta;
    for (std::size_t k = 0; k < bruckA2aCross_.size(); ++k) {
      const double m = block * algo::patterns::bruckAlltoallBlocks(n, static_cast<int>(k));
      t += ringSteps(1, bruckA2aCross_[k], m, 0, why) + 2 * m * params_.shm.beta;
    }
    why += " + packing and local rotation";
    return t;
  }
  return std::nullopt;
}

std::optional<double> CostModel::seconds(Collective coll, std::string_view algo, double bytes,
                                         std::string& steps) const {
  std::optional<double> t;
  switch (coll) {
    case Collective::Allreduce:
      t = allreduce(algo, bytes, steps);
      break;
    case Collective::ReduceScatter:
      t = reduceScatter(algo, bytes, steps);
      break;
    case Collective::Allgather:
      t = allgather(algo, bytes, steps);
      break;
    case Collective::Broadcast:
      t = rootedTree(algo, bytes, false, steps);
      break;
    case Collective::Reduce:
      t = rootedTree(algo, bytes, true, steps);
      break;
    case Collective::Alltoall:
      t = alltoall(algo, bytes, steps);
      break;
    default:
      break;
  }
  if (t && n_ <= 1) {  // one rank: nothing moves
    steps.clear();
    return 0.0;
  }
  return t;
}

std::optional<Prediction> CostModel::predict(Collective coll, std::string_view algorithm,
                                             std::size_t bytes) const {
  Prediction p;
  auto t = seconds(coll, algorithm, static_cast<double>(bytes), p.steps);
  if (!t) return std::nullopt;
  p.algorithm = std::string(algorithm);
  p.seconds = *t;
  if (p.steps.empty()) p.steps = "nothing to send";
  return p;
}

std::vector<Prediction> CostModel::candidates(Collective coll, std::size_t bytes) const {
  std::vector<Prediction> out;
  for (const auto& a : algo::registry()) {
    if (a.coll != coll) continue;
    if (auto p = predict(coll, a.name, bytes)) out.push_back(std::move(*p));
  }
  if (out.size() < 2) out.clear();  // nothing to choose
  return out;
}

std::optional<std::string> CostModel::choose(Collective coll, std::size_t bytes) const {
  static_assert(static_cast<int>(Collective::Recv) + 1 == kCollectives);
  if (static_cast<int>(coll) >= kCollectives) return std::nullopt;
  const int cls = sizeClass(bytes);
  const auto slot = static_cast<std::size_t>(static_cast<int>(coll) * kClasses + cls);
  const std::int16_t cached = choice_[slot].load(std::memory_order_relaxed);
  if (cached > 0) return std::string(algo::registry()[static_cast<std::size_t>(cached - 1)].name);
  if (cached < 0) return std::nullopt;
  const auto cands = candidates(coll, classBytes(cls));
  if (cands.empty()) {
    choice_[slot].store(-1, std::memory_order_relaxed);
    return std::nullopt;
  }
  const auto best = std::min_element(
      cands.begin(), cands.end(),
      [](const Prediction& a, const Prediction& b) { return a.seconds < b.seconds; });
  const auto reg = algo::registry();
  for (std::size_t i = 0; i < reg.size(); ++i)
    if (reg[i].coll == coll && best->algorithm == reg[i].name)
      choice_[slot].store(static_cast<std::int16_t>(i + 1), std::memory_order_relaxed);
  return best->algorithm;
}

bool CostModel::firstUse(Collective coll, std::size_t bytes) const noexcept {
  const auto c = static_cast<std::size_t>(coll);
  if (c >= logged_.size()) return false;
  const std::uint64_t bit = std::uint64_t{1} << sizeClass(bytes);
  return (logged_[c].fetch_or(bit, std::memory_order_relaxed) & bit) == 0;
}

// ---------------------------------------------------------------- explanation

std::vector<std::string> explainSelection(const std::vector<Rule>& rules, const SelectionInputs& in,
                                          const std::string& chosen) {
  std::vector<std::string> lines;
  const int cls = CostModel::sizeClass(in.bytes);
  std::string head = std::string(toString(in.coll)) + " " + bytesText(in.bytes) + " (size class " +
                     (cls == 0 ? std::string("<= 1 B")
                               : bytesText(CostModel::classBytes(cls - 1)) +
                                     " < size <= " + bytesText(CostModel::classBytes(cls))) +
                     ")";
  std::vector<Prediction> cands;
  if (in.model != nullptr) {
    cands = in.model->candidates(in.coll, CostModel::classBytes(cls));
    head += ", " + std::to_string(in.model->nodes()) + " node(s) x " +
            std::to_string(in.model->ranksPerNode()) + " rank(s), model " +
            in.model->params().summary();
  }
  lines.push_back(head + ":");
  for (const auto& p : cands)
    lines.push_back("  candidate " + p.algorithm +
                    std::string(p.algorithm.size() < 20 ? 20 - p.algorithm.size() : 0, ' ') +
                    " predicted " + formatSeconds(p.seconds) + " at " +
                    bytesText(CostModel::classBytes(cls)) + " (" + p.steps + ")" +
                    (p.algorithm == chosen ? "  <- chosen" : ""));
  std::string why;
  const Selection sel = select(rules, in);
  if (sel.skippedRule != nullptr)
    lines.push_back("  rule '" + sel.skippedRule->algorithm + "' skipped: " + sel.skippedRow->name +
                    " " + algo::describe(sel.skippedBecause, *sel.skippedRow));
  switch (sel.reason) {
    case Selection::Reason::Rule:
      why = "a rule (BRAID_ALGO or tuning file) names " + chosen;
      break;
    case Selection::Reason::CostModel:
      why = "cost model: fastest predicted of the rows that can run";
      break;
    case Selection::Reason::Default:
      if (in.deterministic && isReduction(in.coll))
        why = "default table, deterministic mode (rank-ordered rows only)";
      else if (chosen.rfind("shm_", 0) == 0)
        why = "default table: one host with shared memory";
      else if (in.model != nullptr && in.model->decides())
        why = std::string(
                  "default table (the model has nothing that can run to choose between "
                  "for ") +
              toString(in.coll) + ")";
      else
        why = "default table (one host, default parameters; BRAID_SMALL_MSG_SIZE threshold)";
      break;
  }
  lines.push_back("  chosen " + chosen + ": " + why);
  return lines;
}

}  // namespace braid::tuning
