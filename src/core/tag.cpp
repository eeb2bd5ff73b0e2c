#include "core/tag.hpp"

#include "transport/transport.hpp"

namespace braid::core {

std::uint64_t collectiveTag(Collective c, DataType t, ReduceOp op, int root, std::uint64_t seq) {
  return (static_cast<std::uint64_t>(c) & 0x1f) | ((static_cast<std::uint64_t>(t) & 7) << 5) |
         ((static_cast<std::uint64_t>(op) & 7) << 8) |
         ((static_cast<std::uint64_t>(root) & 0xffff) << 11) | ((seq & 0xffffffffull) << 27);
}

std::uint64_t p2pTag(DataType t, std::uint32_t userTag) {
  return transport::kP2PTagBit | static_cast<std::uint64_t>(Collective::Send) |
         ((static_cast<std::uint64_t>(t) & 7) << 5) | (static_cast<std::uint64_t>(userTag) << 11);
}

std::string describeTag(std::uint64_t tag) {
  auto c = static_cast<Collective>(tag & 0x1f);
  auto t = static_cast<DataType>((tag >> 5) & 7);
  if (tag & transport::kP2PTagBit)
    return std::string("send/recv(") + toString(t) + ", tag " +
           std::to_string((tag >> 11) & 0xffffffffull) + ")";
  auto op = static_cast<ReduceOp>((tag >> 8) & 7);
  std::string s = std::string(toString(c)) + "(" + toString(t);
  if (c == Collective::Allreduce || c == Collective::Reduce || c == Collective::ReduceScatter ||
      c == Collective::ReduceScatterv)
    s += std::string(", ") + toString(op);
  if (c == Collective::Reduce || c == Collective::Broadcast || c == Collective::Gather ||
      c == Collective::Scatter)
    s += ", root " + std::to_string((tag >> 11) & 0xffff);
  return s + ") op #" + std::to_string((tag >> 27) & 0xffffffffull);
}

}  // namespace braid::core
