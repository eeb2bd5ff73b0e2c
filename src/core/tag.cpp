#include "core/tag.hpp"

#include "transport/transport.hpp"

namespace braid::core {
namespace {

std::uint64_t mix(std::uint64_t h, std::uint64_t v) {
  // splitmix64 finalizer over a running combination: cheap and well spread.
  h ^= v + 0x9e3779b97f4a7c15ull + (h << 6) + (h >> 2);
  h ^= h >> 30;
  h *= 0xbf58476d1ce4e5b9ull;
  h ^= h >> 27;
  h *= 0x94d049bb133111ebull;
  h ^= h >> 31;
  return h;
}

}  // namespace

std::uint64_t countKey(Collective c, std::size_t count, std::span<const std::size_t> counts) {
  if (c == Collective::Alltoallv) return 0;
  if (c == Collective::Allgatherv || c == Collective::ReduceScatterv) {
    std::uint64_t h = counts.size();
    for (std::size_t n : counts) h = mix(h, n);
    return h;
  }
  return count;
}

std::uint64_t commIdHash(std::string_view id) {
  std::uint64_t h = 1469598103934665603ull;
  for (char ch : id) {
    h ^= static_cast<unsigned char>(ch);
    h *= 1099511628211ull;
  }
  return h;
}

std::uint64_t collectiveTag(Collective c, DataType t, ReduceOp op, int root, std::uint64_t seq,
                            std::uint64_t countKey, std::uint64_t commHash, bool fingerprint) {
  std::uint64_t tag =
      (static_cast<std::uint64_t>(c) & 0x1f) | ((static_cast<std::uint64_t>(t) & 0x1f) << 5) |
      ((static_cast<std::uint64_t>(op) & 0xf) << 10) |
      ((static_cast<std::uint64_t>(root) & 0xfff) << 14) | ((seq & kTagSeqMask) << 26);
  if (fingerprint) {
    // The count's low bits enter unhashed: two counts that differ by less than 2^20 (the usual
    // mistake) always give different tags; other differences are missed with odds 2^-20.
    // One mix over the inputs combined injectively (root in the low half, the sequence's high
    // part in the high half): three chained mixes cost ~15 ns of an 8 B call's ~200.
    const std::uint64_t h = mix(commHash + (countKey >> 20) * 0x9e3779b97f4a7c15ull,
                                static_cast<std::uint32_t>(root) | ((seq >> kTagSeqBits) << 32));
    tag |= ((h ^ countKey) & 0xfffffull) << 43;
  }
  return tag;
}

std::uint64_t p2pTag(DataType t, std::uint32_t userTag) {
  return transport::kP2PTagBit | static_cast<std::uint64_t>(Collective::Send) |
         ((static_cast<std::uint64_t>(t) & 0x1f) << 5) |
         (static_cast<std::uint64_t>(userTag) << 14);
}

TagFields decodeTag(std::uint64_t tag) {
  TagFields f;
  f.p2p = (tag & transport::kP2PTagBit) != 0;
  f.coll = static_cast<Collective>(tag & 0x1f);
  f.dtype = static_cast<DataType>((tag >> 5) & 0x1f);
  f.op = static_cast<ReduceOp>((tag >> 10) & 0xf);
  if (f.p2p) {
    f.userTag = static_cast<std::uint32_t>((tag >> 14) & 0xffffffffull);
  } else {
    f.rootLow = static_cast<unsigned>((tag >> 14) & 0xfff);
    f.seqLow = (tag >> 26) & kTagSeqMask;
  }
  return f;
}

std::uint64_t nearestSeq(std::uint64_t seqLow, std::uint64_t near) {
  const std::uint64_t period = kTagSeqMask + 1;
  std::uint64_t base = near & ~kTagSeqMask;
  std::uint64_t best = base | seqLow;
  auto dist = [&](std::uint64_t s) { return s > near ? s - near : near - s; };
  if (base >= period && dist((base - period) | seqLow) < dist(best))
    best = (base - period) | seqLow;
  if (dist((base + period) | seqLow) < dist(best)) best = (base + period) | seqLow;
  return best;
}

std::string describeTag(std::uint64_t tag) {
  const TagFields f = decodeTag(tag);
  if (f.p2p)
    return std::string("send/recv(") + toString(f.dtype) + ", tag " + std::to_string(f.userTag) +
           ")";
  const Collective c = f.coll;
  std::string s = std::string(toString(c)) + "(" + toString(f.dtype);
  if (c == Collective::Allreduce || c == Collective::Reduce || c == Collective::ReduceScatter ||
      c == Collective::ReduceScatterv)
    s += std::string(", ") + toString(f.op);
  if (c == Collective::Reduce || c == Collective::Broadcast || c == Collective::Gather ||
      c == Collective::Scatter)
    s += ", root " + std::to_string(f.rootLow);
  return s + ") op #" + std::to_string(f.seqLow);
}

}  // namespace braid::core
