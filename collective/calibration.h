// Measured times of real all-reduce ops beside what the α-β-γ model predicts for them
// (DESIGN.md §5). The model counts rounds, messages, bytes and reductions; what it cannot see
// (ranks sharing cores on one host, buffers that outgrow the caches, how an algorithm's rounds
// overlap on a real network) shows as a ratio per algorithm. A plan applies that ratio between the
// calibrated sizes, interpolated in log size, and holds it beyond them.
#pragma once

#include <cstdint>
#include <vector>

#include "collective/types.h"

namespace gradsync {

struct CalibrationSample {
  Algorithm algorithm = Algorithm::ring;
  std::uint64_t bytes = 0;  // per rank, f32
  double measured_us = 0;   // the slowest rank's best time
  double modelled_us = 0;   // the α-β-γ model's time for the same op
  friend bool operator==(const CalibrationSample&, const CalibrationSample&) = default;
};

// measured / modelled for `algorithm` at `bytes`; 1 where no usable sample is of `algorithm`.
double calibration_factor(const std::vector<CalibrationSample>& samples, Algorithm algorithm,
                          std::uint64_t bytes);

// `modelled_us` (the model's time for `algorithm` at `bytes`) scaled by the calibration factor, and
// never below what `algorithm` was measured to take at a calibrated size up to `bytes`: the ratio
// changes between calibrated sizes, and the prediction must not fall as the size grows.
double calibrated_us(const std::vector<CalibrationSample>& samples, Algorithm algorithm,
                     std::uint64_t bytes, double modelled_us);

}  // namespace gradsync
