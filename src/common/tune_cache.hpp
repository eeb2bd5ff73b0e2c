// The machine profile's file: decisions braid measured on this machine (the streaming-store
// threshold, the effective cache size, the shared-memory single-copy threshold per rank count),
// kept so that the next process on the same machine reads them instead of measuring again
// (BRAID_TUNE_CACHE, docs/env.md). The file names the machine it was measured on (CPU model,
// instruction-set level, CPU count); a file of another machine, an unreadable or a corrupt one
// is measured over. Writers replace it whole (a temporary file renamed over it), so ranks of
// one host that write at once never leave a torn file; measuring is serialised by an advisory
// lock next to it (TuneCacheLock), so that ranks started together measure once.
//
// Format (text, one item a line; '#' lines are comments):
//   braid-tune-cache 1
//   cpu <model name, the rest of the line>
//   isa <level>
//   cpus <count>
//   entry <name> <value: decimal bytes or "never"> <UTC date YYYY-MM-DDTHH:MM:SSZ> <detail...>
#pragma once

#include <cstdint>
#include <map>
#include <string>

#include "common/fd.hpp"

namespace braid::machine {

/// What a cached measurement is valid for.
struct TuneKey {
  std::string cpuModel;  // /proc/cpuinfo's "model name" ("unknown" when absent)
  std::string isa;       // the best kernel level the CPU has ("avx512", "avx2", ...)
  int cpus = 0;          // online CPUs
  // The CPU's identity beneath its name, from the first CPU of /proc/cpuinfo: x86's vendor,
  // family, model and stepping ("AuthenticAMD family 26 model 2 stepping 1"), arm64's
  // implementer, variant, part and revision; "" where it shows none. Virtual machines name
  // different CPUs alike ("AMD EPYC" for Zen 1, Zen 4 and Zen 5 guests), and a home directory
  // shared by the nodes of a cluster carries one file to all of them.
  std::string cpuId;
  friend bool operator==(const TuneKey&, const TuneKey&) = default;
};

/// This machine's key; `isa` comes from the caller (the kernels know the levels).
/// `cpuinfo` replaces /proc/cpuinfo (tests).
TuneKey thisMachine(std::string isa, const std::string& cpuinfo = "/proc/cpuinfo");

inline constexpr std::uint64_t kTuneNever = UINT64_MAX;

struct TuneEntry {
  std::uint64_t value = 0;  // bytes; kTuneNever for "never"
  std::string date;         // when it was measured (UTC)
  std::string detail;       // how (figures, duration), one line
};

/// The file to use, from BRAID_TUNE_CACHE's value (`setting`): "off" -> "" (no file); a path ->
/// that path; unset or empty -> $XDG_CACHE_HOME/braid/machine.tune, else
/// $HOME/.cache/braid/machine.tune, else "" (nowhere to keep it).
std::string tuneCachePath(const std::string& setting);

struct TuneCache {
  enum class State { Off, Missing, Loaded, OtherMachine, Corrupt };
  State state = State::Off;
  std::string path;
  std::string problem;  // Corrupt / OtherMachine: what was wrong, for the warning
  TuneKey key;          // the file's key (Loaded, OtherMachine)
  std::map<std::string, TuneEntry> entries;  // Loaded only
  const TuneEntry* find(const std::string& name) const {
    auto it = entries.find(name);
    return it == entries.end() ? nullptr : &it->second;
  }
};

/// Reads `path` ("" -> State::Off) for machine `key`; never throws.
TuneCache readTuneCache(const std::string& path, const TuneKey& key);

/// Adds or replaces `entries` in the file for `key` (a file of another machine, or a corrupt
/// one, is started afresh), creating the directory; written to a temporary file in the same
/// directory and renamed over `path`. Returns "" on success, else what failed (the caller warns;
/// a profile that cannot be kept is measured again next time, nothing else).
std::string writeTuneCache(const std::string& path, const TuneKey& key,
                           const std::map<std::string, TuneEntry>& entries);

/// The current UTC time as the file writes dates.
std::string tuneDateNow();

/// An exclusive advisory lock (flock) on `path` + ".lock", held for the object's lifetime: one
/// process of a host measures while the others wait, then read what it wrote. Waits at most
/// `timeoutMs`; a lock that cannot be had (read-only directory, timeout) leaves locked() false and
/// the caller measures anyway.
class TuneCacheLock {
 public:
  TuneCacheLock(const std::string& path, int timeoutMs);
  ~TuneCacheLock();
  TuneCacheLock(const TuneCacheLock&) = delete;
  TuneCacheLock& operator=(const TuneCacheLock&) = delete;
  bool locked() const noexcept { return static_cast<bool>(fd_); }

 private:
  Fd fd_;
};

}  // namespace braid::machine
