// Order statistics of measured times: the planner and the benchmark report the same ones.
#pragma once

#include <algorithm>
#include <cmath>
#include <vector>

namespace gradsync {

// The `fraction` quantile of `values` (0.5: the median, 0.25 and 0.75: the quartiles),
// interpolated linearly between the two nearest order statistics; 0 for no values.
inline double quantile(std::vector<double> values, double fraction) {
  if (values.empty()) return 0;
  std::sort(values.begin(), values.end());
  const double position = fraction * static_cast<double>(values.size() - 1);
  const auto below = static_cast<std::size_t>(std::floor(position));
  const std::size_t above = std::min(below + 1, values.size() - 1);
  return values[below] + (position - static_cast<double>(below)) * (values[above] - values[below]);
}

}  // namespace gradsync
