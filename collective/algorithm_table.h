// The group's algorithm table (docs/architecture.md §9): for each collective, the size thresholds
// at which the cost model switches algorithm. The coordinator builds it once per generation; every
// rank looks ops up in the same table, so every rank runs the same algorithm for the same op.
#pragma once

#include <cstdint>
#include <functional>
#include <set>
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

// The f32 op of `bytes` per rank that the table is built at (all-to-all's count is per
// destination: the same bytes per rank in all; a barrier has none).
OpShape table_shape(Collective collective, int world_size, std::uint64_t bytes);

class AlgorithmTable {
 public:
  AlgorithmTable() = default;
  explicit AlgorithmTable(std::vector<Threshold> thresholds) : thresholds_(std::move(thresholds)) {}

  // Asks `choose` at 4 B, 8 B, … 1 GiB of f32 (barrier: once) and keeps the points where the
  // choice changes.
  using Chooser = std::function<Algorithm(const OpShape& shape)>;
  static AlgorithmTable build(int world_size, const Chooser& choose);

  Algorithm lookup(Collective collective, std::uint64_t bytes) const;
  // This table, but with `algorithm` for `collective` from `from_bytes` up to `until_bytes`
  // (the largest std::uint64_t: on and on).
  AlgorithmTable with(Collective collective, std::uint64_t from_bytes, std::uint64_t until_bytes,
                      Algorithm algorithm) const;
  const std::vector<Threshold>& thresholds() const { return thresholds_; }
  // One line per threshold, for the log: "allreduce >= 4 B: hypercube".
  std::string describe() const;
  friend bool operator==(const AlgorithmTable&, const AlgorithmTable&) = default;

 private:
  std::vector<Threshold> thresholds_;
};

}  // namespace gradsync
