#include "daemon/op_times.h"

#include <vector>

#include "collective/plan_choice.h"
#include "collective/quantile.h"
#include "proto/convert.h"

namespace gradsync::daemon {

bool OpTimes::record(std::uint64_t wire_bytes, Algorithm algorithm, double elapsed_us) {
  std::lock_guard lock(mutex_);
  Window& window = windows_[{size_log2(wire_bytes), algorithm}];
  window.times.push_back(elapsed_us);
  if (window.times.size() > kWindow) window.times.pop_front();
  window.changed = true;
  return ++unreported_ == kReportEvery;
}

bool OpTimes::take_report(std::uint64_t generation, proto::OpTimesReport& report) {
  std::lock_guard lock(mutex_);
  report.Clear();
  report.set_generation(generation);
  unreported_ = 0;
  for (auto& [key, window] : windows_) {
    if (!window.changed) continue;
    window.changed = false;
    // Assigned rather than constructed from the deque: that GCC 12 at -O3 takes for freeing a
    // pointer it did not allocate (-Wfree-nonheap-object).
    std::vector<double> times;
    times.assign(window.times.begin(), window.times.end());
    proto::OpTimes& entry = *report.add_times();
    entry.set_size_log2(static_cast<std::uint32_t>(key.first));
    entry.set_algorithm(to_proto(key.second));
    entry.set_ops(times.size());
    entry.set_low_us(quantile(times, 0.25));
    entry.set_median_us(quantile(times, 0.5));
    entry.set_high_us(quantile(times, 0.75));
  }
  return report.times_size() > 0;
}

void OpTimes::clear() {
  std::lock_guard lock(mutex_);
  windows_.clear();
  unreported_ = 0;
}

}  // namespace gradsync::daemon
