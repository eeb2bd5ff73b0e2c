#include "transport/factory.hpp"

#include <braid/error.hpp>
#include <vector>

#include "store/all_gather.hpp"
#include "transport/host_identity.hpp"
#include "transport/routed_transport.hpp"
#include "transport/shm/shm_transport.hpp"

namespace braid::transport {

namespace {}  // namespace

std::unique_ptr<RoutedTransport> createTransport(Store& store, int rank, int size,
                                                 const TransportOptions& options) {
  if (size < 1 || rank < 0 || rank >= size)
    throw Error(ErrorCode::InvalidArgument, "createTransport: rank " + std::to_string(rank) +
                                                " is outside world size " + std::to_string(size));
  if (size == 1)
    return std::make_unique<RoutedTransport>(rank, size, std::vector<RoutedTransport::Leg>{});
  std::string mine = options.hostIdentity.empty() ? hostIdentity() : options.hostIdentity;
  if (options.shmDisable) mine = "shm-disabled/rank-" + std::to_string(rank) + "/" + mine;
  const std::vector<std::string> hosts =
      allGatherStrings(store, "host", rank, size, mine, options.tcp.connectTimeout, "their host");
  std::vector<int> local;
  for (int r = 0; r < size; ++r)
    if (hosts[static_cast<std::size_t>(r)] == mine) local.push_back(r);

  std::vector<RoutedTransport::Leg> legs;
  if (local.size() > 1) {
    ShmOptions shmOptions = options.shm;
    shmOptions.setupTimeout = options.tcp.connectTimeout;
    shmOptions.spin = options.tcp.spin;
    RoutedTransport::Leg leg;
    auto shm = createShmTransport(store, rank, size, local, shmOptions);
    leg.paths.resize(static_cast<std::size_t>(size));
    for (int p : local)
      if (p != rank) leg.paths[static_cast<std::size_t>(p)] = shm->pathTo(p);
    leg.transport = std::move(shm);
    legs.push_back(std::move(leg));
  }
  // Every rank sees the same grouping, so either all ranks build TCP or none does.
  if (local.size() < static_cast<std::size_t>(size)) {
    RoutedTransport::Leg leg;
    leg.transport = createTcpTransport(store, rank, size, options.tcp);
    leg.paths.assign(static_cast<std::size_t>(size), "tcp");
    leg.paths[static_cast<std::size_t>(rank)].clear();
    legs.push_back(std::move(leg));
  }
  return std::make_unique<RoutedTransport>(rank, size, std::move(legs));
}

std::string shmWakeMode(const Transport& t) {
  const auto* routed = dynamic_cast<const RoutedTransport*>(&t);
  const ShmTransport* shm =
      routed != nullptr ? routed->sharedMemoryLeg() : dynamic_cast<const ShmTransport*>(&t);
  if (shm == nullptr) return "";
  return shm->lightWake() ? "light (membarrier)" : "fenced";
}

std::string pathTo(const Transport& t, int peer) {
  const auto* routed = dynamic_cast<const RoutedTransport*>(&t);
  return routed != nullptr ? routed->pathTo(peer) : "";
}

}  // namespace braid::transport
