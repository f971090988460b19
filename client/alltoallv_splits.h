// How the ranks of an alltoallv learn its whole matrix of splits (collective/schedule.h,
// OpShape::splits) when each knows only its own counts, as torch and MPI give them: every rank
// all-gathers a row of its send counts and its receive counts, and checks every pair against both
// ends. Every rank sees the same rows, so counts that disagree fail on every rank alike, with the
// same pairs named, before any tensor byte moves.
#pragma once

#include <cstdint>
#include <span>
#include <vector>

#include "collective/status.h"

namespace gradsync {

// This rank's row for the all-gather: its send counts, then its receive counts.
std::vector<std::uint64_t> splits_row(std::span<const std::uint64_t> send_counts,
                                      std::span<const std::uint64_t> recv_counts);
// The elements of one row: 2 · world_size.
inline std::uint64_t splits_row_length(int world_size) {
  return 2 * static_cast<std::uint64_t>(world_size);
}

// From every rank's row (rank-major), the splits matrix, row-major; an invalid_argument error
// naming the pairs whose two ends disagree (the first few, and how many in all).
Status splits_from_rows(std::span<const std::uint64_t> rows, int world_size,
                        std::vector<std::uint64_t>& splits);

}  // namespace gradsync
