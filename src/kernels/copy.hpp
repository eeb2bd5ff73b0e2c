// Copies for the shared-memory collectives.
#pragma once

#include <cstddef>

namespace braid::kernels {

/// memcpy with non-temporal stores (then sfence) on x86-64, plain memcpy elsewhere: for a
/// destination that is not read again soon and, with the rest of the output, exceeds the
/// cache (the caller decides; kernels::streamingThresholdBytes() is the usual bound). The
/// buffers must not overlap.
void copyStreaming(void* dst, const void* src, std::size_t bytes) noexcept;

}  // namespace braid::kernels
