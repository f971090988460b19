#include <algorithm>

#include "collective/algorithms.h"
#include "collective/check.h"

namespace gradsync {

std::span<const Algorithm> algorithms_for(Collective collective) {
  static constexpr Algorithm kAllreduce[] = {Algorithm::tree, Algorithm::hypercube, Algorithm::ring,
                                             Algorithm::halving_doubling};
  static constexpr Algorithm kRing[] = {Algorithm::ring};
  static constexpr Algorithm kTree[] = {Algorithm::tree};
  static constexpr Algorithm kAlltoall[] = {Algorithm::direct, Algorithm::bruck};
  static constexpr Algorithm kDirect[] = {Algorithm::direct};
  static constexpr Algorithm kBarrier[] = {Algorithm::dissemination};
  static constexpr Algorithm kReduce[] = {Algorithm::tree, Algorithm::ring};
  switch (collective) {
    case Collective::allreduce:
      return kAllreduce;
    case Collective::reduce_scatter:
    case Collective::allgather:
      return kRing;
    case Collective::broadcast:
    case Collective::gather:
    case Collective::scatter:
      return kTree;
    case Collective::reduce:
      return kReduce;
    case Collective::alltoall:
      return kAlltoall;
    case Collective::alltoallv:
      return kDirect;
    case Collective::barrier:
      return kBarrier;
  }
  std::abort();
}

bool supports(Collective collective, Algorithm algorithm) {
  const auto algorithms = algorithms_for(collective);
  return std::find(algorithms.begin(), algorithms.end(), algorithm) != algorithms.end();
}

Schedule build_schedule(const OpShape& shape, Algorithm algorithm, int rank) {
  GRADSYNC_CHECK(supports(shape.collective, algorithm));
  const int p = shape.world_size;
  const std::uint64_t n = shape.count;
  const std::size_t size = shape.element_size;
  switch (shape.collective) {
    case Collective::allreduce:
      switch (algorithm) {
        case Algorithm::tree:
          return tree_allreduce(rank, p, n, size);
        case Algorithm::hypercube:
          return hypercube_allreduce(rank, p, n, size);
        case Algorithm::ring:
          return ring_allreduce(rank, p, n, size);
        case Algorithm::halving_doubling:
          return halving_doubling_allreduce(rank, p, n, size);
        default:
          break;
      }
      break;
    case Collective::reduce_scatter:
      return ring_reduce_scatter(rank, p, n, size);
    case Collective::allgather:
      return ring_allgather(rank, p, n, size);
    case Collective::broadcast:
      return tree_broadcast(rank, p, shape.root, n, size);
    case Collective::alltoall:
      return algorithm == Algorithm::direct ? direct_alltoall(rank, p, n, size)
                                            : bruck_alltoall(rank, p, n, size);
    case Collective::alltoallv:
      return direct_alltoallv(shape, rank);
    case Collective::barrier:
      return dissemination_barrier(rank, p);
    case Collective::reduce:
      return algorithm == Algorithm::tree ? tree_reduce(rank, p, shape.root, n, size)
                                          : ring_reduce(rank, p, shape.root, n, size);
    case Collective::gather:
      return tree_gather(rank, p, shape.root, n, size);
    case Collective::scatter:
      return tree_scatter(rank, p, shape.root, n, size);
  }
  std::abort();
}

std::vector<Schedule> build_all_ranks(const OpShape& shape, Algorithm algorithm) {
  std::vector<Schedule> schedules;
  schedules.reserve(shape.world_size);
  for (int rank = 0; rank < shape.world_size; ++rank) {
    schedules.push_back(build_schedule(shape, algorithm, rank));
  }
  return schedules;
}

}  // namespace gradsync
