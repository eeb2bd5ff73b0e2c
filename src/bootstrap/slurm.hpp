// What braid derives from the variables Slurm gives every task, so that `srun -n 8 ./app` needs
// no store address (docs/env.md, "Store address"; docs/cluster.md). Pure functions of strings:
// src/core/env.cpp reads the variables and passes them here.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

namespace braid::bootstrap {

/// Expands Slurm's compressed host-list syntax: a comma-separated list of names, each with any
/// number of bracketed range lists, e.g. "node[01-03,07],login1,rack[1-2]-n[1-2]" ->
/// node01 node02 node03 node07 login1 rack1-n1 rack1-n2 rack2-n1 rack2-n2. A range keeps the
/// zero padding of its lower bound ("[08-10]" -> 08 09 10). At most `limit` names are produced
/// (the rest is not expanded). Throws Error(InvalidArgument) naming `what` (the variable) and
/// the position for an unbalanced bracket, an empty name or range, a bound that is not a number,
/// or a range whose upper bound is below its lower one.
std::vector<std::string> expandHostList(std::string_view list, std::string_view what,
                                        std::size_t limit = std::size_t{1} << 20);

/// The store port of a Slurm step: kSlurmPortLow + (job mod 625) * 16 + (step mod 16), inside
/// [kSlurmPortLow, kSlurmPortHigh]. Steps 0..15 of one job, and jobs whose ids differ by less
/// than 625, get distinct ports (so concurrent steps and jobs sharing a node do not collide); the
/// range lies below Linux's ephemeral ports (32768-60999), so no outgoing connection holds one.
inline constexpr std::uint16_t kSlurmPortLow = 20000;
inline constexpr std::uint16_t kSlurmPortHigh = 29999;
std::uint16_t slurmStorePort(std::uint64_t jobId, std::uint64_t stepId);

}  // namespace braid::bootstrap
