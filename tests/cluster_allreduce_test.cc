// Every all-reduce algorithm on a real local cluster (one gradsyncd per rank, loopback TCP), for
// several world sizes, counts, dtypes and ops: integers bitwise, floats within a stated tolerance
// (here exact, since the inputs are small integers), and bitwise equal across ranks.
#include <gtest/gtest.h>

#include <mutex>
#include <set>

#include "collective/algorithms.h"
#include "support/cluster.h"
#include "support/tensor_values.h"

namespace gradsync {
namespace {

using testing::Bytes;

class ClusterAllreduce : public ::testing::TestWithParam<int> {};

TEST_P(ClusterAllreduce, EveryAlgorithmGivesTheReferenceOnEveryRank) {
  const int p = GetParam();
  // A small segment, so that the 1 000 003-element case crosses many segments.
  testing::TestCluster cluster = testing::start_cluster(p, "", 64 << 10);
  ASSERT_EQ(static_cast<int>(cluster.clients.size()), p);
  const std::set<std::uint64_t> counts = {0, 1, static_cast<std::uint64_t>(p - 1), 1000, 1'000'003};
  struct Op {
    Algorithm algorithm;
    std::uint64_t count;
    DataType type;
    ReduceOp op;
  };
  std::vector<Op> ops;
  for (Algorithm algorithm : algorithms_for(Collective::allreduce)) {
    for (std::uint64_t n : counts) {
      if (n > 1000) {
        ops.push_back({algorithm, n, DataType::f32, ReduceOp::sum});
        continue;
      }
      for (DataType type :
           {DataType::f32, DataType::f64, DataType::bf16, DataType::i32, DataType::u8}) {
        for (ReduceOp op : {ReduceOp::sum, ReduceOp::min, ReduceOp::avg}) {
          ops.push_back({algorithm, n, type, op});
        }
      }
    }
  }
  std::mutex failures_mutex;
  std::vector<std::string> failures;
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    for (const Op& op : ops) {
      Bytes data = testing::contribution(op.type, op.op, rank, op.count);
      OpOptions options;
      options.op = op.op;
      options.algorithm = op.algorithm;
      std::string what = std::string(name(op.algorithm)) + " n=" + std::to_string(op.count) + " " +
                         std::string(name(op.type)) + " " + std::string(name(op.op)) + " rank " +
                         std::to_string(rank);
      try {
        client.allreduce(data.data(), op.count, op.type, options);
        if (data != testing::expected_reduction(op.type, op.op, p, op.count)) {
          std::lock_guard lock(failures_mutex);
          failures.push_back(what + ": wrong result");
        }
      } catch (const ClientError& error) {
        std::lock_guard lock(failures_mutex);
        failures.push_back(what + ": " + error.what());
      }
    }
  });
  EXPECT_TRUE(failures.empty()) << failures.size() << " failures, first: " << failures.front();
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ClusterAllreduce, ::testing::Values(1, 2, 3, 4, 5, 7, 8),
                         [](const auto& param_info) {
                           return "p" + std::to_string(param_info.param);
                         });

}  // namespace
}  // namespace gradsync
