// The schedules with which workers measure their links (docs/architecture.md §9): round trips of a
// few bytes for the latency α, and a bulk exchange in both directions for the time per byte β.
// Pairs meet in a round-robin tournament, so that every rank probes one partner at a time and every
// pair of ranks, which some schedule uses (direct all-to-all uses them all), is measured once.
#pragma once

#include <cstdint>

#include "collective/schedule.h"

namespace gradsync {

// Rounds of the tournament over `world_size` ranks: every pair meets once.
int tournament_rounds(int world_size);

// The rank `rank` meets in `round` (the circle method: with an even number of seats, the last seat
// stays put and the others turn), or -1 where it sits the round out (odd world sizes).
int tournament_partner(int rank, int world_size, int round);

// `exchanges` round trips of `bytes` between `rank` and `partner` (-1: idle rounds only): the lower
// rank sends first. 2 · exchanges rounds; the message goes out of `data` and lands in `scratch`.
Schedule ping_pong_schedule(int rank, int world_size, int partner, int exchanges,
                            std::uint64_t bytes);

// One round in which `rank` and `partner` send each other `bytes` at once (links are full duplex,
// as in every collective's rounds); out of `data`, into `scratch`.
Schedule bulk_exchange_schedule(int rank, int world_size, int partner, std::uint64_t bytes);

}  // namespace gradsync
