// The coordinator's side of DESIGN.md §5: every rank's probe report combined into the group's
// network model, the calibration of the model against real all-reduce ops, and the plan built from
// both.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "collective/group_plan.h"
#include "collective/status.h"
#include "gradsync.pb.h"

namespace gradsync::daemon {

// `reports[r]` is rank r's. Both ends of a link time the same round trips and the same exchange,
// so a link costs the mean of what its two ends measured, in both directions; γ is the slowest
// rank's. A report that is malformed or misses a link is an error naming the rank. The plan's
// table is built from the network alone, until add_calibration().
Status plan_from_reports(std::uint64_t generation, const std::vector<proto::ProbeReport>& reports,
                         GroupPlan& plan);

// A plan from a network model given by hand (no probing, no calibration).
GroupPlan plan_from_model(std::uint64_t generation, int world_size, const NetworkModel& network);

// What to calibrate all-reduce at: 4 B, 64 KiB, 1 MiB and 4 MiB, as far as the plan predicts that
// running the contenders at each (where an op takes over 5 ms, the algorithms within 1.5x of the
// best prediction) fits in `budget`; small sizes are repeated more often, since a single descheduled rank can double their
// time. Nothing for a single rank.
proto::CalibrationRequest calibration_request(const GroupPlan& plan,
                                              std::chrono::milliseconds budget);

// Takes the slowest rank's best time per (algorithm, size) from `reports[r]`, rank r's, puts it
// beside the model's time, and rebuilds the plan's table from the calibrated predictions.
Status add_calibration(GroupPlan& plan, const std::vector<proto::CalibrationReport>& reports);

}  // namespace gradsync::daemon
