// A table refined from real ops on a real local cluster (docs/architecture.md §9): a group started
// on a wrong table (the hypercube for large all-reduces) explores and switches versions while
// clients run a training-like loop, and every rank runs the same algorithm for every op: no
// mismatch, no wrong result, the same plan everywhere.
#include <gtest/gtest.h>

#include <algorithm>

#include "client/full_plan.h"
#include "support/cluster.h"
#include "support/tensor_values.h"

namespace gradsync {
namespace {

using testing::Bytes;

TEST(ClusterTableRefinement, EveryRankSwitchesTableVersionsAtTheSameOp) {
  constexpr int p = 4;
  constexpr std::uint64_t kCount = 1 << 18;  // 1 MiB of f32
  constexpr int kOps = 400;
  cli::LocalClusterOptions options;
  options.workers = p;
  options.coordinator_flags = {"--start-allreduce", "hypercube:262144", "--explore-every", "10"};
  testing::TestCluster cluster = testing::start_cluster(options);
  ASSERT_EQ(static_cast<int>(cluster.clients.size()), p);
  ASSERT_EQ(full_plan(cluster.clients[0]).table.lookup(Collective::allreduce, kCount * 4),
            Algorithm::hypercube);
  std::vector<std::vector<Algorithm>> used(p);
  const Bytes expected = testing::expected_reduction(DataType::f32, ReduceOp::sum, p, kCount);
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    for (int op = 0; op < kOps; ++op) {
      Bytes data = testing::contribution(DataType::f32, ReduceOp::sum, rank, kCount);
      Handle handle = client.allreduce_async(data.data(), kCount, DataType::f32);
      handle.wait();
      used[rank].push_back(handle.algorithm());
      ASSERT_EQ(data, expected) << "rank " << rank << ", op " << op;
    }
  });
  for (int rank = 1; rank < p; ++rank) {
    EXPECT_EQ(used[rank], used[0]) << "rank " << rank << " ran another algorithm for some op";
  }
  EXPECT_TRUE(std::any_of(used[0].begin(), used[0].end(), [](Algorithm algorithm) {
    return algorithm != Algorithm::hypercube;
  })) << "no trial or switch ran";
  const GroupPlan plan = full_plan(cluster.clients[0]);
  EXPECT_GE(plan.table_version, 2u);
  EXPECT_GE(plan.history.size(), 2u) << "the forced start, then what the real ops changed";
  for (int rank = 1; rank < p; ++rank) {
    EXPECT_EQ(full_plan(cluster.clients[rank]), plan) << "rank " << rank;
  }
}

}  // namespace
}  // namespace gradsync
