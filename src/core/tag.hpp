// The 64-bit tag every message of an operation carries: a fingerprint of the operation, so the
// receiver detects ranks that called different collectives (Error(Mismatch)) instead of hanging
// or corrupting memory. Layout of a collective's tag:
//   bits  0-4   collective          bits  5-9   dtype (32 values; kNumDataTypes = 17 in use)
//   bits 10-13  reduction op (16 values; kNumReduceOps = 9 in use)
//   bits 14-25  root (low 12 bits)  bits 26-42  sequence number of the collective on its
//                                               communicator (low 17 bits)
//   bits 43-62  fingerprint: the count key's low 20 bits XOR 20 bits of a hash of (the rest of
//               the count key, communicator id, full root, full sequence number), so a different
//               count or communicator changes the tag too (counts closer than 2^20 always do)
//   bit  63     0 (1 marks a point-to-point tag: bits 0-9 as above, 14-45 the user's tag, no
//               sequence number: point-to-point messages pair by order)
// The low fields are plain so that a receiver can say what its peer called (decodeTag); the
// count itself does not fit and is fetched through the store on the error path
// (core/diagnosis.hpp).
#pragma once

#include <braid/types.hpp>
#include <cstdint>
#include <span>
#include <string>
#include <string_view>

namespace braid::core {

inline constexpr unsigned kTagSeqBits = 17;
inline constexpr unsigned kTagDtypeBits = 5;
inline constexpr unsigned kTagOpBits = 4;
static_assert(kNumDataTypes <= (1 << kTagDtypeBits), "every DataType must fit the tag's field");
static_assert(kNumReduceOps <= (1 << kTagOpBits), "every ReduceOp must fit the tag's field");
inline constexpr std::uint64_t kTagSeqMask = (1ull << kTagSeqBits) - 1;

/// What the count contributes to a collective's fingerprint ("count key"): the count for fixed
/// size collectives; for allgatherv and reduce_scatterv, whose counts array every rank passes
/// alike, a hash of that array; for alltoallv, whose counts legitimately differ per rank, 0
/// (the transports still check every message's size).
std::uint64_t countKey(Collective c, std::size_t count, std::span<const std::size_t> counts);
/// FNV-1a of a communicator id, computed once per communicator.
std::uint64_t commIdHash(std::string_view id);

/// `fingerprint` false (BRAID_FINGERPRINT=0, a measurement switch) leaves bits 43-62 zero.
std::uint64_t collectiveTag(Collective c, DataType t, ReduceOp op, int root, std::uint64_t seq,
                            std::uint64_t countKey, std::uint64_t commHash,
                            bool fingerprint = true);
std::uint64_t p2pTag(DataType t, std::uint32_t userTag);

/// The plain fields of a tag.
struct TagFields {
  bool p2p = false;
  Collective coll = Collective::Barrier;
  DataType dtype = DataType::Float32;
  ReduceOp op = ReduceOp::Sum;
  unsigned rootLow = 0;       // collective: root & 0xfff
  std::uint64_t seqLow = 0;   // collective: seq & kTagSeqMask
  std::uint32_t userTag = 0;  // point-to-point
};
TagFields decodeTag(std::uint64_t tag);
/// The sequence number closest to `near` whose low bits are `seqLow`.
std::uint64_t nearestSeq(std::uint64_t seqLow, std::uint64_t near);
/// "allreduce(fp32, sum) op #57" / "send/recv(fp32, tag 3)" (sequence numbers modulo 2^17).
std::string describeTag(std::uint64_t tag);

}  // namespace braid::core
