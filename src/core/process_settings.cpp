#include "core/process_settings.hpp"

#include <braid/error.hpp>

#include "common/machine.hpp"
#include "kernels/reduce.hpp"

namespace braid::core {
namespace {

std::string mib(std::size_t bytes) {
  if (bytes % (std::size_t{1} << 20) == 0) return std::to_string(bytes >> 20) + " MiB";
  return std::to_string(bytes >> 10) + " KiB";
}

}  // namespace

void applyProcessSettings(const Options& opts) {
  if (!opts.kernelIsa.empty() && opts.kernelIsa != "auto") {
    // Process-wide (kernels are stateless and every level gives bit-identical results).
    auto isa = kernels::parseIsa(opts.kernelIsa);
    if (!isa)
      throw Error(ErrorCode::InvalidArgument,
                  "Options::kernelIsa (BRAID_KERNEL_ISA) '" + opts.kernelIsa +
                      "' is not one of auto, scalar, avx2, avx512, avx512bf16");
    kernels::setActiveIsa(*isa);
  }
  if (opts.llcBytes != 0) kernels::setLastLevelCacheBytes(opts.llcBytes);
}

std::string processSettingsText() {
  std::string levels;
  for (kernels::Isa l : kernels::supportedIsas())
    levels += (levels.empty() ? "" : " ") + std::string(kernels::toString(l));
  const machine::CacheReading llc = machine::lastLevelCache();
  const std::size_t threshold = kernels::streamingThresholdBytes();
  std::string out = std::string(kernels::selectedIsa()) + " (this CPU: " + levels +
                    "), streaming from " + mib(threshold) + " (last-level cache ";
  if (threshold != llc.bytes / 2)
    out += mib(threshold * 2) + " set or measured, braid-info --tune";
  else
    out += mib(llc.bytes);
  out += "; " + llc.source;
  if (llc.reportedBytes != 0) out += " reports " + mib(llc.reportedBytes);
  return out + "), " + std::to_string(machine::usableCpus()) + " usable CPUs";
}

}  // namespace braid::core
