#include "collective/algorithm_table.h"

#include "collective/algorithms.h"

namespace gradsync {

namespace {

// Predictions closer than this are a tie: calibration measures with about this much noise, and
// on both test networks (loopback, the emulated 1 Gbit/s LAN) the earlier algorithm of such a
// pair (the ring before halving-doubling at 16-64 MiB) was never the slower one by more.
constexpr double kTieTolerance = 0.05;

}  // namespace

AlgorithmTable AlgorithmTable::build(int world_size, const NetworkModel& network) {
  return build(world_size, [&network](const OpShape& shape, Algorithm algorithm) {
    return estimate_cost(shape, algorithm, network).time_us;
  });
}

AlgorithmTable AlgorithmTable::build(int world_size, const CostFunction& cost) {
  std::vector<Threshold> thresholds;
  for (Collective collective : kAllCollectives) {
    const bool sized = collective != Collective::barrier;
    for (std::uint64_t bytes = 4; bytes <= (sized ? (1ull << 30) : 4); bytes *= 2) {
      // All-to-all's count is per destination: the same bytes per rank in all.
      const std::uint64_t count = collective == Collective::alltoall
                                      ? std::max<std::uint64_t>(bytes / 4 / world_size, 1)
                                      : bytes / 4;
      const OpShape shape{collective, world_size, sized ? count : 0, 4};
      Algorithm chosen = algorithms_for(collective).front();
      double best = cost(shape, chosen);
      for (Algorithm candidate : algorithms_for(collective)) {
        const double time = cost(shape, candidate);
        if (time < best * (1 - kTieTolerance)) {
          best = time;
          chosen = candidate;
        }
      }
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
