// Reusable correctness checks: each runs one collective on every rank with data from
// harness/data.hpp and compares every element with an independently computed expectation
// (gtest failures name the collective, world size, rank, dtype, op and count).
#pragma once

#include <braid/braid.hpp>

#include <cstddef>
#include <span>

namespace braid::test {

inline constexpr std::size_t kSweepCounts[] = {0, 1, 7, 13, 1031};

void checkAllreduce(Comm& c, DataType t, ReduceOp op, std::size_t count, bool inPlace);
void checkReduce(Comm& c, DataType t, ReduceOp op, std::size_t count, int root, bool inPlace);
void checkReduceScatter(Comm& c, DataType t, ReduceOp op, std::size_t count, bool inPlace);
/// allgather (+in place), broadcast from every root, gather, scatter, alltoall.
void checkNonReducing(Comm& c, DataType t, std::size_t count);
/// allgatherv, reduce_scatterv, alltoallv with uneven counts and gaps between blocks.
void checkVariants(Comm& c, DataType t, std::size_t base);
/// Async send/recv around a ring.
void checkSendRecv(Comm& c, std::size_t count);
/// Every check above over every count, dtype and op (a subset at large counts).
void sweepCollectives(Comm& c, std::span<const std::size_t> counts = kSweepCounts);

/// Counts of the focused sweep of the added dtypes and ops: 0, 1, odd, prime, more than a
/// chunk of testOptions (64 B).
inline constexpr std::size_t kExtendedCounts[] = {0, 1, 7, 13, 131};
/// allreduce (out of place, in place), reduce and reduce_scatter (out of place, in place) for
/// every supported (dtype, op) pair with an added dtype or an added op (bitwise, PremulSum with
/// per-rank factors), compared bit-exactly with harness/data.hpp's extendedExpected; plus the
/// non-reducing collectives for bool, int16 and complex128.
void checkExtendedReductions(Comm& c, std::span<const std::size_t> counts = kExtendedCounts);
/// Unsupported (dtype, op) pairs and bad PremulSum factors: Error(InvalidArgument) naming op
/// and dtype on every rank, nothing sent (the communicator works afterwards).
void checkUnsupportedReductions(Comm& c);

}  // namespace braid::test
