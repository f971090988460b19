// Binomial trees: reduce to a root, broadcast, gather and scatter from one, and all-reduce as a
// reduce and a broadcast in a row.
//
// Worked example, all-reduce, p = 4, n = 4 (every round moves the whole vector):
//   reduce    round 0: 1 → 0, 3 → 2 (receivers reduce)   round 1: 2 → 0
//   broadcast round 2: 0 → 2                             round 3: 0 → 1, 2 → 3
// 2·⌈log₂p⌉ rounds of α + βn; rank 0 carries every round, which is why this is only a baseline.
// Gather and scatter move the chunks of the ranks below a subtree instead, so that the root's link
// carries each chunk once: ⌈log₂p⌉ α + β n (p − 1)/p, the bandwidth bound and the fewest rounds.
// Every tree is numbered from its root: virtual rank v is real rank (v + root) mod p.
#include <algorithm>

#include "collective/algorithms.h"
#include "collective/check.h"
#include "collective/math_util.h"

namespace gradsync {

namespace {

Span whole(const Schedule& schedule) { return schedule.span(Chunk{0, schedule.shape.count}); }

int virtual_rank(const Schedule& schedule, int root) {
  return positive_mod(schedule.rank - root, schedule.shape.world_size);
}

int real_rank(const Schedule& schedule, int root, int virtual_rank) {
  return (virtual_rank + root) % schedule.shape.world_size;
}

// Round k pairs virtual rank v (v mod 2^(k+1) = 0) with v + 2^k, which sends its partial sum
// down; the receiver's own partial covers the lower virtual ranks, so it stands on the left.
void append_binomial_reduce(Schedule& schedule, int root) {
  const int p = schedule.shape.world_size;
  const int v = virtual_rank(schedule, root);
  for (int mask = 1; mask < p; mask <<= 1) {
    Round& round = schedule.add_round();
    if (v % (2 * mask) == mask) {
      round.send(real_rank(schedule, root, v - mask), whole(schedule));
    } else if (v % (2 * mask) == 0 && v + mask < p) {
      round.recv_reduce(real_rank(schedule, root, v + mask), whole(schedule),
                        RecvAction::reduce_local_first);
    }
  }
}

// The chunks of virtual ranks [first, last) (of the balanced partition over real ranks): one
// span, or two where the range wraps past real rank p − 1.
std::vector<Span> virtual_chunks(const Schedule& schedule, int root, int first, int last) {
  const int p = schedule.shape.world_size;
  const std::uint64_t n = schedule.shape.count;
  last = std::min(last, p);
  if (first >= last) return {schedule.span(Chunk{0, 0})};
  const auto chunks = [&](int from, int to) {  // real ranks [from, to)
    const Chunk begin = balanced_chunk(n, p, from);
    const Chunk end = balanced_chunk(n, p, to - 1);
    return schedule.span(Chunk{begin.offset, end.end() - begin.offset});
  };
  const int from = real_rank(schedule, root, first);
  const int count = last - first;
  if (from + count <= p) return {chunks(from, from + count)};
  return {chunks(from, p), chunks(0, from + count - p)};
}

// Round k: virtual rank v (v mod 2^(k+1) = 2^k) sends the chunks of its subtree, [v, v + 2^k), to
// v − 2^k, whose subtree then holds the chunks of [v − 2^k, v + 2^k).
void append_binomial_gather(Schedule& schedule, int root) {
  const int p = schedule.shape.world_size;
  const int v = virtual_rank(schedule, root);
  for (int mask = 1; mask < p; mask <<= 1) {
    Round& round = schedule.add_round();
    if (v % (2 * mask) == mask) {
      round.sends.push_back(
          {real_rank(schedule, root, v - mask), virtual_chunks(schedule, root, v, v + mask)});
    } else if (v % (2 * mask) == 0 && v + mask < p) {
      round.recvs.push_back({real_rank(schedule, root, v + mask),
                             virtual_chunks(schedule, root, v + mask, v + 2 * mask),
                             RecvAction::copy});
    }
  }
}

// The gather backwards: the largest subtrees first, each getting the chunks of its ranks.
void append_binomial_scatter(Schedule& schedule, int root) {
  const int p = schedule.shape.world_size;
  const int v = virtual_rank(schedule, root);
  for (int mask = p > 1 ? 1 << (ceil_log2(p) - 1) : 0; mask >= 1; mask >>= 1) {
    Round& round = schedule.add_round();
    if (v % (2 * mask) == 0 && v + mask < p) {
      round.sends.push_back({real_rank(schedule, root, v + mask),
                             virtual_chunks(schedule, root, v + mask, v + 2 * mask)});
    } else if (v % (2 * mask) == mask) {
      round.recvs.push_back({real_rank(schedule, root, v - mask),
                             virtual_chunks(schedule, root, v, v + mask), RecvAction::copy});
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

// The schedule of `shape`, whose tree `append` adds, from shape.root.
Schedule rooted_tree(const OpShape& shape, int rank, void (*append)(Schedule&, int root)) {
  GRADSYNC_CHECK_GE(shape.root, 0);
  GRADSYNC_CHECK_LT(shape.root, shape.world_size);
  Schedule schedule = empty_schedule(shape, Algorithm::tree, rank);
  append(schedule, shape.root);
  return schedule;
}

}  // namespace

Schedule tree_allreduce(int rank, int world_size, std::uint64_t count, std::size_t element_size) {
  Schedule schedule = empty_schedule({Collective::allreduce, world_size, count, element_size},
                                     Algorithm::tree, rank);
  append_binomial_reduce(schedule, 0);
  append_binomial_broadcast(schedule, 0);
  return schedule;
}

Schedule tree_broadcast(int rank, int world_size, int root, std::uint64_t count,
                        std::size_t element_size) {
  return rooted_tree({Collective::broadcast, world_size, count, element_size, root}, rank,
                     append_binomial_broadcast);
}

Schedule tree_reduce(int rank, int world_size, int root, std::uint64_t count,
                     std::size_t element_size) {
  return rooted_tree({Collective::reduce, world_size, count, element_size, root}, rank,
                     append_binomial_reduce);
}

Schedule tree_gather(int rank, int world_size, int root, std::uint64_t count,
                     std::size_t element_size) {
  return rooted_tree({Collective::gather, world_size, count, element_size, root}, rank,
                     append_binomial_gather);
}

Schedule tree_scatter(int rank, int world_size, int root, std::uint64_t count,
                      std::size_t element_size) {
  return rooted_tree({Collective::scatter, world_size, count, element_size, root}, rank,
                     append_binomial_scatter);
}

}  // namespace gradsync
