#include "collective/link_probe.h"

#include "collective/check.h"

namespace gradsync {

namespace {

// An idle schedule of `rounds` rounds whose data and scratch buffers hold one probe message.
Schedule probe_schedule(int rank, int world_size, int rounds, std::uint64_t bytes) {
  Schedule schedule =
      empty_schedule({Collective::barrier, world_size, bytes, 1}, Algorithm::probe, rank);
  schedule.buffer_bytes[static_cast<int>(BufferId::data)] = bytes;
  schedule.buffer_bytes[static_cast<int>(BufferId::scratch)] = bytes;
  schedule.result = Span{BufferId::scratch, 0, bytes};
  schedule.rounds.resize(static_cast<std::size_t>(rounds));
  return schedule;
}

}  // namespace

int tournament_rounds(int world_size) {
  GRADSYNC_CHECK_GE(world_size, 1);
  return world_size % 2 == 0 ? world_size - 1 : world_size;
}

int tournament_partner(int rank, int world_size, int round) {
  GRADSYNC_CHECK_GE(rank, 0);
  GRADSYNC_CHECK_LT(rank, world_size);
  const int seats = world_size % 2 == 0 ? world_size : world_size + 1;
  const int turning = seats - 1;  // the seats that turn; seat `turning` stays put
  GRADSYNC_CHECK_GE(round, 0);
  GRADSYNC_CHECK_LT(round, turning);
  // Example, 4 seats: round 0 pairs 3-0 and 1-2; round 1: 3-1, 0-2; round 2: 3-2, 0-1.
  int partner = 0;
  if (rank == turning) {
    partner = round;
  } else if (rank == round) {
    partner = turning;
  } else {
    partner = ((2 * round - rank) % turning + turning) % turning;
  }
  return partner < world_size ? partner : -1;
}

Schedule ping_pong_schedule(int rank, int world_size, int partner, int exchanges,
                            std::uint64_t bytes) {
  GRADSYNC_CHECK_GE(exchanges, 1);
  Schedule schedule = probe_schedule(rank, world_size, 2 * exchanges, bytes);
  if (partner < 0) return schedule;
  GRADSYNC_CHECK_NE(partner, rank);
  const Span out{BufferId::data, 0, bytes};
  const Span in{BufferId::scratch, 0, bytes};
  for (std::size_t t = 0; t < schedule.rounds.size(); ++t) {
    const bool lower_sends = t % 2 == 0;
    if (lower_sends == (rank < partner)) {
      schedule.rounds[t].send(partner, out);
    } else {
      schedule.rounds[t].recv_copy(partner, in);
    }
  }
  return schedule;
}

Schedule bulk_exchange_schedule(int rank, int world_size, int partner, std::uint64_t bytes) {
  Schedule schedule = probe_schedule(rank, world_size, 1, bytes);
  if (partner < 0) return schedule;
  GRADSYNC_CHECK_NE(partner, rank);
  schedule.rounds[0].send(partner, Span{BufferId::data, 0, bytes});
  schedule.rounds[0].recv_copy(partner, Span{BufferId::scratch, 0, bytes});
  return schedule;
}

}  // namespace gradsync
