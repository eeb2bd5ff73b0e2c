// braid public API, training layer: compressed allreduce of fp32 gradients with optional error
// feedback. Built on the communicator's public collectives only (src/train/). docs/training.md
// states each method's steps, bytes on the wire and error bound.
#pragma once

#include <braid/comm.hpp>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace braid::train {

enum class CompressionKind : std::uint8_t {
  None,   ///< plain fp32 allreduce (the reference)
  Int8,   ///< per-block scaled int8: alltoall of int8 slices, fp32 sum, int8 allgather
  TopK,   ///< the k largest magnitudes of each rank (index + value), allgather-based merge
  RandK,  ///< k indices drawn from a seed shared by all ranks; only values on the wire
  Sign,   ///< 1 bit per element and a per-block scale (mean magnitude), allgather
};

struct CompressionSpec {
  CompressionKind kind = CompressionKind::None;
  /// TopK, RandK: fraction of the elements sent, in (0, 1]; k = max(1, round(ratio * count)).
  double ratio = 0.01;
  /// Int8, Sign: elements per scale.
  std::size_t blockElements = 256;
  /// RandK: seed shared by all ranks (must be equal on every rank).
  std::uint64_t seed = 0x5eed;

  /// "none", "int8", "topk:RATIO", "randk:RATIO", "sign" (RATIO a decimal in (0, 1], e.g. 0.01).
  /// nullopt when malformed.
  static std::optional<CompressionSpec> parse(std::string_view text);
  /// The spelling parse() accepts.
  std::string toString() const;
};

/// What one compressed allreduce put on the wire. Counted as the payload the compressor hands to
/// braid's collectives, averaged over ranks, with the bandwidth-optimal volume of each
/// collective: allreduce of B bytes 2(n-1)/n B, allgather of B bytes per rank (n-1) B,
/// alltoall of T bytes in total per rank (n-1)/n T.
struct CompressStats {
  /// Bytes each rank sends, averaged over ranks.
  double wireBytes = 0;
  /// The same for an uncompressed fp32 allreduce of the same count: 2(n-1)/n * 4 * count.
  double denseWireBytes = 0;
};

/// A compressed sum/avg allreduce of fp32 data.
///
/// Threading: one Compressor is used by one thread at a time (it keeps scratch buffers and, for
/// RandK, a step counter). Every rank must call it with the same count and in the same order
/// (RandK draws the same indices on every rank only then). The result is identical on every rank.
///
/// Error feedback: with `residual` (count elements, zero at the start), the residual is added to
/// the input before compression, and afterwards holds what this rank's contribution left out:
/// input + old residual - what it contributed (Int8: the rank owning a slice also keeps the
/// re-quantisation error of that slice's sum). Hence, summed over ranks,
///   sum_r (input_r + old residual_r) = n * result (Avg) or result (Sum) + sum_r new residual_r
/// exactly up to fp32 rounding, so over many steps the results add up to the exact sums minus
/// the bounded final residuals.
class Compressor {
 public:
  static std::unique_ptr<Compressor> create(const CompressionSpec& spec);
  virtual ~Compressor() = default;

  const CompressionSpec& spec() const noexcept { return spec_; }

  /// In place over `data` (count fp32 elements); op Sum or Avg (else Error(InvalidArgument)).
  /// Inputs must be finite. `residual`: null, or count elements of error-feedback state.
  virtual CompressStats allreduce(Comm& comm, float* data, std::size_t count, ReduceOp op,
                                  float* residual) = 0;
  CompressStats allreduce(Comm& comm, float* data, std::size_t count, ReduceOp op) {
    return allreduce(comm, data, count, op, nullptr);
  }

 protected:
  explicit Compressor(const CompressionSpec& spec) : spec_(spec) {}
  CompressionSpec spec_;
};

/// Error-feedback state of one tensor: owns the residual and applies it on every step.
class ErrorFeedback {
 public:
  explicit ErrorFeedback(Compressor& compressor) : compressor_(compressor) {}
  /// The compressor's allreduce with this tensor's residual. The count must stay the same from
  /// call to call (else Error(InvalidArgument)); the residual starts at zero.
  CompressStats allreduce(Comm& comm, float* data, std::size_t count, ReduceOp op);
  std::span<const float> residual() const noexcept { return residual_; }
  void reset() { residual_.assign(residual_.size(), 0.0f); }

 private:
  Compressor& compressor_;
  std::vector<float> residual_;
  bool started_ = false;
};

/// Bytes each rank sends, averaged over ranks, for an uncompressed fp32 allreduce.
double denseWireBytes(int nranks, std::size_t count) noexcept;

}  // namespace braid::train
