// Collectives over subgroups on real local clusters, flat and with local ranks: two subgroups run
// their ops at once, each member getting its subgroup's closed form by its rank in the subgroup,
// and a rank in neither is not involved; then the whole group's stream serves on. (Two subgroups
// that share two hosts need one order for their ops on both, which ranks on one host in different
// processes do not give: docs/clients.md, "Subgroups".) A list that is no subgroup,
// and a client that is not in its list, are refused with the reason.
#include <gtest/gtest.h>

#include <algorithm>
#include <numeric>

#include "collective/partition.h"
#include "support/cluster.h"
#include "support/failures.h"
#include "support/tensor_values.h"

namespace gradsync {
namespace {

using testing::Bytes;

struct SubgroupCase {
  std::vector<int> local_ranks;  // by host
  std::vector<int> first;        // two subgroups, each in its order, sharing at most one host
  std::vector<int> second;
};

class ClusterSubgroup : public ::testing::TestWithParam<SubgroupCase> {
 protected:
  testing::TestCluster start() {
    cli::LocalClusterOptions options;
    options.workers = static_cast<int>(GetParam().local_ranks.size());
    options.local_ranks = GetParam().local_ranks;
    options.segment_bytes = 64 << 10;
    options.coordinator_flags = {"--calibration-ms", "0"};
    return testing::start_cluster(options);
  }

  testing::Failures failures_;
};

// Every rank's chunk of `count` f32 elements, rank r's chunk a pattern of its own, in rank order.
Bytes chunks_in_order(int p, std::uint64_t count) {
  Bytes all;
  for (int owner = 0; owner < p; ++owner) {
    const Bytes chunk = testing::pattern(owner, 3, balanced_chunk(count, p, owner).count * 4);
    all.insert(all.end(), chunk.begin(), chunk.end());
  }
  return all;
}

// Runs a member's ops as rank `rank` of a subgroup of `size`, recording every wrong result.
void run_member(Client& client, int rank, int size, testing::Failures& failures) {
  EXPECT_EQ(client.rank(), rank);
  EXPECT_EQ(client.world_size(), size);
  const std::string who = " (rank " + std::to_string(rank) + " of " + std::to_string(size) + ")";
  for (const std::uint64_t n : {std::uint64_t{0}, std::uint64_t{5}, std::uint64_t{300'007}}) {
    const std::string where = " n=" + std::to_string(n) + who;
    Bytes sum = testing::contribution(DataType::f32, ReduceOp::sum, rank, n);
    client.allreduce(sum.data(), n, DataType::f32);
    if (sum != testing::expected_reduction(DataType::f32, ReduceOp::sum, size, n)) {
      failures.record("allreduce" + where);
    }
    OpOptions from_last;
    from_last.root = size - 1;
    Bytes broadcast = rank == size - 1 ? testing::pattern(9, 1, n * 4) : Bytes(n * 4);
    client.broadcast(broadcast.data(), n, DataType::f32, from_last);
    if (broadcast != testing::pattern(9, 1, n * 4)) failures.record("broadcast" + where);
    const Bytes all = chunks_in_order(size, n);
    const Chunk mine = balanced_chunk(n, size, rank);
    const Bytes own(all.begin() + static_cast<std::ptrdiff_t>(mine.offset * 4),
                    all.begin() + static_cast<std::ptrdiff_t>((mine.offset + mine.count) * 4));
    Bytes gathered(n * 4);
    client.allgather(own.data(), gathered.data(), n, DataType::f32);
    if (gathered != all) failures.record("allgather" + where);
    Bytes at_root(n * 4);
    client.gather(own.data(), at_root.data(), n, DataType::f32, from_last);
    if (rank == size - 1 && at_root != all) failures.record("gather" + where);
    Bytes reduced = testing::contribution(DataType::f32, ReduceOp::sum, rank, n);
    client.reduce(reduced.data(), n, DataType::f32, from_last);
    if (rank == size - 1 &&
        reduced != testing::expected_reduction(DataType::f32, ReduceOp::sum, size, n)) {
      failures.record("reduce" + where);
    }
    // Alltoallv by subgroup ranks: rank i sends rank j n/size² + (i + 2j) mod 3 bytes.
    const auto split = [&](int from, int to) {
      return n / static_cast<std::uint64_t>(size * size) +
             static_cast<std::uint64_t>((from + 2 * to) % 3);
    };
    std::vector<std::uint64_t> send_counts;
    std::vector<std::uint64_t> recv_counts;
    Bytes sent;
    Bytes expected;
    for (int peer = 0; peer < size; ++peer) {
      send_counts.push_back(split(rank, peer));
      recv_counts.push_back(split(peer, rank));
      const Bytes block = testing::pattern(rank, peer, send_counts.back());
      sent.insert(sent.end(), block.begin(), block.end());
      const Bytes theirs = testing::pattern(peer, rank, recv_counts.back());
      expected.insert(expected.end(), theirs.begin(), theirs.end());
    }
    Bytes received(expected.size());
    client.alltoallv(sent.data(), send_counts, received.data(), recv_counts, DataType::u8);
    if (received != expected) failures.record("alltoallv" + where);
  }
  client.barrier();
}

TEST_P(ClusterSubgroup, TwoSubgroupsRunAtOnceEachOverItsOwnMembers) {
  const SubgroupCase& shape = GetParam();
  const int p = std::accumulate(shape.local_ranks.begin(), shape.local_ranks.end(), 0);
  testing::TestCluster cluster = start();
  ASSERT_EQ(static_cast<int>(cluster.clients.size()), p);
  const std::vector<std::string> sockets = cluster.cluster->rank_sockets();
  testing::on_every_rank(cluster, [&](int rank, Client& whole) {
    const auto member_of = [rank](const std::vector<int>& members) {
      return std::find(members.begin(), members.end(), rank) != members.end();
    };
    const bool in_first = member_of(shape.first);
    const std::vector<int>& members = in_first ? shape.first : shape.second;
    if (member_of(members)) {
      try {
        Client client = Client::connect(
            sockets[rank], ConnectOptions{std::chrono::seconds(10), whole.local_rank(), whole.job(),
                                          in_first ? "first" : "second", members});
        const int position =
            static_cast<int>(std::find(members.begin(), members.end(), rank) - members.begin());
        run_member(client, position, static_cast<int>(members.size()), failures_);
      } catch (const ClientError& error) {
        failures_.record("rank " + std::to_string(rank) + ": " + error.what());
      }
    }
    // The whole group's stream serves on beside them.
    Bytes sum = testing::contribution(DataType::f32, ReduceOp::sum, rank, 1000);
    whole.allreduce(sum.data(), 1000, DataType::f32);
    if (sum != testing::expected_reduction(DataType::f32, ReduceOp::sum, p, 1000)) {
      failures_.record("the whole group's allreduce, rank " + std::to_string(rank));
    }
  });
  failures_.expect_none();
}

INSTANTIATE_TEST_SUITE_P(Layouts, ClusterSubgroup,
                         ::testing::Values(SubgroupCase{{1, 1, 1}, {2, 0}, {1}},
                                           SubgroupCase{{1, 1, 1, 1, 1}, {4, 1, 3}, {0, 2}},
                                           SubgroupCase{{2, 1, 3}, {5, 3, 1}, {0, 2}},
                                           SubgroupCase{{2, 1, 3}, {4, 3}, {1, 0, 2, 5}},
                                           SubgroupCase{{1, 1}, {1}, {}}),
                         [](const ::testing::TestParamInfo<SubgroupCase>& param) {
                           std::string name;
                           for (const int ranks : param.param.local_ranks)
                             name += std::to_string(ranks);
                           for (const int rank : param.param.first)
                             name += "_" + std::to_string(rank);
                           return "hosts_" + name;
                         });

TEST(ClusterSubgroupInput, AListThatIsNoSubgroupOrLeavesTheClientOutIsRefused) {
  testing::TestCluster cluster = testing::start_cluster(3);
  const std::vector<std::string> sockets = cluster.cluster->rank_sockets();
  const auto refusal = [&](int rank, std::vector<int> members) {
    try {
      Client::connect(sockets[rank], ConnectOptions{std::chrono::seconds(5), 0, "refusals", "bad",
                                                    std::move(members)});
    } catch (const ClientError& error) {
      EXPECT_EQ(error.code(), ErrorCode::invalid_argument) << error.what();
      return std::string(error.what());
    }
    return std::string("connected");
  };
  EXPECT_NE(refusal(0, {0, 3}).find("subgroup [0, 3]: rank 3 is not a rank of a group of 3"),
            std::string::npos);
  EXPECT_NE(refusal(0, {0, 2, 0}).find("rank 0 is named twice"), std::string::npos);
  EXPECT_NE(refusal(1, {0, 2}).find("rank 1 is not a member of subgroup [0, 2]"),
            std::string::npos);
  testing::expect_every_rank_still_serves(cluster);
}

}  // namespace
}  // namespace gradsync
