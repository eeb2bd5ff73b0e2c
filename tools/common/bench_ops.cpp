#include "common/bench_ops.hpp"

#include <array>
#include <cstring>

#include "common/check_data.hpp"

namespace braid::tools {
namespace {

constexpr std::array<BenchOpInfo, 9> kOps = {{
    {BenchOp::Allreduce, "allreduce", Collective::Allreduce, true, false, false},
    {BenchOp::Allgather, "allgather", Collective::Allgather, false, false, true},
    {BenchOp::ReduceScatter, "reducescatter", Collective::ReduceScatter, true, false, true},
    {BenchOp::Broadcast, "broadcast", Collective::Broadcast, false, true, false},
    {BenchOp::Reduce, "reduce", Collective::Reduce, true, true, false},
    {BenchOp::Alltoall, "alltoall", Collective::Alltoall, false, false, true},
    {BenchOp::Gather, "gather", Collective::Gather, false, true, true},
    {BenchOp::Scatter, "scatter", Collective::Scatter, false, true, true},
    {BenchOp::SendRecv, "sendrecv", Collective::Send, false, false, false},
}};

DataPattern patternFor(const BenchCase& c, int nranks) {
  return DataPattern(c.dtype, c.info->reduces ? std::optional<ReduceOp>(c.redop) : std::nullopt,
                     nranks);
}

}  // namespace

std::span<const BenchOpInfo> benchOps() {
  return kOps;
}

const BenchOpInfo* findBenchOp(std::string_view name) {
  if (name == "all_reduce") name = "allreduce";
  if (name == "all_gather") name = "allgather";
  if (name == "reduce_scatter") name = "reducescatter";
  if (name == "bcast") name = "broadcast";
  if (name == "all_to_all" || name == "alltoallv") name = "alltoall";
  if (name == "send_recv") name = "sendrecv";
  for (const BenchOpInfo& op : kOps)
    if (name == op.name) return &op;
  return nullptr;
}

double busFactor(BenchOp op, int nranks) {
  const double n = nranks;
  switch (op) {
    case BenchOp::Allreduce:
      return 2.0 * (n - 1) / n;
    case BenchOp::Allgather:
    case BenchOp::ReduceScatter:
    case BenchOp::Alltoall:
    case BenchOp::Gather:
    case BenchOp::Scatter:
      return (n - 1) / n;
    case BenchOp::Broadcast:
    case BenchOp::Reduce:
    case BenchOp::SendRecv:
      return 1.0;
  }
  return 1.0;
}

void BenchRunner::run(const BenchCase& c) {
  const int n = comm_.size();
  const std::size_t per = c.count / static_cast<std::size_t>(n);
  switch (c.info->op) {
    case BenchOp::Allreduce:
      comm_.allreduce(send_, recv_, c.count, c.dtype, c.redop);
      break;
    case BenchOp::Allgather:
      comm_.allgather(send_, recv_, per, c.dtype);
      break;
    case BenchOp::ReduceScatter:
      comm_.reduceScatter(send_, recv_, per, c.dtype, c.redop);
      break;
    case BenchOp::Broadcast:
      comm_.broadcast(recv_, c.count, c.dtype, c.root);
      break;
    case BenchOp::Reduce:
      comm_.reduce(send_, recv_, c.count, c.dtype, c.redop, c.root);
      break;
    case BenchOp::Alltoall:
      comm_.alltoall(send_, recv_, per, c.dtype);
      break;
    case BenchOp::Gather:
      comm_.gather(send_, recv_, per, c.dtype, c.root);
      break;
    case BenchOp::Scatter:
      comm_.scatter(send_, recv_, per, c.dtype, c.root);
      break;
    case BenchOp::SendRecv: {
      // A ring: send to rank+1 while receiving from rank-1, both in flight at once (the
      // receive is posted asynchronously first, so no cycle of waiting senders can form).
      if (n == 1) {
        std::memcpy(recv_, send_, c.count * dataTypeSize(c.dtype));
        break;
      }
      const int r = comm_.rank();
      Work incoming = comm_.recvAsync(recv_, c.count, c.dtype, (r + n - 1) % n);
      comm_.send(send_, c.count, c.dtype, (r + 1) % n);
      incoming.wait();
      break;
    }
  }
}

void BenchRunner::prepare(const BenchCase& c) {
  const int n = comm_.size();
  const int r = comm_.rank();
  const std::size_t per = c.count / static_cast<std::size_t>(n);
  const std::size_t bytes = c.count * dataTypeSize(c.dtype);
  const DataPattern p = patternFor(c, n);
  std::memset(recv_, 0xff, bytes);  // NaN for floats, -1 / max for integers
  switch (c.info->op) {
    case BenchOp::Allgather:
    case BenchOp::Gather:
      fillBuffer(c.dtype, send_, per, [&](std::size_t i) { return p.value(r, r * per + i); });
      break;
    case BenchOp::Broadcast:
      if (r == c.root)
        fillBuffer(c.dtype, recv_, c.count, [&](std::size_t i) { return p.value(c.root, i); });
      break;
    case BenchOp::Scatter:
      if (r == c.root)
        fillBuffer(c.dtype, send_, c.count, [&](std::size_t i) { return p.value(r, i); });
      break;
    default:
      fillBuffer(c.dtype, send_, c.count, [&](std::size_t i) { return p.value(r, i); });
  }
}

std::int64_t BenchRunner::verify(const BenchCase& c) const {
  const int n = comm_.size();
  const int r = comm_.rank();
  const std::size_t per = c.count / static_cast<std::size_t>(n);
  const DataPattern p = patternFor(c, n);
  const DataType t = c.dtype;
  switch (c.info->op) {
    case BenchOp::Allreduce:
      return countWrong(t, recv_, c.count, [&](std::size_t i) { return p.reduced(i); });
    case BenchOp::Reduce:
      if (r != c.root) return 0;
      return countWrong(t, recv_, c.count, [&](std::size_t i) { return p.reduced(i); });
    case BenchOp::ReduceScatter:
      return countWrong(t, recv_, per, [&](std::size_t i) { return p.reduced(r * per + i); });
    case BenchOp::Allgather:
      return countWrong(t, recv_, per * n,
                        [&](std::size_t j) { return p.value(static_cast<int>(j / per), j); });
    case BenchOp::Gather:
      if (r != c.root) return 0;
      return countWrong(t, recv_, per * n,
                        [&](std::size_t j) { return p.value(static_cast<int>(j / per), j); });
    case BenchOp::Broadcast:
      return countWrong(t, recv_, c.count, [&](std::size_t i) { return p.value(c.root, i); });
    case BenchOp::Scatter:
      return countWrong(t, recv_, per, [&](std::size_t i) { return p.value(c.root, r * per + i); });
    case BenchOp::Alltoall:
      // Block q of this rank's output is block r of rank q's input.
      return countWrong(t, recv_, per * n, [&](std::size_t j) {
        return p.value(static_cast<int>(j / per), r * per + j % per);
      });
    case BenchOp::SendRecv: {
      const int prev = (r + n - 1) % n;
      return countWrong(t, recv_, c.count, [&](std::size_t i) { return p.value(prev, i); });
    }
  }
  return 0;
}

}  // namespace braid::tools
