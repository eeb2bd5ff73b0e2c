#include "collective_checks.hpp"

#include <algorithm>
#include <chrono>
#include <cstring>
#include <numeric>

#include "common/check_data.hpp"

namespace braid::check {
namespace {

using Clock = std::chrono::steady_clock;
constexpr DataType kType = DataType::Float32;
// Index stride between the blocks of alltoallv, so each (source, destination) block has its own
// values.
constexpr std::size_t kBlockStride = std::size_t{1} << 24;

std::vector<std::size_t> packedDispls(const std::vector<std::size_t>& counts) {
  std::vector<std::size_t> d(counts.size(), 0);
  for (std::size_t i = 1; i < counts.size(); ++i) d[i] = d[i - 1] + counts[i - 1];
  return d;
}

}  // namespace

CollectiveChecker::CollectiveChecker(Comm& comm, std::size_t bytes)
    : comm_(comm), count_(bytes / sizeof(float)) {
  // Room for every check: the bench operations use count_ elements, the v-forms at most
  // size * (base + size) (see unevenCounts).
  const std::size_t n = static_cast<std::size_t>(comm.size());
  const std::size_t elements = std::max(count_, n * (count_ / n / 2 + n)) + 1;
  send_.resize(elements);
  recv_.resize(elements);
}

const std::vector<std::string>& CollectiveChecker::names() {
  static const std::vector<std::string> kNames = [] {
    const auto ops = tools::benchOps();
    std::vector<std::string> v(ops.size());
    std::transform(ops.begin(), ops.end(), v.begin(),
                   [](const tools::BenchOpInfo& op) { return std::string(op.name); });
    v.insert(v.end(), {"barrier", "allgatherv", "reducescatterv", "alltoallv"});
    return v;
  }();
  return kNames;
}

std::string CollectiveChecker::algorithm(Collective c, std::size_t bytes) const {
  try {
    return comm_.selectedAlgorithm(c, bytes);
  } catch (const std::exception&) {
    return "?";
  }
}

std::vector<std::size_t> CollectiveChecker::unevenCounts() const {
  const std::size_t n = static_cast<std::size_t>(comm_.size());
  std::vector<std::size_t> counts(n);
  for (std::size_t r = 0; r < n; ++r) counts[r] = count_ / n / 2 + r;
  return counts;
}

CollectiveOutcome CollectiveChecker::run(std::size_t index) {
  const auto ops = tools::benchOps();
  if (index < ops.size()) return runBench(ops[index]);
  const std::string& name = names().at(index);
  if (name == "barrier") return runBarrier();
  if (name == "allgatherv") return runAllgatherv();
  if (name == "reducescatterv") return runReduceScatterv();
  return runAlltoallv();
}

CollectiveOutcome CollectiveChecker::runBench(const tools::BenchOpInfo& op) {
  const std::size_t n = static_cast<std::size_t>(comm_.size());
  std::size_t count = count_;
  if (op.perRankSplit) count = count / n * n;
  const tools::BenchCase c{&op, kType, ReduceOp::Sum, comm_.size() - 1, count};
  tools::BenchRunner runner(comm_, send_.data(), recv_.data());
  CollectiveOutcome out;
  out.bytes = count * sizeof(float);
  out.algo = op.op == tools::BenchOp::SendRecv ? "p2p" : algorithm(op.coll, out.bytes);
  runner.prepare(c);
  comm_.barrier();
  const auto t0 = Clock::now();
  runner.run(c);
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  out.wrong = runner.verify(c);
  return out;
}

CollectiveOutcome CollectiveChecker::runBarrier() {
  CollectiveOutcome out;
  out.algo = algorithm(Collective::Barrier, 0);
  comm_.barrier();
  const auto t0 = Clock::now();
  comm_.barrier();
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  return out;
}

CollectiveOutcome CollectiveChecker::runAllgatherv() {
  const int me = comm_.rank();
  const auto counts = unevenCounts();
  const auto displs = packedDispls(counts);
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  const tools::DataPattern p(kType, std::nullopt, comm_.size());
  tools::fillBuffer(kType, send_.data(), counts[me],
                    [&](std::size_t i) { return p.value(me, displs[me] + i); });
  std::memset(recv_.data(), 0xff, total * sizeof(float));
  CollectiveOutcome out;
  out.bytes = total * sizeof(float);
  out.algo = algorithm(Collective::Allgatherv, out.bytes);
  comm_.barrier();
  const auto t0 = Clock::now();
  comm_.allgatherv(send_.data(), recv_.data(), counts, displs, kType);
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  out.wrong = tools::countWrong(kType, recv_.data(), total, [&](std::size_t j) {
    int owner = 0;
    while (owner + 1 < comm_.size() && displs[owner + 1] <= j) ++owner;
    return p.value(owner, j);
  });
  return out;
}

CollectiveOutcome CollectiveChecker::runReduceScatterv() {
  const int me = comm_.rank();
  const auto counts = unevenCounts();
  const auto displs = packedDispls(counts);
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  const tools::DataPattern p(kType, ReduceOp::Sum, comm_.size());
  tools::fillBuffer(kType, send_.data(), total, [&](std::size_t i) { return p.value(me, i); });
  std::memset(recv_.data(), 0xff, counts[me] * sizeof(float));
  CollectiveOutcome out;
  out.bytes = total * sizeof(float);
  out.algo = algorithm(Collective::ReduceScatterv, out.bytes);
  comm_.barrier();
  const auto t0 = Clock::now();
  comm_.reduceScatterv(send_.data(), recv_.data(), counts, kType, ReduceOp::Sum);
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  out.wrong = tools::countWrong(kType, recv_.data(), counts[me],
                                [&](std::size_t i) { return p.reduced(displs[me] + i); });
  return out;
}

CollectiveOutcome CollectiveChecker::runAlltoallv() {
  const int me = comm_.rank();
  const int n = comm_.size();
  const std::size_t base = count_ / static_cast<std::size_t>(n) / 2;
  // Elements rank a sends to rank b: uneven in both directions.
  auto blockCount = [&](int a, int b) { return base + static_cast<std::size_t>((a * 3 + b) % 4); };
  std::vector<std::size_t> sendCounts(n), recvCounts(n);
  for (int q = 0; q < n; ++q) {
    sendCounts[q] = blockCount(me, q);
    recvCounts[q] = blockCount(q, me);
  }
  const auto sendDispls = packedDispls(sendCounts);
  const auto recvDispls = packedDispls(recvCounts);
  const std::size_t sendTotal = sendDispls.back() + sendCounts.back();
  const std::size_t recvTotal = recvDispls.back() + recvCounts.back();
  if (send_.size() < sendTotal) send_.resize(sendTotal);
  if (recv_.size() < recvTotal) recv_.resize(recvTotal);
  const tools::DataPattern p(kType, std::nullopt, n);
  for (int q = 0; q < n; ++q)
    tools::fillBuffer(kType, send_.data() + sendDispls[q], sendCounts[q], [&](std::size_t i) {
      return p.value(me, static_cast<std::size_t>(q) * kBlockStride + i);
    });
  std::memset(recv_.data(), 0xff, recvTotal * sizeof(float));
  CollectiveOutcome out;
  out.bytes = sendTotal * sizeof(float);
  out.algo = algorithm(Collective::Alltoallv, out.bytes);
  comm_.barrier();
  const auto t0 = Clock::now();
  comm_.alltoallv(send_.data(), sendCounts, sendDispls, recv_.data(), recvCounts, recvDispls,
                  kType);
  out.seconds = std::chrono::duration<double>(Clock::now() - t0).count();
  for (int q = 0; q < n; ++q)
    out.wrong += tools::countWrong(
        kType, recv_.data() + recvDispls[q], recvCounts[q],
        [&](std::size_t i) { return p.value(q, static_cast<std::size_t>(me) * kBlockStride + i); });
  return out;
}

}  // namespace braid::check
