#include "collective/algorithm_table.h"

#include <limits>

#include "collective/algorithms.h"

namespace gradsync {

OpShape table_shape(Collective collective, int world_size, std::uint64_t bytes) {
  if (collective == Collective::barrier) return {collective, world_size, 0, 4};
  if (collective == Collective::alltoall || collective == Collective::alltoallv) {
    const std::uint64_t block = std::max<std::uint64_t>(bytes / 4 / world_size, 1);
    if (collective == Collective::alltoall) return {collective, world_size, block, 4};
    // The table's alltoallv is the all-to-all of the same bytes.
    const auto pairs = static_cast<std::size_t>(world_size) * static_cast<std::size_t>(world_size);
    return alltoallv_shape(world_size, std::vector<std::uint64_t>(pairs, block), 4);
  }
  return {collective, world_size, std::max<std::uint64_t>(bytes / 4, 1), 4};
}

AlgorithmTable AlgorithmTable::build(int world_size, const Chooser& choose) {
  std::vector<Threshold> thresholds;
  for (Collective collective : kAllCollectives) {
    const bool sized = collective != Collective::barrier;
    for (std::uint64_t bytes = 4; bytes <= (sized ? (1ull << 30) : 4); bytes *= 2) {
      const Algorithm chosen = choose(table_shape(collective, world_size, bytes));
      if (thresholds.empty() || thresholds.back().collective != collective ||
          thresholds.back().algorithm != chosen) {
        thresholds.push_back(
            {collective,
             thresholds.empty() || thresholds.back().collective != collective ? 0 : bytes, chosen});
      }
    }
  }
  return AlgorithmTable(std::move(thresholds));
}

Algorithm AlgorithmTable::lookup(Collective collective, std::uint64_t bytes) const {
  const Threshold* match = nullptr;
  for (const Threshold& threshold : thresholds_) {
    if (threshold.collective == collective && threshold.min_bytes <= bytes) match = &threshold;
  }
  return match != nullptr ? match->algorithm : algorithms_for(collective).front();
}

AlgorithmTable AlgorithmTable::with(Collective collective, std::uint64_t from_bytes,
                                    std::uint64_t until_bytes, Algorithm algorithm) const {
  std::set<std::uint64_t> points = {0, from_bytes};
  if (until_bytes != std::numeric_limits<std::uint64_t>::max()) points.insert(until_bytes);
  for (const Threshold& threshold : thresholds_) {
    if (threshold.collective == collective) points.insert(threshold.min_bytes);
  }
  std::vector<Threshold> thresholds;
  for (Collective each : kAllCollectives) {
    if (each != collective) {
      for (const Threshold& threshold : thresholds_) {
        if (threshold.collective == each) thresholds.push_back(threshold);
      }
      continue;
    }
    for (const std::uint64_t point : points) {
      const Algorithm chosen =
          point >= from_bytes && point < until_bytes ? algorithm : lookup(collective, point);
      if (thresholds.empty() || thresholds.back().collective != collective ||
          thresholds.back().algorithm != chosen) {
        thresholds.push_back({collective, point, chosen});
      }
    }
  }
  return AlgorithmTable(std::move(thresholds));
}

std::string AlgorithmTable::describe() const {
  std::string text;
  for (const Threshold& threshold : thresholds_) {
    text += std::string(name(threshold.collective)) + " >= " + std::to_string(threshold.min_bytes) +
            " B: " + std::string(name(threshold.algorithm)) + "\n";
  }
  return text;
}

}  // namespace gradsync
