// The table of every algorithm, grouped by collective. Adding an algorithm: one file under
// src/algo/<collective>/, one row here, one section in docs/algorithms.md; the sweeps in
// tests/algo pick it up from this table.
#include <algorithm>
#include <array>
#include <memory>

#include "algo/algorithm.hpp"

namespace braid::algo {

// Entry points, one per algorithm file (the functions are the files' only exports).
void ringAllreduce(Context&, const CollArgs&);
void recursiveDoublingAllreduce(Context&, const CollArgs&);
void binomialTreeReduce(Context&, const CollArgs&);
void binomialTreeBroadcast(Context&, const CollArgs&);
void ringAllgather(Context&, const CollArgs&);
void ringAllgatherv(Context&, const CollArgs&);
void ringReduceScatter(Context&, const CollArgs&);
void ringReduceScatterv(Context&, const CollArgs&);
void linearGather(Context&, const CollArgs&);
void linearScatter(Context&, const CollArgs&);
void pairwiseAlltoall(Context&, const CollArgs&);
void pairwiseAlltoallv(Context&, const CollArgs&);
void disseminationBarrier(Context&, const CollArgs&);
void shmDirectAllreduce(Context&, const CollArgs&);
void shmDirectAllgather(Context&, const CollArgs&);
void shmDirectBroadcast(Context&, const CollArgs&);
void shmDirectReduceScatter(Context&, const CollArgs&);
void shmDirectReduce(Context&, const CollArgs&);
void shmDirectBarrier(Context&, const CollArgs&);
void rankOrderedAllreduce(Context&, const CollArgs&);
void rankOrderedReduce(Context&, const CollArgs&);
void rankOrderedReduceScatter(Context&, const CollArgs&);
void rankOrderedReduceScatterv(Context&, const CollArgs&);
void halvingDoublingAllreduce(Context&, const CollArgs&);
void halvingDoublingReduceScatter(Context&, const CollArgs&);
void doubleBinaryTreeAllreduce(Context&, const CollArgs&);
void bruckAllgather(Context&, const CollArgs&);
void bruckAlltoall(Context&, const CollArgs&);
void hierarchicalAllreduce(Context&, const CollArgs&);
void shmDirectAlltoall(Context&, const CollArgs&);
void shmDirectAlltoallv(Context&, const CollArgs&);
void shmDirectAllgatherv(Context&, const CollArgs&);
void shmDirectReduceScatterv(Context&, const CollArgs&);
void shmLowLatencyAllreduce(Context&, const CollArgs&);
void shmLowLatencyBroadcast(Context&, const CollArgs&);
void shmLowLatencyReduce(Context&, const CollArgs&);
void shmLowLatencyBarrier(Context&, const CollArgs&);
void shmLowLatencyAllgather(Context&, const CollArgs&);
void shmLowLatencyReduceScatter(Context&, const CollArgs&);
void shmLowLatencyAlltoall(Context&, const CollArgs&);
void hierarchicalAllgather(Context&, const CollArgs&);
void hierarchicalReduceScatter(Context&, const CollArgs&);
void hierarchicalBroadcast(Context&, const CollArgs&);
void hierarchicalReduce(Context&, const CollArgs&);

namespace {

constexpr std::size_t kLine = transport::SharedMemoryGroup::kLineBytes;
constexpr Constraints kShm{.sharedMemory = true};
constexpr Constraints kShmLine{.sharedMemory = true, .maxBytes = kLine};
constexpr Constraints kShmLinePerRank{
    .sharedMemory = true, .maxBytes = kLine, .maxBytesPerRank = true};
constexpr Constraints kNodes{.severalNodes = true, .subCommunicators = true};
constexpr Constraints kUniformNodes{
    .severalNodes = true, .uniformNodes = true, .subCommunicators = true};

constexpr std::array kAlgorithms{
    AlgoInfo{"ring", Collective::Allreduce, ringAllreduce,
             "ring reduce-scatter then ring allgather, chunk-pipelined; 2(N-1)/N x bytes per rank"},
    AlgoInfo{"recursive_doubling", Collective::Allreduce, recursiveDoublingAllreduce,
             "log2(N) full-buffer exchanges, non-power-of-two ranks fold in; for small messages"},
    AlgoInfo{"binomial_tree", Collective::Reduce, binomialTreeReduce,
             "binomial tree towards the root, chunk-pipelined; log2(N) steps"},
    AlgoInfo{"binomial_tree", Collective::Broadcast, binomialTreeBroadcast,
             "binomial tree from the root, chunk-pipelined; log2(N) steps"},
    AlgoInfo{"ring", Collective::Allgather, ringAllgather,
             "ring, chunk-pipelined; N-1 steps, (N-1)/N x output bytes per rank"},
    AlgoInfo{"ring", Collective::Allgatherv, ringAllgatherv,
             "ring, chunk-pipelined; N-1 steps, each rank forwards every other rank's block"},
    AlgoInfo{"ring", Collective::ReduceScatter, ringReduceScatter,
             "ring, chunk-pipelined; N-1 steps, (N-1)/N x input bytes per rank"},
    AlgoInfo{"ring", Collective::ReduceScatterv, ringReduceScatterv,
             "ring, chunk-pipelined; N-1 steps, each rank forwards every other rank's partial"},
    AlgoInfo{"linear", Collective::Gather, linearGather,
             "every rank sends its block to the root directly"},
    AlgoInfo{"linear", Collective::Scatter, linearScatter,
             "the root sends every rank its block directly"},
    AlgoInfo{"pairwise", Collective::Alltoall, pairwiseAlltoall,
             "N-1 steps, step s sends to rank+s and receives from rank-s"},
    AlgoInfo{"pairwise", Collective::Alltoallv, pairwiseAlltoallv,
             "N-1 steps, step s sends to rank+s and receives from rank-s"},
    AlgoInfo{"dissemination", Collective::Barrier, disseminationBarrier,
             "ceil(log2 N) rounds of 0-byte messages to rank+2^k"},
    // Direct shared-memory collectives: only when every rank is on one host (the transport has
    // a SharedMemoryGroup); selection does not pick them elsewhere.
    AlgoInfo{"shm_direct", Collective::Allreduce, shmDirectAllreduce,
             "one host: each rank reduces its 1/N slice of every peer's staged chunk in shared "
             "memory, then all copy the slices; 2 barriers per chunk (1 below 4 KiB)",
             true, kShm},
    AlgoInfo{"shm_direct", Collective::Allgather, shmDirectAllgather,
             "one host: each rank stages its block in shared memory, all copy every block; "
             "1 barrier per chunk; from the single-copy size, each reads every peer's block "
             "from its send buffer (CMA, 2 barriers)",
             false, kShm},
    AlgoInfo{"shm_direct", Collective::Broadcast, shmDirectBroadcast,
             "one host: the root stages the buffer in shared memory, all copy it; 1 barrier per "
             "chunk; from the single-copy size, all read the root's buffer (CMA, 2 barriers)",
             false, kShm},
    AlgoInfo{"shm_direct", Collective::ReduceScatter, shmDirectReduceScatter,
             "one host: each rank stages its input, reduces its block of every peer's staging; "
             "1 barrier per chunk",
             true, kShm},
    AlgoInfo{"shm_direct", Collective::Reduce, shmDirectReduce,
             "one host: slices reduced in shared memory as in allreduce, the root copies them; "
             "2 barriers per chunk (1 below 4 KiB); from the single-copy size, the root reads "
             "the inputs (CMA) and reduces in rank order (2 barriers)",
             true, kShm},
    AlgoInfo{"shm_direct", Collective::Barrier, shmDirectBarrier,
             "one host: one counter line per rank in shared memory, spin then futex", false, kShm},
    // Deterministic mode (BRAID_DETERMINISTIC): every element reduced in rank order.
    AlgoInfo{"rank_ordered", Collective::Allreduce, rankOrderedAllreduce,
             "each rank reduces its 1/N segment of every input in rank order, then ring "
             "allgather; 2(N-1)/N x bytes per rank, bitwise reproducible",
             true},
    AlgoInfo{"rank_ordered", Collective::Reduce, rankOrderedReduce,
             "the root reduces every rank's input in rank order, chunk-pipelined; root receives "
             "(N-1) x bytes, bitwise reproducible",
             true},
    AlgoInfo{"rank_ordered", Collective::ReduceScatter, rankOrderedReduceScatter,
             "every rank sends each owner its block, owners reduce in rank order; (N-1)/N x input "
             "bytes per rank, bitwise reproducible",
             true},
    AlgoInfo{"rank_ordered", Collective::ReduceScatterv, rankOrderedReduceScatterv,
             "every rank sends each owner its block, owners reduce in rank order; bitwise "
             "reproducible",
             true},
    AlgoInfo{"halving_doubling", Collective::Allreduce, halvingDoublingAllreduce,
             "Rabenseifner: recursive-halving reduce-scatter, recursive-doubling allgather; "
             "2 log2(p) steps, 2(p-1)/p x bytes per rank, extra ranks fold in and out"},
    AlgoInfo{"halving_doubling", Collective::ReduceScatter, halvingDoublingReduceScatter,
             "recursive halving; log2(p) steps, (N-1)/N x input bytes per rank for N = 2^k, "
             "extra ranks fold in and out"},
    AlgoInfo{"double_binary_tree", Collective::Allreduce, doubleBinaryTreeAllreduce,
             "two complementary binary trees, half the buffer each, reduce up then broadcast "
             "down, chunk-pipelined; ~2 log2(N) steps, <= 2 x bytes per rank"},
    AlgoInfo{"bruck", Collective::Allgather, bruckAllgather,
             "Bruck: ceil(log2 N) steps of doubling distance, then a local rotation; "
             "(N-1)/N x output bytes per rank; for small messages"},
    AlgoInfo{"bruck", Collective::Alltoall, bruckAlltoall,
             "Bruck: ceil(log2 N) steps, each block hops once per set bit of its distance; "
             "~(N/2) log2 N blocks per rank; for small messages"},
    AlgoInfo{"hierarchical", Collective::Allreduce, hierarchicalAllreduce,
             "several hosts: reduce-scatter in the node (node sub-communicator's selection), "
             "ring allreduce of each slice across nodes (all local ranks in parallel), "
             "allgather in the node, pipelined by pieces; 2(M-1)/M x bytes per host over the "
             "network for M hosts",
             false, kUniformNodes},
    AlgoInfo{"shm_direct", Collective::Alltoall, shmDirectAlltoall,
             "one host: from the single-copy size each rank reads its block straight from every "
             "peer's send buffer (CMA, 2 barriers); below, through staging slots, 1 barrier per "
             "chunk",
             false, kShm},
    AlgoInfo{"shm_direct", Collective::Alltoallv, shmDirectAlltoallv,
             "one host: alltoall through staging slots, counts exchanged and checked in round 0; "
             "1 barrier per chunk of the largest block",
             false, kShm},
    AlgoInfo{"shm_direct", Collective::Allgatherv, shmDirectAllgatherv,
             "one host: each rank stages its block in shared memory, all copy every block; "
             "1 barrier per chunk of the largest block",
             false, kShm},
    AlgoInfo{"shm_direct", Collective::ReduceScatterv, shmDirectReduceScatterv,
             "one host: each rank stages its input, reduces its block of every peer's staging; "
             "1 barrier per chunk of the largest block",
             true, kShm},
    // Low-latency shared-memory collectives: data, tag and sequence number in one line per
    // rank (1 KiB: up to 1008 B of data, one cache line up to 48); only messages that fit.
    AlgoInfo{"shm_ll", Collective::Allreduce, shmLowLatencyAllreduce,
             "one host, <= 1008 B: each rank posts its input in its line, all reduce the N lines "
             "in rank order; no barrier",
             false, kShmLine},
    AlgoInfo{"shm_ll", Collective::Broadcast, shmLowLatencyBroadcast,
             "one host, <= 1008 B: the root posts the buffer in its line, all copy it", false,
             kShmLine},
    AlgoInfo{"shm_ll", Collective::Reduce, shmLowLatencyReduce,
             "one host, <= 1008 B: each rank posts its input in its line, the root reduces", false,
             kShmLine},
    AlgoInfo{"shm_ll", Collective::Barrier, shmLowLatencyBarrier,
             "one host: each rank posts a sequence number in its line, polls the others'", false,
             kShm},
    AlgoInfo{"shm_ll", Collective::Allgather, shmLowLatencyAllgather,
             "one host, <= 1008 B per rank: each rank posts its block in its line, all copy", false,
             kShmLinePerRank},
    AlgoInfo{"shm_ll", Collective::ReduceScatter, shmLowLatencyReduceScatter,
             "one host, <= 1008 B in all: each rank posts its input in its line, each reduces "
             "its own block of the N lines in rank order; no barrier",
             false, kShmLine},
    AlgoInfo{"shm_ll", Collective::Alltoall, shmLowLatencyAlltoall,
             "one host, <= 1008 B in all: each rank posts its send buffer in its line, each "
             "copies its block out of every peer's line; no barrier",
             false, kShmLine},
    // Hierarchical (several hosts): phases run as collectives of the sub-communicators of the
    // node and of the ranks with the same local rank on every node (algo/group.hpp), each
    // through its own selection; only with such a topology.
    AlgoInfo{"hierarchical", Collective::Allgather, hierarchicalAllgather,
             "several hosts: allgather of own blocks across nodes (all local ranks in "
             "parallel), then one allgather per node inside the node, each phase a collective "
             "of a sub-communicator; (M-1)/M x bytes per host over the network",
             false, kUniformNodes},
    AlgoInfo{"hierarchical", Collective::ReduceScatter, hierarchicalReduceScatter,
             "several hosts: one reduce-scatter per node inside the node, then reduce-scatter "
             "of the node partials across nodes (all local ranks in parallel), each phase a "
             "collective of a sub-communicator; (M-1)/M x bytes per host over the network",
             false, kUniformNodes},
    AlgoInfo{"hierarchical", Collective::Broadcast, hierarchicalBroadcast,
             "several hosts: root scatters P slices in its node, broadcast of each slice "
             "across nodes in parallel, allgather in each node (sub-communicators); bytes once "
             "per host",
             false, kNodes},
    AlgoInfo{"hierarchical", Collective::Reduce, hierarchicalReduce,
             "several hosts: reduce-scatter of P slices in each node, reduce of each slice "
             "across nodes in parallel (sub-communicators), slices gathered at the root",
             false, kNodes},
};

}  // namespace

std::span<const AlgoInfo> registry() {
  return kAlgorithms;
}

const AlgoInfo* findAlgorithm(Collective coll, std::string_view name) {
  const auto* it = std::find_if(kAlgorithms.begin(), kAlgorithms.end(), [&](const AlgoInfo& a) {
    return a.coll == coll && name == a.name;
  });
  return it == kAlgorithms.end() ? nullptr : std::addressof(*it);
}

}  // namespace braid::algo
