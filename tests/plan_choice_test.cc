// How auto chooses from a plan (collective/plan_choice.h): the model's order unless a measurement
// is clear of it, never on an extrapolation, and the explanation `gradsync plan` prints.
#include "collective/plan_choice.h"

#include <gtest/gtest.h>

#include <limits>

namespace gradsync {
namespace {

constexpr int kRanks = 4;

GroupPlan model_plan() {
  GroupPlan plan;
  plan.world_size = kRanks;
  plan.network = NetworkModel::uniform(10.0, 0.001);
  return plan;
}

OpShape allreduce(std::uint64_t bytes) { return {Collective::allreduce, kRanks, bytes / 4, 4}; }

// A sample of `algorithm` at `bytes` measured at `factor` times its model, with quartiles
// `spread` below and above.
CalibrationSample sample(const GroupPlan& plan, Algorithm algorithm, std::uint64_t bytes,
                         double factor, double spread) {
  const CostEstimate modelled = estimate_cost(allreduce(bytes), algorithm, plan.network);
  const double measured = modelled.time_us * factor;
  return {algorithm,
          bytes,
          measured,
          modelled.latency_us,
          modelled.transfer_us,
          measured * (1 - spread),
          measured * (1 + spread),
          9};
}

TEST(PlanChoice, WithoutMeasurementsTheModelDecides) {
  const GroupPlan plan = model_plan();
  const AlgorithmChoice choice = choose_algorithm(plan, allreduce(64ull << 20));
  EXPECT_EQ(choice.basis, ChoiceBasis::model);
  EXPECT_EQ(choice.algorithm, choice.model_choice);
  EXPECT_FALSE(choice.overruled.has_value());
  EXPECT_EQ(explain(choice).rfind("model: ", 0), 0u) << explain(choice);
}

TEST(PlanChoice, AMeasurementWinsOnlyWhereItsQuartilesPartFromTheModelChoices) {
  GroupPlan plan = model_plan();
  constexpr std::uint64_t kBytes = 1 << 20;
  const Algorithm model_choice = choose_algorithm(plan, allreduce(kBytes)).algorithm;
  ASSERT_EQ(model_choice, Algorithm::ring);
  // Halving-doubling measured at 0.85 of the ring's time, both with quartiles 5% either side:
  // 0.8925 < 0.95, clear.
  const double ring_us = estimate_cost(allreduce(kBytes), Algorithm::ring, plan.network).time_us;
  const double halving_us =
      estimate_cost(allreduce(kBytes), Algorithm::halving_doubling, plan.network).time_us;
  plan.calibration = {
      sample(plan, Algorithm::ring, kBytes, 1.0, 0.05),
      sample(plan, Algorithm::halving_doubling, kBytes, 0.85 * ring_us / halving_us, 0.05)};
  AlgorithmChoice choice = choose_algorithm(plan, allreduce(kBytes));
  EXPECT_EQ(choice.algorithm, Algorithm::halving_doubling);
  EXPECT_EQ(choice.basis, ChoiceBasis::measured);
  EXPECT_NE(explain(choice).find("is clear of the model's choice, ring"), std::string::npos)
      << explain(choice);
  // The same medians with quartiles 10% either side overlap (0.935 > 0.9): the model's.
  plan.calibration = {
      sample(plan, Algorithm::ring, kBytes, 1.0, 0.10),
      sample(plan, Algorithm::halving_doubling, kBytes, 0.85 * ring_us / halving_us, 0.10)};
  choice = choose_algorithm(plan, allreduce(kBytes));
  EXPECT_EQ(choice.algorithm, Algorithm::ring);
  EXPECT_EQ(choice.basis, ChoiceBasis::model);
  EXPECT_NE(explain(choice).find("halving_doubling"), std::string::npos);
  EXPECT_NE(explain(choice).find("within the spread"), std::string::npos) << explain(choice);
  EXPECT_EQ(build_table(plan).lookup(Collective::allreduce, kBytes), Algorithm::ring);
}

TEST(PlanChoice, AnExtrapolationIsNoEvidence) {
  GroupPlan plan = model_plan();
  // The tree measured at a fifth of its model at 1 MiB, the ring at three times its model at 1 and
  // 4 MiB: the tree's extrapolation is faster at 4 MiB too.
  plan.calibration = {sample(plan, Algorithm::tree, 1 << 20, 0.2, 0.01),
                      sample(plan, Algorithm::ring, 1 << 20, 3.0, 0.01),
                      sample(plan, Algorithm::ring, 4 << 20, 3.0, 0.01)};
  ASSERT_LT(predicted_range(plan, allreduce(4 << 20), Algorithm::tree).high_us,
            predicted_range(plan, allreduce(4 << 20), Algorithm::ring).low_us)
      << "the tree's extrapolation";
  EXPECT_EQ(choose_algorithm(plan, allreduce(1 << 20)).algorithm, Algorithm::tree);
  const AlgorithmChoice beyond = choose_algorithm(plan, allreduce(4 << 20));
  EXPECT_EQ(beyond.algorithm, Algorithm::ring);
  EXPECT_NE(explain(beyond).find("beyond the sizes timed"), std::string::npos) << explain(beyond);
}

TEST(PlanChoice, ALongInterpolationIsNoEvidenceEither) {
  GroupPlan plan = model_plan();
  const Algorithm model_choice = choose_algorithm(plan, allreduce(16 << 10)).model_choice;
  const Algorithm other =
      model_choice == Algorithm::halving_doubling ? Algorithm::ring : Algorithm::halving_doubling;
  // `other` level with the model's choice at 4 KiB, at half its time at 64 KiB: interpolated,
  // clearly faster at 16 KiB.
  const auto relative = [&plan, model_choice, other](std::uint64_t bytes, double factor) {
    return factor * estimate_cost(allreduce(bytes), model_choice, plan.network).time_us /
           estimate_cost(allreduce(bytes), other, plan.network).time_us;
  };
  plan.calibration = {sample(plan, model_choice, 4 << 10, 1.0, 0.01),
                      sample(plan, other, 4 << 10, relative(4 << 10, 1.0), 0.01),
                      sample(plan, model_choice, 64 << 10, 1.0, 0.01),
                      sample(plan, other, 64 << 10, relative(64 << 10, 0.5), 0.01)};
  ASSERT_LT(predicted_range(plan, allreduce(16 << 10), other).high_us,
            predicted_range(plan, allreduce(16 << 10), model_choice).low_us);
  const AlgorithmChoice between = choose_algorithm(plan, allreduce(16 << 10));
  EXPECT_EQ(between.algorithm, model_choice) << explain(between);
  EXPECT_EQ(choose_algorithm(plan, allreduce(64 << 10)).algorithm, other);
}

TEST(PlanChoice, BeyondTheLargestSizeTheQuartilesKeepTheirDistanceFromTheMedian) {
  const GroupPlan plan = [] {
    GroupPlan result = model_plan();
    result.calibration = {sample(result, Algorithm::ring, 64 << 10, 1.0, 0.3),
                          sample(result, Algorithm::ring, 1 << 20, 1.0, 0.02)};
    return result;
  }();
  const PredictedRange range = predicted_range(plan, allreduce(64ull << 20), Algorithm::ring);
  EXPECT_NEAR(range.low_us / range.median_us, 0.98, 1e-9);
  EXPECT_NEAR(range.high_us / range.median_us, 1.02, 1e-9);
}

TEST(PlanChoice, ATrialRunsOneOpInItsEveryOfItsBucketAndNothingElse) {
  GroupPlan plan = model_plan();
  plan.table = build_table(plan);
  const Algorithm table_choice = plan.table.lookup(Collective::allreduce, 1 << 20);
  const Algorithm tried = table_choice == Algorithm::tree ? Algorithm::ring : Algorithm::tree;
  plan.trials = {{20, tried, 10}};
  int trials = 0;
  for (std::uint64_t op = 0; op < 10'000; ++op) {
    const Algorithm algorithm = algorithm_for_op(plan, Collective::allreduce, 1 << 20, op);
    ASSERT_TRUE(algorithm == table_choice || algorithm == tried) << name(algorithm);
    trials += algorithm == tried;
    EXPECT_EQ(algorithm, algorithm_for_op(plan, Collective::allreduce, 1 << 20, op))
        << "the same op picks the same on every rank";
    EXPECT_EQ(algorithm_for_op(plan, Collective::allreduce, 4 << 20, op),
              plan.table.lookup(Collective::allreduce, 4 << 20))
        << "another bucket";
    EXPECT_EQ(algorithm_for_op(plan, Collective::allgather, 1 << 20, op),
              plan.table.lookup(Collective::allgather, 1 << 20))
        << "another collective";
  }
  EXPECT_GT(trials, 800);
  EXPECT_LT(trials, 1200);
  // A training step of 4 ops repeats with its period; the trials still reach each of them.
  for (std::uint64_t position = 0; position < 4; ++position) {
    int reached = 0;
    for (std::uint64_t step = 0; step < 1000; ++step) {
      reached +=
          algorithm_for_op(plan, Collective::allreduce, 1 << 20, step * 4 + position) == tried;
    }
    EXPECT_GT(reached, 50) << "position " << position;
  }
}

TEST(AlgorithmTable, WithChangesOnlyTheRangeItNames) {
  const AlgorithmTable table({{Collective::allreduce, 0, Algorithm::tree},
                              {Collective::allreduce, 4096, Algorithm::ring},
                              {Collective::broadcast, 0, Algorithm::tree}});
  const AlgorithmTable changed =
      table.with(Collective::allreduce, 1 << 20, 2 << 20, Algorithm::halving_doubling);
  EXPECT_EQ(changed.lookup(Collective::allreduce, 4), Algorithm::tree);
  EXPECT_EQ(changed.lookup(Collective::allreduce, (1 << 20) - 4), Algorithm::ring);
  EXPECT_EQ(changed.lookup(Collective::allreduce, 1 << 20), Algorithm::halving_doubling);
  EXPECT_EQ(changed.lookup(Collective::allreduce, (2 << 20) - 4), Algorithm::halving_doubling);
  EXPECT_EQ(changed.lookup(Collective::allreduce, 2 << 20), Algorithm::ring);
  EXPECT_EQ(changed.lookup(Collective::broadcast, 1 << 20), Algorithm::tree);
  const AlgorithmTable onwards = table.with(
      Collective::allreduce, 8192, std::numeric_limits<std::uint64_t>::max(), Algorithm::hypercube);
  EXPECT_EQ(onwards.thresholds().size(), 4u) << onwards.describe();
  EXPECT_EQ(onwards.lookup(Collective::allreduce, 1ull << 40), Algorithm::hypercube);
  EXPECT_EQ(table.with(Collective::allreduce, 4096, 8192, Algorithm::ring), table)
      << "no change, no new thresholds";
}

}  // namespace
}  // namespace gradsync
