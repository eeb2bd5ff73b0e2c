#include "harness/random_ops.hpp"

#include <gtest/gtest.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <exception>
#include <functional>
#include <memory>
#include <numeric>
#include <random>
#include <vector>

#include "harness/data.hpp"

namespace braid::test {
namespace {

std::uint64_t mix(std::uint64_t x) {
  x += 0x9E3779B97F4A7C15ull;
  x = (x ^ (x >> 30)) * 0xBF58476D1CE4E5B9ull;
  x = (x ^ (x >> 27)) * 0x94D049BB133111EBull;
  return x ^ (x >> 31);
}

// Values of the non-reducing collectives: small integers every dtype holds exactly.
double plainValue(DataType t, int rank, std::size_t i, std::size_t salt) {
  return roundTrip(t, static_cast<double>((rank * 31 + static_cast<int>((i + salt) % 97)) % 120));
}

/// Compares buffers with expectations; reports the first wrong element of an operation only.
struct Check {
  std::string what;  // "seed S op #i allreduce ... on rank r of n"
  bool failed = false;
  void elements(const Buffer& b, std::size_t offset, std::size_t count,
                const std::function<double(std::size_t)>& expected) {
    for (std::size_t i = 0; i < count && !failed; ++i) {
      const double got = b.get(offset + i), want = expected(i);
      if (got == want) continue;
      failed = true;
      ADD_FAILURE() << what << ": element " << offset + i << " is " << got << ", expected " << want;
    }
  }
};

// The draws of one operation, identical on every rank.
class Draw {
 public:
  explicit Draw(std::uint64_t seed) : rng_(seed) {}
  std::uint64_t below(std::uint64_t n) { return n == 0 ? 0 : rng_() % n; }
  bool coin() { return below(2) == 1; }
  DataType dtype() { return kAllDataTypes[below(std::size(kAllDataTypes))]; }
  ReduceOp op() { return kAllReduceOps[below(std::size(kAllReduceOps))]; }
  /// 0, 1, a few, a few hundred, or up to maxCount (many 64-byte chunks).
  std::size_t count(std::size_t maxCount) {
    switch (below(8)) {
      case 0:
        return 0;
      case 1:
        return 1;
      case 2:
      case 3:
        return 2 + below(15);
      case 4:
      case 5:
        return 17 + below(300);
      default:
        return 1 + below(maxCount);
    }
  }

 private:
  std::mt19937_64 rng_;
};

struct Ctx {
  Comm& c;
  int n;
  int me;
  std::size_t salt;
  Check& check;
};

std::vector<double> column(DataType t, ReduceOp op, int n, std::size_t i) {
  std::vector<double> v(static_cast<std::size_t>(n));
  for (int r = 0; r < n; ++r) v[static_cast<std::size_t>(r)] = testValue(t, op, r, i);
  return v;
}

// ---- one function per kind; each returns its description ---------------------------------------

std::string allreduce(Ctx& x, Draw& d, std::size_t maxCount) {
  const DataType t = d.dtype();
  const ReduceOp op = d.op();
  const std::size_t count = d.count(maxCount);
  const bool inPlace = d.coin();
  Buffer send(t, count), recv(t, count);
  for (std::size_t i = 0; i < count; ++i) send.set(i, testValue(t, op, x.me, i + x.salt));
  x.c.allreduce(send.data(), inPlace ? send.data() : recv.data(), count, t, op);
  x.check.elements(inPlace ? send : recv, 0, count, [&](std::size_t i) {
    return expectedReduce(t, op, column(t, op, x.n, i + x.salt));
  });
  return std::string("allreduce ") + toString(t) + " " + toString(op) + " count " +
         std::to_string(count) + (inPlace ? " in place" : "");
}

std::string reduce(Ctx& x, Draw& d, std::size_t maxCount) {
  const DataType t = d.dtype();
  const ReduceOp op = d.op();
  const std::size_t count = d.count(maxCount);
  const int root = static_cast<int>(d.below(static_cast<std::uint64_t>(x.n)));
  const bool inPlace = d.coin();
  Buffer send(t, count), recv(t, count);
  for (std::size_t i = 0; i < count; ++i) send.set(i, testValue(t, op, x.me, i + x.salt));
  void* out = inPlace ? send.data() : (x.me == root ? recv.data() : nullptr);
  x.c.reduce(send.data(), out, count, t, op, root);
  if (x.me == root)
    x.check.elements(inPlace ? send : recv, 0, count, [&](std::size_t i) {
      return expectedReduce(t, op, column(t, op, x.n, i + x.salt));
    });
  return std::string("reduce ") + toString(t) + " " + toString(op) + " count " +
         std::to_string(count) + " root " + std::to_string(root);
}

std::string broadcast(Ctx& x, Draw& d, std::size_t maxCount) {
  const DataType t = d.dtype();
  const std::size_t count = d.count(maxCount);
  const int root = static_cast<int>(d.below(static_cast<std::uint64_t>(x.n)));
  Buffer buf(t, count);
  for (std::size_t i = 0; i < count; ++i)
    buf.set(i, x.me == root ? plainValue(t, root, i, x.salt) : 0);
  x.c.broadcast(buf.data(), count, t, root);
  x.check.elements(buf, 0, count, [&](std::size_t i) { return plainValue(t, root, i, x.salt); });
  return std::string("broadcast ") + toString(t) + " count " + std::to_string(count) + " root " +
         std::to_string(root);
}

std::string allgather(Ctx& x, Draw& d, std::size_t maxCount) {
  const DataType t = d.dtype();
  const std::size_t count = d.count(maxCount / 4);
  const bool inPlace = d.coin();
  const auto un = static_cast<std::size_t>(x.n);
  Buffer send(t, count), recv(t, count * un);
  for (std::size_t i = 0; i < count; ++i) {
    send.set(i, plainValue(t, x.me, i, x.salt));
    recv.set(static_cast<std::size_t>(x.me) * count + i, plainValue(t, x.me, i, x.salt));
  }
  x.c.allgather(inPlace ? recv.at(static_cast<std::size_t>(x.me) * count) : send.data(),
                recv.data(), count, t);
  x.check.elements(recv, 0, count * un, [&](std::size_t k) {
    return plainValue(t, static_cast<int>(k / count), k % count, x.salt);
  });
  return std::string("allgather ") + toString(t) + " count " + std::to_string(count) +
         (inPlace ? " in place" : "");
}

// Per-rank counts (some empty) for the v-variants.
std::vector<std::size_t> varyingCounts(Draw& d, int n, std::size_t maxCount) {
  std::vector<std::size_t> counts(static_cast<std::size_t>(n));
  for (auto& c : counts) c = d.below(4) == 0 ? 0 : d.count(maxCount);
  return counts;
}

std::string allgatherv(Ctx& x, Draw& d, std::size_t maxCount) {
  const DataType t = d.dtype();
  const auto counts = varyingCounts(d, x.n, maxCount / 4);
  const bool gaps = d.coin();
  std::vector<std::size_t> displs;
  std::size_t extent = 0;
  for (std::size_t c : counts) {
    if (gaps) displs.push_back(extent + 1);
    extent += c + (gaps ? 2 : 0);
  }
  if (!gaps) displs.clear();
  const auto me = static_cast<std::size_t>(x.me);
  Buffer send(t, counts[me]), recv(t, extent);
  for (std::size_t i = 0; i < counts[me]; ++i) send.set(i, plainValue(t, x.me, i, x.salt));
  x.c.allgatherv(send.data(), recv.data(), counts, displs, t);
  std::size_t off = 0;
  for (int r = 0; r < x.n; ++r) {
    const auto ur = static_cast<std::size_t>(r);
    const std::size_t at = gaps ? displs[ur] : off;
    x.check.elements(recv, at, counts[ur],
                     [&](std::size_t i) { return plainValue(t, r, i, x.salt); });
    off += counts[ur];
  }
  return std::string("allgatherv ") + toString(t) + " total " + std::to_string(extent) +
         (gaps ? " with gaps" : "");
}

std::string reduceScatter(Ctx& x, Draw& d, std::size_t maxCount) {
  const DataType t = d.dtype();
  const ReduceOp op = d.op();
  const std::size_t count = d.count(maxCount / 4);
  const bool inPlace = d.coin();
  const auto un = static_cast<std::size_t>(x.n);
  const auto me = static_cast<std::size_t>(x.me);
  Buffer send(t, count * un), recv(t, count);
  for (std::size_t i = 0; i < count * un; ++i) send.set(i, testValue(t, op, x.me, i + x.salt));
  x.c.reduceScatter(send.data(), inPlace ? send.at(me * count) : recv.data(), count, t, op);
  x.check.elements(inPlace ? send : recv, inPlace ? me * count : 0, count, [&](std::size_t i) {
    return expectedReduce(t, op, column(t, op, x.n, me * count + i + x.salt));
  });
  return std::string("reducescatter ") + toString(t) + " " + toString(op) + " count " +
         std::to_string(count) + (inPlace ? " in place" : "");
}

std::string reduceScatterv(Ctx& x, Draw& d, std::size_t maxCount) {
  const DataType t = d.dtype();
  const ReduceOp op = d.op();
  const auto counts = varyingCounts(d, x.n, maxCount / 4);
  const auto me = static_cast<std::size_t>(x.me);
  const std::size_t total = std::accumulate(counts.begin(), counts.end(), std::size_t{0});
  const std::size_t first = std::accumulate(counts.begin(), counts.begin() + x.me, std::size_t{0});
  Buffer send(t, total), recv(t, counts[me]);
  for (std::size_t i = 0; i < total; ++i) send.set(i, testValue(t, op, x.me, i + x.salt));
  x.c.reduceScatterv(send.data(), recv.data(), counts, t, op);
  x.check.elements(recv, 0, counts[me], [&](std::size_t i) {
    return expectedReduce(t, op, column(t, op, x.n, first + i + x.salt));
  });
  return std::string("reducescatterv ") + toString(t) + " " + toString(op) + " total " +
         std::to_string(total);
}

std::string gatherScatter(Ctx& x, Draw& d, std::size_t maxCount) {
  const DataType t = d.dtype();
  const std::size_t count = d.count(maxCount / 4);
  const int root = static_cast<int>(d.below(static_cast<std::uint64_t>(x.n)));
  const auto un = static_cast<std::size_t>(x.n);
  const bool isRoot = x.me == root;
  if (d.coin()) {
    Buffer send(t, count), recv(t, count * un);
    for (std::size_t i = 0; i < count; ++i) send.set(i, plainValue(t, x.me, i, x.salt));
    x.c.gather(send.data(), isRoot ? recv.data() : nullptr, count, t, root);
    if (isRoot)
      x.check.elements(recv, 0, count * un, [&](std::size_t k) {
        return plainValue(t, static_cast<int>(k / count), k % count, x.salt);
      });
    return std::string("gather ") + toString(t) + " count " + std::to_string(count) + " root " +
           std::to_string(root);
  }
  Buffer send(t, count * un), recv(t, count);
  if (isRoot)
    for (std::size_t k = 0; k < count * un; ++k)
      send.set(k, plainValue(t, static_cast<int>(k / count), k % count, x.salt));
  x.c.scatter(isRoot ? send.data() : nullptr, recv.data(), count, t, root);
  x.check.elements(recv, 0, count, [&](std::size_t i) { return plainValue(t, x.me, i, x.salt); });
  return std::string("scatter ") + toString(t) + " count " + std::to_string(count) + " root " +
         std::to_string(root);
}

std::string alltoall(Ctx& x, Draw& d, std::size_t maxCount) {
  const DataType t = d.dtype();
  const auto un = static_cast<std::size_t>(x.n);
  if (d.coin()) {
    const std::size_t count = d.count(maxCount / 8);
    Buffer send(t, count * un), recv(t, count * un);
    for (int j = 0; j < x.n; ++j)
      for (std::size_t i = 0; i < count; ++i)
        send.set(static_cast<std::size_t>(j) * count + i, plainValue(t, x.me * x.n + j, i, x.salt));
    x.c.alltoall(send.data(), recv.data(), count, t);
    x.check.elements(recv, 0, count * un, [&](std::size_t k) {
      return plainValue(t, static_cast<int>(k / count) * x.n + x.me, k % count, x.salt);
    });
    return std::string("alltoall ") + toString(t) + " count " + std::to_string(count);
  }
  // alltoallv: rank `from` sends amount(from, to) elements to `to`, packed.
  const std::uint64_t base = d.below(maxCount / 8 + 1);
  auto amount = [&](int from, int to) {
    const std::uint64_t h = mix(x.salt * 131 + static_cast<std::uint64_t>(from * 64 + to));
    return h % 4 == 0 ? std::size_t{0} : static_cast<std::size_t>(h % (base + 1));
  };
  std::vector<std::size_t> sc(un), rc(un);
  for (int j = 0; j < x.n; ++j) {
    sc[static_cast<std::size_t>(j)] = amount(x.me, j);
    rc[static_cast<std::size_t>(j)] = amount(j, x.me);
  }
  const std::size_t st = std::accumulate(sc.begin(), sc.end(), std::size_t{0});
  const std::size_t rt = std::accumulate(rc.begin(), rc.end(), std::size_t{0});
  Buffer send(t, st), recv(t, rt);
  std::size_t off = 0;
  for (int j = 0; j < x.n; ++j)
    for (std::size_t i = 0; i < sc[static_cast<std::size_t>(j)]; ++i)
      send.set(off++, plainValue(t, x.me * x.n + j, i, x.salt));
  x.c.alltoallv(send.data(), sc, {}, recv.data(), rc, {}, t);
  off = 0;
  for (int j = 0; j < x.n; ++j) {
    x.check.elements(recv, off, rc[static_cast<std::size_t>(j)],
                     [&](std::size_t i) { return plainValue(t, j * x.n + x.me, i, x.salt); });
    off += rc[static_cast<std::size_t>(j)];
  }
  return std::string("alltoallv ") + toString(t) + " sent " + std::to_string(st);
}

std::string sendRecv(Ctx& x, Draw& d, std::size_t maxCount) {
  const DataType t = d.dtype();
  const std::size_t count = d.count(maxCount);
  if (x.n == 1) return "sendrecv skipped (1 rank)";
  const int shift = 1 + static_cast<int>(d.below(static_cast<std::uint64_t>(x.n - 1)));
  const auto tag = static_cast<std::uint32_t>(d.below(1000));
  const int to = (x.me + shift) % x.n, from = (x.me - shift + x.n) % x.n;
  Buffer out(t, count), in(t, count);
  for (std::size_t i = 0; i < count; ++i) out.set(i, plainValue(t, x.me, i, x.salt));
  Work w = x.c.recvAsync(in.data(), count, t, from, tag);
  if (d.coin())
    x.c.send(out.data(), count, t, to, tag);
  else
    x.c.sendAsync(out.data(), count, t, to, tag).wait();
  w.wait();
  x.check.elements(in, 0, count, [&](std::size_t i) { return plainValue(t, from, i, x.salt); });
  return std::string("sendrecv ") + toString(t) + " count " + std::to_string(count) + " shift " +
         std::to_string(shift);
}

// 2-4 asynchronous operations issued back to back, waited in a random order.
std::string asyncMix(Ctx& x, Draw& d, std::size_t maxCount) {
  struct Pending {
    Work work;
    std::unique_ptr<Buffer> a, b;
    std::function<void()> verify;
  };
  std::vector<Pending> ops;
  const int m = 2 + static_cast<int>(d.below(3));
  std::string what = "async";
  for (int k = 0; k < m; ++k) {
    Pending p;
    const DataType t = d.dtype();
    const std::size_t count = d.count(maxCount / 2);
    const std::size_t salt = x.salt + static_cast<std::size_t>(k) * 1009;
    switch (d.below(x.n > 1 ? 4 : 3)) {
      case 0: {
        const ReduceOp op = d.op();
        p.a = std::make_unique<Buffer>(t, count);
        for (std::size_t i = 0; i < count; ++i) p.a->set(i, testValue(t, op, x.me, i + salt));
        p.work = x.c.allreduceAsync(p.a->data(), p.a->data(), count, t, op);
        p.verify = [&x, &buf = *p.a, t, op, count, salt] {
          x.check.elements(buf, 0, count, [&](std::size_t i) {
            return expectedReduce(t, op, column(t, op, x.n, i + salt));
          });
        };
        what += " allreduce";
        break;
      }
      case 1: {
        const int root = static_cast<int>(d.below(static_cast<std::uint64_t>(x.n)));
        p.a = std::make_unique<Buffer>(t, count);
        for (std::size_t i = 0; i < count; ++i)
          p.a->set(i, x.me == root ? plainValue(t, root, i, salt) : 0);
        p.work = x.c.broadcastAsync(p.a->data(), count, t, root);
        p.verify = [&x, &buf = *p.a, t, root, count, salt] {
          x.check.elements(buf, 0, count,
                           [&](std::size_t i) { return plainValue(t, root, i, salt); });
        };
        what += " broadcast";
        break;
      }
      case 2: {
        const std::size_t c = count / 4;
        p.a = std::make_unique<Buffer>(t, c);
        p.b = std::make_unique<Buffer>(t, c * static_cast<std::size_t>(x.n));
        for (std::size_t i = 0; i < c; ++i) p.a->set(i, plainValue(t, x.me, i, salt));
        p.work = x.c.allgatherAsync(p.a->data(), p.b->data(), c, t);
        p.verify = [&x, &buf = *p.b, t, c, salt] {
          x.check.elements(buf, 0, c * static_cast<std::size_t>(x.n), [&](std::size_t q) {
            return plainValue(t, static_cast<int>(q / c), q % c, salt);
          });
        };
        what += " allgather";
        break;
      }
      default: {  // a send and a receive around the ring, as two operations
        const int to = (x.me + 1) % x.n, from = (x.me + x.n - 1) % x.n;
        p.a = std::make_unique<Buffer>(t, count);
        p.b = std::make_unique<Buffer>(t, count);
        for (std::size_t i = 0; i < count; ++i) p.a->set(i, plainValue(t, x.me, i, salt));
        Pending s;
        s.work = x.c.sendAsync(p.a->data(), count, t, to, 77);
        p.work = x.c.recvAsync(p.b->data(), count, t, from, 77);
        p.verify = [&x, &buf = *p.b, t, from, count, salt] {
          x.check.elements(buf, 0, count,
                           [&](std::size_t i) { return plainValue(t, from, i, salt); });
        };
        s.verify = [] {};
        ops.push_back(std::move(s));
        what += " send+recv";
        break;
      }
    }
    ops.push_back(std::move(p));
  }
  // Wait in a random order; some with a bounded wait first.
  std::vector<std::size_t> order(ops.size());
  std::iota(order.begin(), order.end(), std::size_t{0});
  for (std::size_t i = order.size(); i > 1; --i) std::swap(order[i - 1], order[d.below(i)]);
  // A failure is reported as the earliest issued operation's error: the later ones may only
  // say that the communicator failed before them.
  std::vector<std::exception_ptr> errors(ops.size());
  for (std::size_t i : order) {
    try {
      if (d.coin()) {
        while (!ops[i].work.wait(std::chrono::milliseconds(50))) {
        }
      } else {
        ops[i].work.wait();
      }
    } catch (const Error&) {
      errors[i] = std::current_exception();
    }
    EXPECT_TRUE(ops[i].work.test());
  }
  for (const auto& e : errors)
    if (e) std::rethrow_exception(e);
  for (auto& p : ops) p.verify();
  return what;
}

}  // namespace

std::uint64_t RandomOps::draw(std::uint64_t index, std::uint64_t salt) const {
  return mix(mix(seed_ ^ mix(index)) ^ salt);
}

std::string RandomOps::run(Comm& c, std::uint64_t index) const {
  Draw d(draw(index, static_cast<std::uint64_t>(c.size())));
  Check check;
  check.what = "seed " + std::to_string(seed_) + " op #" + std::to_string(index) + " on rank " +
               std::to_string(c.rank()) + " of " + std::to_string(c.size()) + " (communicator " +
               c.id() + ")";
  Ctx x{c, c.size(), c.rank(), static_cast<std::size_t>(d.below(1000)), check};
  std::string what;
  switch (d.below(14)) {
    case 0:
    case 1:
      what = allreduce(x, d, maxCount_);
      break;
    case 2:
      what = reduce(x, d, maxCount_);
      break;
    case 3:
      what = broadcast(x, d, maxCount_);
      break;
    case 4:
      what = allgather(x, d, maxCount_);
      break;
    case 5:
      what = allgatherv(x, d, maxCount_);
      break;
    case 6:
      what = reduceScatter(x, d, maxCount_);
      break;
    case 7:
      what = reduceScatterv(x, d, maxCount_);
      break;
    case 8:
      what = gatherScatter(x, d, maxCount_);
      break;
    case 9:
      what = alltoall(x, d, maxCount_);
      break;
    case 10:
      c.barrier();
      what = "barrier";
      break;
    case 11:
      what = sendRecv(x, d, maxCount_);
      break;
    default:
      what = asyncMix(x, d, maxCount_);
      break;
  }
  if (check.failed)
    ADD_FAILURE() << "seed " << seed_ << " op #" << index << " (" << what << ") on rank "
                  << c.rank() << " of " << c.size() << " (communicator " << c.id()
                  << ") gave a wrong result";
  return what;
}

std::uint64_t seedFromEnv(const char* name) {
  if (const char* v = std::getenv(name); v != nullptr && *v != '\0')
    return std::strtoull(v, nullptr, 0);
  std::random_device rd;
  return (static_cast<std::uint64_t>(rd()) << 32) ^ rd();
}

std::size_t residentBytes() {
  // RssAnon: heap, stacks and private mappings. Shared memory (the shm transport's segments,
  // whose pages count once touched and grow as more ring slots get used) is left out.
  std::FILE* f = std::fopen("/proc/self/status", "r");
  if (f == nullptr) return 0;
  char line[256];
  std::size_t kib = 0;
  while (std::fgets(line, sizeof line, f) != nullptr)
    if (std::sscanf(line, "RssAnon: %zu kB", &kib) == 1) break;
  std::fclose(f);
  return kib * 1024;
}

}  // namespace braid::test
