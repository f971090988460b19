// The group's algorithm table (DESIGN.md §5): for each collective, the size thresholds at which
// the cost model switches algorithm. The coordinator builds it once per generation; every rank
// looks ops up in the same table, so every rank runs the same algorithm for the same op.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "collective/cost_model.h"
#include "collective/types.h"

namespace gradsync {

struct Threshold {
  Collective collective;
  std::uint64_t min_bytes;  // from this many bytes of data on, until the next threshold
  Algorithm algorithm;
  friend bool operator==(const Threshold&, const Threshold&) = default;
};

class AlgorithmTable {
 public:
  AlgorithmTable() = default;
  explicit AlgorithmTable(std::vector<Threshold> thresholds) : thresholds_(std::move(thresholds)) {}

  // Evaluates every candidate at 4 B, 8 B, … 1 GiB of f32 and keeps the points where the choice
  // changes; the choice is cheapest()'s (within 5%, `network`'s model decides).
  static AlgorithmTable build(int world_size, const CostFunction& cost,
                              const NetworkModel& network);
  static AlgorithmTable build(int world_size, const NetworkModel& network);

  Algorithm lookup(Collective collective, std::uint64_t bytes) const;
  const std::vector<Threshold>& thresholds() const { return thresholds_; }
  // One line per threshold, for the log: "allreduce >= 4 B: hypercube".
  std::string describe() const;
  friend bool operator==(const AlgorithmTable&, const AlgorithmTable&) = default;

 private:
  std::vector<Threshold> thresholds_;
};

}  // namespace gradsync
