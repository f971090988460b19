#include "collective/group_plan.h"

#include <algorithm>
#include <cstdio>
#include <string>

namespace gradsync {

HostLayout host_layout(const GroupPlan& plan) {
  return HostLayout::of_plan(plan.world_size, plan.local_ranks);
}

double predicted_us(const GroupPlan& plan, const OpShape& shape, Algorithm algorithm) {
  const double modelled = estimate_cost(shape, algorithm, plan.network).time_us;
  if (shape.collective != Collective::allreduce) return modelled;
  return calibrated_us(plan.calibration, algorithm, shape.count * shape.element_size, modelled);
}

std::string describe(const GroupPlan& plan) {
  double alpha_min = plan.network.alpha_us;
  double beta_min = plan.network.beta_us_per_byte;
  for (int from = 0; from < plan.world_size && plan.network.per_link(); ++from) {
    for (int to = 0; to < plan.world_size; ++to) {
      if (from == to) continue;
      alpha_min = std::min(alpha_min, plan.network.link(from, to).alpha_us);
      beta_min = std::min(beta_min, plan.network.link(from, to).beta_us_per_byte);
    }
  }
  char line[256];
  std::snprintf(line, sizeof line,
                "alpha %.1f-%.1f us, beta %.3g-%.3g us/byte (%.3g-%.3g GB/s), gamma %.3g us/byte, "
                "%s\n",
                alpha_min, plan.network.alpha_us, beta_min, plan.network.beta_us_per_byte,
                beta_min > 0 ? 1e-3 / beta_min : 0.0,
                plan.network.beta_us_per_byte > 0 ? 1e-3 / plan.network.beta_us_per_byte : 0.0,
                plan.network.gamma_us_per_byte, plan.measured ? "measured" : "given");
  std::string text = line;
  for (const CalibrationSample& sample : plan.calibration) {
    std::snprintf(line, sizeof line, "calibration: %s at %llu B: %.1f us measured, %.1f modelled\n",
                  std::string(name(sample.algorithm)).c_str(),
                  static_cast<unsigned long long>(sample.bytes), sample.measured_us,
                  sample.modelled_us());
    text += line;
  }
  return text + plan.table.describe();
}

}  // namespace gradsync
