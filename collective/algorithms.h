// Schedule builders, one per (collective, algorithm). Every builder works for any world size p ≥ 1
// and any element count n ≥ 0, and splits vectors into balanced chunks (partition.h).
#pragma once

#include <cstddef>
#include <cstdint>
#include <span>
#include <vector>

#include "collective/schedule.h"

namespace gradsync {

Schedule tree_allreduce(int rank, int world_size, std::uint64_t count, std::size_t element_size);
Schedule hypercube_allreduce(int rank, int world_size, std::uint64_t count,
                             std::size_t element_size);
Schedule ring_allreduce(int rank, int world_size, std::uint64_t count, std::size_t element_size);
Schedule halving_doubling_allreduce(int rank, int world_size, std::uint64_t count,
                                    std::size_t element_size);
// Rank r ends with chunk r of the balanced partition of the reduced tensor.
Schedule ring_reduce_scatter(int rank, int world_size, std::uint64_t count,
                             std::size_t element_size);
// Rank r contributes chunk r of the balanced partition of the `count`-element result.
Schedule ring_allgather(int rank, int world_size, std::uint64_t count, std::size_t element_size);
Schedule tree_broadcast(int rank, int world_size, int root, std::uint64_t count,
                        std::size_t element_size);
// The reduction on `root` only; the other ranks' data ends as partial results.
Schedule tree_reduce(int rank, int world_size, int root, std::uint64_t count,
                     std::size_t element_size);
Schedule ring_reduce(int rank, int world_size, int root, std::uint64_t count,
                     std::size_t element_size);
// Rank r's chunk r of the balanced partition of `count` elements, to `root`'s data.
Schedule tree_gather(int rank, int world_size, int root, std::uint64_t count,
                     std::size_t element_size);
// The root's chunk r of the balanced partition of `count` elements, to rank r's data.
Schedule tree_scatter(int rank, int world_size, int root, std::uint64_t count,
                      std::size_t element_size);
// Block j of rank i's data goes to block i of rank j's output; blocks are `block_count` elements.
Schedule direct_alltoall(int rank, int world_size, std::uint64_t block_count,
                         std::size_t element_size);
Schedule bruck_alltoall(int rank, int world_size, std::uint64_t block_count,
                        std::size_t element_size);
// The direct exchange of an alltoallv shape (OpShape::splits): round k sends rank r's block for
// r+k and receives rank r−k's block for r, each as long as its split.
Schedule direct_alltoallv(const OpShape& shape, int rank);
Schedule dissemination_barrier(int rank, int world_size);

// The algorithms that can run `collective`, in the order ties are broken when choosing.
std::span<const Algorithm> algorithms_for(Collective collective);
bool supports(Collective collective, Algorithm algorithm);

// Dispatches to the builder above; `algorithm` must support `shape.collective`.
Schedule build_schedule(const OpShape& shape, Algorithm algorithm, int rank);
std::vector<Schedule> build_all_ranks(const OpShape& shape, Algorithm algorithm);

}  // namespace gradsync
