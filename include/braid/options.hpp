// braid public API: communicator configuration. Every environment variable braid reads is read
// in one place (Options::fromEnv / LaunchInfo::fromEnv) and listed by `braid-info --env`.
#pragma once

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

namespace braid {

struct Options {
  /// Pipelining unit: large messages are cut into chunks of this many bytes (BRAID_CHUNK_SIZE).
  std::size_t chunkBytes = 256 * 1024;
  /// Upper bound of the scratch memory one communicator allocates, once (BRAID_BUFFSIZE).
  std::size_t bufferBytes = 4 * 1024 * 1024;
  /// Messages up to this size use latency-optimised algorithms (BRAID_SMALL_MSG_SIZE).
  std::size_t smallMessageBytes = 64 * 1024;
  /// Algorithm rules, e.g. "ring" or "allreduce:ring;allgather:ring" (BRAID_ALGO).
  std::string algo;
  /// Bound on connection setup, store included (BRAID_CONNECT_TIMEOUT, milliseconds).
  std::chrono::milliseconds connectTimeout{60000};
  /// Default bound on one operation (BRAID_EXEC_TIMEOUT, milliseconds).
  std::chrono::milliseconds execTimeout{300000};
  /// Spin this long before sleeping while waiting (BRAID_SPIN_US, microseconds).
  std::chrono::microseconds spin{50};
  /// Address to listen on for peers; empty: the address this host uses to reach the store
  /// (BRAID_LISTEN_ADDR).
  std::string listenAddress;
  /// Log level: 0 none, 1 WARN, 2 INFO, 3 TRACE (BRAID_DEBUG=WARN|INFO|TRACE).
  int logLevel = 1;

  /// Defaults overridden by the BRAID_* environment variables. Throws Error(InvalidArgument)
  /// naming the variable when a value does not parse.
  static Options fromEnv();
};

/// Who this process is in the job, from a launcher's environment. Precedence (first set wins):
/// BRAID_RANK/BRAID_WORLD_SIZE/BRAID_LOCAL_RANK, then torchrun's RANK/WORLD_SIZE/LOCAL_RANK,
/// then Open MPI's OMPI_COMM_WORLD_*, then Slurm's SLURM_PROCID/SLURM_NTASKS/SLURM_LOCALID.
/// Store address: BRAID_STORE (host:port), else MASTER_ADDR:MASTER_PORT.
struct LaunchInfo {
  int rank = 0;
  int size = 1;
  int localRank = 0;
  std::string storeHost = "127.0.0.1";
  std::uint16_t storePort = 0;
  /// When false, rank 0 serves the store at storeHost:storePort (BRAID_STORE_EXTERNAL=1 sets true).
  bool storeExternal = false;
  /// Which convention supplied rank and size: "braid", "torchrun", "openmpi", "slurm", "default".
  std::string source = "default";

  static LaunchInfo fromEnv();
};

/// One documented environment variable.
struct EnvVarDoc {
  const char* name;
  const char* defaultValue;
  const char* meaning;
};
/// Every environment variable braid reads, with its default and meaning.
const std::vector<EnvVarDoc>& environmentVariables();

}  // namespace braid
