#include "topology/traffic_transport.hpp"

#include <braid/error.hpp>

namespace braid::topology {

std::uint64_t Traffic::totalSent() const noexcept {
  std::uint64_t t = 0;
  for (auto b : bytesSent) t += b;
  return t;
}

std::uint64_t Traffic::totalMessagesSent() const noexcept {
  std::uint64_t t = 0;
  for (auto m : messagesSent) t += m;
  return t;
}

TrafficCountingTransport::TrafficCountingTransport(transport::Transport& inner,
                                                   const Topology& topo)
    : inner_(inner), topo_(topo) {
  if (topo.size() != inner.size() || inner.rank() < 0 || inner.rank() >= topo.size())
    throw Error(ErrorCode::InvalidArgument,
                "TrafficCountingTransport: the topology has " + std::to_string(topo.size()) +
                    " ranks but the transport is rank " + std::to_string(inner.rank()) + " of " +
                    std::to_string(inner.size()));
}

void TrafficCountingTransport::postSend(int peer, const void* data, std::size_t bytes,
                                        std::uint64_t tag, transport::Request& req) {
  inner_.postSend(peer, data, bytes, tag, req);
  const auto c = static_cast<std::size_t>(topo_.link(inner_.rank(), peer));
  traffic_.bytesSent[c] += bytes;
  ++traffic_.messagesSent[c];
}

void TrafficCountingTransport::postRecv(int peer, void* data, std::size_t bytes, std::uint64_t tag,
                                        transport::Request& req) {
  inner_.postRecv(peer, data, bytes, tag, req);
  const auto c = static_cast<std::size_t>(topo_.link(inner_.rank(), peer));
  traffic_.bytesReceived[c] += bytes;
  ++traffic_.messagesReceived[c];
}

}  // namespace braid::topology
