// The store address exchanged through the launcher's PMIx server (Open MPI's mpirun is one), so
// `mpirun -np 8 -H a,b ./app` needs no store address. Optional at build time: compiled with PMIx
// when CMake finds libpmix (Debian: libpmix-dev), else pmixBuilt() is false and the exchange
// throws naming what is missing. docs/architecture.md, "Bootstrap".
#pragma once

#include <chrono>
#include <string>

namespace braid::bootstrap {

/// Whether this build of braid can talk to a PMIx server.
bool pmixBuilt() noexcept;

/// Collective over every process of this process's PMIx namespace (the job): PMIx_Init, the
/// process of PMIx rank 0 publishes `mine` (its store's "host:port"; the others' `mine` is
/// ignored) with PMIx_Put + PMIx_Commit, a PMIx_Fence that collects the data (bounded by
/// `timeout`), every process reads rank 0's value with PMIx_Get, PMIx_Finalize. Returns rank 0's
/// value. `rank` is the launcher's rank of this process (OMPI_COMM_WORLD_RANK); a PMIx rank that
/// differs is an Error(InvalidArgument). Every failure is an Error naming the PMIx call and its
/// status text. Each call uses a key of its own (a per-process counter), so every communicator
/// created this way gets its own exchange.
std::string pmixExchange(const std::string& mine, int rank, std::chrono::milliseconds timeout);

}  // namespace braid::bootstrap
