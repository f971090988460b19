// Dissemination barrier: in round k every rank signals rank r + 2^k and waits for rank r − 2^k
// (mod p). After ⌈log₂p⌉ rounds each rank has heard, directly or through others, from every rank.
// p = 4: round 0: 0→1, 1→2, 2→3, 3→0; round 1: 0→2, 1→3, 2→0, 3→1. Every message is zero-length.
#include "collective/algorithms.h"
#include "collective/math_util.h"

namespace gradsync {

Schedule dissemination_barrier(int rank, int world_size) {
  Schedule schedule =
      empty_schedule({Collective::barrier, world_size, 0, 1}, Algorithm::dissemination, rank);
  const Span signal{BufferId::data, 0, 0};
  for (int distance = 1; distance < world_size; distance <<= 1) {
    Round& round = schedule.add_round();
    round.send((rank + distance) % world_size, signal);
    round.recv_copy(positive_mod(rank - distance, world_size), signal);
  }
  return schedule;
}

}  // namespace gradsync
