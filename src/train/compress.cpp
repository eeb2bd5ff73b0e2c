// Compressed allreduce of fp32 data, on top of the communicator's public collectives.
//
// Each method, for n ranks and `count` elements (docs/training.md has the bounds):
//  Int8   The vector is cut into n slices on block boundaries. Every rank quantises each slice
//         (per block: scale = max|x|/127, int8 = round(x/scale)) and an alltoallv sends slice s
//         to rank s. Rank s dequantises the n contributions and sums them in fp32 (rank order),
//         re-quantises the sum the same way and an allgatherv hands every rank all the slices.
//         Wire: 2(n-1)/n * (count + 4 count/block) bytes instead of 2(n-1)/n * 4 count.
//  TopK   Each rank keeps its k largest magnitudes; an allgather moves k (uint32 index, fp32
//         value) pairs per rank; every rank adds them into a zeroed output in rank order.
//         Wire: (n-1) * 8k.
//  RandK  All ranks draw the same k indices from (seed, step); an fp32 allreduce sums the k
//         values; the output holds them at those indices, zero elsewhere. Wire: 2(n-1)/n * 4k.
//  Sign   Each rank sends one bit per element and one scale (mean |x|) per block; an allgather
//         moves the packets; every rank adds the decoded +-scale vectors in rank order.
//         Wire: (n-1) * (count/8 + 4 count/block).
// Every rank ends with bit-identical results: sums are taken over the same packets in the same
// order (RandK: the allreduce's result, the same everywhere).
#include <algorithm>
#include <braid/compress.hpp>
#include <charconv>
#include <cmath>
#include <cstring>

#include "kernels/codec.hpp"

namespace braid::train {
namespace {

const char* kindName(CompressionKind k) {
  switch (k) {
    case CompressionKind::None:
      return "none";
    case CompressionKind::Int8:
      return "int8";
    case CompressionKind::TopK:
      return "topk";
    case CompressionKind::RandK:
      return "randk";
    case CompressionKind::Sign:
      return "sign";
  }
  return "?";
}

std::size_t round4(std::size_t b) {
  return (b + 3) / 4 * 4;
}

Error badArgument(const Comm& comm, const CompressionSpec& spec, const std::string& what) {
  return Error(ErrorCode::InvalidArgument, std::string("compressed allreduce (") + spec.toString() +
                                               ") on rank " + std::to_string(comm.rank()) + ": " +
                                               what);
}

/// k of TopK and RandK: max(1, round(ratio * count)), at most count.
std::size_t kFor(double ratio, std::size_t count) {
  if (count == 0) return 0;
  const auto k = static_cast<std::size_t>(std::llround(ratio * static_cast<double>(count)));
  return std::clamp<std::size_t>(k, 1, count);
}

class CompressorBase : public Compressor {
 public:
  explicit CompressorBase(const CompressionSpec& spec) : Compressor(spec) {}

  CompressStats allreduce(Comm& comm, float* data, std::size_t count, ReduceOp op,
                          float* residual) final {
    if (op != ReduceOp::Sum && op != ReduceOp::Avg)
      throw badArgument(comm, spec_,
                        std::string("op must be sum or avg, got ") + braid::toString(op));
    if (count > 0 && data == nullptr) throw badArgument(comm, spec_, "data is null");
    if (count > 0xFFFFFFFFull)
      throw badArgument(comm, spec_, "count " + std::to_string(count) + " exceeds 2^32 - 1");
    CompressStats stats;
    stats.denseWireBytes = denseWireBytes(comm.size(), count);
    if (count == 0) return stats;
    if (residual != nullptr)
      for (std::size_t i = 0; i < count; ++i) data[i] += residual[i];
    stats.wireBytes = run(comm, data, count, residual);
    if (op == ReduceOp::Avg) {
      const float n = static_cast<float>(comm.size());
      for (std::size_t i = 0; i < count; ++i) data[i] /= n;
    }
    return stats;
  }

 protected:
  /// Sums x (count elements, residual already added) over ranks in place; writes the new
  /// residual when not null; returns the wire bytes.
  virtual double run(Comm& comm, float* x, std::size_t count, float* residual) = 0;
};

class DenseCompressor final : public CompressorBase {
 public:
  using CompressorBase::CompressorBase;

 protected:
  double run(Comm& comm, float* x, std::size_t count, float* residual) override {
    comm.allreduce(x, x, count, DataType::Float32, ReduceOp::Sum);
    if (residual != nullptr) std::fill(residual, residual + count, 0.0f);
    return denseWireBytes(comm.size(), count);
  }
};

class Int8Compressor final : public CompressorBase {
 public:
  using CompressorBase::CompressorBase;

 protected:
  double run(Comm& comm, float* x, std::size_t count, float* residual) override {
    const int n = comm.size();
    const int me = comm.rank();
    const std::size_t block = spec_.blockElements;
    const std::size_t nb = kernels::numBlocks(count, block);
    // Slice s: blocks [nb*s/n, nb*(s+1)/n); its packet: scales, then int8 values padded to 4.
    begin_.assign(n + 1, 0);
    blocks_.assign(n + 1, 0);
    bytes_.assign(n, 0);
    offsets_.assign(n, 0);
    std::size_t total = 0;
    for (int s = 0; s <= n; ++s) {
      blocks_[s] = nb * static_cast<std::size_t>(s) / static_cast<std::size_t>(n);
      begin_[s] = std::min(blocks_[s] * block, count);
    }
    for (int s = 0; s < n; ++s) {
      bytes_[s] = 4 * (blocks_[s + 1] - blocks_[s]) + round4(begin_[s + 1] - begin_[s]);
      offsets_[s] = total;
      total += bytes_[s];
    }
    send_.resize(total / 4);
    for (int s = 0; s < n; ++s) quantize(s, x + begin_[s], send_.data() + offsets_[s] / 4);
    if (residual != nullptr) {
      for (int s = 0; s < n; ++s) {
        dequantize(s, send_.data() + offsets_[s] / 4, residual + begin_[s], false);
      }
      for (std::size_t i = 0; i < count; ++i) residual[i] = x[i] - residual[i];
    }

    // Slice `me` from every rank, summed in fp32 in rank order, then re-quantised.
    const std::size_t mine = bytes_[me];
    const std::size_t len = begin_[me + 1] - begin_[me];
    recv_.resize(mine * n / 4);
    recvCounts_.assign(n, mine);
    recvDispls_.resize(n);
    for (int r = 0; r < n; ++r) recvDispls_[r] = mine * static_cast<std::size_t>(r);
    comm.alltoallv(send_.data(), bytes_, offsets_, recv_.data(), recvCounts_, recvDispls_,
                   DataType::Uint8);
    sum_.assign(len, 0.0f);
    for (int r = 0; r < n; ++r) dequantize(me, recv_.data() + r * mine / 4, sum_.data(), true);
    own_.resize(mine / 4);
    std::uint32_t* own = own_.data();
    quantize(me, sum_.data(), own);
    if (residual != nullptr) {
      requant_.resize(len);
      dequantize(me, own, requant_.data(), false);
      float* res = residual + begin_[me];
      for (std::size_t i = 0; i < len; ++i) res[i] += sum_[i] - requant_[i];
    }
    comm.allgatherv(own, send_.data(), bytes_, offsets_, DataType::Uint8);
    for (int s = 0; s < n; ++s) dequantize(s, send_.data() + offsets_[s] / 4, x + begin_[s], false);
    return 2.0 * (n - 1) / n * static_cast<double>(total);
  }

 private:
  void quantize(int s, const float* x, std::uint32_t* packet) {
    const std::size_t nbs = blocks_[s + 1] - blocks_[s];
    auto* scales = reinterpret_cast<float*>(packet);
    auto* q = reinterpret_cast<std::int8_t*>(packet + nbs);
    kernels::quantizeInt8(x, begin_[s + 1] - begin_[s], spec_.blockElements, scales, q);
  }
  void dequantize(int s, const std::uint32_t* packet, float* out, bool accumulate) {
    const std::size_t nbs = blocks_[s + 1] - blocks_[s];
    const auto* scales = reinterpret_cast<const float*>(packet);
    const auto* q = reinterpret_cast<const std::int8_t*>(packet + nbs);
    kernels::dequantizeInt8(scales, q, begin_[s + 1] - begin_[s], spec_.blockElements, out,
                            accumulate);
  }

  std::vector<std::size_t> begin_, blocks_, bytes_, offsets_, recvCounts_, recvDispls_;
  std::vector<std::uint32_t> send_, recv_, own_;  // packets, 4-byte aligned
  std::vector<float> sum_, requant_;
};

class TopKCompressor final : public CompressorBase {
 public:
  using CompressorBase::CompressorBase;

 protected:
  double run(Comm& comm, float* x, std::size_t count, float* residual) override {
    const int n = comm.size();
    const std::size_t k = kFor(spec_.ratio, count);
    packet_.resize(2 * k);
    kernels::selectTopK(x, count, k, packet_.data(), scratch_);
    for (std::size_t j = 0; j < k; ++j) std::memcpy(&packet_[k + j], &x[packet_[j]], 4);
    if (residual != nullptr) {
      std::copy(x, x + count, residual);
      for (std::size_t j = 0; j < k; ++j) residual[packet_[j]] = 0.0f;
    }
    all_.resize(2 * k * static_cast<std::size_t>(n));
    comm.allgather(packet_.data(), all_.data(), 2 * k, DataType::Int32);
    std::fill(x, x + count, 0.0f);
    for (int r = 0; r < n; ++r) {
      const std::uint32_t* p = all_.data() + 2 * k * static_cast<std::size_t>(r);
      for (std::size_t j = 0; j < k; ++j) {
        float v;
        std::memcpy(&v, &p[k + j], 4);
        if (p[j] >= count)
          throw Error(ErrorCode::Mismatch, "topk: rank " + std::to_string(r) + " sent index " +
                                               std::to_string(p[j]) + " beyond count");
        x[p[j]] += v;
      }
    }
    return static_cast<double>(n - 1) * 8.0 * static_cast<double>(k);
  }

 private:
  std::vector<std::uint32_t> packet_, all_;
  std::vector<float> scratch_;
};

class RandKCompressor final : public CompressorBase {
 public:
  using CompressorBase::CompressorBase;

 protected:
  double run(Comm& comm, float* x, std::size_t count, float* residual) override {
    const int n = comm.size();
    const std::size_t k = kFor(spec_.ratio, count);
    idx_.resize(k);
    kernels::sampleIndices(spec_.seed, step_++, count, k, idx_.data(), taken_);
    values_.resize(k);
    for (std::size_t j = 0; j < k; ++j) values_[j] = x[idx_[j]];
    if (residual != nullptr) {
      std::copy(x, x + count, residual);
      for (std::size_t j = 0; j < k; ++j) residual[idx_[j]] = 0.0f;
    }
    comm.allreduce(values_.data(), values_.data(), k, DataType::Float32, ReduceOp::Sum);
    std::fill(x, x + count, 0.0f);
    for (std::size_t j = 0; j < k; ++j) x[idx_[j]] = values_[j];
    return 2.0 * (n - 1) / n * 4.0 * static_cast<double>(k);
  }

 private:
  std::uint64_t step_ = 0;
  std::vector<std::uint32_t> idx_;
  std::vector<std::uint8_t> taken_;
  std::vector<float> values_;
};

class SignCompressor final : public CompressorBase {
 public:
  using CompressorBase::CompressorBase;

 protected:
  double run(Comm& comm, float* x, std::size_t count, float* residual) override {
    const int n = comm.size();
    const std::size_t block = spec_.blockElements;
    const std::size_t nb = kernels::numBlocks(count, block);
    const std::size_t words = nb + round4((count + 7) / 8) / 4;
    packet_.resize(words);
    auto* scales = reinterpret_cast<float*>(packet_.data());
    auto* bits = reinterpret_cast<std::uint8_t*>(packet_.data() + nb);
    packet_.back() = 0;  // padding bytes are sent: keep them defined
    kernels::encodeSign(x, count, block, scales, bits);
    if (residual != nullptr) {
      kernels::decodeSign(scales, bits, count, block, residual, false);
      for (std::size_t i = 0; i < count; ++i) residual[i] = x[i] - residual[i];
    }
    all_.resize(words * static_cast<std::size_t>(n));
    comm.allgather(packet_.data(), all_.data(), words, DataType::Int32);
    for (int r = 0; r < n; ++r) {
      const std::uint32_t* p = all_.data() + words * static_cast<std::size_t>(r);
      kernels::decodeSign(reinterpret_cast<const float*>(p),
                          reinterpret_cast<const std::uint8_t*>(p + nb), count, block, x, r > 0);
    }
    return static_cast<double>(n - 1) * 4.0 * static_cast<double>(words);
  }

 private:
  std::vector<std::uint32_t> packet_, all_;
};

}  // namespace

double denseWireBytes(int nranks, std::size_t count) noexcept {
  if (nranks <= 1) return 0;
  return 2.0 * (nranks - 1) / nranks * 4.0 * static_cast<double>(count);
}

std::optional<CompressionSpec> CompressionSpec::parse(std::string_view text) {
  CompressionSpec spec;
  const auto colon = text.find(':');
  const std::string_view name = text.substr(0, colon);
  const bool hasRatio = colon != std::string_view::npos;
  if (name == "none" || name == "int8" || name == "sign") {
    if (hasRatio) return std::nullopt;
    spec.kind = name == "none"   ? CompressionKind::None
                : name == "int8" ? CompressionKind::Int8
                                 : CompressionKind::Sign;
    return spec;
  }
  if (name != "topk" && name != "randk") return std::nullopt;
  spec.kind = name == "topk" ? CompressionKind::TopK : CompressionKind::RandK;
  if (hasRatio) {
    const std::string_view r = text.substr(colon + 1);
    double v = 0;
    const auto [end, ec] = std::from_chars(r.data(), r.data() + r.size(), v);
    if (r.empty() || ec != std::errc() || end != r.data() + r.size() || !(v > 0.0) || v > 1.0)
      return std::nullopt;
    spec.ratio = v;
  }
  return spec;
}

std::string CompressionSpec::toString() const {
  std::string s = kindName(kind);
  if (kind == CompressionKind::TopK || kind == CompressionKind::RandK) {
    char buf[32];
    const auto [end, ec] = std::to_chars(buf, buf + sizeof buf, ratio);
    s += ":" + std::string(buf, ec == std::errc() ? end : buf);
  }
  return s;
}

std::unique_ptr<Compressor> Compressor::create(const CompressionSpec& spec) {
  if (spec.blockElements == 0)
    throw Error(ErrorCode::InvalidArgument, "compressor: blockElements must be positive");
  if ((spec.kind == CompressionKind::TopK || spec.kind == CompressionKind::RandK) &&
      !(spec.ratio > 0.0 && spec.ratio <= 1.0))
    throw Error(ErrorCode::InvalidArgument,
                "compressor: ratio must be in (0, 1], got " + std::to_string(spec.ratio));
  switch (spec.kind) {
    case CompressionKind::None:
      return std::make_unique<DenseCompressor>(spec);
    case CompressionKind::Int8:
      return std::make_unique<Int8Compressor>(spec);
    case CompressionKind::TopK:
      return std::make_unique<TopKCompressor>(spec);
    case CompressionKind::RandK:
      return std::make_unique<RandKCompressor>(spec);
    case CompressionKind::Sign:
      return std::make_unique<SignCompressor>(spec);
  }
  throw Error(ErrorCode::InvalidArgument, "compressor: unknown kind");
}

CompressStats ErrorFeedback::allreduce(Comm& comm, float* data, std::size_t count, ReduceOp op) {
  if (!started_) {
    residual_.assign(count, 0.0f);
    started_ = true;
  } else if (count != residual_.size()) {
    throw Error(ErrorCode::InvalidArgument,
                "error feedback on rank " + std::to_string(comm.rank()) + ": count " +
                    std::to_string(count) + " differs from the first call's " +
                    std::to_string(residual_.size()));
  }
  return compressor_.allreduce(comm, data, count, op, residual_.data());
}

}  // namespace braid::train
