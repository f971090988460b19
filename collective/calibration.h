// Measured times of real all-reduce ops beside what the α-β-γ model predicts for them
// (docs/architecture.md §9). The model counts rounds, messages, bytes and reductions; what it
// cannot see (ranks sharing cores on one host, per-op overheads, buffers that outgrow the caches, a
// link that sends its first few hundred KiB at once) is taken from the measurements, per algorithm:
// - between two calibrated sizes, the measured times, interpolated in log size and log time;
// - below the smallest, its measurement scaled as the model scales;
// - beyond the largest, its measurement plus the model's extra time, scaled by how much more the
//   largest size really took than the one before it (measured slope over modelled slope), but
//   never less than the model's own slope, since the model's β is a sustained rate.
#pragma once

#include <cstdint>
#include <vector>

#include "collective/types.h"

namespace gradsync {

struct CalibrationSample {
  Algorithm algorithm = Algorithm::ring;
  std::uint64_t bytes = 0;          // per rank, f32
  double measured_us = 0;           // median over repetitions of the slowest rank's time
  double modelled_latency_us = 0;   // the model's latency terms for the same op
  double modelled_transfer_us = 0;  // the model's transfer terms
  // The quartiles of the slowest rank's time (its spread), and how many repetitions they are of;
  // 0: no spread known, the median alone.
  double low_us = 0;
  double high_us = 0;
  int repetitions = 0;
  double modelled_us() const { return modelled_latency_us + modelled_transfer_us; }
  friend bool operator==(const CalibrationSample&, const CalibrationSample&) = default;
};

// Which of a sample's times a prediction follows.
enum class Quartile { low, median, high };

// The prediction for `algorithm` at `bytes` where the model says `modelled_us`, following each
// sample's `quartile`; the model's time as it is where no sample is of `algorithm`. Never falls as
// `bytes` grows.
double calibrated_us(const std::vector<CalibrationSample>& samples, Algorithm algorithm,
                     std::uint64_t bytes, double modelled_us, Quartile quartile = Quartile::median);

}  // namespace gradsync
