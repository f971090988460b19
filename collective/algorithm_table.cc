#include "collective/algorithm_table.h"

#include "collective/algorithms.h"

namespace gradsync {

AlgorithmTable AlgorithmTable::build(int world_size, const NetworkModel& network) {
  return build(
      world_size,
      [&network](const OpShape& shape, Algorithm algorithm) {
        return estimate_cost(shape, algorithm, network).time_us;
      },
      network);
}

AlgorithmTable AlgorithmTable::build(int world_size, const CostFunction& cost,
                                     const NetworkModel& network) {
  std::vector<Threshold> thresholds;
  for (Collective collective : kAllCollectives) {
    const bool sized = collective != Collective::barrier;
    for (std::uint64_t bytes = 4; bytes <= (sized ? (1ull << 30) : 4); bytes *= 2) {
      // All-to-all's count is per destination: the same bytes per rank in all.
      const std::uint64_t count = collective == Collective::alltoall
                                      ? std::max<std::uint64_t>(bytes / 4 / world_size, 1)
                                      : bytes / 4;
      const OpShape shape{collective, world_size, sized ? count : 0, 4};
      const Algorithm chosen = cheapest(estimate_candidates(shape, cost, network));
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

std::string AlgorithmTable::describe() const {
  std::string text;
  for (const Threshold& threshold : thresholds_) {
    text += std::string(name(threshold.collective)) + " >= " + std::to_string(threshold.min_bytes) +
            " B: " + std::string(name(threshold.algorithm)) + "\n";
  }
  return text;
}

}  // namespace gradsync
