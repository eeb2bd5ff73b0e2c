#include "perf_args.hpp"

#include <charconv>
#include <limits>
#include <string_view>

namespace braid::perf {

const char* const kPerfUsage = R"(usage: braid-perf COLLECTIVE [options]

Measures one or more collectives the way nccl-tests does, on the communicator of the launcher's
environment (braid-run, torchrun, Open MPI or Slurm): braid-run -n 4 braid-perf allreduce

COLLECTIVE: allreduce allgather reducescatter broadcast reduce alltoall gather scatter sendrecv,
  a comma-separated list of them, or all.
  size (-b/-e) is nccl-tests' size: allgather and gather the gathered buffer, reducescatter the
  whole input, alltoall and scatter each rank's whole buffer, sendrecv the message (a ring: rank
  r sends to r+1 and receives from r-1). Where the buffer is split in nranks blocks the count is
  rounded down to a multiple of nranks (a count of 0 still runs).

options:
  -b, --minbytes SIZE       smallest size (default 8; K, M, G suffixes: binary multiples)
  -e, --maxbytes SIZE       largest size (default 256M); two buffers of it are allocated, so
                            more than half the host's memory is a usage error
  -f, --stepfactor F        multiply the size by F each step (default 4); maxbytes always runs
  -n, --iters N             back-to-back operations timed per repetition (default: by size,
                            200 up to 64K, 50 up to 1M, 10 up to 16M, 4 up to 64M, else 2)
  -w, --warmup_iters N      untimed operations before each size (default 5)
  -c, --check 0|1           verify every element on every rank after timing (default 1)
  -d, --datatype T          fp32 (default), fp64, fp16, bf16, int8, uint8, int16, uint16,
                            int32, uint32, int64, uint64, bool, fp8e4m3, fp8e5m2, complex64,
                            complex128, a list, or all
  -o, --op OP               sum (default), prod, min, max, avg, band, bor, bxor, premul_sum
                            (factor 1), a list, or all; pairs braid does not support (band on
                            fp32, min on complex, avg on bool) are skipped with a note
  -r, --root R              root of broadcast, reduce, gather, scatter (default 0)
  --algo RULES              force algorithms: sets Options::algo (BRAID_ALGO's syntax) and
                            algoForce: a size the algorithm cannot run (its constraints,
                            braid-info) fails with an error naming the constraint
  --json FILE               also write one JSON object per line per result ('-': stdout);
                            besides the table's columns: connections (sockets a rank
                            holds after the run, max over ranks) and init_ms
                            (communicator creation, max over ranks)
  --reps K                  repetitions per size (default 7); the median is reported
  --compress METHOD         allreduce through a compressor (docs/training.md): int8,
                            topk:RATIO, randk:RATIO or sign (fp32, sum or avg). Adds the
                            columns wire (bytes each rank sends, averaged over ranks), dense
                            (the same for a plain fp32 allreduce) and relerr (|out - exact| /
                            |exact| in the 2-norm, one shot without error feedback, on random
                            data); time includes copying the input into the working buffer
  --elastic                 when a rank is lost (PeerLost, Timeout), shrink the communicator
                            to the live ranks (docs/reliability.md), print "shrunk to N ranks"
                            and go on from the size that failed (run under braid-run
                            --max-failures K); exits 0 when the rest ran and checked
  --straggler RANK:US       rank RANK sleeps US microseconds before every operation (tests
                            and demonstrations); turns on straggler attribution
                            (Options::straggler) and prints the straggler report at the end:
                            which rank arrived last at how many collectives, by how much
  -h, --help                show this help

time(us): each rank times N back-to-back blocking operations and takes the per-op mean; the max
over ranks is one repetition; the median over K repetitions is reported. algbw = size / time,
busbw = algbw * factor (allreduce 2(n-1)/n; allgather, reducescatter, alltoall, gather, scatter
(n-1)/n; broadcast, reduce, sendrecv 1). #wrong: wrong elements summed over ranks.

exit status: 0 success, 1 a braid error, 2 bad usage (also a size that overflows or cannot
be allocated), 3 wrong results.
)";

namespace {

int parseInt(std::string_view option, const std::string& text, int min, int max) {
  int v = 0;
  const auto [end, ec] = std::from_chars(text.data(), text.data() + text.size(), v);
  if (ec != std::errc() || end != text.data() + text.size() || v < min || v > max)
    throw UsageError(std::string(option) + ": expected an integer in [" + std::to_string(min) +
                     ", " + std::to_string(max) + "], got '" + text + "'");
  return v;
}

std::size_t parseBytesArg(std::string_view option, const std::string& text) {
  const auto v = parseByteSize(text);
  if (!v)
    throw UsageError(std::string(option) + ": expected a size like 8, 64K, 4M, 1G, got '" + text +
                     "'");
  return *v;
}

std::vector<std::string> splitList(const std::string& text) {
  std::vector<std::string> items;
  std::size_t start = 0;
  while (start <= text.size()) {
    const std::size_t comma = text.find(',', start);
    const std::size_t end = comma == std::string::npos ? text.size() : comma;
    if (end > start) items.push_back(text.substr(start, end - start));
    if (comma == std::string::npos) break;
    start = comma + 1;
  }
  return items;
}

void addOps(const std::string& text, PerfArgs& args) {
  for (const std::string& name : splitList(text)) {
    if (name == "all") {
      for (const BenchOpInfo& op : benchOps()) args.ops.push_back(&op);
      continue;
    }
    const BenchOpInfo* op = findBenchOp(name);
    if (op == nullptr) throw UsageError("unknown collective '" + name + "'");
    args.ops.push_back(op);
  }
}

std::vector<DataType> parseDtypes(const std::string& text) {
  std::vector<DataType> out;
  for (const std::string& name : splitList(text)) {
    if (name == "all") {
      for (int t = 0; t < kNumDataTypes; ++t) out.push_back(static_cast<DataType>(t));
      continue;
    }
    const auto t = parseDataType(name);
    if (!t) throw UsageError("-d: unknown data type '" + name + "'");
    out.push_back(*t);
  }
  if (out.empty()) throw UsageError("-d: no data type given");
  return out;
}

std::vector<ReduceOp> parseRedops(const std::string& text) {
  std::vector<ReduceOp> out;
  for (const std::string& name : splitList(text)) {
    if (name == "all") {
      for (int o = 0; o < kNumReduceOps; ++o) out.push_back(static_cast<ReduceOp>(o));
      continue;
    }
    const auto o = parseReduceOp(name);
    if (!o) throw UsageError("-o: unknown reduction '" + name + "'");
    out.push_back(*o);
  }
  if (out.empty()) throw UsageError("-o: no reduction given");
  return out;
}

}  // namespace

PerfArgs parsePerfArgs(int argc, char** argv) {
  PerfArgs args;
  std::string dtypes = "fp32";
  std::string redops = "sum";
  for (int i = 1; i < argc; ++i) {
    const std::string arg = argv[i];
    // "-b 8", "-b8", "--minbytes 8", "--minbytes=8".
    auto value = [&](std::string_view shortName,
                     std::string_view longName) -> std::optional<std::string> {
      for (std::string_view name : {shortName, longName}) {
        if (name.empty()) continue;
        if (arg == name) {
          if (i + 1 >= argc) throw UsageError(std::string(name) + " needs a value");
          return std::string(argv[++i]);
        }
        if (arg.size() > name.size() && arg.starts_with(name)) {
          const bool isLong = name.starts_with("--");
          if (isLong && arg[name.size()] == '=') return arg.substr(name.size() + 1);
          if (!isLong) return arg.substr(name.size());
        }
      }
      return std::nullopt;
    };
    if (arg == "-h" || arg == "--help") {
      args.help = true;
      return args;
    }
    if (arg == "--elastic") {
      args.elastic = true;
      continue;
    }
    if (auto v = value("-b", "--minbytes")) {
      args.minBytes = parseBytesArg("-b", *v);
    } else if (auto v2 = value("-e", "--maxbytes")) {
      args.maxBytes = parseBytesArg("-e", *v2);
    } else if (auto v3 = value("-f", "--stepfactor")) {
      args.stepFactor = static_cast<std::size_t>(parseInt("-f", *v3, 1, 1 << 20));
    } else if (auto v4 = value("-n", "--iters")) {
      args.iters = parseInt("-n", *v4, 1, 1 << 30);
    } else if (auto v5 = value("-w", "--warmup_iters")) {
      args.warmup = parseInt("-w", *v5, 0, 1 << 30);
    } else if (auto v6 = value("-c", "--check")) {
      args.check = parseInt("-c", *v6, 0, 1) == 1;
    } else if (auto v7 = value("-d", "--datatype")) {
      dtypes = *v7;
    } else if (auto v8 = value("-o", "--op")) {
      redops = *v8;
    } else if (auto v9 = value("-r", "--root")) {
      args.root = parseInt("-r", *v9, 0, std::numeric_limits<int>::max());
    } else if (auto v10 = value("", "--algo")) {
      args.algo = *v10;
    } else if (auto v11 = value("", "--json")) {
      args.jsonPath = *v11;
    } else if (auto v12 = value("", "--reps")) {
      args.reps = parseInt("--reps", *v12, 1, 1 << 20);
    } else if (auto v13 = value("", "--compress")) {
      args.compress = train::CompressionSpec::parse(*v13);
      if (!args.compress)
        throw UsageError(
            "--compress: expected int8, topk:RATIO, randk:RATIO or sign (RATIO in "
            "(0, 1]), got '" +
            *v13 + "'");
    } else if (auto v14 = value("", "--straggler")) {
      const std::size_t colon = v14->find(':');
      if (colon == std::string::npos)
        throw UsageError("--straggler: expected RANK:MICROSECONDS, got '" + *v14 + "'");
      args.stragglerRank =
          parseInt("--straggler (rank)", v14->substr(0, colon), 0, std::numeric_limits<int>::max());
      args.stragglerMicros =
          parseInt("--straggler (microseconds)", v14->substr(colon + 1), 0, 60 * 1000 * 1000);
    } else if (arg.size() > 1 && arg[0] == '-') {
      throw UsageError("unknown option '" + arg + "'");
    } else {
      addOps(arg, args);
    }
  }
  args.dtypes = parseDtypes(dtypes);
  args.redops = parseRedops(redops);
  if (args.ops.empty()) throw UsageError("no collective given");
  if (args.compress) {
    for (const BenchOpInfo* op : args.ops)
      if (op->op != BenchOp::Allreduce)
        throw UsageError(std::string("--compress applies to allreduce only, not ") + op->name);
    for (DataType t : args.dtypes)
      if (t != DataType::Float32)
        throw UsageError(std::string("--compress needs -d fp32, not ") + toString(t));
    for (ReduceOp o : args.redops)
      if (o != ReduceOp::Sum && o != ReduceOp::Avg)
        throw UsageError(std::string("--compress needs -o sum or avg, not ") + toString(o));
  }
  // Two buffers of maxBytes each, rounded up to pages: sizes beyond this bound overflow that
  // arithmetic (what braid-perf allocates is checked against the host's memory in main.cpp).
  for (auto [option, bytes] : {std::pair{"-b", args.minBytes}, std::pair{"-e", args.maxBytes}})
    if (bytes > kMaxPerfBytes)
      throw UsageError(std::string(option) + " " + std::to_string(bytes) +
                       ": too large (braid-perf allocates two buffers of that size; at most " +
                       std::to_string(kMaxPerfBytes) + " bytes)");
  if (args.minBytes > args.maxBytes)
    throw UsageError("-b " + std::to_string(args.minBytes) + " is larger than -e " +
                     std::to_string(args.maxBytes));
  if (args.stepFactor < 2 && args.minBytes != args.maxBytes)
    throw UsageError("-f: the step factor must be at least 2");
  return args;
}

std::vector<std::size_t> sizeSteps(const PerfArgs& args) {
  std::vector<std::size_t> sizes;
  for (std::size_t b = args.minBytes; b <= args.maxBytes; b *= args.stepFactor) {
    sizes.push_back(b);
    if (b == 0 || args.stepFactor < 2 ||
        b > std::numeric_limits<std::size_t>::max() / args.stepFactor)
      break;
  }
  if (sizes.empty() || sizes.back() != args.maxBytes) sizes.push_back(args.maxBytes);
  return sizes;
}

int itersForBytes(std::size_t bytes) {
  if (bytes <= (std::size_t{64} << 10)) return 200;
  if (bytes <= (std::size_t{1} << 20)) return 50;
  if (bytes <= (std::size_t{16} << 20)) return 10;
  if (bytes <= (std::size_t{64} << 20)) return 4;
  return 2;
}

}  // namespace braid::perf
