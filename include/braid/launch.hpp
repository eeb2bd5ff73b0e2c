// Serving the store of a launch: what Comm::create(launch, options) does first, for tools that
// open the store themselves (braid-check). Not included by braid.hpp.
#pragma once

#include <braid/options.hpp>
#include <braid/store.hpp>
#include <memory>

namespace braid {

/// Rank 0's store server for `launch` (nullptr on the other ranks and with storeExternal);
/// afterwards `launch.storeHost`/`storePort` are where every rank reaches it. Under Open MPI
/// (storeSource "pmix") rank 0 binds a free port and the address is exchanged through the
/// launcher's PMIx server here: a collective over the job, every rank must call it. A port rank 0
/// cannot bind is an Error naming the port and, under Slurm, how it was derived.
std::shared_ptr<TcpStoreServer> serveLaunchStore(LaunchInfo& launch, const Options& options);

/// For a store whose address a launcher gave (launch.jobId set): rank 0 records the job in
/// `store`, every other rank checks it, so the store of another job (a derived port it holds)
/// is an Error(InvalidArgument) naming both jobs, never joined. Does nothing without a jobId.
void checkLaunchStoreJob(Store& store, const LaunchInfo& launch, const Options& options);

}  // namespace braid
