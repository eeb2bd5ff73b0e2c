// A seeded stream of random operations for soak and chaos tests: every collective (v-variants
// included), send/recv, and asynchronous mixes waited in random order, with random dtypes, ops,
// counts, roots and in-place use. Operation i is a pure function of (seed, i, communicator
// size), so every rank draws the same one without talking. Every result is compared with values
// computed independently (harness/data.hpp).
#pragma once

#include <braid/braid.hpp>
#include <cstdint>
#include <string>

namespace braid::test {

class RandomOps {
 public:
  explicit RandomOps(std::uint64_t seed, std::size_t maxCount = 3000)
      : seed_(seed), maxCount_(maxCount) {}

  /// Runs operation `index` on c; every rank of c must call it with the same index. A wrong
  /// result is a gtest failure naming the seed, the index, the operation and the rank; errors
  /// of the library propagate. Returns what ran ("allreduce fp32 sum count 13 in place").
  std::string run(Comm& c, std::uint64_t index) const;

  /// A random number for (seed, index, salt) that every rank draws alike.
  std::uint64_t draw(std::uint64_t index, std::uint64_t salt) const;

  std::uint64_t seed() const { return seed_; }

 private:
  std::uint64_t seed_;
  std::size_t maxCount_;
};

/// The seed from the environment variable `name` if set (for replays), else a fresh random one.
std::uint64_t seedFromEnv(const char* name);

/// Anonymous resident memory of this process in bytes (RssAnon in /proc/self/status: heap,
/// stacks, private mappings; not the shared-memory segments).
std::size_t residentBytes();

}  // namespace braid::test
