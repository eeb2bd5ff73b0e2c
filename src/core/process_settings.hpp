// The parts of Options that are process-wide rather than per communicator: the reduction
// kernels' instruction set and the cache size the streaming threshold derives from. Every
// communicator's creation applies them; so does the test harness's main, so that a test
// binary run with BRAID_KERNEL_ISA or BRAID_LLC_SIZE behaves as the machine it describes even
// where no communicator is created (kernels and algorithms driven directly).
#pragma once

#include <braid/options.hpp>
#include <string>

namespace braid::core {

/// Applies opts.kernelIsa (when not empty or "auto") and opts.llcBytes (when non-zero). Throws
/// Error(InvalidArgument) naming Options::kernelIsa when the level is unknown or this CPU
/// lacks it. Settings left at their defaults leave the process's current choice alone.
void applyProcessSettings(const Options& opts);

/// One line describing what this process's kernels use and why: "avx2 (this CPU: scalar avx2
/// avx512 avx512bf16), streaming from 16 MiB (last-level cache 32 MiB; sysfs L3 reports
/// 32 MiB), 2 usable CPUs".
std::string processSettingsText();

}  // namespace braid::core
