// Binomial trees: reduce to rank 0, broadcast from any root, and all-reduce as the two in a row.
//
// Worked example, all-reduce, p = 4, n = 4 (every round moves the whole vector):
//   reduce    round 0: 1 → 0, 3 → 2 (receivers reduce)   round 1: 2 → 0
//   broadcast round 2: 0 → 2                             round 3: 0 → 1, 2 → 3
// 2·⌈log₂p⌉ rounds of α + βn; rank 0 carries every round, which is why this is only a baseline.
#include "collective/algorithms.h"
#include "collective/check.h"
#include "collective/math_util.h"

namespace gradsync {

namespace {

Span whole(const Schedule& schedule) { return schedule.span(Chunk{0, schedule.shape.count}); }

// Round k pairs rank r (r mod 2^(k+1) = 0) with r + 2^k, which sends its partial sum down; the
// receiver's own partial covers the lower ranks, so it stands on the left of the reduction.
void append_binomial_reduce(Schedule& schedule) {
  const int p = schedule.shape.world_size;
  const int r = schedule.rank;
  for (int mask = 1; mask < p; mask <<= 1) {
    Round& round = schedule.add_round();
    if (r % (2 * mask) == mask) {
      round.send(r - mask, whole(schedule));
    } else if (r % (2 * mask) == 0 && r + mask < p) {
      round.recv_reduce(r + mask, whole(schedule), RecvAction::reduce_local_first);
    }
  }
}

// In round k, the 2^k ranks that have the vector (virtual ranks below 2^k, counted from the root)
// each send it 2^k further.
void append_binomial_broadcast(Schedule& schedule, int root) {
  const int p = schedule.shape.world_size;
  const int v = positive_mod(schedule.rank - root, p);
  const auto real = [&](int virtual_rank) { return (virtual_rank + root) % p; };
  for (int mask = 1; mask < p; mask <<= 1) {
    Round& round = schedule.add_round();
    if (v < mask && v + mask < p) {
      round.send(real(v + mask), whole(schedule));
    } else if (v >= mask && v < 2 * mask) {
      round.recv_copy(real(v - mask), whole(schedule));
    }
  }
}

}  // namespace

Schedule tree_allreduce(int rank, int world_size, std::uint64_t count, std::size_t element_size) {
  Schedule schedule = empty_schedule({Collective::allreduce, world_size, count, element_size},
                                     Algorithm::tree, rank);
  append_binomial_reduce(schedule);
  append_binomial_broadcast(schedule, 0);
  return schedule;
}

Schedule tree_broadcast(int rank, int world_size, int root, std::uint64_t count,
                        std::size_t element_size) {
  GRADSYNC_CHECK_GE(root, 0);
  GRADSYNC_CHECK_LT(root, world_size);
  Schedule schedule = empty_schedule({Collective::broadcast, world_size, count, element_size, root},
                                     Algorithm::tree, rank);
  append_binomial_broadcast(schedule, root);
  return schedule;
}

}  // namespace gradsync
