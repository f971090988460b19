// Ring reduce-scatter, all-gather, all-reduce as the two in a row, and reduce as a reduce-scatter
// and a gather.
//
// Worked example, p = 4, n = 4 (chunk c is element c; "→" is the ring direction r → r + 1):
//   reduce-scatter step s: rank r sends chunk (r−s−1) mod p and reduces chunk (r−s−2) mod p
//     s = 0: 0 sends c3, 1 sends c0, 2 sends c1, 3 sends c2
//     s = 1: 0 sends c2 (now x3+x0)…   s = 2: …after which rank r holds chunk r fully reduced
//   all-gather step s: rank r sends chunk (r−s) mod p and copies in chunk (r−s−1) mod p
// Each rank sends p−1 chunks per phase: 2n(p−1)/p elements in all, the bandwidth lower bound, at
// the price of 2(p−1) latencies. The chunk a rank receives in step s is the one it forwards in s +
// 1, which is what lets the engine pipeline segments through the ring.
#include "collective/algorithms.h"
#include "collective/math_util.h"

namespace gradsync {

namespace {

Span ring_chunk(const Schedule& schedule, int index) {
  const int p = schedule.shape.world_size;
  return schedule.span(balanced_chunk(schedule.shape.count, p, positive_mod(index, p)));
}

// Each chunk's partial sum travels around the ring in rank order, so the arriving partial (lower
// ranks) stands on the left.
void append_ring_reduce_scatter(Schedule& schedule) {
  const int p = schedule.shape.world_size;
  const int r = schedule.rank;
  for (int step = 0; step + 1 < p; ++step) {
    Round& round = schedule.add_round();
    round.send((r + 1) % p, ring_chunk(schedule, r - step - 1));
    round.recv_reduce(positive_mod(r - 1, p), ring_chunk(schedule, r - step - 2),
                      RecvAction::reduce_received_first);
  }
}

void append_ring_allgather(Schedule& schedule) {
  const int p = schedule.shape.world_size;
  const int r = schedule.rank;
  for (int step = 0; step + 1 < p; ++step) {
    Round& round = schedule.add_round();
    round.send((r + 1) % p, ring_chunk(schedule, r - step));
    round.recv_copy(positive_mod(r - 1, p), ring_chunk(schedule, r - step - 1));
  }
}

}  // namespace

Schedule ring_allreduce(int rank, int world_size, std::uint64_t count, std::size_t element_size) {
  Schedule schedule = empty_schedule({Collective::allreduce, world_size, count, element_size},
                                     Algorithm::ring, rank);
  append_ring_reduce_scatter(schedule);
  append_ring_allgather(schedule);
  return schedule;
}

Schedule ring_reduce_scatter(int rank, int world_size, std::uint64_t count,
                             std::size_t element_size) {
  Schedule schedule = empty_schedule({Collective::reduce_scatter, world_size, count, element_size},
                                     Algorithm::ring, rank);
  append_ring_reduce_scatter(schedule);
  schedule.result = ring_chunk(schedule, rank);
  return schedule;
}

// The ring's reduce-scatter, then every rank's chunk straight to the root: 2βn(p − 1)/p, the
// bandwidth bound of a reduce, where the tree's root takes the whole vector ⌈log₂p⌉ times.
Schedule ring_reduce(int rank, int world_size, int root, std::uint64_t count,
                     std::size_t element_size) {
  Schedule schedule = empty_schedule({Collective::reduce, world_size, count, element_size, root},
                                     Algorithm::ring, rank);
  append_ring_reduce_scatter(schedule);
  if (world_size == 1) return schedule;
  Round& round = schedule.add_round();
  if (rank != root) {
    round.send(root, ring_chunk(schedule, rank));
    return schedule;
  }
  for (int peer = 0; peer < world_size; ++peer) {
    if (peer != root) round.recv_copy(peer, ring_chunk(schedule, peer));
  }
  return schedule;
}

Schedule ring_allgather(int rank, int world_size, std::uint64_t count, std::size_t element_size) {
  Schedule schedule = empty_schedule({Collective::allgather, world_size, count, element_size},
                                     Algorithm::ring, rank);
  append_ring_allgather(schedule);
  return schedule;
}

}  // namespace gradsync
