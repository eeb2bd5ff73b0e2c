// Reduction kernel dispatch. Each instruction-set level fills a table of (dtype, op) loops in
// its own translation unit (reduce_scalar.cpp, reduce_avx2.cpp, reduce_avx512.cpp,
// reduce_avx512bf16.cpp), compiled for that target only. The CPU is inspected once, on first
// use; afterwards a call costs one atomic load and one indirect call. Integer sums and
// products wrap (computed in the unsigned type, as two's complement).
#include "kernels/reduce.hpp"

#include <algorithm>
#include <atomic>
#include <braid/error.hpp>
#include <cstdlib>
#include <cstring>
#include <string>

#include "common/machine.hpp"
#include "kernels/kernel_table.hpp"

#if defined(__x86_64__)
#include <cpuid.h>
#endif

namespace braid::kernels {
namespace {

using detail::KernelTable;

constexpr int kNumIsas = 4;

struct Levels {
  const KernelTable* table[kNumIsas] = {};
  Isa best = Isa::Scalar;
};

#if defined(__x86_64__)
bool cpuHasF16c() {
  unsigned a = 0, b = 0, c = 0, d = 0;
  return __get_cpuid(1, &a, &b, &c, &d) != 0 && (c & bit_F16C) != 0;
}
#endif

Levels detect() {
  Levels l;
  l.table[static_cast<int>(Isa::Scalar)] = &detail::scalarKernels();
#if defined(__x86_64__)
  // libgcc's checks include the OS side (XCR0 enables the YMM/ZMM state).
  __builtin_cpu_init();
  const bool avx2 = __builtin_cpu_supports("avx2") && cpuHasF16c();
  const bool avx512 = avx2 && __builtin_cpu_supports("avx512f") &&
                      __builtin_cpu_supports("avx512bw") && __builtin_cpu_supports("avx512dq") &&
                      __builtin_cpu_supports("avx512vl");
  const bool bf16 = avx512 && __builtin_cpu_supports("avx512bf16");
  if (avx2) {
    l.table[static_cast<int>(Isa::Avx2)] = &detail::avx2Kernels();
    l.best = Isa::Avx2;
  }
  // `auto` takes the highest level. The AVX-512 levels were written on a machine without
  // AVX-512 and were opt-in until braid_unit_kernels_test (every supported level, bit-exact)
  // passed on an AVX-512 CPU (AMD EPYC, AVX512_BF16, 2026-11-30; docs/architecture.md, Kernels).
  if (avx512) {
    l.table[static_cast<int>(Isa::Avx512)] = &detail::avx512Kernels();
    l.best = Isa::Avx512;
  }
  if (bf16) {
    static KernelTable withBf16 = detail::avx512Kernels();
    detail::overrideWithAvx512Bf16(withBf16);
    l.table[static_cast<int>(Isa::Avx512Bf16)] = &withBf16;
    l.best = Isa::Avx512Bf16;
  }
#endif
  return l;
}

const Levels& levels() {
  static const Levels l = detect();
  return l;
}

// The level the functions without an Isa argument use (setActiveIsa); null until first use.
std::atomic<const KernelTable*> gActiveTable{nullptr};

const KernelTable& activeTable() {
  const KernelTable* t = gActiveTable.load(std::memory_order_acquire);
  if (t != nullptr) [[likely]]
    return *t;
  const Levels& l = levels();
  const KernelTable* best = l.table[static_cast<int>(l.best)];
  // A concurrent setActiveIsa may have won: keep its choice.
  if (!gActiveTable.compare_exchange_strong(t, best, std::memory_order_acq_rel)) return *t;
  return *best;
}

const KernelTable& tableFor(Isa isa, const char* what) {
  const int i = static_cast<int>(isa);
  if (i < 0 || i >= kNumIsas)
    throw Error(ErrorCode::InvalidArgument,
                std::string(what) + ": unknown kernel ISA " + std::to_string(i));
  const KernelTable* t = levels().table[i];
  if (t == nullptr)
    throw Error(ErrorCode::InvalidArgument,
                std::string(what) + ": kernel ISA " + toString(isa) +
                    " is not supported by this CPU (best: " + toString(levels().best) + ")");
  return *t;
}

int opColumn(ReduceOp op) {
  switch (op) {
    case ReduceOp::Sum:
    case ReduceOp::Avg:
      return 0;
    case ReduceOp::Prod:
      return 1;
    case ReduceOp::Min:
      return 2;
    case ReduceOp::Max:
      return 3;
    case ReduceOp::BAnd:
      return 4;
    case ReduceOp::BOr:
      return 5;
    case ReduceOp::BXor:
      return 6;
    case ReduceOp::PremulSum:
      return 0;
  }
  throw Error(ErrorCode::InvalidArgument,
              "reduction kernel: unknown op " + std::to_string(static_cast<int>(op)));
}

int dtypeRow(DataType t) {
  if (!isValid(t))
    throw Error(ErrorCode::InvalidArgument,
                "reduction kernel: unknown dtype " + std::to_string(static_cast<int>(t)));
  return static_cast<int>(t);
}

bool shouldStream(StoreMode mode, const void* dst, const void* a, const void* b,
                  std::size_t bytes) {
  switch (mode) {
    case StoreMode::Cached:
      return false;
    case StoreMode::Streaming:
      return true;
    case StoreMode::Auto:
      break;
  }
  const std::size_t threshold = streamingThresholdBytes();
  return threshold != 0 && bytes >= threshold && dst != a && dst != b;
}

// Sum, Prod, Min, Max, Avg (a sum, divided afterwards by the caller), BAnd, BOr, BXor,
// PremulSum (a sum of inputs the caller premultiplied).
constexpr int kColumn[kNumReduceOps] = {0, 1, 2, 3, 0, 4, 5, 6, 0};

// The errors of run(), out of line: the per-call path saves no registers for them.
[[noreturn, gnu::cold, gnu::noinline]] void failInvalid(DataType t, ReduceOp op) {
  dtypeRow(t);  // throws the error naming what is wrong
  opColumn(op);
  throw Error(ErrorCode::Internal, "reduction kernel: invalid dtype or op");
}
[[noreturn, gnu::cold, gnu::noinline]] void failUnsupported(DataType t, ReduceOp op) {
  throw Error(ErrorCode::InvalidArgument, std::string("reduction kernel: op ") + toString(op) +
                                              " is not supported for dtype " + toString(t));
}

void run(const KernelTable& table, DataType t, ReduceOp op, void* dst, const void* a, const void* b,
         std::size_t count, StoreMode mode) {
  if (!isValid(t) || !isValid(op)) [[unlikely]]
    failInvalid(t, op);
  const detail::BinaryFn fn = table.binary[static_cast<int>(t)][kColumn[static_cast<int>(op)]];
  if (fn == nullptr) [[unlikely]]
    failUnsupported(t, op);
  if (count == 0) return;
  const bool stream = shouldStream(mode, dst, a, b, count * dataTypeSize(t));
  fn(dst, a, b, count, stream);
}

template <class T, class D>
void divideIntegers(void* buf, std::size_t n, D divisor) {
  auto* p = static_cast<T*>(buf);
  for (std::size_t i = 0; i < n; ++i) p[i] = static_cast<T>(p[i] / divisor);
}

void divide(const KernelTable& table, DataType t, void* buf, std::size_t count, int divisor) {
  const int row = dtypeRow(t);
  if (count == 0 || divisor == 1) return;
  if (divisor == 0) throw Error(ErrorCode::InvalidArgument, "divideBy: divisor 0");
  switch (t) {
    case DataType::Int8:
      return divideIntegers<std::int8_t>(buf, count, divisor);
    case DataType::Uint8:
      return divideIntegers<std::uint8_t>(buf, count, divisor);
    case DataType::Int32:
      return divideIntegers<std::int32_t>(buf, count, divisor);
    case DataType::Int64:
      return divideIntegers<std::int64_t>(buf, count, std::int64_t{divisor});
    case DataType::Int16:
      return divideIntegers<std::int16_t>(buf, count, divisor);
    case DataType::Uint16:
      return divideIntegers<std::uint16_t>(buf, count, divisor);
    case DataType::Uint32:
      return divideIntegers<std::uint32_t>(buf, count, static_cast<std::uint32_t>(divisor));
    case DataType::Uint64:
      return divideIntegers<std::uint64_t>(buf, count, static_cast<std::uint64_t>(divisor));
    default:
      if (table.divide[row] == nullptr)
        throw Error(ErrorCode::InvalidArgument,
                    std::string("divideBy: avg is not supported for dtype ") + toString(t));
      table.divide[row](buf, count, divisor);
  }
}

void scale(const KernelTable& table, DataType t, void* dst, const void* src, std::size_t count,
           double factor) {
  const int row = dtypeRow(t);
  if (table.scale[row] == nullptr)
    throw Error(ErrorCode::InvalidArgument,
                std::string("scaleBy: premul_sum is not supported for dtype ") + toString(t));
  // Integers convert the factor to int64 (out of range would be undefined behaviour).
  if (isInteger(t) && !(factor >= -9223372036854775808.0 && factor < 9223372036854775808.0))
    throw Error(ErrorCode::InvalidArgument,
                std::string("scaleBy: factor out of int64's range for dtype ") + toString(t));
  if (count == 0) return;
  table.scale[row](dst, src, count, factor);
}

}  // namespace

const char* toString(Isa isa) noexcept {
  switch (isa) {
    case Isa::Scalar:
      return "scalar";
    case Isa::Avx2:
      return "avx2";
    case Isa::Avx512:
      return "avx512";
    case Isa::Avx512Bf16:
      return "avx512bf16";
  }
  return "unknown";
}

std::optional<Isa> parseIsa(std::string_view name) noexcept {
  std::string lower(name);
  for (char& c : lower) c = static_cast<char>(c >= 'A' && c <= 'Z' ? c - 'A' + 'a' : c);
  for (Isa isa : kAllIsas)
    if (lower == toString(isa)) return isa;
  return std::nullopt;
}

bool isaSupported(Isa isa) noexcept {
  const int i = static_cast<int>(isa);
  return i >= 0 && i < kNumIsas && levels().table[i] != nullptr;
}

std::vector<Isa> supportedIsas() {
  std::vector<Isa> out;
  for (Isa isa : kAllIsas)
    if (isaSupported(isa)) out.push_back(isa);
  return out;
}

Isa bestIsa() noexcept {
  return levels().best;
}

Isa activeIsa() noexcept {
  const KernelTable* t = &activeTable();
  for (Isa isa : kAllIsas)
    if (levels().table[static_cast<int>(isa)] == t) return isa;
  return Isa::Scalar;  // unreachable: the active table is always one of the levels'
}

void setActiveIsa(Isa isa) {
  gActiveTable.store(&tableFor(isa, "setActiveIsa"), std::memory_order_release);
}

const char* selectedIsa() noexcept {
  return toString(activeIsa());
}

namespace {
// The threshold set by setLastLevelCacheBytes; kUnset until then (the machine's report applies).
constexpr std::size_t kUnset = ~std::size_t{0};
std::atomic<std::size_t> gThreshold{kUnset};
std::atomic<std::size_t> gMeasured{kUnset};  // setMeasuredStreamingThreshold's
}  // namespace

std::size_t streamingThresholdBytes() noexcept {
  // Half the last-level cache: an output that large does not stay cached for the next step
  // anyway. Measured (docs/benchmarks.md, Reduction kernels): for a distinct dst of 64 MiB
  // non-temporal stores were 5-12% faster than cached ones (they skip the read-for-ownership of
  // dst); in place they were slower, which is why Auto never streams into an input.
  const std::size_t set = gThreshold.load(std::memory_order_relaxed);
  if (set != kUnset) return set;
  const std::size_t measured = gMeasured.load(std::memory_order_relaxed);
  if (measured != kUnset) return measured;
  static const std::size_t reported = machine::lastLevelCache().bytes / 2;
  return reported;
}

void setLastLevelCacheBytes(std::size_t bytes) noexcept {
  gThreshold.store(bytes == 0 ? kUnset : bytes / 2, std::memory_order_relaxed);
}

std::size_t streamingThresholdSet() noexcept {
  const std::size_t set = gThreshold.load(std::memory_order_relaxed);
  return set == kUnset ? 0 : set;
}

void setMeasuredStreamingThreshold(std::size_t bytes) noexcept {
  gMeasured.store(bytes == 0 ? kUnset : bytes, std::memory_order_relaxed);
}

namespace {

// A few elements of a type the portable level reduces in a handful of instructions each
// (integers, fp32, fp64, bool) go through its loop whatever level is active: a vector level
// takes fewer elements than a vector through its padded tail (three stack copies and a zeroed
// vector), about 150 instructions for 2 fp32 against about 30 (docs/benchmarks.md, "The
// per-operation path"). Every level gives the reference's bits (braid_unit_kernels_test), so
// the result does not depend on the path. fp16, bf16 and float8 convert in integer arithmetic
// at the portable level, which costs more than the tail; complex stays on the active level too.
constexpr std::size_t kPortableBelow = 8;

bool cheapPortably(DataType t) noexcept {
  switch (t) {
    case DataType::Float16:
    case DataType::BFloat16:
    case DataType::Float8E4M3Fn:
    case DataType::Float8E5M2:
    case DataType::Complex64:
    case DataType::Complex128:
      return false;
    default:
      return true;
  }
}

// The portable level's loop for `count` elements, or null where the active level's applies
// (more elements, another dtype, an invalid or unsupported pair: run() says which).
detail::BinaryFn portableLoop(DataType t, ReduceOp op, std::size_t count) noexcept {
  if (count - 1 >= kPortableBelow - 1 || !isValid(t) || !isValid(op) || !cheapPortably(t))
    return nullptr;
  static const KernelTable& portable = detail::scalarKernels();
  return portable.binary[static_cast<int>(t)][kColumn[static_cast<int>(op)]];
}

}  // namespace

void reduce3(DataType t, ReduceOp op, void* dst, const void* a, const void* b, std::size_t count) {
  if (const detail::BinaryFn fn = portableLoop(t, op, count)) return fn(dst, a, b, count, false);
  run(activeTable(), t, op, dst, a, b, count, StoreMode::Auto);
}

void reduceInto(DataType t, ReduceOp op, void* dst, const void* src, std::size_t count) {
  if (const detail::BinaryFn fn = portableLoop(t, op, count))
    return fn(dst, dst, src, count, false);
  run(activeTable(), t, op, dst, dst, src, count, StoreMode::Auto);
}

void reduce3(DataType t, ReduceOp op, void* dst, const void* a, const void* b, std::size_t count,
             StoreMode mode) {
  run(activeTable(), t, op, dst, a, b, count, mode);
}

void divideBy(DataType t, void* buf, std::size_t count, int divisor) {
  divide(activeTable(), t, buf, count, divisor);
}

void scaleBy(DataType t, void* dst, const void* src, std::size_t count, double factor) {
  scale(activeTable(), t, dst, src, count, factor);
}

void scaleBy(Isa isa, DataType t, void* dst, const void* src, std::size_t count, double factor) {
  scale(tableFor(isa, "scaleBy"), t, dst, src, count, factor);
}

bool hasKernel(Isa isa, DataType t, ReduceOp op) {
  if (!isValid(t) || !isValid(op)) return false;
  const KernelTable& table = tableFor(isa, "hasKernel");
  const int row = static_cast<int>(t);
  if (table.binary[row][opColumn(op)] == nullptr) return false;
  // Avg also divides (integers portably, here), PremulSum also scales.
  if (op == ReduceOp::Avg) return isInteger(t) || table.divide[row] != nullptr;
  if (op == ReduceOp::PremulSum) return table.scale[row] != nullptr;
  return true;
}

void reduce3(Isa isa, DataType t, ReduceOp op, void* dst, const void* a, const void* b,
             std::size_t count, StoreMode mode) {
  run(tableFor(isa, "reduce3"), t, op, dst, a, b, count, mode);
}

void reduceInto(Isa isa, DataType t, ReduceOp op, void* dst, const void* src, std::size_t count,
                StoreMode mode) {
  run(tableFor(isa, "reduceInto"), t, op, dst, dst, src, count, mode);
}

void divideBy(Isa isa, DataType t, void* buf, std::size_t count, int divisor) {
  divide(tableFor(isa, "divideBy"), t, buf, count, divisor);
}

float halfToFloat(std::uint16_t h) noexcept {
  return detail::halfWiden(h);
}
std::uint16_t floatToHalf(float f) noexcept {
  return detail::halfNarrow(f);
}
float bf16ToFloat(std::uint16_t b) noexcept {
  return detail::bf16Widen(b);
}
std::uint16_t floatToBf16(float f) noexcept {
  return detail::bf16Narrow(f);
}
float e4m3ToFloat(std::uint8_t b) noexcept {
  return detail::e4m3Widen(b);
}
std::uint8_t floatToE4m3(float f) noexcept {
  return detail::e4m3Narrow(f);
}
float e5m2ToFloat(std::uint8_t b) noexcept {
  return detail::e5m2Widen(b);
}
std::uint8_t floatToE5m2(float f) noexcept {
  return detail::e5m2Narrow(f);
}

}  // namespace braid::kernels
