// The machine profile: the decisions braid derives from measuring this machine rather than from
// constants, where each comes from, and the file that keeps them between runs
// (common/tune_cache.hpp, BRAID_TUNE_CACHE). Per decision, in order: the BRAID_* override; the
// file's entry for this machine (CPU model, instruction-set level, CPU count); a measurement
// now, written to the file; a default where nothing can be measured. `braid-info --tune` prints
// the result (docs/tools.md); docs/architecture.md, "Decisions from measurement", lists them.
#pragma once

#include <braid/options.hpp>
#include <cstddef>
#include <string>
#include <vector>

#include "common/tune_cache.hpp"

namespace braid::core {

struct TuneDecision {
  std::string name;    // "streaming threshold"
  std::string value;   // "2 MiB"
  std::string source;  // "BRAID_LLC_SIZE=8M", "cached in FILE (measured DATE)", "measured now
                       // in 31.2 ms, kept in FILE", "default"
  std::string detail;  // the figures behind it, or ""
};

struct MachineProfile {
  std::size_t streamingBytes = 0;  // 0: not decided here (BRAID_LLC_SIZE applies)
  std::size_t cacheBytes = 0;
  std::vector<TuneDecision> decisions;
  std::vector<std::string> warnings;  // a corrupt file; a file BRAID_TUNE_CACHE names that
                                      // could not be written
};

/// This machine's key (the best kernel level this CPU has, not BRAID_KERNEL_ISA's choice).
machine::TuneKey machineKey();

/// The file opts.tuneCache names ("" when "off" or when there is nowhere to keep it).
std::string tuneCachePath(const Options& opts);

/// Resolves the process-wide decisions (streaming threshold, effective cache) for `opts`:
/// BRAID_LLC_SIZE wins; else the file's entries; else measured now (kernels::measureCopies,
/// tens of milliseconds, serialised between processes by the file's lock) and written to the
/// file. Does not apply anything.
MachineProfile resolveMachineProfile(const Options& opts);

/// Once per process (the first communicator's options): resolves the profile and, unless
/// BRAID_LLC_SIZE is set, makes its streaming threshold the kernels'
/// (setMeasuredStreamingThreshold). Returns the profile resolved then (later calls return the same
/// one).
const MachineProfile& applyMachineProfile(const Options& opts);

/// `braid-info --tune`: every decision, its value and where it came from: the process-wide ones
/// (resolved as a communicator would, measuring and writing the file when needed), the chunk
/// size, and the shared-memory single-copy thresholds the file holds per rank count.
std::string tuneReport(const Options& opts);

}  // namespace braid::core
