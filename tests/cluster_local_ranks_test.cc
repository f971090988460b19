// Daemons that serve several local ranks (--local-ranks): every collective with the semantics of a
// flat group of every host's ranks, checked against closed forms on every rank; ops that local
// ranks submit differently, or not at all, or whose client goes, fail on every rank, saying why,
// and the daemons serve on.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdlib>
#include <mutex>
#include <numeric>
#include <thread>

#include "cli/connect_clients.h"
#include "collective/partition.h"
#include "support/cluster.h"
#include "support/failures.h"
#include "support/tensor_values.h"
#include "support/test_names.h"

namespace gradsync {
namespace {

using testing::Bytes;

constexpr auto kFailFast = std::chrono::seconds(10);

// By host, how many ranks each daemon serves.
using Layout = std::vector<int>;

class ClusterLocalRanks : public ::testing::TestWithParam<Layout> {};

TEST_P(ClusterLocalRanks, EveryCollectiveGivesWhatAFlatGroupOfEveryRankWould) {
  const Layout& layout = GetParam();
  const int p = std::accumulate(layout.begin(), layout.end(), 0);
  testing::TestCluster cluster = testing::start_hosts(layout);
  ASSERT_EQ(static_cast<int>(cluster.clients.size()), p);
  testing::Failures failures;
  const std::vector<std::uint64_t> counts = {0, 1, static_cast<std::uint64_t>(p - 1), 1000,
                                             1'000'003};
  const std::vector<std::pair<DataType, ReduceOp>> reductions = {
      {DataType::f32, ReduceOp::sum},     {DataType::i64, ReduceOp::prod},
      {DataType::bf16, ReduceOp::max},    {DataType::f64, ReduceOp::avg},
      {DataType::i32, ReduceOp::min},     {DataType::c128, ReduceOp::prod},
      {DataType::boolean, ReduceOp::sum}, {DataType::i8, ReduceOp::bxor}};
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    if (client.rank() != rank || client.world_size() != p) {
      failures.record("rank " + std::to_string(rank) + " calls itself rank " +
                      std::to_string(client.rank()) + " of " + std::to_string(client.world_size()));
      return;
    }
    for (const std::uint64_t n : counts) {
      const std::string where = " n=" + std::to_string(n) + " rank " + std::to_string(rank);
      try {
        for (const auto& [type, op] : reductions) {
          const std::size_t size = element_size(type);
          Bytes data = testing::contribution(type, op, rank, n);
          OpOptions options;
          options.op = op;
          client.allreduce(data.data(), n, type, options);
          if (data != testing::expected_reduction(type, op, p, n)) {
            failures.record("allreduce " + std::string(name(type)) + " " + std::string(name(op)) +
                            where);
          }
          // Reduce-scatter: this rank's chunk of the balanced partition over every rank.
          const Bytes input = testing::contribution(type, op, rank, n);
          const Chunk mine = balanced_chunk(n, p, rank);
          Bytes chunk(mine.count * size);
          client.reduce_scatter(input.data(), n, chunk.data(), type, options);
          const Bytes all = testing::expected_reduction(type, op, p, n);
          if (chunk != Bytes(all.begin() + mine.offset * size, all.begin() + mine.end() * size)) {
            failures.record("reduce_scatter " + std::string(name(type)) + " " +
                            std::string(name(op)) + where);
          }
        }
        // All-gather: every rank's chunk, in rank order.
        const Chunk mine = balanced_chunk(n, p, rank);
        const Bytes own = testing::pattern(rank, 1, mine.count * 4);
        Bytes gathered(n * 4);
        client.allgather(own.data(), gathered.data(), n, DataType::f32);
        for (int owner = 0; owner < p; ++owner) {
          const Chunk theirs = balanced_chunk(n, p, owner);
          const Bytes expected = testing::pattern(owner, 1, theirs.count * 4);
          if (!std::equal(expected.begin(), expected.end(), gathered.begin() + theirs.offset * 4)) {
            failures.record("allgather, rank " + std::to_string(owner) + "'s chunk" + where);
          }
        }
        // Broadcast from the last rank, and from rank 1 (host 0's second local rank, or host 1).
        for (const int root : {p - 1, std::min(1, p - 1)}) {
          OpOptions from_root;
          from_root.root = root;
          Bytes data = rank == root ? testing::pattern(root, 2, n * 8) : Bytes(n * 8);
          client.broadcast(data.data(), n, DataType::f64, from_root);
          if (data != testing::pattern(root, 2, n * 8)) {
            failures.record("broadcast from " + std::to_string(root) + where);
          }
        }
        // All-to-all: block j goes to rank j.
        const std::uint64_t block = n == 1'000'003 ? n / static_cast<std::uint64_t>(p) : n;
        for (const Algorithm algorithm : {Algorithm::direct, Algorithm::bruck}) {
          Bytes blocks(static_cast<std::size_t>(p) * block * 2);
          for (int j = 0; j < p; ++j) {
            const Bytes part = testing::pattern(rank, j, block * 2);
            std::copy(part.begin(), part.end(), blocks.begin() + j * block * 2);
          }
          Bytes received(blocks.size());
          OpOptions options;
          options.algorithm = algorithm;
          client.alltoall(blocks.data(), received.data(), block, DataType::bf16, options);
          for (int i = 0; i < p; ++i) {
            const Bytes expected = testing::pattern(i, rank, block * 2);
            if (!std::equal(expected.begin(), expected.end(), received.begin() + i * block * 2)) {
              failures.record("alltoall/" + std::string(name(algorithm)) + " from rank " +
                              std::to_string(i) + where);
            }
          }
        }
        client.barrier();
      } catch (const ClientError& error) {
        failures.record(std::string(error.what()) + where);
      }
    }
  });
  failures.expect_none();
}

INSTANTIATE_TEST_SUITE_P(Layouts, ClusterLocalRanks,
                         ::testing::Values(Layout{2}, Layout{3}, Layout{2, 2}, Layout{3, 3},
                                           Layout{1, 3}, Layout{2, 1, 2}, Layout{3, 1, 2},
                                           Layout{2, 2, 2, 2}, Layout{1, 1, 1, 1}),
                         [](const auto& param) { return testing::layout_name(param.param); });

// Every rank runs an all-reduce and gets the sum: nothing of an op that failed is left behind.
void expect_every_rank_runs_an_op(testing::TestCluster& cluster) {
  const int p = static_cast<int>(cluster.clients.size());
  testing::Failures failures;
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    Bytes data = testing::contribution(DataType::i32, ReduceOp::sum, rank, 1000);
    try {
      client.allreduce(data.data(), 1000, DataType::i32);
      if (data != testing::expected_reduction(DataType::i32, ReduceOp::sum, p, 1000)) {
        failures.record("rank " + std::to_string(rank) + " wrong after the failed op");
      }
    } catch (const ClientError& error) {
      failures.record(error.what());
    }
  });
  failures.expect_none();
}

// Every rank but `late`, of host 0, submits an op: they fail with `code` within kFailFast, their
// message naming `named`. Host 0's ranks wait 600 ms for `late`; the others longer, so that what
// fails them is host 0's word, not their own deadline.
void expect_one_op_lost(testing::TestCluster& cluster, int late, ErrorCode code,
                        const std::string& named) {
  const int host_zero = cluster.clients.front().local_world_size();
  testing::Failures failures;
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    if (rank == late) return;
    Bytes data = testing::contribution(DataType::f32, ReduceOp::sum, rank, 100);
    OpOptions options;
    options.timeout = std::chrono::milliseconds(rank < host_zero ? 600 : 5000);
    const auto start = std::chrono::steady_clock::now();
    try {
      client.allreduce(data.data(), 100, DataType::f32, options);
      failures.record("rank " + std::to_string(rank) + "'s op succeeded without rank " +
                      std::to_string(late));
    } catch (const ClientError& error) {
      const std::string what = error.what();
      if (error.code() != code || what.find(named) == std::string::npos) {
        failures.record("rank " + std::to_string(rank) + ": " + what);
      }
    }
    if (std::chrono::steady_clock::now() - start > kFailFast) {
      failures.record("rank " + std::to_string(rank) + " waited past " +
                      std::to_string(kFailFast.count()) + " s");
    }
  });
  failures.expect_none();
}

TEST(ClusterLocalRanksFailures, ALocalRankThatSubmitsNothingFailsItsPlaceOnEveryRank) {
  testing::TestCluster cluster = testing::start_hosts({2, 1});
  ASSERT_EQ(cluster.clients.size(), 3u);
  expect_one_op_lost(cluster, 1, ErrorCode::deadline_exceeded, "local rank 1 (rank 1)");
  // Its own op at that place fails when it comes, saying why; the next ops pair again.
  Bytes late = testing::contribution(DataType::f32, ReduceOp::sum, 1, 100);
  try {
    cluster.clients[1].allreduce(late.data(), 100, DataType::f32);
    ADD_FAILURE() << "the late rank's op succeeded alone";
  } catch (const ClientError& error) {
    EXPECT_NE(std::string(error.what()).find("failed on every rank without it"), std::string::npos)
        << error.what();
  }
  expect_every_rank_runs_an_op(cluster);
}

TEST(ClusterLocalRanksFailures, ALocalClientThatGoesFailsTheOthersAtOnceAndTheDaemonsServeOn) {
  testing::TestCluster cluster = testing::start_hosts({2, 1});
  ASSERT_EQ(cluster.clients.size(), 3u);
  // Every rank's client submits: rank 1's is its rank's submitting client when it goes.
  testing::on_every_rank(cluster, [&](int, Client& client) { EXPECT_NO_THROW(client.barrier()); });
  std::thread leaver([&] {
    std::this_thread::sleep_for(std::chrono::milliseconds(300));
    Client gone = std::move(cluster.clients[1]);
  });
  // The others' ops would wait 30 s for rank 1's; its client goes after 300 ms.
  testing::Failures failures;
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    if (rank == 1) return;
    Bytes data = testing::contribution(DataType::f32, ReduceOp::sum, rank, 100);
    OpOptions options;
    options.timeout = std::chrono::seconds(30);
    const auto start = std::chrono::steady_clock::now();
    try {
      client.allreduce(data.data(), 100, DataType::f32, options);
      failures.record("rank " + std::to_string(rank) + "'s op succeeded without rank 1");
    } catch (const ClientError& error) {
      const std::string what = error.what();
      // Told by rank 1's daemon, whichever comes first: the place its local rank left, or the
      // end of that rank's stream.
      if (error.code() != ErrorCode::aborted ||
          (what.find("local rank 1 (rank 1)") == std::string::npos &&
           what.find("rank 1's client") == std::string::npos)) {
        failures.record("rank " + std::to_string(rank) + ": " + what);
      }
    }
    if (std::chrono::steady_clock::now() - start > kFailFast) {
      failures.record("rank " + std::to_string(rank) + " waited for its timeout");
    }
  });
  leaver.join();
  failures.expect_none();
  // A training job that lost a process starts again: new clients on every rank run ops.
  cluster.clients.clear();
  cluster.clients = cli::connect_clients(cluster.cluster->rank_sockets(), std::chrono::seconds(10));
  expect_every_rank_runs_an_op(cluster);
}

TEST(ClusterLocalRanksFailures, LocalRanksThatSubmitDifferentOpsFailOnEveryRankNamingBoth) {
  testing::TestCluster cluster = testing::start_hosts({2, 2});
  ASSERT_EQ(cluster.clients.size(), 4u);
  testing::Failures failures;
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    // Rank 3 (host 1's local rank 1) submits one element more than the others.
    const std::uint64_t n = rank == 3 ? 101 : 100;
    Bytes data = testing::contribution(DataType::f32, ReduceOp::sum, rank, n);
    try {
      client.allreduce(data.data(), n, DataType::f32);
      failures.record("rank " + std::to_string(rank) + " ran a mismatched op");
    } catch (const ClientError& error) {
      const std::string what = error.what();
      if (error.code() != ErrorCode::mismatch ||
          what.find("rank 2 submitted") == std::string::npos ||
          what.find("rank 3 submitted") == std::string::npos) {
        failures.record("rank " + std::to_string(rank) + ": " + what);
      }
    }
  });
  failures.expect_none();
  expect_every_rank_runs_an_op(cluster);
}

TEST(ClusterLocalRanksInput, AClientOfALocalRankTheDaemonDoesNotServeIsRefusedSayingWhich) {
  testing::TestCluster cluster = testing::start_hosts({2});
  ASSERT_EQ(cluster.clients.size(), 2u);
  const std::string socket = cluster.cluster->sockets()[0];
  for (const int wrong : {2, -1}) {
    try {
      Client::connect(socket, std::chrono::seconds(5), wrong);
      ADD_FAILURE() << "local rank " << wrong << " was served";
    } catch (const ClientError& error) {
      EXPECT_EQ(error.code(), ErrorCode::invalid_argument);
      EXPECT_NE(std::string(error.what())
                    .find("local rank " + std::to_string(wrong) + " is not one of the 2"),
                std::string::npos)
          << error.what();
    }
  }
  // A second submitting client of a stream for a local rank that has one is refused, naming the
  // first.
  testing::on_every_rank(cluster, [&](int, Client& client) { EXPECT_NO_THROW(client.barrier()); });
  Client second = Client::connect(socket, ConnectOptions{std::chrono::seconds(5), 1, {}, "0", {}});
  EXPECT_EQ(second.rank(), 1);
  EXPECT_EQ(second.local_rank(), 1);
  EXPECT_EQ(second.local_world_size(), 2);
  try {
    second.barrier();
    ADD_FAILURE() << "a second client submitted for local rank 1";
  } catch (const ClientError& error) {
    EXPECT_NE(std::string(error.what()).find("rank 1 already has a submitting client"),
              std::string::npos)
        << error.what();
  }
  // The daemon serves on: both ranks run an op.
  testing::on_every_rank(cluster, [&](int, Client& client) { EXPECT_NO_THROW(client.barrier()); });
}

TEST(ClusterLocalRanksInput, AMalformedLocalRankInTheEnvironmentIsAClearError) {
  testing::TestCluster cluster = testing::start_hosts({2});
  ASSERT_EQ(cluster.clients.size(), 2u);
  ASSERT_EQ(::setenv("LOCAL_RANK", "1x", 1), 0);
  try {
    Client::connect(cluster.cluster->sockets()[0], std::chrono::seconds(5));
    ADD_FAILURE() << "LOCAL_RANK=1x was taken";
  } catch (const ClientError& error) {
    EXPECT_NE(std::string(error.what()).find("LOCAL_RANK is '1x'"), std::string::npos)
        << error.what();
  }
  ASSERT_EQ(::setenv("LOCAL_RANK", "1", 1), 0);
  Client from_environment = Client::connect(cluster.cluster->sockets()[0], std::chrono::seconds(5));
  ::unsetenv("LOCAL_RANK");
  EXPECT_EQ(from_environment.local_rank(), 1);
  EXPECT_EQ(from_environment.rank(), 1);
}

}  // namespace
}  // namespace gradsync
