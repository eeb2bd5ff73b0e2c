// The transport a communicator uses: shared memory between ranks of one host, TCP between hosts,
// behind one RoutedTransport.
#pragma once

#include <braid/store.hpp>
#include <memory>
#include <string>

#include "transport/routed_transport.hpp"
#include "transport/shm/shm_transport.hpp"
#include "transport/tcp/tcp_transport.hpp"

namespace braid::transport {

struct TransportOptions {
  /// The TCP transport; its connectTimeout bounds every transport's setup and its spin is every
  /// transport's spin (shm.setupTimeout and shm.spin are overwritten with them).
  TcpOptions tcp;
  /// Use TCP even between ranks of one host (BRAID_SHM_DISABLE=1).
  bool shmDisable = false;
  /// The shared-memory transport (BRAID_SHM_*).
  ShmOptions shm;
  /// Tests: this rank's host identity instead of hostIdentity(), to emulate several hosts.
  std::string hostIdentity;
};

/// Collective over all `size` ranks. Publishes this rank's host identity under "host/<rank>"
/// (a rank with shmDisable publishes one of its own, so it shares memory with nobody), reads
/// everyone's, builds the shm transport among the ranks of this rank's host and, unless that is
/// the whole world, the TCP transport among all ranks (used for the other hosts only). Always
/// returns a RoutedTransport, so pathTo() answers for every communicator. A rank that never
/// publishes is named in an Error(Timeout) after tcp.connectTimeout.
std::unique_ptr<RoutedTransport> createTransport(Store& store, int rank, int size,
                                                 const TransportOptions& options);

/// The path to `peer` when `t` is a RoutedTransport (see RoutedTransport::pathTo), else "".
std::string pathTo(const Transport& t, int peer);
/// How this rank's shared-memory group wakes sleepers: "light (membarrier)", "fenced", or ""
/// when `t` has no shared-memory leg (docs/env.md, BRAID_SHM_LIGHT_WAKE).
std::string shmWakeMode(const Transport& t);

}  // namespace braid::transport
