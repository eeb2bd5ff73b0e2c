// Reduction kernels for every dtype x op, vectorised with explicit intrinsics for the CPU found
// at run time (AVX-512 (+BF16), AVX2+F16C, portable scalar), chosen once per process.
// fp16, bf16 and float8 are widened to fp32, combined, and rounded back once (round to nearest
// even). Bitwise ops exist for integers and Bool; complex has Sum, Prod and Avg.
// Every instruction-set level computes bit-identical results (NaN payloads aside), so the level
// changes speed only; docs/architecture.md (Kernels) describes the design.
#pragma once

#include <braid/types.hpp>
#include <cstddef>
#include <cstdint>
#include <optional>
#include <string_view>
#include <vector>

namespace braid::kernels {

/// dst[i] = dst[i] op src[i]. Avg behaves as Sum (the caller divides afterwards).
void reduceInto(DataType t, ReduceOp op, void* dst, const void* src, std::size_t count);
/// dst[i] = a[i] op b[i]; dst may be the same pointer as a or b (other overlaps: undefined).
void reduce3(DataType t, ReduceOp op, void* dst, const void* a, const void* b, std::size_t count);
/// buf[i] /= divisor (integer division for integer types) — completes Avg.
void divideBy(DataType t, void* buf, std::size_t count, int divisor);
/// dst[i] = src[i] * factor, rounded once to the dtype (PremulSum's premultiplication; see
/// braid::Reduction::factor for the compute types); dst may equal src. Bool: InvalidArgument.
void scaleBy(DataType t, void* dst, const void* src, std::size_t count, double factor);
/// The instruction set the kernels above use in this process: toString(activeIsa()).
const char* selectedIsa() noexcept;

/// Float Min/Max: if either operand is NaN the result is NaN (whatever the order of operands),
/// otherwise the smaller/larger; Sum and Prod follow IEEE arithmetic in fp32/fp64.

/// Instruction-set levels, lowest first. Avx2 needs AVX2 and F16C; Avx512 needs AVX-512
/// F/BW/DQ/VL; Avx512Bf16 is Avx512 plus AVX512_BF16 (hardware fp32->bf16 rounding).
enum class Isa : std::uint8_t { Scalar, Avx2, Avx512, Avx512Bf16 };
inline constexpr Isa kAllIsas[] = {Isa::Scalar, Isa::Avx2, Isa::Avx512, Isa::Avx512Bf16};

/// "scalar", "avx2", "avx512", "avx512bf16".
const char* toString(Isa isa) noexcept;
/// Parses the names toString gives (case-insensitive); nullopt otherwise.
std::optional<Isa> parseIsa(std::string_view name) noexcept;
/// Whether this CPU (and OS) runs the level's kernels.
bool isaSupported(Isa isa) noexcept;
/// Every supported level, lowest first (always includes Scalar).
std::vector<Isa> supportedIsas();
/// The default level (auto): the highest supported level that has been verified (AVX2; the
/// AVX-512 levels are opt-in, see reduce.cpp). What the process uses unless setActiveIsa chose
/// another.
Isa bestIsa() noexcept;
/// The level reduceInto/reduce3/divideBy without an Isa argument use.
Isa activeIsa() noexcept;
/// Process-wide choice of the level used by the functions without an Isa argument (the
/// communicator applies BRAID_KERNEL_ISA through this). Results do not depend on the level, so
/// communicators of one process may share it. Throws Error(InvalidArgument) naming the level
/// when this CPU does not support it.
void setActiveIsa(Isa isa);

/// How outputs are written. Auto streams (non-temporal stores + sfence) when the output is at
/// least streamingThresholdBytes() (if non-zero) and does not alias an input; Cached never
/// streams; Streaming always does (where dst is element-aligned), for measurement.
enum class StoreMode : std::uint8_t { Auto, Cached, Streaming };
/// Output size from which StoreMode::Auto streams into a dst distinct from both inputs, in
/// order: half the last-level cache setLastLevelCacheBytes set (BRAID_LLC_SIZE); the threshold
/// measured on this machine (setMeasuredStreamingThreshold: the machine profile, applied at the
/// first communicator's creation); else half of machine::lastLevelCache()'s bounded reading
/// (docs/benchmarks.md, Reduction kernels, has the measurement behind the half).
std::size_t streamingThresholdBytes() noexcept;
/// Process-wide: the last-level cache size the streaming threshold derives from (the
/// communicator applies BRAID_LLC_SIZE through this); 0 returns to the measured threshold, if
/// any, else the machine's report.
void setLastLevelCacheBytes(std::size_t bytes) noexcept;
/// The threshold setLastLevelCacheBytes set (half of it), 0 when none is set: an override
/// (BRAID_LLC_SIZE, a test's cache) that the shared-memory group's measured threshold yields to.
std::size_t streamingThresholdSet() noexcept;
/// Process-wide: the streaming threshold the machine profile measured (core/machine_profile.hpp);
/// below setLastLevelCacheBytes in precedence. 0 forgets it.
void setMeasuredStreamingThreshold(std::size_t bytes) noexcept;

/// reduce3 at the active level with an explicit store mode (a direct collective streams its
/// large output).
void reduce3(DataType t, ReduceOp op, void* dst, const void* a, const void* b, std::size_t count,
             StoreMode mode);

/// The same operations at an explicit level (tests and benchmarks run every supported level
/// through these). Throws Error(InvalidArgument) when the CPU does not support `isa`.
void reduce3(Isa isa, DataType t, ReduceOp op, void* dst, const void* a, const void* b,
             std::size_t count, StoreMode mode = StoreMode::Auto);
void reduceInto(Isa isa, DataType t, ReduceOp op, void* dst, const void* src, std::size_t count,
                StoreMode mode = StoreMode::Auto);
void divideBy(Isa isa, DataType t, void* buf, std::size_t count, int divisor);
void scaleBy(Isa isa, DataType t, void* dst, const void* src, std::size_t count, double factor);
/// Whether the level's table has a kernel for (t, op) (every isSupported pair has one).
bool hasKernel(Isa isa, DataType t, ReduceOp op);

/// fp16 / bf16 scalar conversions (exact inverse for every finite half; RNE when narrowing).
float halfToFloat(std::uint16_t h) noexcept;
std::uint16_t floatToHalf(float f) noexcept;
float bf16ToFloat(std::uint16_t b) noexcept;
std::uint16_t floatToBf16(float f) noexcept;
/// float8_e4m3fn / float8_e5m2 conversions with torch's rules (kernel_table.hpp).
float e4m3ToFloat(std::uint8_t b) noexcept;
std::uint8_t floatToE4m3(float f) noexcept;
float e5m2ToFloat(std::uint8_t b) noexcept;
std::uint8_t floatToE5m2(float f) noexcept;

}  // namespace braid::kernels
