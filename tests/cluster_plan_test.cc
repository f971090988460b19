// The group's plan on a real local cluster (docs/architecture.md §9): measured when the group
// forms, the same on every rank, and what auto really runs; a forced algorithm, per op or per
// daemon, wins.
#include <gtest/gtest.h>

#include "client/full_plan.h"
#include "collective/algorithms.h"
#include "support/cluster.h"
#include "support/tensor_values.h"

namespace gradsync {
namespace {

using testing::Bytes;

class ClusterPlan : public ::testing::TestWithParam<int> {};

TEST_P(ClusterPlan, EveryRankHoldsTheSameMeasuredPlan) {
  const int p = GetParam();
  testing::TestCluster cluster = testing::start_cluster(p);
  ASSERT_EQ(static_cast<int>(cluster.clients.size()), p);
  const GroupPlan plan = full_plan(cluster.clients[0]);
  EXPECT_TRUE(plan.measured);
  EXPECT_EQ(plan.world_size, p);
  EXPECT_EQ(plan.generation, 1u);
  ASSERT_EQ(plan.network.per_link(), p > 1) << "a single rank has no links";
  for (int from = 0; from < p; ++from) {
    for (int to = 0; to < p; ++to) {
      if (from == to) continue;
      const LinkCost link = plan.network.link(from, to);
      EXPECT_GT(link.alpha_us, 0.0) << from << "->" << to;
      EXPECT_GT(link.beta_us_per_byte, 0.0) << from << "->" << to;
      EXPECT_EQ(link, plan.network.link(to, from)) << "both ends' mean, both ways";
    }
  }
  EXPECT_EQ(plan.gamma_us_per_byte.size(), static_cast<std::size_t>(p));
  EXPECT_GT(plan.network.gamma_us_per_byte, 0.0);
  // Calibrated unless there is nothing to calibrate: every algorithm at the smallest size at least.
  EXPECT_EQ(plan.calibration.empty(), p == 1);
  for (const CalibrationSample& sample : plan.calibration) {
    EXPECT_GT(sample.measured_us, 0.0);
    EXPECT_GT(sample.modelled_latency_us, 0.0);
  }
  for (Collective collective : kAllCollectives) {
    EXPECT_TRUE(supports(collective, plan.table.lookup(collective, 1 << 20))) << name(collective);
  }
  for (int rank = 1; rank < p; ++rank) {
    EXPECT_EQ(full_plan(cluster.clients[rank]), plan) << "rank " << rank;
  }
}

TEST_P(ClusterPlan, AutoRunsWhatTheTableSaysAndAForcedAlgorithmWins) {
  const int p = GetParam();
  testing::TestCluster cluster = testing::start_cluster(p);
  ASSERT_EQ(static_cast<int>(cluster.clients.size()), p);
  const GroupPlan plan = full_plan(cluster.clients[0]);
  const std::vector<std::uint64_t> counts = {1, 1000, 300'000};
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    for (std::uint64_t count : counts) {
      Bytes data = testing::contribution(DataType::f32, ReduceOp::sum, rank, count);
      Handle automatic = client.allreduce_async(data.data(), count, DataType::f32);
      automatic.wait();
      EXPECT_EQ(automatic.algorithm(), plan.table.lookup(Collective::allreduce, count * 4))
          << count << " elements";
      for (Algorithm forced : algorithms_for(Collective::allreduce)) {
        data = testing::contribution(DataType::f32, ReduceOp::sum, rank, count);
        OpOptions options;
        options.algorithm = forced;
        Handle handle = client.allreduce_async(data.data(), count, DataType::f32, options);
        handle.wait();
        EXPECT_EQ(handle.algorithm(), forced) << count << " elements";
        EXPECT_EQ(data, testing::expected_reduction(DataType::f32, ReduceOp::sum, p, count));
      }
    }
  });
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ClusterPlan, ::testing::Values(1, 2, 3, 4, 8),
                         [](const auto& param_info) {
                           return "p" + std::to_string(param_info.param);
                         });

TEST(ClusterPlan, AnAlgorithmForcedOnEveryDaemonRunsForEveryAutoOp) {
  testing::TestCluster cluster = testing::start_cluster(4, "ring");
  ASSERT_EQ(cluster.clients.size(), 4u);
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    for (std::uint64_t count : {1ull, 1000ull, 300'000ull}) {
      Bytes data = testing::contribution(DataType::f32, ReduceOp::sum, rank, count);
      Handle handle = client.allreduce_async(data.data(), count, DataType::f32);
      handle.wait();
      EXPECT_EQ(handle.algorithm(), Algorithm::ring) << count << " elements";
    }
  });
}

TEST(ClusterPlan, AModelGivenToTheCoordinatorReplacesTheMeasurement) {
  // α = 1 s makes every extra round ruinous: the table must pick the fewest rounds everywhere.
  testing::TestCluster cluster =
      testing::start_cluster(4, "", 0, {"--alpha-us", "1000000", "--beta-us-per-byte", "0.001"});
  ASSERT_EQ(cluster.clients.size(), 4u);
  const GroupPlan plan = full_plan(cluster.clients[0]);
  EXPECT_FALSE(plan.measured);
  EXPECT_FALSE(plan.network.per_link());
  EXPECT_TRUE(plan.calibration.empty());
  EXPECT_DOUBLE_EQ(plan.network.alpha_us, 1e6);
  EXPECT_EQ(plan.table.lookup(Collective::allreduce, 4), Algorithm::hypercube);
  EXPECT_EQ(plan.table.lookup(Collective::allreduce, 1 << 20), Algorithm::hypercube);
}

}  // namespace
}  // namespace gradsync
