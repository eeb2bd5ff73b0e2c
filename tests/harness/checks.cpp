#include "harness/checks.hpp"

#include <gtest/gtest.h>

#include "harness/data.hpp"

#include <cstring>
#include <functional>
#include <numeric>
#include <string>
#include <vector>

namespace braid::test {

// Compares got with expected for every element, reporting the first few differences.
static void expectElements(const Buffer& got, std::size_t offset, std::size_t count,
                    const std::function<double(std::size_t)>& expected, const std::string& what) {
  int reported = 0;
  for (std::size_t i = 0; i < count; ++i) {
    double e = expected(i);
    double g = got.get(offset + i);
    if (g != e && reported++ < 3)
      ADD_FAILURE() << what << ": element " << i << " is " << g << ", expected " << e;
  }
}

static std::string label(const Comm& c, const char* coll, DataType t, ReduceOp op, std::size_t count,
                  bool inPlace) {
  return std::string(coll) + " n=" + std::to_string(c.size()) + " rank=" +
         std::to_string(c.rank()) + " " + toString(t) + " " + toString(op) +
         " count=" + std::to_string(count) + (inPlace ? " in-place" : "");
}

static std::vector<double> column(DataType t, ReduceOp op, int n, std::size_t i) {
  std::vector<double> v(n);
  for (int r = 0; r < n; ++r) v[r] = roundTrip(t, testValue(t, op, r, i));
  return v;
}

void checkAllreduce(Comm& c, DataType t, ReduceOp op, std::size_t count, bool inPlace) {
  const int n = c.size(), me = c.rank();
  Buffer send(t, count), recv(t, count);
  for (std::size_t i = 0; i < count; ++i) send.set(i, testValue(t, op, me, i));
  if (inPlace) {
    c.allreduce(send.data(), send.data(), count, t, op);
  } else {
    c.allreduce(send.data(), recv.data(), count, t, op);
  }
  expectElements(inPlace ? send : recv, 0, count,
                 [&](std::size_t i) { return expectedReduce(t, op, column(t, op, n, i)); },
                 label(c, "allreduce", t, op, count, inPlace));
}

void checkReduce(Comm& c, DataType t, ReduceOp op, std::size_t count, int root, bool inPlace) {
  const int n = c.size(), me = c.rank();
  Buffer send(t, count), recv(t, count);
  for (std::size_t i = 0; i < count; ++i) send.set(i, testValue(t, op, me, i));
  void* out = inPlace ? send.data() : recv.data();
  c.reduce(send.data(), me == root ? out : nullptr, count, t, op, root);
  if (me == root)
    expectElements(inPlace ? send : recv, 0, count,
                   [&](std::size_t i) { return expectedReduce(t, op, column(t, op, n, i)); },
                   label(c, "reduce", t, op, count, inPlace) + " root=" + std::to_string(root));
}

void checkReduceScatter(Comm& c, DataType t, ReduceOp op, std::size_t count, bool inPlace) {
  const int n = c.size(), me = c.rank();
  Buffer send(t, count * n), recv(t, count);
  for (std::size_t i = 0; i < count * n; ++i) send.set(i, testValue(t, op, me, i));
  if (inPlace)
    c.reduceScatter(send.data(), send.at(me * count), count, t, op);
  else
    c.reduceScatter(send.data(), recv.data(), count, t, op);
  expectElements(inPlace ? send : recv, inPlace ? me * count : 0, count,
                 [&](std::size_t i) {
                   return expectedReduce(t, op, column(t, op, n, me * count + i));
                 },
                 label(c, "reducescatter", t, op, count, inPlace));
}

static double gatherValue(DataType t, int rank, std::size_t i) {
  return roundTrip(t, static_cast<double>((rank * 31 + static_cast<int>(i % 97)) % 120));
}

void checkNonReducing(Comm& c, DataType t, std::size_t count) {
  const int n = c.size(), me = c.rank();
  const std::string tail = " n=" + std::to_string(n) + " rank=" + std::to_string(me) + " " +
                           toString(t) + " count=" + std::to_string(count);
  // allgather, out of place and in place
  {
    Buffer send(t, count), recv(t, count * n);
    for (std::size_t i = 0; i < count; ++i) send.set(i, gatherValue(t, me, i));
    c.allgather(send.data(), recv.data(), count, t);
    expectElements(recv, 0, count * n,
                   [&](std::size_t k) { return gatherValue(t, static_cast<int>(k / count), k % count); },
                   "allgather" + tail);
    Buffer inplace(t, count * n);
    for (std::size_t i = 0; i < count; ++i) inplace.set(me * count + i, gatherValue(t, me, i));
    c.allgather(inplace.at(me * count), inplace.data(), count, t);
    expectElements(inplace, 0, count * n,
                   [&](std::size_t k) { return gatherValue(t, static_cast<int>(k / count), k % count); },
                   "allgather in-place" + tail);
  }
  // broadcast from every root
  for (int root = 0; root < n; ++root) {
    Buffer buf(t, count);
    for (std::size_t i = 0; i < count; ++i) buf.set(i, me == root ? gatherValue(t, root, i) : 0);
    c.broadcast(buf.data(), count, t, root);
    expectElements(buf, 0, count, [&](std::size_t i) { return gatherValue(t, root, i); },
                   "broadcast root=" + std::to_string(root) + tail);
  }
  // gather and scatter at a root that is not 0 when possible
  const int root = n - 1;
  {
    Buffer send(t, count), recv(t, count * n);
    for (std::size_t i = 0; i < count; ++i) send.set(i, gatherValue(t, me, i));
    c.gather(send.data(), me == root ? recv.data() : nullptr, count, t, root);
    if (me == root)
      expectElements(recv, 0, count * n,
                     [&](std::size_t k) { return gatherValue(t, static_cast<int>(k / count), k % count); },
                     "gather" + tail);
  }
  {
    Buffer send(t, count * n), recv(t, count);
    if (me == root)
      for (std::size_t k = 0; k < count * n; ++k)
        send.set(k, gatherValue(t, static_cast<int>(k / count), k % count));
    c.scatter(me == root ? send.data() : nullptr, recv.data(), count, t, root);
    expectElements(recv, 0, count, [&](std::size_t i) { return gatherValue(t, me, i); },
                   "scatter" + tail);
  }
  // alltoall: block j of rank r holds value(r * n + j)
  {
    Buffer send(t, count * n), recv(t, count * n);
    for (int j = 0; j < n; ++j)
      for (std::size_t i = 0; i < count; ++i) send.set(j * count + i, gatherValue(t, me * n + j, i));
    c.alltoall(send.data(), recv.data(), count, t);
    expectElements(recv, 0, count * n,
                   [&](std::size_t k) {
                     return gatherValue(t, static_cast<int>(k / count) * n + me, k % count);
                   },
                   "alltoall" + tail);
  }
}

// Variable-count collectives: rank r contributes (count + r) % 5 + r elements.
void checkVariants(Comm& c, DataType t, std::size_t base) {
  const int n = c.size(), me = c.rank();
  std::vector<std::size_t> counts(n);
  for (int r = 0; r < n; ++r) counts[r] = (base + r) % 5 + static_cast<std::size_t>(r) + base;
  std::vector<std::size_t> displs(n);
  std::size_t total = 0;
  for (int r = 0; r < n; ++r) {
    displs[r] = total + 2;  // gaps between blocks
    total += counts[r] + 2;
  }
  const std::string tail = " n=" + std::to_string(n) + " rank=" + std::to_string(me) + " " +
                           toString(t) + " base=" + std::to_string(base);
  {
    Buffer send(t, counts[me]), recv(t, total);
    for (std::size_t i = 0; i < counts[me]; ++i) send.set(i, gatherValue(t, me, i));
    c.allgatherv(send.data(), recv.data(), counts, displs, t);
    for (int r = 0; r < n; ++r)
      expectElements(recv, displs[r], counts[r], [&](std::size_t i) { return gatherValue(t, r, i); },
                     "allgatherv block " + std::to_string(r) + tail);
  }
  {
    std::size_t packed = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
    Buffer send(t, packed), recv(t, counts[me]);
    for (std::size_t i = 0; i < packed; ++i) send.set(i, testValue(t, ReduceOp::Sum, me, i));
    c.reduceScatterv(send.data(), recv.data(), counts, t, ReduceOp::Sum);
    std::size_t off = std::accumulate(counts.begin(), counts.begin() + me, std::size_t{0});
    expectElements(recv, 0, counts[me],
                   [&](std::size_t i) {
                     return expectedReduce(t, ReduceOp::Sum, column(t, ReduceOp::Sum, n, off + i));
                   },
                   "reducescatterv" + tail);
  }
  {
    // alltoallv: rank r sends (r + j) % 3 + base elements to rank j.
    auto amount = [&](int from, int to) { return static_cast<std::size_t>((from + to) % 3) + base; };
    std::vector<std::size_t> sc(n), sd(n), rc(n), rd(n);
    std::size_t so = 0, ro = 0;
    for (int j = 0; j < n; ++j) {
      sc[j] = amount(me, j);
      sd[j] = so;
      so += sc[j] + 1;
      rc[j] = amount(j, me);
      rd[j] = ro;
      ro += rc[j] + 3;
    }
    Buffer send(t, so), recv(t, ro);
    for (int j = 0; j < n; ++j)
      for (std::size_t i = 0; i < sc[j]; ++i) send.set(sd[j] + i, gatherValue(t, me * n + j, i));
    c.alltoallv(send.data(), sc, sd, recv.data(), rc, rd, t);
    for (int j = 0; j < n; ++j)
      expectElements(recv, rd[j], rc[j], [&](std::size_t i) { return gatherValue(t, j * n + me, i); },
                     "alltoallv from " + std::to_string(j) + tail);
  }
}

void checkSendRecv(Comm& c, std::size_t count) {
  const int n = c.size(), me = c.rank();
  if (n == 1) return;
  const DataType t = DataType::Int32;
  const int next = (me + 1) % n, prev = (me + n - 1) % n;
  Buffer out(t, count), in(t, count);
  for (std::size_t i = 0; i < count; ++i) out.set(i, me * 1000 + static_cast<double>(i % 1000));
  Work w = c.recvAsync(in.data(), count, t, prev, 7);
  c.sendAsync(out.data(), count, t, next, 7).wait();
  w.wait();
  expectElements(in, 0, count, [&](std::size_t i) { return prev * 1000 + static_cast<double>(i % 1000); },
                 "sendrecv ring n=" + std::to_string(n) + " rank=" + std::to_string(me));
}


void sweepCollectives(Comm& c, std::span<const std::size_t> counts) {
  const int n = c.size();
  for (std::size_t count : counts) {
    for (DataType t : kAllDataTypes) {
      for (ReduceOp op : kAllReduceOps) {
        // The whole dtype x op cross product at small counts; the large count with a subset.
        if (count > 100 && op != ReduceOp::Sum && t != DataType::Float32) continue;
        for (bool inPlace : {false, true}) {
          checkAllreduce(c, t, op, count, inPlace);
          checkReduceScatter(c, t, op, count, inPlace);
        }
        checkReduce(c, t, op, count, static_cast<int>((count + 1) % n), false);
        checkReduce(c, t, op, count, 0, true);
      }
      if (count <= 100 || t == DataType::Float32 || t == DataType::Int8)
        checkNonReducing(c, t, count);
    }
    checkSendRecv(c, count);
  }
  for (DataType t : {DataType::Float32, DataType::Int8, DataType::BFloat16}) {
    checkVariants(c, t, 0);
    checkVariants(c, t, 150);
  }
  c.barrier();
}

// ---- the added dtypes and ops --------------------------------------------------------------

namespace {

bool isAddedOp(ReduceOp op) {
  return op == ReduceOp::BAnd || op == ReduceOp::BOr || op == ReduceOp::BXor ||
         op == ReduceOp::PremulSum;
}

bool isAddedDtype(DataType t) {
  for (DataType x : kExtendedDataTypes)
    if (x == t) return true;
  return false;
}

// Compares `count` elements of got (from element `offset`) with extendedExpected at column
// `first + i`, bit for bit.
void expectBytes(DataType t, ReduceOp op, int n, const std::uint8_t* got, std::size_t first,
                 std::size_t count, const std::string& what) {
  const std::size_t es = dataTypeSize(t);
  std::vector<std::uint8_t> e(es);
  int reported = 0;
  for (std::size_t i = 0; i < count; ++i) {
    extendedExpected(t, op, n, first + i, e.data());
    if (std::memcmp(got + i * es, e.data(), es) != 0 && reported++ < 3) {
      std::string g, x;
      char b[4];
      for (std::size_t k = es; k-- > 0;) {
        std::snprintf(b, sizeof b, "%02x", got[i * es + k]);
        g += b;
        std::snprintf(b, sizeof b, "%02x", e[k]);
        x += b;
      }
      ADD_FAILURE() << what << ": element " << i << " is 0x" << g << ", expected 0x" << x;
    }
  }
}

std::vector<std::uint8_t> inputs(DataType t, ReduceOp op, int rank, std::size_t first,
                                 std::size_t count) {
  const std::size_t es = dataTypeSize(t);
  std::vector<std::uint8_t> v(count * es + 1);
  for (std::size_t i = 0; i < count; ++i) extendedInput(t, op, rank, first + i, v.data() + i * es);
  return v;
}

}  // namespace

void checkExtendedReductions(Comm& c, std::span<const std::size_t> counts) {
  const int n = c.size(), me = c.rank();
  for (std::size_t count : counts) {
    for (int ti = 0; ti < kNumDataTypes; ++ti) {
      const auto t = static_cast<DataType>(ti);
      const std::size_t es = dataTypeSize(t);
      for (ReduceOp op : kEveryReduceOp) {
        if (!isSupported(t, op) || !(isAddedDtype(t) || isAddedOp(op))) continue;
        const Reduction red = op == ReduceOp::PremulSum ? premulSum(premulFactor(t, me))
                                                         : Reduction(op);
        const std::string tail = " n=" + std::to_string(n) + " rank=" + std::to_string(me) + " " +
                                 toString(t) + " " + toString(op) +
                                 " count=" + std::to_string(count);
        for (bool inPlace : {false, true}) {
          auto send = inputs(t, op, me, 0, count);
          std::vector<std::uint8_t> recv(count * es + 1);
          std::uint8_t* out = inPlace ? send.data() : recv.data();
          c.allreduce(send.data(), out, count, t, red);
          expectBytes(t, op, n, out, 0, count, "allreduce" + std::string(inPlace ? " in-place" : "") + tail);
        }
        {
          const int root = static_cast<int>((count + 1) % n);
          auto send = inputs(t, op, me, 0, count);
          std::vector<std::uint8_t> recv(count * es + 1);
          c.reduce(send.data(), me == root ? recv.data() : nullptr, count, t, red, root);
          if (me == root) expectBytes(t, op, n, recv.data(), 0, count, "reduce root=" + std::to_string(root) + tail);
        }
        for (bool inPlace : {false, true}) {
          auto send = inputs(t, op, me, 0, count * n);
          std::vector<std::uint8_t> recv(count * es + 1);
          std::uint8_t* out = inPlace ? send.data() + me * count * es : recv.data();
          c.reduceScatter(send.data(), out, count, t, red);
          expectBytes(t, op, n, out, me * count, count,
                      "reducescatter" + std::string(inPlace ? " in-place" : "") + tail);
        }
      }
    }
    for (DataType t : {DataType::Bool, DataType::Int16, DataType::Float8E5M2, DataType::Complex128})
      checkNonReducing(c, t, count);
  }
  c.barrier();
}

void checkUnsupportedReductions(Comm& c) {
  const std::string where = " on rank " + std::to_string(c.rank());
  struct Case {
    DataType t;
    Reduction op;
    const char* words[2];
  };
  const Case cases[] = {
      {DataType::Float32, ReduceOp::BAnd, {"band", "fp32"}},
      {DataType::BFloat16, ReduceOp::BOr, {"bor", "bf16"}},
      {DataType::Float8E4M3Fn, ReduceOp::BXor, {"bxor", "fp8e4m3"}},
      {DataType::Complex64, ReduceOp::BXor, {"bxor", "complex64"}},
      {DataType::Complex64, ReduceOp::Min, {"min", "complex64"}},
      {DataType::Complex128, ReduceOp::Max, {"max", "complex128"}},
      {DataType::Bool, ReduceOp::Avg, {"avg", "bool"}},
      {DataType::Bool, premulSum(2.0), {"premul_sum", "bool"}},
      {DataType::Int32, premulSum(0.5), {"premul_sum", "factor"}},
      {DataType::Uint64, premulSum(1e30), {"premul_sum", "factor"}},
  };
  std::vector<std::uint8_t> buf(64 * 16), out(64 * 16);
  for (const Case& k : cases) {
    auto expectRejected = [&](const char* coll, const std::function<void()>& call) {
      try {
        call();
        ADD_FAILURE() << coll << " " << toString(k.t) << " " << toString(k.op.op) << where
                      << " was accepted";
      } catch (const Error& e) {
        EXPECT_EQ(e.code(), ErrorCode::InvalidArgument) << e.what();
        const std::string msg = e.what();
        for (const char* w : k.words)
          EXPECT_NE(msg.find(w), std::string::npos) << coll << ": '" << w << "' not in: " << msg;
        EXPECT_NE(msg.find(coll), std::string::npos) << msg;
        EXPECT_NE(msg.find("rank " + std::to_string(c.rank())), std::string::npos) << msg;
      }
    };
    expectRejected("allreduce", [&] { c.allreduce(buf.data(), out.data(), 4, k.t, k.op); });
    expectRejected("reduce", [&] { c.reduce(buf.data(), out.data(), 4, k.t, k.op, 0); });
    expectRejected("reducescatter", [&] { c.reduceScatter(buf.data(), out.data(), 1, k.t, k.op); });
    expectRejected("allreduce", [&] { c.allreduceAsync(buf.data(), out.data(), 4, k.t, k.op).wait(); });
  }
  // Nothing was sent: the communicator still works.
  checkAllreduce(c, DataType::Int32, ReduceOp::Sum, 5, false);
}

}  // namespace braid::test
