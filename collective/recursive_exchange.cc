// All-reduce by pairwise exchange over a hypercube: recursive doubling, and recursive halving +
// doubling (Rabenseifner). Both need a power-of-two group, so other world sizes fold first.
//
// Folding, p = 6 (core of 4, r = 2 extra ranks): ranks 0 and 2 send their whole vector to 1 and 3,
// which reduce it in; the core {1, 3, 4, 5} plays virtual ranks {0, 1, 2, 3}; at the end 1 and 3
// copy the result back to 0 and 2. Two extra rounds of α + βn, no other cost.
//
// Recursive doubling, p = 4, n = 4: round k pairs v with v xor 2^k and both exchange and reduce the
// whole vector: round 0: 0↔1, 2↔3; round 1: 0↔2, 1↔3. log₂p rounds of α + βn: few latencies, so it
// wins for short vectors.
//
// Halving + doubling, p = 4, n = 4: halving round 0 pairs 0↔2, 1↔3: the lower rank keeps elements
// {0, 1} and sends {2, 3}; round 1 pairs 0↔1, 2↔3 and halves again, so virtual rank v owns element
// v reduced. Doubling replays the pairs in reverse and copies the halves back. 2·log₂p latencies
// and 2n(p−1)/p bytes: bandwidth-optimal with logarithmic latency.
#include "collective/algorithms.h"
#include "collective/math_util.h"

namespace gradsync {

namespace {

class PowerOfTwoFold {
 public:
  explicit PowerOfTwoFold(int world_size)
      : core_size_(floor_power_of_two(world_size)), extra_(world_size - core_size_) {}

  int core_size() const { return core_size_; }

  // The rank's place in the power-of-two core, or -1 for a rank folded onto its partner.
  int virtual_rank(int rank) const {
    if (rank >= 2 * extra_) return rank - extra_;
    return rank % 2 == 1 ? rank / 2 : -1;
  }

  int real_rank(int virtual_rank) const {
    return virtual_rank < extra_ ? 2 * virtual_rank + 1 : virtual_rank + extra_;
  }

  // Even ranks below 2·extra hand their vector to the odd rank above them, which reduces it in
  // (the sender is the lower rank, so it stands on the left).
  void append_fold(Schedule& schedule, Span whole) const {
    if (extra_ == 0) return;
    Round& round = schedule.add_round();
    const int r = schedule.rank;
    if (r >= 2 * extra_) return;
    if (r % 2 == 0) {
      round.send(r + 1, whole);
    } else {
      round.recv_reduce(r - 1, whole, RecvAction::reduce_received_first);
    }
  }

  void append_unfold(Schedule& schedule, Span whole) const {
    if (extra_ == 0) return;
    Round& round = schedule.add_round();
    const int r = schedule.rank;
    if (r >= 2 * extra_) return;
    if (r % 2 == 1) {
      round.send(r - 1, whole);
    } else {
      round.recv_copy(r + 1, whole);
    }
  }

 private:
  int core_size_;
  int extra_;
};

// The lower virtual rank's partial stands on the left on both sides of an exchange.
RecvAction exchange_order(int virtual_rank, int partner) {
  return virtual_rank < partner ? RecvAction::reduce_local_first
                                : RecvAction::reduce_received_first;
}

}  // namespace

Schedule hypercube_allreduce(int rank, int world_size, std::uint64_t count,
                             std::size_t element_size) {
  Schedule schedule = empty_schedule({Collective::allreduce, world_size, count, element_size},
                                     Algorithm::hypercube, rank);
  const Span whole = schedule.span(Chunk{0, count});
  const PowerOfTwoFold fold(world_size);
  const int v = fold.virtual_rank(rank);
  fold.append_fold(schedule, whole);
  for (int mask = 1; mask < fold.core_size(); mask <<= 1) {
    Round& round = schedule.add_round();
    if (v < 0) continue;
    const int partner = v ^ mask;
    round.send(fold.real_rank(partner), whole);
    round.recv_reduce(fold.real_rank(partner), whole, exchange_order(v, partner));
  }
  fold.append_unfold(schedule, whole);
  return schedule;
}

Schedule halving_doubling_allreduce(int rank, int world_size, std::uint64_t count,
                                    std::size_t element_size) {
  Schedule schedule = empty_schedule({Collective::allreduce, world_size, count, element_size},
                                     Algorithm::halving_doubling, rank);
  const Chunk whole{0, count};
  const PowerOfTwoFold fold(world_size);
  const int v = fold.virtual_rank(rank);
  fold.append_fold(schedule, schedule.span(whole));

  // Halving: the range this rank is responsible for shrinks by half each round; the parents are
  // kept so that doubling can retrace them. Halves are balanced, so after log₂p rounds the owned
  // ranges differ by at most one element.
  std::vector<Chunk> parents;
  Chunk owned = whole;
  for (int mask = fold.core_size() / 2; mask >= 1; mask >>= 1) {
    Round& round = schedule.add_round();
    if (v < 0) continue;
    const int partner = v ^ mask;
    const bool keep_lower = (v & mask) == 0;
    const Chunk kept = balanced_chunk(owned, 2, keep_lower ? 0 : 1);
    const Chunk given = balanced_chunk(owned, 2, keep_lower ? 1 : 0);
    round.send(fold.real_rank(partner), schedule.span(given));
    round.recv_reduce(fold.real_rank(partner), schedule.span(kept), exchange_order(v, partner));
    parents.push_back(owned);
    owned = kept;
  }

  // Doubling: the partner of each halving round sends back the half this rank gave away.
  for (int mask = 1; mask < fold.core_size(); mask <<= 1) {
    Round& round = schedule.add_round();
    if (v < 0) continue;
    const int partner = v ^ mask;
    const Chunk parent = parents.back();
    parents.pop_back();
    const bool owned_lower = (v & mask) == 0;
    const Chunk missing = balanced_chunk(parent, 2, owned_lower ? 1 : 0);
    round.send(fold.real_rank(partner), schedule.span(owned));
    round.recv_copy(fold.real_rank(partner), schedule.span(missing));
    owned = parent;
  }
  fold.append_unfold(schedule, schedule.span(whole));
  return schedule;
}

}  // namespace gradsync
