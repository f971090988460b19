#include "client/alltoallv_splits.h"

#include <string>

namespace gradsync {

std::vector<std::uint64_t> splits_row(std::span<const std::uint64_t> send_counts,
                                      std::span<const std::uint64_t> recv_counts) {
  std::vector<std::uint64_t> row(send_counts.begin(), send_counts.end());
  row.insert(row.end(), recv_counts.begin(), recv_counts.end());
  return row;
}

Status splits_from_rows(std::span<const std::uint64_t> rows, int world_size,
                        std::vector<std::uint64_t>& splits) {
  const auto p = static_cast<std::size_t>(world_size);
  const auto sends = [&](std::size_t from, std::size_t to) { return rows[from * 2 * p + to]; };
  const auto expects = [&](std::size_t at, std::size_t from) {
    return rows[at * 2 * p + p + from];
  };
  constexpr int kPairsNamed = 3;
  int disagreeing = 0;
  std::string named;
  splits.assign(p * p, 0);
  for (std::size_t from = 0; from < p; ++from) {
    for (std::size_t to = 0; to < p; ++to) {
      splits[from * p + to] = sends(from, to);
      if (sends(from, to) == expects(to, from)) continue;
      if (disagreeing++ < kPairsNamed) {
        named += std::string(named.empty() ? "" : "; ") + "rank " + std::to_string(from) +
                 " sends " + std::to_string(sends(from, to)) + " elements to rank " +
                 std::to_string(to) + ", which expects " + std::to_string(expects(to, from));
      }
    }
  }
  if (disagreeing == 0) return {};
  return Status(ErrorCode::invalid_argument,
                "alltoallv counts disagree for " + std::to_string(disagreeing) + " pair" +
                    (disagreeing == 1 ? "" : "s") + " of ranks: " + named);
}

}  // namespace gradsync
