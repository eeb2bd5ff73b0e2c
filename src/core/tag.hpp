// The 64-bit tag every message of an operation carries: a fingerprint of the operation, so the
// receiver detects ranks that called different collectives (Error(Mismatch)) instead of hanging.
//   bits 0-4 collective, 5-7 dtype, 8-10 op, 11-26 root (low 16 bits), 27-58 sequence number of
//   the collective on its communicator (low 32 bits), 63 point-to-point (then bits 11-42 hold the
//   user's tag and no sequence number: point-to-point messages pair by order, not by count).
#pragma once

#include <braid/types.hpp>

#include <cstdint>
#include <string>

namespace braid::core {

std::uint64_t collectiveTag(Collective c, DataType t, ReduceOp op, int root, std::uint64_t seq);
std::uint64_t p2pTag(DataType t, std::uint32_t userTag);
/// "allreduce(fp32, sum) op #57" / "send/recv(fp32, tag 3)".
std::string describeTag(std::uint64_t tag);

}  // namespace braid::core
