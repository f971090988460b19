// The coordinator's side of DESIGN.md §5: every rank's probe report combined into the group's plan.
#pragma once

#include <cstdint>
#include <vector>

#include "collective/group_plan.h"
#include "collective/status.h"
#include "gradsync.pb.h"

namespace gradsync::daemon {

// `reports[r]` is rank r's. Both ends of a link time the same round trips and the same exchange,
// so a link costs the mean of what its two ends measured, in both directions; γ is the slowest
// rank's. A report that is malformed or misses a link is an error naming the rank.
Status plan_from_reports(std::uint64_t generation, const std::vector<proto::ProbeReport>& reports,
                         GroupPlan& plan);

// A plan from a network model given by hand (no probing).
GroupPlan plan_from_model(std::uint64_t generation, int world_size, const NetworkModel& network);

}  // namespace gradsync::daemon
