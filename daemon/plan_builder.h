// The coordinator's side of docs/architecture.md §9: every rank's probe report combined into the
// group's network model, the calibration of the model against real all-reduce ops, and the plan
// built from both.
#pragma once

#include <chrono>
#include <cstdint>
#include <vector>

#include "collective/group_plan.h"
#include "collective/status.h"
#include "gradsync.pb.h"

namespace gradsync::daemon {

// Groups up to this size get a cost per link; larger ones, whose link table would not fit in one
// control message, the slowest link's cost on every link.
inline constexpr int kMaxPerLinkRanks = 128;

// Checks rank `rank`'s report as it arrives, so that a bad one is blamed on its sender: the
// generation and rank, every other rank's link exactly once, costs that are numbers >= 0.
Status check_probe_report(const proto::ProbeReport& report, std::uint64_t generation, int rank,
                          int world_size);

// `reports[r]` is rank r's, each checked. Both ends of a link time the same round trips and the
// same exchange: a link's β is the mean of its two ends', its α the smaller (the larger end was
// descheduled while it measured), in both directions; γ is the slowest rank's. The plan's table is
// built from the network alone, until add_calibration().
GroupPlan plan_from_reports(std::uint64_t generation,
                            const std::vector<proto::ProbeReport>& reports);

// A plan from a network model given by hand (no probing, no calibration).
GroupPlan plan_from_model(std::uint64_t generation, int world_size, const NetworkModel& network);

// What to calibrate all-reduce at: 4 B, 4 KiB, 64 KiB, 1 MiB and 4 MiB, as far as the plan
// predicts that running the contenders at each (where an op takes over 5 ms, the algorithms within
// 1.3x of the best prediction) fits in `budget`; small sizes are repeated more often, since a
// single descheduled rank can double their time, and every size at least five times, enough for
// quartiles: a measurement overrides the model only where they part. Nothing for a single rank.
proto::CalibrationRequest calibration_request(const GroupPlan& plan,
                                              std::chrono::milliseconds budget);

// Checks rank `rank`'s answer to `request` as it arrives: exactly the requested samples, once
// each, with times > 0.
Status check_calibration_report(const proto::CalibrationReport& report,
                                const proto::CalibrationRequest& request, int rank);

// Takes per (algorithm, size) the median and quartiles over repetitions of the slowest rank's time
// from the checked `reports` (with the drift that hit every algorithm of a repetition taken out),
// puts them beside the model's time, and rebuilds the plan's table from the calibrated predictions.
void add_calibration(GroupPlan& plan, const std::vector<proto::CalibrationReport>& reports);

}  // namespace gradsync::daemon
