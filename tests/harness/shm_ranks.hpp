// Shared-memory transport tests (tests/transport/shm_test.cpp, shm_setup_test.cpp): ranks as
// threads of this process, each with its own transport (its own mapping of the segment), meeting
// through a MemoryStore; the options of the two data paths; the named segments this process left
// in /dev/shm.
#pragma once

#include <dirent.h>
#include <gtest/gtest.h>
#include <unistd.h>

#include <chrono>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <thread>
#include <vector>

#include "harness/errors.hpp"
#include "store/memory_store.hpp"
#include "transport/shm/shm_transport.hpp"

namespace braid::test {

enum class ShmPath { Ring, SingleCopy, Default };

/// Ring: everything through the ring. SingleCopy: every non-empty message single-copy (a send
/// then completes only once the receiver has read it). Default: the default of a host of 2 CPUs
/// (set, not the machine's): with 3 or more ranks, single-copy from 64 KiB; with 2, the ring.
inline transport::ShmOptions shmOptionsFor(ShmPath path) {
  transport::ShmOptions o;
  o.setupTimeout = std::chrono::seconds(10);
  o.hostCpus = 2;
  if (path == ShmPath::Ring) o.cmaThresholdBytes = SIZE_MAX;
  if (path == ShmPath::SingleCopy) o.cmaThresholdBytes = 0;
  return o;
}

inline std::vector<int> allRanks(int size) {
  std::vector<int> r(static_cast<std::size_t>(size));
  for (int i = 0; i < size; ++i) r[static_cast<std::size_t>(i)] = i;
  return r;
}

/// Runs body(rank, transport) on `size` threads, each with its own transport over all ranks.
inline void runShmRanks(int size, const std::function<void(int, transport::ShmTransport&)>& body,
                        const transport::ShmOptions& options = shmOptionsFor(ShmPath::Default)) {
  MemoryStore store;
  const std::vector<int> local = allRanks(size);
  std::vector<std::string> errors(static_cast<std::size_t>(size));
  std::vector<std::thread> threads;
  for (int r = 0; r < size; ++r) {
    threads.emplace_back([&, r] {
      errors[static_cast<std::size_t>(r)] = errorOf([&] {
        auto t = transport::createShmTransport(store, r, size, local, options);
        ASSERT_EQ(t->rank(), r);
        ASSERT_EQ(t->size(), size);
        body(r, *t);
      });
      if (!errors[static_cast<std::size_t>(r)].empty())
        std::fprintf(stderr, "rank %d: %s\n", r, errors[static_cast<std::size_t>(r)].c_str());
    });
  }
  for (auto& t : threads) t.join();
  for (int r = 0; r < size; ++r)
    EXPECT_EQ(errors[static_cast<std::size_t>(r)], "") << "rank " << r << " of " << size;
}

/// Named segments in /dev/shm made by this process (a name carries its creator's pid:
/// "braid-shm-<pid>-<nonce>"), so segments of tests running in parallel do not count.
inline std::vector<std::string> braidShmEntries() {
  std::vector<std::string> names;
  DIR* d = ::opendir("/dev/shm");
  if (d == nullptr) return names;
  const std::string ours = "braid-shm-" + std::to_string(::getpid()) + "-";
  while (const dirent* e = ::readdir(d)) {
    const std::string n = e->d_name;
    if (n.rfind(ours, 0) == 0) names.push_back(n);
  }
  ::closedir(d);
  return names;
}

}  // namespace braid::test
