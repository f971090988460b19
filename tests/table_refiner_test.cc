// The coordinator's refinement of the table from real ops (daemon/table_refiner.h): noise does not
// flip a choice, a consistent advantage does, every rank must have timed enough, trials go only to
// close contenders, and a bad report is refused naming its sender.
#include "daemon/table_refiner.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "collective/algorithms.h"
#include "collective/plan_choice.h"
#include "proto/convert.h"

namespace gradsync::daemon {
namespace {

constexpr int kRanks = 4;
constexpr int kBucket = 20;  // 1 MiB up to 2 MiB

GroupPlan model_plan() {
  GroupPlan plan;
  plan.generation = 5;
  plan.world_size = kRanks;
  plan.network = NetworkModel::uniform(10.0, 0.001);
  plan.table = build_table(plan);
  return plan;
}

proto::OpTimesReport report(const std::vector<std::tuple<Algorithm, double, double, double>>& times,
                            std::uint64_t ops = 32, std::uint64_t generation = 5) {
  proto::OpTimesReport result;
  result.set_generation(generation);
  for (const auto& [algorithm, low, median, high] : times) {
    proto::OpTimes& entry = *result.add_times();
    entry.set_size_log2(kBucket);
    entry.set_algorithm(to_proto(algorithm));
    entry.set_ops(ops);
    entry.set_low_us(low);
    entry.set_median_us(median);
    entry.set_high_us(high);
  }
  return result;
}

TEST(TableRefiner, NoiseDoesNotFlipTheTableAndAConsistentAdvantageDoes) {
  const GroupPlan plan = model_plan();
  const Algorithm running = plan.table.lookup(Collective::allreduce, 1 << kBucket);
  const Algorithm other =
      running == Algorithm::ring ? Algorithm::halving_doubling : Algorithm::ring;
  TableRefiner refiner(plan, 0);
  // The other is faster by its median on every rank, but the quartiles overlap.
  for (int rank = 0; rank < kRanks; ++rank) {
    ASSERT_TRUE(
        refiner.take(rank, report({{running, 950, 1000, 1100}, {other, 850, 900, 1000}})).ok());
  }
  EXPECT_FALSE(refiner.next().has_value()) << "noise";
  // Clear on three ranks; the fourth's slowest quartile still overlaps: the group's view is the
  // slowest rank's.
  for (int rank = 0; rank < kRanks - 1; ++rank) {
    ASSERT_TRUE(
        refiner.take(rank, report({{running, 950, 1000, 1100}, {other, 700, 750, 800}})).ok());
  }
  EXPECT_FALSE(refiner.next().has_value());
  ASSERT_TRUE(
      refiner.take(kRanks - 1, report({{running, 950, 1000, 1100}, {other, 700, 760, 820}})).ok());
  const std::optional<GroupPlan> next = refiner.next();
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->table_version, 2u);
  EXPECT_EQ(next->table.lookup(Collective::allreduce, 1 << kBucket), other);
  EXPECT_EQ(next->table.lookup(Collective::allreduce, (2 << kBucket) - 4), other);
  EXPECT_EQ(next->table.lookup(Collective::allreduce, 2 << kBucket),
            plan.table.lookup(Collective::allreduce, 2 << kBucket))
      << "only the bucket the evidence is of";
  EXPECT_EQ(next->table.lookup(Collective::allreduce, (1 << kBucket) - 4),
            plan.table.lookup(Collective::allreduce, (1 << kBucket) - 4));
  ASSERT_EQ(next->history.size(), 1u);
  EXPECT_EQ(next->history[0].version, 2u);
  EXPECT_NE(next->history[0].why.find("in real ops, clear of " + std::string(name(running))),
            std::string::npos)
      << next->history[0].why;
}

TEST(TableRefiner, EveryRankMustHaveTimedEnoughOps) {
  const GroupPlan plan = model_plan();
  const Algorithm running = plan.table.lookup(Collective::allreduce, 1 << kBucket);
  const Algorithm other = running == Algorithm::ring ? Algorithm::tree : Algorithm::ring;
  TableRefiner refiner(plan, 0);
  for (int rank = 0; rank < kRanks; ++rank) {
    const std::uint64_t ops = rank == 2 ? TableRefiner::kMinOps - 1 : 32;
    ASSERT_TRUE(
        refiner.take(rank, report({{running, 950, 1000, 1100}, {other, 100, 110, 120}}, ops)).ok());
  }
  EXPECT_FALSE(refiner.next().has_value()) << "rank 2 has timed too few";
}

TEST(TableRefiner, TrialsGoOnlyToCloseContendersNotYetTimed) {
  GroupPlan plan = model_plan();
  const OpShape shape{Collective::allreduce, kRanks, (1 << kBucket) / 4, 4};
  // The hypercube forced at 1 MiB: the ring and halving-doubling are predicted faster.
  plan.table =
      plan.table.with(Collective::allreduce, 1 << kBucket, 2 << kBucket, Algorithm::hypercube);
  TableRefiner refiner(plan, 50);
  for (int rank = 0; rank < kRanks; ++rank) {
    ASSERT_TRUE(refiner.take(rank, report({{Algorithm::hypercube, 950, 1000, 1100}})).ok());
  }
  const std::optional<GroupPlan> next = refiner.next();
  ASSERT_TRUE(next.has_value());
  EXPECT_EQ(next->table, plan.table) << "no evidence for another algorithm yet";
  const double hypercube_us = predicted_us(plan, shape, Algorithm::hypercube);
  ASSERT_FALSE(next->trials.empty());
  for (const TableTrial& trial : next->trials) {
    EXPECT_EQ(trial.size_log2, kBucket);
    EXPECT_NE(trial.algorithm, Algorithm::hypercube);
    const double trial_us = predicted_us(plan, shape, trial.algorithm);
    EXPECT_LE(trial_us, 1.1 * hypercube_us) << name(trial.algorithm);
    EXPECT_EQ(trial.every, trial_us < hypercube_us ? 10 : 50) << name(trial.algorithm);
  }
  for (Algorithm algorithm : algorithms_for(Collective::allreduce)) {
    const bool tried =
        std::any_of(next->trials.begin(), next->trials.end(),
                    [&](const TableTrial& trial) { return trial.algorithm == algorithm; });
    const bool contender = algorithm != Algorithm::hypercube &&
                           predicted_us(plan, shape, algorithm) <= 1.1 * hypercube_us;
    EXPECT_EQ(tried, contender) << name(algorithm);
  }
  EXPECT_NE(next->history.back().why.find("trials:"), std::string::npos);
  // Without exploration, nothing.
  TableRefiner quiet(plan, 0);
  for (int rank = 0; rank < kRanks; ++rank) {
    ASSERT_TRUE(quiet.take(rank, report({{Algorithm::hypercube, 950, 1000, 1100}})).ok());
  }
  EXPECT_FALSE(quiet.next().has_value());
}

TEST(TableRefiner, ABadReportIsRefusedNamingItsSender) {
  TableRefiner refiner(model_plan(), 50);
  const auto refused = [&refiner](const proto::OpTimesReport& bad) {
    const Status status = refiner.take(3, bad);
    EXPECT_EQ(status.code(), ErrorCode::protocol_error);
    EXPECT_NE(status.message().find("rank 3 sent bad op times"), std::string::npos);
    return status.message();
  };
  EXPECT_NE(refused(report({{Algorithm::ring, 1, 2, 3}}, 32, 4)).find("generation 4"),
            std::string::npos);
  EXPECT_NE(refused(report({{Algorithm::ring, 3, 2, 1}})).find("in order"), std::string::npos);
  EXPECT_NE(refused(report({{Algorithm::ring, 1, 2, 3}}, 0)).find("of no ops"), std::string::npos);
  EXPECT_NE(refused(report({{Algorithm::ring, 1, 2, 3}, {Algorithm::ring, 1, 2, 3}}))
                .find("listed twice"),
            std::string::npos);
  EXPECT_NE(refused(report({{Algorithm::bruck, 1, 2, 3}})).find("not an all-reduce"),
            std::string::npos);
  proto::OpTimesReport huge = report({{Algorithm::ring, 1, 2, 3}});
  huge.mutable_times(0)->set_size_log2(63);
  refused(huge);
  proto::OpTimesReport not_a_number = report({{Algorithm::ring, 1, 2, 3}});
  not_a_number.mutable_times(0)->set_median_us(std::nan(""));
  refused(not_a_number);
}

}  // namespace
}  // namespace gradsync::daemon
