// Single copy for the direct shared-memory collectives: ranks read each other's user buffers
// with process_vm_readv (SharedMemoryGroup::readPeer) instead of copying through the staging
// areas twice. A collective goes this way for blocks of at least
// SharedMemoryGroup::singleCopyBytes(), which the shared-memory transport chose at creation
// (measured on the machine unless BRAID_SHM_CMA_* overrides it; never where the kernel refuses
// the reads: src/transport/shm/shm_single_copy.hpp); the same answer on every rank, so every
// rank takes the same path.
#pragma once

#include <cstdint>
#include <cstring>

#include "algo/algorithm.hpp"
#include "transport/transport.hpp"

namespace braid::algo {

/// One single-copy step: construction starts a step and publishes the address of the buffer
/// this rank's peers will read (nullptr: none); ready() is the barrier after which peers'
/// buffers may be read (read()); done() is the barrier after which every rank has finished
/// reading, so the buffers may change again. Every rank calls ready() and done() once each.
class PeerBuffers {
 public:
  PeerBuffers(Context& ctx, transport::SharedMemoryGroup& g, const void* mine)
      : ctx_(ctx), g_(g), half_(g.beginStep()) {
    const auto address = static_cast<std::uint64_t>(reinterpret_cast<std::uintptr_t>(mine));
    std::memcpy(g_.staging(ctx_.rank) + half_, &address, sizeof address);
  }
  void ready() { g_.barrier(ctx_.tag, ctx_.deadline); }
  /// Copies `bytes` at byte offset `at` of rank `p`'s published buffer into `dst`.
  void read(int p, std::size_t at, void* dst, std::size_t bytes) {
    std::uint64_t address = 0;
    std::memcpy(&address, g_.staging(p) + half_, sizeof address);
    g_.readPeer(p, address + at, dst, bytes);
  }
  void done() { g_.barrier(ctx_.tag, ctx_.deadline); }

 private:
  Context& ctx_;
  transport::SharedMemoryGroup& g_;
  const std::size_t half_;
};

/// Whether a direct collective moving blocks of `bytes` from peers goes single copy.
inline bool singleCopy(const transport::SharedMemoryGroup& g, std::size_t bytes) {
  return bytes > 0 && bytes >= g.singleCopyBytes();
}

}  // namespace braid::algo
