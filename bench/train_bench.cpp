// Training-layer benchmarks, run under a launcher (docs/training.md):
//
//   braid-run -n 4 build/bin/train_bench fusion  [--tensors 1000] [--bytes 4096] [--reps 7]
//   braid-run -n 4 build/bin/train_bench overlap [--bytes 16M] [--chunks 16] [--reps 7]
//   braid-run -n 2 build/bin/train_bench compress [--bytes 4M] [--methods none,int8,...]
//                                                 [--steps 4] [--reps 7]
//   ... [--json FILE]   one JSON object per result line as well
//
// fusion: T tensors of B bytes (fp32, sum) all-reduced one by one with blocking allreduce,
//   one by one with allreduceAsync (all posted, then all waited), and through a FusionBuffer
//   (queued, then synchronize()); the ratio one-by-one / fused is reported.
// overlap: a buffer produced chunk by chunk by a compute kernel (a dependent chain of FMAs per
//   element, calibrated with all ranks computing so that computing the buffer takes about as long
//   as all-reducing it) measured four ways: compute only, allreduce only (the same chunks, async,
//   nothing to compute), compute then allreduce (serial), and OverlappedAllreduce (chunk i on the
//   wire while chunk i+1 is computed), interleaved round by round (so that the machine's load
//   hits all four alike). Perfect overlap is max(compute, comm), none is the sum.
//   The serial and overlapped results are checked element by element against the average
//   over ranks computed independently (exit status 1 and "WRONG" if any differs).
// compress: per method (none = plain allreduce), a step = copy a gradient stand-in into the
//   working buffer and average it through the compressor with error feedback; time per step,
//   bytes on the wire, and the relative error of the sum of S steps' results against S times the
//   exact average (error feedback keeps it small). Methods run in one job, interleaved round by
//   round.
// Every time: per-rank wall time of one round, max over ranks, median over reps.
// bench/shaped_link.sh runs the overlap mode over a bandwidth-limited loopback (docs/training.md).
#include <algorithm>
#include <braid/braid.hpp>
#include <braid/compress.hpp>
#include <braid/fusion.hpp>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <fstream>
#include <functional>
#include <memory>
#include <string>
#include <vector>

namespace {

using Clock = std::chrono::steady_clock;
using braid::Comm;
using braid::DataType;
using braid::ReduceOp;

struct Args {
  std::string mode;
  int tensors = 1000;
  std::size_t bytes = 0;  // 0: the mode's default
  std::size_t chunks = 16;
  int reps = 7;
  std::string json;
  std::string methods = "none,int8,topk:0.01,randk:0.01,sign";  // compress
  int steps = 4;                                                // compress: steps per round
};

std::size_t parseSize(const std::string& s) {
  char* end = nullptr;
  double v = std::strtod(s.c_str(), &end);
  std::string suffix(end);
  if (suffix == "K" || suffix == "k") v *= 1024;
  if (suffix == "M" || suffix == "m") v *= 1024 * 1024;
  if (suffix == "G" || suffix == "g") v *= 1024.0 * 1024 * 1024;
  return static_cast<std::size_t>(v);
}

double maxOverRanks(Comm& c, double v) {
  double out = 0;
  c.allreduce(&v, &out, 1, DataType::Float64, ReduceOp::Max);
  return out;
}

/// Max over ranks of the wall time of one round of fn.
double timeOnce(Comm& c, const std::function<void()>& fn) {
  c.barrier();
  const auto t0 = Clock::now();
  fn();
  return maxOverRanks(c, std::chrono::duration<double>(Clock::now() - t0).count());
}

double median(std::vector<double> t) {
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

/// Median over reps of the max over ranks of one round of fn (after one untimed round).
double timeRounds(Comm& c, int reps, const std::function<void()>& fn) {
  fn();
  std::vector<double> t;
  for (int k = 0; k < reps; ++k) {
    c.barrier();
    const auto t0 = Clock::now();
    fn();
    t.push_back(maxOverRanks(c, std::chrono::duration<double>(Clock::now() - t0).count()));
  }
  std::sort(t.begin(), t.end());
  return t[t.size() / 2];
}

class JsonOut {
 public:
  JsonOut(Comm& c, const std::string& path) {
    if (c.rank() == 0 && !path.empty()) file_.open(path, std::ios::trunc);
  }
  void row(const std::string& body) {
    if (file_) file_ << "{" << body << "}\n";
  }

 private:
  std::ofstream file_;
};

int runFusion(Comm& c, const Args& a) {
  const std::size_t bytes = a.bytes ? a.bytes : 4096;
  const std::size_t count = bytes / 4;
  std::vector<std::vector<float>> bufs(a.tensors, std::vector<float>(count, 1.0f));
  const double blocking = timeRounds(c, a.reps, [&] {
    for (auto& b : bufs) c.allreduce(b.data(), b.data(), count, DataType::Float32, ReduceOp::Avg);
  });
  const double async = timeRounds(c, a.reps, [&] {
    std::vector<braid::Work> w;
    w.reserve(bufs.size());
    for (auto& b : bufs)
      w.push_back(c.allreduceAsync(b.data(), b.data(), count, DataType::Float32, ReduceOp::Avg));
    for (auto& x : w) x.wait();
  });
  braid::train::FusionBuffer fb(c);
  const double fused = timeRounds(c, a.reps, [&] {
    for (auto& b : bufs) fb.allreduce(b.data(), count, DataType::Float32, ReduceOp::Avg);
    fb.synchronize();
  });
  const auto st = fb.stats();
  const double perRoundAllreduces =
      static_cast<double>(st.allreduces) / static_cast<double>(a.reps + 1);
  if (c.rank() == 0) {
    std::printf(
        "# fusion: %d tensors x %zu B fp32 avg, nranks %d, threshold %zu B, cycle %lld us\n",
        a.tensors, bytes, c.size(), fb.options().thresholdBytes,
        static_cast<long long>(fb.options().cycleTime.count()));
    std::printf("# %-28s %12s %12s\n", "method", "time(ms)", "vs fused");
    std::printf("  %-28s %12.3f %12.2f\n", "one by one (blocking)", blocking * 1e3,
                blocking / fused);
    std::printf("  %-28s %12.3f %12.2f\n", "one by one (async, then wait)", async * 1e3,
                async / fused);
    std::printf("  %-28s %12.3f %12.2f\n", "fusion buffer", fused * 1e3, 1.0);
    std::printf("# fused allreduces per round: %.1f (of %d tensors)\n", perRoundAllreduces,
                a.tensors);
  }
  JsonOut j(c, a.json);
  char row[512];
  std::snprintf(row, sizeof row,
                "\"bench\":\"fusion\",\"nranks\":%d,\"tensors\":%d,\"bytes\":%zu,"
                "\"blocking_ms\":%.4f,\"async_ms\":%.4f,\"fused_ms\":%.4f,\"ratio_blocking\":%.3f,"
                "\"ratio_async\":%.3f,\"fused_allreduces_per_round\":%.2f",
                c.size(), a.tensors, bytes, blocking * 1e3, async * 1e3, fused * 1e3,
                blocking / fused, async / fused, perRoundAllreduces);
  j.row(row);
  return 0;
}

/// The stand-in for a backward pass: a dependent FMA chain of `work` steps per element.
void computeChunk(float* p, std::size_t begin, std::size_t end, int work, int rank) {
  for (std::size_t i = begin; i < end; ++i) {
    float x = static_cast<float>((i + rank) % 97) * 0.01f;
    for (int k = 0; k < work; ++k) x = x * 0.999f + 0.001f;
    p[i] = x;
  }
}

/// Checks every element of an all-reduced (avg) buffer of computeChunk outputs against the
/// average over ranks computed here: computeChunk's value depends on (i + rank) % 97 only, so
/// the 97 possible values are computed once. Returns the number of elements off by more than
/// 1e-5 relative (the fp32 sum of n terms and the division round differently).
std::size_t countWrong(const std::vector<float>& buf, int work, int n) {
  float table[97];
  for (int k = 0; k < 97; ++k) {
    float x = static_cast<float>(k) * 0.01f;
    for (int s = 0; s < work; ++s) x = x * 0.999f + 0.001f;
    table[k] = x;
  }
  std::size_t wrong = 0;
  for (std::size_t i = 0; i < buf.size(); ++i) {
    double want = 0;
    for (int r = 0; r < n; ++r) want += table[(i + static_cast<std::size_t>(r)) % 97];
    want /= n;
    if (std::abs(buf[i] - want) > 1e-5 * std::max(1.0, std::abs(want))) ++wrong;
  }
  return wrong;
}

int runOverlap(Comm& c, const Args& a) {
  const std::size_t bytes = a.bytes ? a.bytes : (std::size_t{16} << 20);
  const std::size_t count = bytes / 4;
  std::vector<float> buf(count);
  auto commOnly = [&] {
    braid::train::OverlappedAllreduce ar(c, buf.data(), count, DataType::Float32, ReduceOp::Avg,
                                         a.chunks);
    for (std::size_t k = 0; k < ar.chunks(); ++k) ar.ready(k);
    ar.wait();
  };
  double comm = timeRounds(c, a.reps, commOnly);
  // Calibrate: work steps per element so that computing the buffer takes about `comm`, timed
  // with every rank computing at once (as in the measured rounds; the same decisions on every
  // rank, since the time is the max over ranks).
  int work = 1;
  for (;;) {
    const double t = timeOnce(c, [&] { computeChunk(buf.data(), 0, count, work, c.rank()); });
    if (t >= comm || work > (1 << 20)) {
      work = std::max(1, static_cast<int>(work * comm / std::max(t, 1e-9)));
      break;
    }
    work *= 2;
  }
  auto computeOnly = [&] { computeChunk(buf.data(), 0, count, work, c.rank()); };
  auto serialRound = [&] {
    computeChunk(buf.data(), 0, count, work, c.rank());
    c.allreduce(buf.data(), buf.data(), count, DataType::Float32, ReduceOp::Avg);
  };
  auto overlappedRound = [&] {
    braid::train::OverlappedAllreduce ar(c, buf.data(), count, DataType::Float32, ReduceOp::Avg,
                                         a.chunks);
    for (std::size_t k = 0; k < ar.chunks(); ++k) {
      computeChunk(buf.data(), ar.chunkBegin(k), ar.chunkEnd(k), work, c.rank());
      ar.ready(k);
    }
    ar.wait();
  };
  // The four phases interleaved, one round of each per rep (rep 0 untimed), so that a change
  // of the machine's load hits all of them alike; the median per phase is reported.
  std::vector<double> tCompute, tComm, tSerial, tOverlapped;
  std::size_t wrong = 0;
  for (int rep = 0; rep <= a.reps; ++rep) {
    const double t1 = timeOnce(c, computeOnly);
    const double t2 = timeOnce(c, commOnly);
    const double t3 = timeOnce(c, serialRound);
    wrong += countWrong(buf, work, c.size());  // the serial round's result
    const double t4 = timeOnce(c, overlappedRound);
    wrong += countWrong(buf, work, c.size());  // the overlapped round's result
    if (rep == 0) continue;
    tCompute.push_back(t1);
    tComm.push_back(t2);
    tSerial.push_back(t3);
    tOverlapped.push_back(t4);
  }
  const double compute = median(tCompute);
  comm = median(tComm);
  const double serial = median(tSerial);
  const double overlapped = median(tOverlapped);
  const double wrongAll = maxOverRanks(c, static_cast<double>(wrong));
  const double best = std::max(compute, comm);
  const double sum = compute + comm;
  if (c.rank() == 0) {
    std::printf("# overlap: %zu B fp32 avg in %zu chunks, nranks %d, compute %d FMA/element\n",
                bytes, a.chunks, c.size(), work);
    std::printf("# %-32s %12s\n", "method", "time(ms)");
    std::printf("  %-32s %12.3f\n", "compute only", compute * 1e3);
    std::printf("  %-32s %12.3f\n", "allreduce only (chunked)", comm * 1e3);
    std::printf("  %-32s %12.3f\n", "max(compute, comm)", best * 1e3);
    std::printf("  %-32s %12.3f\n", "compute + comm", sum * 1e3);
    std::printf("  %-32s %12.3f\n", "serial: compute, then allreduce", serial * 1e3);
    std::printf("  %-32s %12.3f\n", "overlapped (chunked async)", overlapped * 1e3);
    std::printf("# hidden: %.0f%% of the shorter phase ((sum - overlapped) / min)\n",
                100.0 * (sum - overlapped) / std::max(1e-12, std::min(compute, comm)));
    std::printf("# overlapped / max(compute, comm) = %.2f, serial / max = %.2f\n",
                overlapped / std::max(1e-12, best), serial / std::max(1e-12, best));
    std::printf(
        "# check: serial and overlapped results vs the average over ranks of %zu "
        "elements: %s\n",
        count, wrongAll == 0 ? "ok" : "WRONG");
  }
  JsonOut j(c, a.json);
  char row[512];
  std::snprintf(row, sizeof row,
                "\"bench\":\"overlap\",\"nranks\":%d,\"bytes\":%zu,\"chunks\":%zu,\"work\":%d,"
                "\"compute_ms\":%.4f,\"comm_ms\":%.4f,\"serial_ms\":%.4f,\"overlapped_ms\":%.4f,"
                "\"max_ms\":%.4f,\"sum_ms\":%.4f",
                c.size(), bytes, a.chunks, work, compute * 1e3, comm * 1e3, serial * 1e3,
                overlapped * 1e3, best * 1e3, sum * 1e3);
  j.row(row);
  if (wrongAll != 0) {
    std::fprintf(stderr, "train_bench: rank %d: %zu elements differ from the average\n", c.rank(),
                 wrong);
    return 1;
  }
  return 0;
}

/// Rank r's gradient stand-in: uniform in [-1, 1) from a hash of (rank, i), scaled by a factor
/// that changes every 1000 elements (as braid-perf --compress's input).
float gradientValue(int rank, std::size_t i) {
  std::uint64_t z = (static_cast<std::uint64_t>(rank) << 40) ^ (i * 0x9E3779B97F4A7C15ull);
  z = (z ^ (z >> 30)) * 0xBF58476D1CE4E5B9ull;
  z = (z ^ (z >> 27)) * 0x94D049BB133111EBull;
  z ^= z >> 31;
  const float u = static_cast<float>(z >> 40) / static_cast<float>(1ull << 24) * 2.0f - 1.0f;
  const float scale = 0.05f + static_cast<float>((i / 1000) % 7) * 0.3f;
  return u * scale;
}

/// One "training step" per method: copy the gradient into the working buffer and average it
/// over ranks, plainly (none) or through the compressor with error feedback. Reports the time
/// per step, bytes on the wire per step, and the error of the sum of `steps` results against
/// steps x the exact average (what error feedback keeps small), side by side.
int runCompress(Comm& c, const Args& a) {
  const std::size_t bytes = a.bytes ? a.bytes : (std::size_t{4} << 20);
  const std::size_t count = bytes / 4;
  const int steps = std::max(1, a.steps);
  std::vector<float> grad(count), work(count);
  for (std::size_t i = 0; i < count; ++i) grad[i] = gradientValue(c.rank(), i);
  std::vector<float> exact(grad);
  c.allreduce(exact.data(), exact.data(), count, DataType::Float32, ReduceOp::Avg);
  double exactNorm = 0;
  for (float v : exact) exactNorm += static_cast<double>(v) * v;
  exactNorm = std::sqrt(exactNorm) * steps;

  std::string list = a.methods;
  std::vector<std::string> methods;
  for (std::size_t p = 0; p <= list.size();) {
    const std::size_t q = std::min(list.find(',', p), list.size());
    if (q > p) methods.push_back(list.substr(p, q - p));
    p = q + 1;
  }
  JsonOut j(c, a.json);
  double plainStep = 0;
  if (c.rank() == 0) {
    std::printf(
        "# compress: %zu B fp32 avg per step, nranks %d, %d steps per round, error "
        "feedback on, median of %d rounds\n",
        bytes, c.size(), steps, a.reps);
    std::printf("# %-12s %12s %14s %14s %8s %10s %12s\n", "method", "step(ms)", "wire B/rank",
                "dense B/rank", "volume", "vs none", "accum.relerr");
  }
  struct Method {
    std::string name;
    braid::train::CompressionSpec spec;
    std::unique_ptr<braid::train::Compressor> comp;
    std::unique_ptr<braid::train::ErrorFeedback> ef;
    braid::train::CompressStats st;
    std::vector<double> times;
  };
  std::vector<Method> ms;
  for (const std::string& m : methods) {
    const auto spec = braid::train::CompressionSpec::parse(m);
    if (!spec) {
      if (c.rank() == 0) std::fprintf(stderr, "train_bench: bad method '%s'\n", m.c_str());
      return 2;
    }
    Method x{m, *spec, braid::train::Compressor::create(*spec), nullptr, {}, {}};
    x.ef = std::make_unique<braid::train::ErrorFeedback>(*x.comp);
    ms.push_back(std::move(x));
  }
  auto step = [&](Method& m) {
    std::memcpy(work.data(), grad.data(), bytes);
    m.st = m.ef->allreduce(c, work.data(), count, ReduceOp::Avg);
  };
  // Methods interleaved round by round (round 0 untimed), so that a change of the machine's
  // load hits all of them alike; the median round per method is reported.
  for (int rep = 0; rep <= a.reps; ++rep)
    for (Method& m : ms) {
      const double t = timeOnce(c, [&] {
        for (int k = 0; k < steps; ++k) step(m);
      });
      if (rep > 0) m.times.push_back(t / steps);
    }
  for (Method& m : ms)
    if (m.spec.kind == braid::train::CompressionKind::None) plainStep = median(m.times);
  std::vector<double> accum(count);
  for (Method& m : ms) {
    const double t = median(m.times);
    // The error of the sum of `steps` results from a zero residual against steps x exact.
    m.ef->reset();
    std::fill(accum.begin(), accum.end(), 0.0);
    for (int k = 0; k < steps; ++k) {
      step(m);
      for (std::size_t i = 0; i < count; ++i) accum[i] += work[i];
    }
    double diff = 0;
    for (std::size_t i = 0; i < count; ++i) {
      const double d = accum[i] - static_cast<double>(exact[i]) * steps;
      diff += d * d;
    }
    const double relerr = maxOverRanks(c, exactNorm > 0 ? std::sqrt(diff) / exactNorm : 0.0);
    const double vsNone = plainStep > 0 ? plainStep / t : 0.0;
    const auto& st = m.st;
    if (c.rank() == 0) {
      char vs[32] = "-";
      if (plainStep > 0) std::snprintf(vs, sizeof vs, "%.2fx", vsNone);
      std::printf("  %-12s %12.3f %14.0f %14.0f %8.3f %10s %12.2e\n", m.name.c_str(), t * 1e3,
                  st.wireBytes, st.denseWireBytes,
                  st.denseWireBytes > 0 ? st.wireBytes / st.denseWireBytes : 1.0, vs, relerr);
    }
    char row[512];
    std::snprintf(row, sizeof row,
                  "\"bench\":\"compress\",\"nranks\":%d,\"bytes\":%zu,\"method\":\"%s\","
                  "\"steps\":%d,\"step_ms\":%.4f,\"wire_bytes\":%.1f,\"dense_wire_bytes\":%.1f,"
                  "\"speedup_vs_none\":%.4f,\"accum_rel_error\":%.4e",
                  c.size(), bytes, m.name.c_str(), steps, t * 1e3, st.wireBytes, st.denseWireBytes,
                  vsNone, relerr);
    j.row(row);
  }
  if (c.rank() == 0)
    std::printf("# vs none: plain step time / this method's (> 1: faster than uncompressed)\n");
  return 0;
}

const char* kUsage =
    "usage: train_bench fusion|overlap|compress [--tensors N] [--bytes SIZE] [--chunks N] "
    "[--reps K]\n       [--methods none,int8,topk:0.01,...] [--steps S] [--json FILE]\n"
    "(run under braid-run; docs/training.md)\n";

}  // namespace

int main(int argc, char** argv) {
  Args a;
  for (int i = 1; i < argc; ++i) {
    std::string s = argv[i];
    auto next = [&]() -> std::string {
      if (i + 1 >= argc) {
        std::fprintf(stderr, "train_bench: %s needs a value\n%s", s.c_str(), kUsage);
        std::exit(2);
      }
      return argv[++i];
    };
    if (s == "-h" || s == "--help") {
      std::fputs(kUsage, stdout);
      return 0;
    } else if (s == "--tensors") {
      a.tensors = std::atoi(next().c_str());
    } else if (s == "--bytes") {
      a.bytes = parseSize(next());
    } else if (s == "--chunks") {
      a.chunks = static_cast<std::size_t>(std::atoi(next().c_str()));
    } else if (s == "--reps") {
      a.reps = std::atoi(next().c_str());
    } else if (s == "--methods") {
      a.methods = next();
    } else if (s == "--steps") {
      a.steps = std::atoi(next().c_str());
    } else if (s == "--json") {
      a.json = next();
    } else if (a.mode.empty() && s[0] != '-') {
      a.mode = s;
    } else {
      std::fprintf(stderr, "train_bench: unknown argument '%s'\n%s", s.c_str(), kUsage);
      return 2;
    }
  }
  if ((a.mode != "fusion" && a.mode != "overlap" && a.mode != "compress") || a.tensors < 1 ||
      a.reps < 1 || a.chunks < 1) {
    std::fputs(kUsage, stderr);
    return 2;
  }
  try {
    auto comm = Comm::fromEnv();
    if (a.mode == "compress") return runCompress(*comm, a);
    return a.mode == "fusion" ? runFusion(*comm, a) : runOverlap(*comm, a);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "train_bench: %s\n", e.what());
    return 1;
  }
}
