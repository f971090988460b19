// The calibration of the model against measured ops (collective/calibration.h) and the plan's
// predictions and table built on it (collective/group_plan.h).
#include "collective/calibration.h"

#include <gtest/gtest.h>

#include <cmath>

#include "collective/group_plan.h"

namespace gradsync {
namespace {

const std::vector<CalibrationSample> kSamples = {
    {Algorithm::ring, 1024, 300.0, 100.0},           // ratio 3
    {Algorithm::ring, 1024 * 1024, 1200.0, 1200.0},  // ratio 1
    {Algorithm::tree, 1024, 50.0, 100.0},            // ratio 0.5
};

TEST(Calibration, IsOneForAnAlgorithmWithoutSamples) {
  EXPECT_DOUBLE_EQ(calibration_factor(kSamples, Algorithm::hypercube, 4096), 1.0);
  EXPECT_DOUBLE_EQ(calibration_factor({}, Algorithm::ring, 4096), 1.0);
}

TEST(Calibration, HoldsTheNearestRatioBeyondTheCalibratedSizes) {
  EXPECT_DOUBLE_EQ(calibration_factor(kSamples, Algorithm::ring, 4), 3.0);
  EXPECT_DOUBLE_EQ(calibration_factor(kSamples, Algorithm::ring, 1ull << 30), 1.0);
  EXPECT_DOUBLE_EQ(calibration_factor(kSamples, Algorithm::tree, 1ull << 30), 0.5);
}

TEST(Calibration, InterpolatesTheRatioInLogSize) {
  // 32 KiB lies halfway between 1 KiB and 1 MiB in log size: the geometric mean of 3 and 1.
  EXPECT_NEAR(calibration_factor(kSamples, Algorithm::ring, 32 * 1024), std::sqrt(3.0), 1e-12);
  EXPECT_DOUBLE_EQ(calibration_factor(kSamples, Algorithm::ring, 1024), 3.0);
}

TEST(Calibration, IgnoresSamplesWithoutATime) {
  const std::vector<CalibrationSample> broken = {{Algorithm::ring, 1024, 0.0, 100.0},
                                                 {Algorithm::ring, 4096, 100.0, 0.0}};
  EXPECT_DOUBLE_EQ(calibration_factor(broken, Algorithm::ring, 2048), 1.0);
}

TEST(Calibration, APredictionNeverFallsBelowAMeasurementAtASmallerSize) {
  // Between 1 KiB (300 µs measured) and 1 MiB the ratio falls; a model that grows slowly would
  // otherwise predict less than 300 µs for 4 KiB.
  EXPECT_DOUBLE_EQ(calibrated_us(kSamples, Algorithm::ring, 4096, 101.0), 300.0);
  EXPECT_DOUBLE_EQ(calibrated_us(kSamples, Algorithm::ring, 1024 * 1024, 1200.0), 1200.0);
  EXPECT_DOUBLE_EQ(calibrated_us(kSamples, Algorithm::ring, 4ull << 20, 4800.0), 4800.0);
}

TEST(GroupPlan, CalibrationChangesWhatTheTableChooses) {
  GroupPlan plan;
  plan.world_size = 4;
  plan.network = NetworkModel::uniform(10.0, 0.001);
  const AlgorithmTable uncalibrated = build_table(plan);
  EXPECT_NE(uncalibrated.lookup(Collective::allreduce, 64ull << 20), Algorithm::ring)
      << "for p = 4 the model alone prefers halving-doubling's fewer rounds to the ring";
  // Measured: the ring takes half its modelled time at 64 MiB, everything else its model's.
  const OpShape large{Collective::allreduce, 4, 16ull << 20, 4};
  plan.calibration.push_back({Algorithm::ring, 64ull << 20,
                              estimate_cost(large, Algorithm::ring, plan.network).time_us / 2,
                              estimate_cost(large, Algorithm::ring, plan.network).time_us});
  const AlgorithmTable calibrated = build_table(plan);
  EXPECT_EQ(calibrated.lookup(Collective::allreduce, 64ull << 20), Algorithm::ring);
  EXPECT_DOUBLE_EQ(predicted_us(plan, large, Algorithm::ring),
                   estimate_cost(large, Algorithm::ring, plan.network).time_us / 2);
  // Other collectives are not calibrated.
  const OpShape gather{Collective::allgather, 4, 1000, 4};
  EXPECT_DOUBLE_EQ(predicted_us(plan, gather, Algorithm::ring),
                   estimate_cost(gather, Algorithm::ring, plan.network).time_us);
}

}  // namespace
}  // namespace gradsync
