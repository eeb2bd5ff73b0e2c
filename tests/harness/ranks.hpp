// Run N ranks as threads (one process, MemoryStore) or as forked processes (TCP store), with a
// deadline: a hang fails the test naming the ranks that did not finish.
#pragma once

#include <braid/braid.hpp>
#include <chrono>
#include <functional>

namespace braid::test {

using RankFn = std::function<void(Comm&)>;

/// Options for tests: a tiny chunk and scratch so pipelining paths run, short timeouts, and a
/// host of 2 CPUs as the shared-memory transport assumes it (shmHostCpus).
Options testOptions(std::string algo = "");

/// Runs fn on `n` ranks as threads. Every exception is reported as a gtest failure naming the
/// rank; a rank not done within `deadline` aborts the test binary with a message.
void runThreads(int n, const Options& opts, const RankFn& fn,
                std::chrono::seconds deadline = std::chrono::seconds(60));

/// Runs fn on `n` ranks as forked processes joined through a TCP store on loopback. A rank that
/// throws exits non-zero; the call fails the test naming it. Ranks still running at the
/// deadline are killed and reported.
void runProcesses(int n, const Options& opts, const RankFn& fn,
                  std::chrono::seconds deadline = std::chrono::seconds(60));

}  // namespace braid::test
