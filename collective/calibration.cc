#include "collective/calibration.h"

#include <algorithm>
#include <cmath>

namespace gradsync {

double calibration_factor(const std::vector<CalibrationSample>& samples, Algorithm algorithm,
                          std::uint64_t bytes) {
  // (log size, log ratio) of the algorithm's samples, by size.
  std::vector<std::pair<double, double>> points;
  for (const CalibrationSample& sample : samples) {
    if (sample.algorithm != algorithm || sample.measured_us <= 0 || sample.modelled_us <= 0) {
      continue;
    }
    points.emplace_back(std::log(static_cast<double>(std::max<std::uint64_t>(sample.bytes, 1))),
                        std::log(sample.measured_us / sample.modelled_us));
  }
  if (points.empty()) return 1.0;
  std::sort(points.begin(), points.end());
  const double x = std::log(static_cast<double>(std::max<std::uint64_t>(bytes, 1)));
  if (x <= points.front().first) return std::exp(points.front().second);
  if (x >= points.back().first) return std::exp(points.back().second);
  const auto upper =
      std::upper_bound(points.begin(), points.end(), x,
                       [](double size, const auto& point) { return size < point.first; });
  const auto lower = upper - 1;
  const double weight = (x - lower->first) / (upper->first - lower->first);
  return std::exp(lower->second + weight * (upper->second - lower->second));
}

double calibrated_us(const std::vector<CalibrationSample>& samples, Algorithm algorithm,
                     std::uint64_t bytes, double modelled_us) {
  double floor_us = 0;
  for (const CalibrationSample& sample : samples) {
    if (sample.algorithm == algorithm && sample.bytes <= bytes) {
      floor_us = std::max(floor_us, sample.measured_us);
    }
  }
  return std::max(floor_us, modelled_us * calibration_factor(samples, algorithm, bytes));
}

}  // namespace gradsync
