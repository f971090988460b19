#include "collective/calibration.h"

#include <algorithm>
#include <cmath>

namespace gradsync {

namespace {

double following(const std::vector<CalibrationSample>& samples, Algorithm algorithm,
                 std::uint64_t bytes, double modelled_us, Quartile quartile) {
  std::vector<CalibrationSample> own;
  for (CalibrationSample sample : samples) {
    if (sample.algorithm != algorithm || sample.measured_us <= 0 || sample.modelled_us() <= 0) {
      continue;
    }
    if (quartile == Quartile::low && sample.low_us > 0) sample.measured_us = sample.low_us;
    if (quartile == Quartile::high && sample.high_us > 0) sample.measured_us = sample.high_us;
    own.push_back(sample);
  }
  if (own.empty()) return modelled_us;
  std::sort(own.begin(), own.end(), [](const auto& a, const auto& b) { return a.bytes < b.bytes; });
  // A larger op never takes less time: a measurement below a smaller size's is noise.
  for (std::size_t i = 1; i < own.size(); ++i) {
    own[i].measured_us = std::max(own[i].measured_us, own[i - 1].measured_us);
  }
  const CalibrationSample& first = own.front();
  if (bytes <= first.bytes) return modelled_us * first.measured_us / first.modelled_us();
  const CalibrationSample& last = own.back();
  if (bytes >= last.bytes) {
    // The model's β comes from sustained bulk transfers, so no larger op moves its extra bytes
    // faster than the model says; a slope below 1 means the calibrated sizes still fit in what a
    // link sends at once (a token bucket's burst, a switch's buffer).
    double slope = 1;
    if (own.size() >= 2) {
      const CalibrationSample& before = own[own.size() - 2];
      const double modelled_step = last.modelled_us() - before.modelled_us();
      if (modelled_step > 0) {
        slope = std::max(1.0, (last.measured_us - before.measured_us) / modelled_step);
      }
    }
    return last.measured_us + slope * std::max(0.0, modelled_us - last.modelled_us());
  }
  const auto upper = std::upper_bound(
      own.begin(), own.end(), bytes,
      [](std::uint64_t size, const CalibrationSample& sample) { return size < sample.bytes; });
  const auto lower = upper - 1;
  const double weight =
      (std::log(static_cast<double>(bytes)) - std::log(static_cast<double>(lower->bytes))) /
      (std::log(static_cast<double>(upper->bytes)) - std::log(static_cast<double>(lower->bytes)));
  return lower->measured_us * std::pow(upper->measured_us / lower->measured_us, weight);
}

}  // namespace

double calibrated_us(const std::vector<CalibrationSample>& samples, Algorithm algorithm,
                     std::uint64_t bytes, double modelled_us, Quartile quartile) {
  // Beyond the largest calibrated size a quartile keeps its distance from the median there: the
  // quartiles' own slopes, from repetitions a few apart, would cross.
  const CalibrationSample* largest = nullptr;
  for (const CalibrationSample& sample : samples) {
    if (sample.algorithm == algorithm && sample.measured_us > 0 && sample.modelled_us() > 0 &&
        (largest == nullptr || sample.bytes > largest->bytes)) {
      largest = &sample;
    }
  }
  const double spread = largest == nullptr           ? 0
                        : quartile == Quartile::low  ? largest->low_us
                        : quartile == Quartile::high ? largest->high_us
                                                     : 0;
  if (spread > 0 && bytes > largest->bytes) {
    return following(samples, algorithm, bytes, modelled_us, Quartile::median) * spread /
           largest->measured_us;
  }
  return following(samples, algorithm, bytes, modelled_us, quartile);
}

}  // namespace gradsync
