#include "core/machine_profile.hpp"

#include <cstdio>
#include <mutex>

#include "common/machine.hpp"
#include "kernels/copy_profile.hpp"
#include "kernels/reduce.hpp"

namespace braid::core {
namespace {

constexpr const char* kStreaming = "streaming_threshold";
constexpr const char* kCache = "effective_cache";
constexpr int kLockWaitMs = 5000;  // another process measuring takes tens of milliseconds

std::string bytesText(std::uint64_t b) {
  if (b == machine::kTuneNever || b == SIZE_MAX) return "never";
  if (b >= (1u << 20) && b % (1u << 20) == 0) return std::to_string(b >> 20) + " MiB";
  if (b >= 1024 && b % 1024 == 0) return std::to_string(b >> 10) + " KiB";
  return std::to_string(b) + " B";
}

// Both process-wide entries, when the file has them for this machine.
bool fromFile(const machine::TuneCache& c, MachineProfile& p) {
  const machine::TuneEntry* s = c.find(kStreaming);
  const machine::TuneEntry* k = c.find(kCache);
  if (s == nullptr || k == nullptr || s->value == 0 || s->value == machine::kTuneNever ||
      k->value == 0 || k->value == machine::kTuneNever)
    return false;
  p.streamingBytes = static_cast<std::size_t>(s->value);
  p.cacheBytes = static_cast<std::size_t>(k->value);
  const std::string source = "cached in " + c.path + " (measured " + s->date + ")";
  p.decisions.push_back({"streaming threshold", bytesText(s->value), source, s->detail});
  p.decisions.push_back({"effective cache", bytesText(k->value), source, k->detail});
  return true;
}

void noteFileProblem(const machine::TuneCache& c, MachineProfile& p) {
  if (c.state == machine::TuneCache::State::Corrupt)
    p.warnings.push_back("BRAID_TUNE_CACHE " + c.path + " is corrupt (" + c.problem +
                         "): measured again and rewritten");
}

}  // namespace

machine::TuneKey machineKey() {
  static const machine::TuneKey key = [] {
    const std::vector<kernels::Isa> levels = kernels::supportedIsas();
    return machine::thisMachine(levels.empty() ? "scalar" : kernels::toString(levels.back()));
  }();
  return key;
}

std::string tuneCachePath(const Options& opts) {
  return machine::tuneCachePath(opts.tuneCache);
}

MachineProfile resolveMachineProfile(const Options& opts) {
  MachineProfile p;
  const machine::CacheReading llc = machine::lastLevelCache();
  if (opts.llcBytes != 0) {
    const std::string source = "BRAID_LLC_SIZE=" + bytesText(opts.llcBytes);
    p.decisions.push_back(
        {"streaming threshold", bytesText(opts.llcBytes / 2), source, "half the cache set"});
    p.decisions.push_back({"effective cache", bytesText(opts.llcBytes), source, ""});
    return p;
  }
  const std::string path = tuneCachePath(opts);
  const machine::TuneKey key = machineKey();
  machine::TuneCache c = machine::readTuneCache(path, key);
  if (fromFile(c, p)) return p;
  // Measure, one process of the host at a time: the others then find its result.
  machine::TuneCacheLock lock(path, kLockWaitMs);
  if (lock.locked()) {
    c = machine::readTuneCache(path, key);
    if (fromFile(c, p)) return p;
  }
  noteFileProblem(c, p);
  double ms = 0;
  const machine::CpuShare share;
  const std::vector<kernels::CopyTiming> timings = kernels::measureCopies(&ms);
  const std::uint64_t offCpu = share.offCpuPermille();
  const kernels::CopyDecision d = kernels::decideCopies(timings, llc.bytes, llc.bytes / 2);
  p.streamingBytes = d.streamingBytes;
  p.cacheBytes = d.cacheBytes;
  char took[48];
  std::snprintf(took, sizeof took, "measured now in %.1f ms", ms);
  const bool busy = offCpu > static_cast<std::uint64_t>(opts.tuneMaxBusyPercent) * 10;
  const std::string busyWhy = "the machine was busy (this thread was off its CPU for " +
                              machine::permilleText(offCpu) + " of it, BRAID_TUNE_MAX_BUSY " +
                              std::to_string(opts.tuneMaxBusyPercent) + " %)";
  // Implausible figures (decideCopies): the OS's report applies and nothing is kept. A busy
  // machine is the usual cause; the source says so when it was.
  std::string source = d.measured ? std::string(took)
                                  : "default: the OS's " + llc.source + " report, halved (" +
                                        std::string(took) + " gave implausible figures" +
                                        (busy ? "; " + busyWhy : std::string()) + ")";
  if (c.state == machine::TuneCache::State::OtherMachine)
    source += " (the file was another machine's: " + c.problem + ")";
  const std::string cacheWhy = "2 x the streaming threshold, capped by the OS's " + llc.source +
                               " (" + bytesText(llc.bytes) + " bounded)";
  if (!path.empty() && d.measured && busy) {
    // Timed while other work held the CPU: right for this process at best, not for the machine.
    source += ", not kept: " + busyWhy + "; measured again by the next process";
  } else if (!path.empty() && d.measured) {
    const std::string date = machine::tuneDateNow();
    const std::string failed = machine::writeTuneCache(
        path, key,
        {{kStreaming, {d.streamingBytes, date, d.why}}, {kCache, {d.cacheBytes, date, cacheWhy}}});
    if (failed.empty()) {
      source += ", kept in " + path;
    } else {
      source += ", not kept: " + failed;
      // Only a file the user named is worth a warning; the default location may simply be
      // read-only (a container's home), which costs a measurement per process, nothing else.
      if (!opts.tuneCache.empty()) p.warnings.push_back("BRAID_TUNE_CACHE " + path + ": " + failed);
    }
  } else if (path.empty()) {
    source += ", not kept (BRAID_TUNE_CACHE=off)";
  }
  p.decisions.push_back({"streaming threshold", bytesText(d.streamingBytes), source, d.why});
  p.decisions.push_back({"effective cache", bytesText(d.cacheBytes), source, cacheWhy});
  return p;
}

const MachineProfile& applyMachineProfile(const Options& opts) {
  static std::once_flag once;
  static MachineProfile profile;
  std::call_once(once, [&] {
    profile = resolveMachineProfile(opts);
    if (opts.llcBytes == 0 && profile.streamingBytes != 0)
      kernels::setMeasuredStreamingThreshold(profile.streamingBytes);
  });
  return profile;
}

std::string tuneReport(const Options& opts) {
  const MachineProfile p = resolveMachineProfile(opts);
  const machine::TuneKey key = machineKey();
  const std::string path = tuneCachePath(opts);
  std::string out = "machine: " + key.cpuModel + (key.cpuId.empty() ? "" : " (" + key.cpuId + ")") +
                    ", " + key.isa + ", " + std::to_string(key.cpus) + " CPUs\nprofile file: " +
                    (path.empty() ? std::string("none (BRAID_TUNE_CACHE=off)") : path) + "\n";
  auto line = [&](const TuneDecision& d) {
    out += "  " + d.name + ": " + d.value + "\n    from: " + d.source + "\n";
    if (!d.detail.empty()) out += "    why:  " + d.detail + "\n";
  };
  for (const TuneDecision& d : p.decisions) line(d);
  // A decision the shared-memory transport measures at creation and keeps per rank count: the
  // file's entries named `prefix` + "<N>ranks", or where it will come from.
  auto perRankCount = [&](const std::string& what, const std::string& prefix,
                          const std::string& crowded) {
    const machine::TuneCache c = machine::readTuneCache(path, key);
    bool any = false;
    for (const auto& [name, e] : c.entries) {
      if (name.rfind(prefix, 0) != 0) continue;
      any = true;
      line({what + ", " + name.substr(prefix.size()), bytesText(e.value),
            "cached in " + path + " (measured " + e.date + ")", e.detail});
    }
    if (!any)
      line({what, "at creation",
            "measured when a communicator first runs with a CPU per rank on one host, then "
            "cached per rank count (" +
                crowded + ")",
            ""});
  };
  // The message algorithms' chunk is a constant (docs/plan.md, "Decisions from measurement");
  // the direct shared-memory collectives' is measured per rank count at creation.
  const bool chunkSet = opts.chunkBytes != Options{}.chunkBytes;
  line({"chunk size (message algorithms)", bytesText(opts.chunkBytes),
        chunkSet ? "BRAID_CHUNK_SIZE / Options::chunkBytes" : "default (a constant)", ""});
  const std::string shmChunk = "shm chunk (direct collectives, one host)";
  if (opts.shmChunkBytes != 0) {
    line({shmChunk, bytesText(opts.shmChunkBytes), "BRAID_SHM_CHUNK_SIZE", ""});
  } else if (chunkSet) {
    line({shmChunk, bytesText(opts.chunkBytes), "BRAID_CHUNK_SIZE / Options::chunkBytes", ""});
  } else {
    perRankCount(shmChunk, "shm_chunk.", "ranks outnumbering CPUs: " + bytesText(opts.chunkBytes));
  }
  // The direct collectives' streaming stores: measured per rank count like the chunk, since the
  // outputs of a host's ranks share its cache (transport/shm/shm_streaming.hpp).
  const std::string shmStreaming = "shm streaming stores (direct collectives' outputs together)";
  if (opts.llcBytes != 0) {
    line({shmStreaming, bytesText(opts.llcBytes / 2), "BRAID_LLC_SIZE (half of it)", ""});
  } else {
    perRankCount(shmStreaming, "shm_streaming.",
                 "ranks outnumbering CPUs: the streaming threshold above");
  }
  // Single copy: decided per communicator at creation, from the file when it has an entry for
  // the group's rank count.
  const std::string single = "shm single-copy threshold (one host)";
  if (opts.shmCmaDisable) {
    line({single, "never", "BRAID_SHM_CMA_DISABLE", ""});
  } else if (opts.shmCmaThresholdBytes) {
    line({single, bytesText(*opts.shmCmaThresholdBytes), "BRAID_SHM_CMA_THRESHOLD", ""});
  } else {
    perRankCount(single, "shm_single_copy.", "ranks outnumbering CPUs: 64 KiB");
  }
  for (const std::string& w : p.warnings) out += "warning: " + w + "\n";
  return out;
}

}  // namespace braid::core
