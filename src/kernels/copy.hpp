// Copies for the shared-memory collectives.
#pragma once

#include <cstddef>

namespace braid::kernels {

/// memcpy with non-temporal stores (then sfence) on x86-64, plain memcpy elsewhere: for a
/// destination that is not read again soon and, with the rest of the output, exceeds the
/// cache (the caller decides; kernels::streamingThresholdBytes() is the usual bound). The
/// buffers must not overlap.
void copyStreaming(void* dst, const void* src, std::size_t bytes) noexcept;

/// memcpy with ordinary stores in copyStreaming's loop shape (16-byte loads and stores) on
/// x86-64, plain memcpy elsewhere: memcpy itself switches strategy by size (non-temporal stores
/// above a size of its own, `rep movsb` in a band on some CPUs), which would hide what the copy
/// profile and bench/cross_core_copy.cpp measure. The buffers must not overlap.
void copyCached(void* dst, const void* src, std::size_t bytes) noexcept;

}  // namespace braid::kernels
