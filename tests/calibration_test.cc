// The calibration of the model against measured ops (collective/calibration.h) and the plan's
// predictions and table built on it (collective/group_plan.h).
#include "collective/calibration.h"

#include <gtest/gtest.h>

#include <cmath>

#include "collective/group_plan.h"
#include "collective/plan_choice.h"

namespace gradsync {
namespace {

// Ring samples: at 1 KiB the op took three times the model, at 1 MiB its model's time, at 4 MiB
// 2400 µs more than at 1 MiB for 1600 µs more in the model (a measured slope of 1.5).
const std::vector<CalibrationSample> kSamples = {
    {Algorithm::ring, 1024, 300.0, 90.0, 10.0},
    {Algorithm::ring, 1024 * 1024, 1200.0, 100.0, 1100.0},
    {Algorithm::ring, 4 * 1024 * 1024, 3600.0, 100.0, 2700.0},
    {Algorithm::tree, 1024, 50.0, 100.0, 0.0},
    {Algorithm::tree, 65536, 150.0, 100.0, 1000.0},  // a slope of 0.1: the link's burst
};

TEST(Calibration, LeavesAnAlgorithmWithoutSamplesAsModelled) {
  EXPECT_DOUBLE_EQ(calibrated_us(kSamples, Algorithm::hypercube, 4096, 123.0), 123.0);
  EXPECT_DOUBLE_EQ(calibrated_us({}, Algorithm::ring, 4096, 123.0), 123.0);
}

TEST(Calibration, GivesTheMeasurementAtACalibratedSize) {
  EXPECT_DOUBLE_EQ(calibrated_us(kSamples, Algorithm::ring, 1024, 100.0), 300.0);
  EXPECT_DOUBLE_EQ(calibrated_us(kSamples, Algorithm::ring, 1024 * 1024, 1200.0), 1200.0);
  EXPECT_DOUBLE_EQ(calibrated_us(kSamples, Algorithm::tree, 1024, 100.0), 50.0);
}

TEST(Calibration, BelowTheSmallestSizeScalesItsMeasurementAsTheModelScales) {
  EXPECT_DOUBLE_EQ(calibrated_us(kSamples, Algorithm::ring, 4, 90.0), 270.0);
  EXPECT_DOUBLE_EQ(calibrated_us(kSamples, Algorithm::tree, 4, 100.0), 50.0);
}

TEST(Calibration, InterpolatesTheMeasurementsInLogSizeAndLogTime) {
  // 32 KiB lies halfway between 1 KiB and 1 MiB in log size: the geometric mean of the times.
  EXPECT_NEAR(calibrated_us(kSamples, Algorithm::ring, 32 * 1024, 555.0), std::sqrt(300.0 * 1200),
              1e-9);
}

TEST(Calibration, BeyondTheLargestSizeAddsTheModelsExtraTimeAtTheMeasuredSlope) {
  // 16 MiB modelled at 11 200 µs: 8400 µs more than at 4 MiB, at the measured slope of 1.5.
  EXPECT_NEAR(calibrated_us(kSamples, Algorithm::ring, 16 * 1024 * 1024, 11'200.0),
              3600.0 + 8400.0 * 1.5, 1e-9);
  // A slope below the model's (sizes that still fit in a link's burst) counts as the model's.
  EXPECT_DOUBLE_EQ(calibrated_us(kSamples, Algorithm::tree, 1 << 20, 16'100.0), 150.0 + 15'000.0);
  // With a single sample the model's extra time counts as it is.
  const std::vector<CalibrationSample> single = {{Algorithm::tree, 1024, 50.0, 100.0, 0.0}};
  EXPECT_DOUBLE_EQ(calibrated_us(single, Algorithm::tree, 1 << 20, 1100.0), 50.0 + 1000.0);
}

TEST(Calibration, NeverFallsAsTheSizeGrows) {
  // A model of 50 µs latency plus 1800 µs per MiB, and a 64 KiB measurement below the 4 B one.
  const auto transfer = [](std::uint64_t bytes) {
    return 1800.0 * static_cast<double>(bytes) / static_cast<double>(1 << 20);
  };
  const std::vector<CalibrationSample> noisy = {
      {Algorithm::ring, 4, 500.0, 50.0, transfer(4)},
      {Algorithm::ring, 65536, 200.0, 50.0, transfer(65536)},
      {Algorithm::ring, 1 << 20, 2000.0, 50.0, transfer(1 << 20)}};
  double previous = 0;
  for (std::uint64_t bytes = 1; bytes <= (64ull << 20); bytes *= 2) {
    const double predicted = calibrated_us(noisy, Algorithm::ring, bytes, 50.0 + transfer(bytes));
    EXPECT_GE(predicted, previous) << bytes << " bytes";
    previous = predicted;
  }
}

TEST(Calibration, IgnoresSamplesWithoutATime) {
  const std::vector<CalibrationSample> broken = {{Algorithm::ring, 1024, 0.0, 100.0, 5.0},
                                                 {Algorithm::ring, 4096, 100.0, 0.0, 0.0}};
  EXPECT_DOUBLE_EQ(calibrated_us(broken, Algorithm::ring, 2048, 77.0), 77.0);
}

TEST(GroupPlan, CalibrationChangesWhatTheTableChooses) {
  GroupPlan plan;
  plan.world_size = 4;
  plan.network = NetworkModel::uniform(10.0, 0.001);
  EXPECT_EQ(build_table(plan).lookup(Collective::allreduce, 64ull << 20), Algorithm::ring)
      << "for p = 4 the model calls the ring and halving-doubling a tie (within 5%) at 64 MiB";
  // Measured: halving-doubling moves its bytes in half the modelled time; the ring takes its
  // model's.
  const OpShape large{Collective::allreduce, 4, 16ull << 20, 4};
  const CostEstimate modelled = estimate_cost(large, Algorithm::halving_doubling, plan.network);
  const CostEstimate ring = estimate_cost(large, Algorithm::ring, plan.network);
  const double measured = modelled.latency_us + modelled.transfer_us / 2;
  plan.calibration.push_back({Algorithm::halving_doubling, 64ull << 20, measured,
                              modelled.latency_us, modelled.transfer_us});
  plan.calibration.push_back(
      {Algorithm::ring, 64ull << 20, ring.time_us, ring.latency_us, ring.transfer_us});
  EXPECT_EQ(build_table(plan).lookup(Collective::allreduce, 64ull << 20),
            Algorithm::halving_doubling);
  EXPECT_DOUBLE_EQ(predicted_us(plan, large, Algorithm::halving_doubling), measured);
  // Other collectives are not calibrated.
  const OpShape gather{Collective::allgather, 4, 1000, 4};
  EXPECT_DOUBLE_EQ(predicted_us(plan, gather, Algorithm::ring),
                   estimate_cost(gather, Algorithm::ring, plan.network).time_us);
}

TEST(GroupPlan, PredictionsWithinFivePercentAreATieForTheEarlierAlgorithm) {
  GroupPlan plan;
  plan.world_size = 4;
  plan.network = NetworkModel::uniform(10.0, 0.001);
  const OpShape large{Collective::allreduce, 4, 16ull << 20, 4};
  const CostEstimate ring = estimate_cost(large, Algorithm::ring, plan.network);
  const CostEstimate halving = estimate_cost(large, Algorithm::halving_doubling, plan.network);
  // Halving-doubling measured 4% faster than the ring: still the ring.
  plan.calibration = {
      {Algorithm::ring, 64ull << 20, ring.time_us, ring.latency_us, ring.transfer_us},
      {Algorithm::halving_doubling, 64ull << 20, ring.time_us * 0.96, halving.latency_us,
       halving.transfer_us}};
  EXPECT_EQ(build_table(plan).lookup(Collective::allreduce, 64ull << 20), Algorithm::ring);
  plan.calibration[1].measured_us = ring.time_us * 0.9;  // 10% faster: halving-doubling
  EXPECT_EQ(build_table(plan).lookup(Collective::allreduce, 64ull << 20),
            Algorithm::halving_doubling);
}

TEST(GroupPlan, TiesAreBrokenByTheSlowestLinkNotByLinksProbedOneAtATime) {
  // Loopback p = 4 on two CPUs: the pairs 0-2 and 1-3 share a CPU and probe faster, alone, than
  // the pairs that cross; under a real op every link is as busy as the slowest.
  constexpr int p = 4;
  const LinkCost crossing{31.0, 1.0 / 3000};
  const LinkCost same_cpu{12.8, 1.0 / 4500};
  const NetworkModel slowest = NetworkModel::uniform(crossing.alpha_us, crossing.beta_us_per_byte);
  GroupPlan plan;
  plan.world_size = p;
  plan.network = slowest;
  plan.network.world_size = p;
  for (int from = 0; from < p; ++from) {
    for (int to = 0; to < p; ++to) {
      plan.network.links.push_back(from % 2 == to % 2 ? same_cpu : crossing);
    }
  }
  const std::uint64_t bytes = 4ull << 20;
  const OpShape shape{Collective::allreduce, p, bytes / 4, 4};
  const CostEstimate ring = estimate_cost(shape, Algorithm::ring, plan.network);
  const CostEstimate halving = estimate_cost(shape, Algorithm::halving_doubling, plan.network);
  ASSERT_LT(halving.time_us, ring.time_us * 0.9)
      << "the per-link model favours halving-doubling, whose large exchange shares a CPU";
  // Calibration measured both as the slowest link's model has the ring: a tie.
  const double measured = estimate_cost(shape, Algorithm::ring, slowest).time_us;
  plan.calibration = {
      {Algorithm::ring, bytes, measured, ring.latency_us, ring.transfer_us},
      {Algorithm::halving_doubling, bytes, measured, halving.latency_us, halving.transfer_us}};
  EXPECT_EQ(build_table(plan).lookup(Collective::allreduce, bytes), Algorithm::ring);
}

TEST(CostModel, SplitsItsTimeIntoLatencyAndTransfer) {
  const NetworkModel network = NetworkModel::uniform(10.0, 0.001, 0.0005);
  for (std::uint64_t count : {0ull, 1000ull, 1ull << 20}) {
    const CostEstimate estimate =
        estimate_cost({Collective::allreduce, 4, count, 4}, Algorithm::ring, network);
    EXPECT_DOUBLE_EQ(estimate.latency_us, 6 * 10.0) << "2(p − 1) rounds of one message";
    EXPECT_DOUBLE_EQ(estimate.time_us, estimate.latency_us + estimate.transfer_us);
  }
}

}  // namespace
}  // namespace gradsync
