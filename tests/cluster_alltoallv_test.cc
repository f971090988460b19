// Alltoallv on real daemons (docs/clients.md, "Collectives"): random splits, zeros among them and
// blocks of several segments, at p = 2, 3 and 5 and with local ranks ({2, 1, 3}, {2, 2}), checked
// block by block on every rank; counts whose two ends disagree fail on every rank, naming the pair,
// and the daemons serve on.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>
#include <random>

#include "collective/schedule.h"
#include "support/cluster.h"
#include "support/failures.h"
#include "support/tensor_values.h"

namespace gradsync {
namespace {

using testing::Bytes;

// By host, how many ranks each daemon serves.
using Layout = std::vector<int>;

testing::TestCluster start_hosts(const Layout& layout) {
  cli::LocalClusterOptions options;
  options.workers = static_cast<int>(layout.size());
  options.local_ranks = layout;
  options.segment_bytes = 64 << 10;
  options.coordinator_flags = {"--calibration-ms", "0"};
  return testing::start_cluster(options);
}

// The same splits on every rank: from one seed, up to `most` elements, a third of them zero.
std::vector<std::uint64_t> splits_for(int p, std::uint64_t most, unsigned seed) {
  std::mt19937 random(seed);
  std::uniform_int_distribution<std::uint64_t> count(0, most);
  std::vector<std::uint64_t> splits(static_cast<std::size_t>(p) * p);
  for (auto& split : splits) split = random() % 3 == 0 ? 0 : count(random);
  return splits;
}

class ClusterAlltoallv : public ::testing::TestWithParam<Layout> {};

TEST_P(ClusterAlltoallv, EveryBlockReachesItsRankWhateverItsLength) {
  const Layout& layout = GetParam();
  const int p = std::accumulate(layout.begin(), layout.end(), 0);
  testing::TestCluster cluster = start_hosts(layout);
  ASSERT_EQ(static_cast<int>(cluster.clients.size()), p);
  testing::Failures failures;
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    unsigned seed = 1;
    for (const std::uint64_t most : {0ull, 3ull, 1000ull, 100'000ull}) {
      for (const DataType type : {DataType::i16, DataType::f32}) {
        const std::string where = " (rank " + std::to_string(rank) + ", splits up to " +
                                  std::to_string(most) + " " + std::string(name(type)) + ")";
        const OpShape shape = alltoallv_shape(p, splits_for(p, most, seed++), element_size(type));
        std::vector<std::uint64_t> send_counts(p);
        std::vector<std::uint64_t> recv_counts(p);
        Bytes input;
        for (int peer = 0; peer < p; ++peer) {
          send_counts[peer] = split(shape, rank, peer);
          recv_counts[peer] = split(shape, peer, rank);
          const Bytes block = testing::pattern(rank, peer, send_counts[peer] * shape.element_size);
          input.insert(input.end(), block.begin(), block.end());
        }
        Bytes output(output_bytes(shape, rank), std::byte{0xCD});
        try {
          client.alltoallv(input.data(), send_counts, output.data(), recv_counts, type);
        } catch (const ClientError& error) {
          failures.record(error.what() + where);
          continue;
        }
        std::uint64_t at = 0;
        for (int from = 0; from < p; ++from) {
          const Bytes expected =
              testing::pattern(from, rank, recv_counts[from] * shape.element_size);
          if (!std::equal(expected.begin(), expected.end(), output.begin() + at)) {
            failures.record("the block from rank " + std::to_string(from) + where);
          }
          at += expected.size();
        }
      }
    }
  });
  failures.expect_none();
}

INSTANTIATE_TEST_SUITE_P(Layouts, ClusterAlltoallv,
                         ::testing::Values(Layout{1, 1}, Layout{1, 1, 1}, Layout{1, 1, 1, 1, 1},
                                           Layout{2, 1, 3}, Layout{2, 2}),
                         [](const auto& param) {
                           std::string text = "hosts";
                           for (const int ranks : param.param) text += "_" + std::to_string(ranks);
                           return text;
                         });

TEST(ClusterAlltoallvInput, CountsThatDisagreeFailOnEveryRankNamingThePairAndTheDaemonsServeOn) {
  testing::TestCluster cluster = start_hosts({1, 2});
  testing::Failures failures;
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    // Every rank sends one element to each; rank 2 expects two from rank 0.
    const std::vector<std::uint64_t> send_counts(3, 1);
    std::vector<std::uint64_t> recv_counts(3, 1);
    if (rank == 2) recv_counts[0] = 2;
    std::vector<float> input(3, 1.0f);
    std::vector<float> output(4, 0.0f);
    try {
      client.alltoallv(input.data(), send_counts, output.data(), recv_counts, DataType::f32);
      failures.record("rank " + std::to_string(rank) + "'s alltoallv succeeded");
    } catch (const ClientError& error) {
      const std::string what = error.what();
      if (error.code() != ErrorCode::invalid_argument ||
          what.find("rank 0 sends 1 elements to rank 2, which expects 2") == std::string::npos) {
        failures.record("rank " + std::to_string(rank) + ": " + what);
      }
    }
  });
  failures.expect_none();
  testing::expect_every_rank_still_serves(cluster);
}

TEST(ClusterAlltoallvInput, ACountListOfTheWrongLengthIsRefusedSayingSo) {
  testing::TestCluster cluster = start_hosts({1, 1});
  const std::vector<std::uint64_t> three(3, 0);
  const std::vector<std::uint64_t> two(2, 0);
  try {
    cluster.clients[0].alltoallv(nullptr, three, nullptr, two, DataType::f32);
    FAIL() << "three send counts in a group of two were taken";
  } catch (const ClientError& error) {
    EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
    EXPECT_NE(std::string(error.what()).find("each of the 2 ranks; got 3 and 2"),
              std::string::npos)
        << error.what();
  }
  testing::expect_every_rank_still_serves(cluster);
}

}  // namespace
}  // namespace gradsync
