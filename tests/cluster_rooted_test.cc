// Reduce, gather and scatter on real local clusters, flat and with local ranks: on every rank and
// from every root, against closed forms; the ranks that are not the root keep their memory as it
// was. A root that is not a rank is refused on every rank, and the group serves on.
#include <gtest/gtest.h>

#include <mutex>
#include <numeric>

#include "collective/algorithms.h"
#include "collective/partition.h"
#include "support/cluster.h"
#include "support/failures.h"
#include "support/tensor_values.h"
#include "support/test_names.h"

namespace gradsync {
namespace {

using testing::Bytes;

// By host, how many ranks each daemon serves.
using Layout = std::vector<int>;

class ClusterRooted : public ::testing::TestWithParam<Layout> {
 protected:
  testing::TestCluster start() {
    cli::LocalClusterOptions options;
    options.workers = static_cast<int>(GetParam().size());
    options.local_ranks = GetParam();
    options.segment_bytes = 64 << 10;
    options.coordinator_flags = {"--calibration-ms", "0"};
    return testing::start_cluster(options);
  }

  testing::Failures failures_;
};

// Rank `owner`'s chunk of the balanced partition of `count` elements of `size` bytes, as a pattern
// of its own for each `tag`: what one op leaves in a reused region must not pass for another's.
Bytes chunk_pattern(int owner, int tag, int p, std::uint64_t count, std::size_t size) {
  return testing::pattern(owner, tag, balanced_chunk(count, p, owner).count * size);
}

// Every rank's chunk in rank order.
Bytes all_chunks(int tag, int p, std::uint64_t count, std::size_t size) {
  Bytes all;
  for (int owner = 0; owner < p; ++owner) {
    const Bytes chunk = chunk_pattern(owner, tag, p, count, size);
    all.insert(all.end(), chunk.begin(), chunk.end());
  }
  return all;
}

TEST_P(ClusterRooted, ReduceGatherAndScatterGiveTheRootsResultAndLeaveTheOthersAlone) {
  const Layout& layout = GetParam();
  const int p = std::accumulate(layout.begin(), layout.end(), 0);
  testing::TestCluster cluster = start();
  ASSERT_EQ(static_cast<int>(cluster.clients.size()), p);
  const std::vector<std::uint64_t> counts = {0, 1, static_cast<std::uint64_t>(p - 1), 1000,
                                             300'007};
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    for (const std::uint64_t n : counts) {
      for (const int root : {0, p - 1, p / 2}) {
        const std::string where = " n=" + std::to_string(n) + " root " + std::to_string(root) +
                                  " rank " + std::to_string(rank);
        OpOptions options;
        options.root = root;
        try {
          for (const Algorithm algorithm : algorithms_for(Collective::reduce)) {
            for (const auto& [type, op] :
                 {std::pair{DataType::f32, ReduceOp::sum}, std::pair{DataType::i64, ReduceOp::prod},
                  std::pair{DataType::f64, ReduceOp::avg}}) {
              OpOptions reduce = options;
              reduce.op = op;
              reduce.algorithm = algorithm;
              Bytes data = testing::contribution(type, op, rank, n);
              client.reduce(data.data(), n, type, reduce);
              const Bytes expected = rank == root ? testing::expected_reduction(type, op, p, n)
                                                  : testing::contribution(type, op, rank, n);
              if (data != expected) {
                failures_.record("reduce/" + std::string(name(algorithm)) + " " +
                                 std::string(name(type)) + " " + std::string(name(op)) + where);
              }
            }
          }
          const std::size_t size = 2;
          const int tag = static_cast<int>(n % 97) + root;
          const Bytes mine = chunk_pattern(rank, tag, p, n, size);
          Bytes gathered(n * size, std::byte{0xEE});
          client.gather(mine.data(), gathered.data(), n, DataType::bf16, options);
          const Bytes untouched(n * size, std::byte{0xEE});
          if (gathered != (rank == root ? all_chunks(tag, p, n, size) : untouched)) {
            failures_.record("gather" + where);
          }
          const Bytes whole = rank == root ? all_chunks(tag + 1, p, n, size) : Bytes();
          Bytes received(mine.size(), std::byte{0xEE});
          client.scatter(rank == root ? whole.data() : nullptr, received.data(), n, DataType::bf16,
                         options);
          if (received != chunk_pattern(rank, tag + 1, p, n, size))
            failures_.record("scatter" + where);
        } catch (const ClientError& error) {
          failures_.record(std::string(error.what()) + where);
        }
      }
    }
  });
  failures_.expect_none();
}

TEST_P(ClusterRooted, ARootThatIsNotARankIsRefusedOnEveryRankAndTheGroupServesOn) {
  const Layout& layout = GetParam();
  const int p = std::accumulate(layout.begin(), layout.end(), 0);
  testing::TestCluster cluster = start();
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    for (const int root : {p, -1}) {
      OpOptions options;
      options.root = root;
      Bytes data(40);
      try {
        client.reduce(data.data(), 10, DataType::f32, options);
        failures_.record("a reduce to root " + std::to_string(root) + " ran on rank " +
                         std::to_string(rank));
      } catch (const ClientError& error) {
        const std::string expected = "root " + std::to_string(root) + " is not a rank";
        if (error.code() != ErrorCode::invalid_argument ||
            std::string(error.what()).find(expected) == std::string::npos) {
          failures_.record(std::string("rank ") + std::to_string(rank) + ": " + error.what());
        }
      }
    }
    Bytes data = testing::contribution(DataType::i32, ReduceOp::sum, rank, 100);
    client.allreduce(data.data(), 100, DataType::i32);
    if (data != testing::expected_reduction(DataType::i32, ReduceOp::sum, p, 100)) {
      failures_.record("the all-reduce after them, rank " + std::to_string(rank));
    }
  });
  failures_.expect_none();
}

INSTANTIATE_TEST_SUITE_P(Layouts, ClusterRooted,
                         ::testing::Values(Layout{1, 1}, Layout{1, 1, 1}, Layout{1, 1, 1, 1, 1},
                                           Layout{2, 1, 3}),
                         [](const auto& param) { return testing::layout_name(param.param); });

}  // namespace
}  // namespace gradsync
