// All-to-all: block j of rank i's data ends as block i of rank j's output.
//
// Direct exchange, p = 4: round k (1 ≤ k < p) sends block r+k to rank r+k and receives block r−k
// from rank r−k (mod p); the own block is a local copy. (p−1)(α + βm): right for long blocks.
//
// Bruck, p = 4: label the block bound for rank r+j (mod p) "position j". Round k sends every
// position with bit k set to rank r + 2^k, where it keeps its position; after ⌈log₂p⌉ rounds
// position j at rank r holds the block that rank r−j sent to r. Round 0 moves positions {1, 3},
// round 1 positions {2, 3}. ⌈log₂p⌉(α + β·m·p/2): few latencies, so it wins for short blocks.
//
// Alltoallv runs the direct exchange with a block per pair as long as its split; Bruck would carry
// blocks of unequal lengths through ranks that do not know them.
#include "collective/algorithms.h"
#include "collective/math_util.h"

namespace gradsync {

namespace {

Span block(const Schedule& schedule, BufferId buffer, int index) {
  const std::uint64_t m = schedule.shape.count;
  return schedule.span(Chunk{static_cast<std::uint64_t>(index) * m, m}, buffer);
}

// Round k sends `sent(r + k)` to rank r + k and receives `received(r − k)` from rank r − k; the
// own block is copied in the last round. Copied in the first, it would make every later round wait
// for the whole first round (docs/architecture.md §4.2), and so for its longest block.
template <typename SentBlock, typename ReceivedBlock>
void add_direct_exchange(Schedule& schedule, const SentBlock& sent, const ReceivedBlock& received) {
  const int p = schedule.shape.world_size;
  const int r = schedule.rank;
  for (int k = 1; k < p; ++k) {
    Round& round = schedule.add_round();
    round.send((r + k) % p, sent((r + k) % p));
    round.recv_copy(positive_mod(r - k, p), received(positive_mod(r - k, p)));
  }
  if (schedule.rounds.empty()) schedule.add_round();
  schedule.rounds.back().copy(sent(r), received(r));
}

}  // namespace

Schedule direct_alltoall(int rank, int world_size, std::uint64_t block_count,
                         std::size_t element_size) {
  Schedule schedule = empty_schedule({Collective::alltoall, world_size, block_count, element_size},
                                     Algorithm::direct, rank);
  add_direct_exchange(
      schedule, [&](int to) { return block(schedule, BufferId::data, to); },
      [&](int from) { return block(schedule, BufferId::output, from); });
  return schedule;
}

Schedule direct_alltoallv(const OpShape& shape, int rank) {
  Schedule schedule = empty_schedule(shape, Algorithm::direct, rank);
  const int p = shape.world_size;
  // Where each block starts: rank r's tensor is its row of splits, its output its column.
  std::vector<std::uint64_t> sent_from(p + 1, 0);
  std::vector<std::uint64_t> received_at(p + 1, 0);
  for (int j = 0; j < p; ++j) {
    sent_from[j + 1] = sent_from[j] + split(shape, rank, j);
    received_at[j + 1] = received_at[j] + split(shape, j, rank);
  }
  add_direct_exchange(
      schedule,
      [&](int to) {
        return schedule.span(Chunk{sent_from[to], sent_from[to + 1] - sent_from[to]},
                             BufferId::data);
      },
      [&](int from) {
        return schedule.span(Chunk{received_at[from], received_at[from + 1] - received_at[from]},
                             BufferId::output);
      });
  return schedule;
}

// A position is in its block of `data` until it first moves; every hop lands it in its final block
// of `output`, from which its next hop is sent: the round's receive lands on what it sends, at the
// same place of the message (schedule.h), so no scratch is needed. Position 0 never moves and is a
// local copy.
Schedule bruck_alltoall(int rank, int world_size, std::uint64_t block_count,
                        std::size_t element_size) {
  Schedule schedule = empty_schedule({Collective::alltoall, world_size, block_count, element_size},
                                     Algorithm::bruck, rank);
  const int p = world_size;
  const int r = rank;
  std::vector<Span> where(p);
  for (int j = 0; j < p; ++j) where[j] = block(schedule, BufferId::data, (r + j) % p);

  for (int bit = 0; (1 << bit) < p; ++bit) {
    Round& round = schedule.add_round();
    Send& send = round.sends.emplace_back(Send{(r + (1 << bit)) % p, {}});
    Recv& recv =
        round.recvs.emplace_back(Recv{positive_mod(r - (1 << bit), p), {}, RecvAction::copy});
    for (int j = 1; j < p; ++j) {
      if ((j & (1 << bit)) == 0) continue;
      send.spans.push_back(where[j]);
      where[j] = block(schedule, BufferId::output, positive_mod(r - j, p));
      recv.spans.push_back(where[j]);
    }
  }
  if (schedule.rounds.empty()) schedule.add_round();
  schedule.rounds.back().copy(where[0], block(schedule, BufferId::output, r));
  return schedule;
}

}  // namespace gradsync
