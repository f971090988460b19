// Reduce-scatter, all-gather, broadcast (from a non-zero root), all-to-all and barrier on a real
// local cluster, and ops submitted back to back without waiting.
#include <gtest/gtest.h>

#include <algorithm>
#include <mutex>

#include "collective/partition.h"
#include "support/cluster.h"
#include "support/failures.h"
#include "support/tensor_values.h"

namespace gradsync {
namespace {

using testing::Bytes;

class ClusterCollectives : public ::testing::TestWithParam<int> {
 protected:
  testing::Failures failures_;
};

TEST_P(ClusterCollectives, EveryCollectiveMovesTheRightBytes) {
  const int p = GetParam();
  testing::TestCluster cluster = testing::start_cluster(p, "", 64 << 10);
  ASSERT_EQ(static_cast<int>(cluster.clients.size()), p);
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    for (std::uint64_t n :
         {std::uint64_t{0}, std::uint64_t{1}, std::uint64_t{1000}, std::uint64_t{100'003}}) {
      const std::string size = " n=" + std::to_string(n) + " rank " + std::to_string(rank);
      try {
        // Reduce-scatter: this rank's balanced chunk of the reduction.
        const Bytes input = testing::contribution(DataType::i32, ReduceOp::sum, rank, n);
        const Chunk mine = balanced_chunk(n, p, rank);
        Bytes chunk(mine.count * 4);
        client.reduce_scatter(input.data(), n, chunk.data(), DataType::i32);
        const Bytes sum = testing::expected_reduction(DataType::i32, ReduceOp::sum, p, n);
        if (chunk != Bytes(sum.begin() + mine.offset * 4, sum.begin() + mine.end() * 4)) {
          failures_.record("reduce_scatter" + size);
        }
        // All-gather: every rank's chunk, in rank order.
        const Bytes own = testing::pattern(rank, 1, mine.count * 4);
        Bytes gathered(n * 4);
        client.allgather(own.data(), gathered.data(), n, DataType::f32);
        for (int owner = 0; owner < p; ++owner) {
          const Chunk theirs = balanced_chunk(n, p, owner);
          if (Bytes(gathered.begin() + theirs.offset * 4, gathered.begin() + theirs.end() * 4) !=
              testing::pattern(owner, 1, theirs.count * 4)) {
            failures_.record("allgather" + size);
          }
        }
        // Broadcast from the last rank.
        OpOptions from_last;
        from_last.root = p - 1;
        Bytes data = rank == p - 1 ? testing::pattern(p - 1, 2, n * 8) : Bytes(n * 8);
        client.broadcast(data.data(), n, DataType::f64, from_last);
        if (data != testing::pattern(p - 1, 2, n * 8)) failures_.record("broadcast" + size);
        // All-to-all of n/10 + 1 elements per destination, both algorithms.
        const std::uint64_t block = n / 10 + 1;
        for (Algorithm algorithm : {Algorithm::direct, Algorithm::bruck}) {
          Bytes blocks;
          for (int j = 0; j < p; ++j) {
            const Bytes part = testing::pattern(rank, j, block * 2);
            blocks.insert(blocks.end(), part.begin(), part.end());
          }
          Bytes received(blocks.size());
          OpOptions options;
          options.algorithm = algorithm;
          client.alltoall(blocks.data(), received.data(), block, DataType::bf16, options);
          for (int i = 0; i < p; ++i) {
            if (Bytes(received.begin() + i * block * 2, received.begin() + (i + 1) * block * 2) !=
                testing::pattern(i, rank, block * 2)) {
              failures_.record(std::string("alltoall/") + std::string(name(algorithm)) + size);
            }
          }
        }
        client.barrier();
      } catch (const ClientError& error) {
        failures_.record(std::string(error.what()) + size);
      }
    }
  });
  failures_.expect_none();
}

TEST_P(ClusterCollectives, OpsSubmittedBackToBackWithoutWaitingAllComplete) {
  const int p = GetParam();
  testing::TestCluster cluster = testing::start_cluster(p);
  ASSERT_EQ(static_cast<int>(cluster.clients.size()), p);
  constexpr int kOps = 12;
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    std::vector<Bytes> tensors;
    std::vector<Handle> handles;
    for (int i = 0; i < kOps; ++i) {
      // A different length per op, so that an op matched with the wrong one shows.
      tensors.push_back(testing::contribution(DataType::f32, ReduceOp::sum, rank, 5000 + i));
    }
    try {
      for (int i = 0; i < kOps; ++i) {
        handles.push_back(client.allreduce_async(tensors[i].data(), 5000 + i, DataType::f32));
      }
      for (auto& handle : handles) handle.wait();
    } catch (const ClientError& error) {
      failures_.record(error.what());
      return;
    }
    for (int i = 0; i < kOps; ++i) {
      if (tensors[i] != testing::expected_reduction(DataType::f32, ReduceOp::sum, p, 5000 + i)) {
        failures_.record("op " + std::to_string(i) + " rank " + std::to_string(rank));
      }
    }
  });
  failures_.expect_none();
}

TEST_P(ClusterCollectives, SharedTensorsReduceInPlaceWithoutCopies) {
  const int p = GetParam();
  testing::TestCluster cluster = testing::start_cluster(p);
  ASSERT_EQ(static_cast<int>(cluster.clients.size()), p);
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    try {
      SharedTensor tensor = client.allocate(300'000 * 4);
      for (std::uint64_t n : {std::uint64_t{1}, std::uint64_t{1000}, std::uint64_t{300'000}}) {
        const Bytes input = testing::contribution(DataType::f32, ReduceOp::sum, rank, n);
        std::copy(input.begin(), input.end(), tensor.data());
        // A private tensor in flight at the same time takes the copying path.
        Bytes other = testing::contribution(DataType::i32, ReduceOp::max, rank, 77);
        OpOptions maximum;
        maximum.op = ReduceOp::max;
        Handle pending = client.allreduce_async(other.data(), 77, DataType::i32, maximum);
        client.allreduce(tensor.data(), n, DataType::f32);
        pending.wait();
        const Bytes expected = testing::expected_reduction(DataType::f32, ReduceOp::sum, p, n);
        if (!std::equal(expected.begin(), expected.end(), tensor.data())) {
          failures_.record("shared allreduce n=" + std::to_string(n) + " rank " +
                           std::to_string(rank));
        }
        if (other != testing::expected_reduction(DataType::i32, ReduceOp::max, p, 77)) {
          failures_.record("private allreduce beside a shared one, rank " + std::to_string(rank));
        }
      }
      OpOptions from_first;
      from_first.root = 0;
      const Bytes root_bytes = testing::pattern(0, 5, 4000);
      if (rank == 0) std::copy(root_bytes.begin(), root_bytes.end(), tensor.data());
      client.broadcast(tensor.data(), 1000, DataType::f32, from_first);
      if (!std::equal(root_bytes.begin(), root_bytes.end(), tensor.data())) {
        failures_.record("shared broadcast rank " + std::to_string(rank));
      }
    } catch (const ClientError& error) {
      failures_.record(error.what());
    }
  });
  failures_.expect_none();
}

// Every type reduces by each operator it takes (a reduction that it does not take is refused with
// the reason, and the daemon serves the next op), and moves unchanged as bytes: a bool tensor's
// bytes other than 0 and 1 too.
TEST_P(ClusterCollectives, EveryTypeReducesByEveryOperatorItTakesAndMovesAsBytes) {
  const int p = GetParam();
  testing::TestCluster cluster = testing::start_cluster(p, "", 64 << 10);
  ASSERT_EQ(static_cast<int>(cluster.clients.size()), p);
  constexpr std::uint64_t n = 37;
  testing::on_every_rank(cluster, [&](int rank, Client& client) {
    for (const DataType type : kAllDataTypes) {
      for (const ReduceOp op : kAllReduceOps) {
        const std::string what =
            std::string(name(type)) + " " + std::string(name(op)) + " rank " + std::to_string(rank);
        const std::string_view refusal = why_op_cannot_reduce(type, op);
        Bytes data = testing::contribution(type, refusal.empty() ? op : ReduceOp::sum, rank, n);
        OpOptions options;
        options.op = op;
        try {
          client.allreduce(data.data(), n, type, options);
          if (!refusal.empty())
            failures_.record(what + ": reduced, though " + std::string(refusal));
          if (refusal.empty() && data != testing::expected_reduction(type, op, p, n)) {
            failures_.record(what + ": wrong result");
          }
        } catch (const ClientError& error) {
          const bool named = error.code() == ErrorCode::invalid_argument &&
                             std::string(error.what()).find(refusal) != std::string::npos;
          if (refusal.empty() || !named) failures_.record(what + ": " + error.what());
        }
      }
      const std::string moved = std::string(name(type)) + " rank " + std::to_string(rank);
      const std::size_t bytes = n * element_size(type);
      try {
        OpOptions from_last;
        from_last.root = p - 1;
        Bytes data = rank == p - 1 ? testing::pattern(p - 1, 3, bytes) : Bytes(bytes);
        client.broadcast(data.data(), n, type, from_last);
        if (data != testing::pattern(p - 1, 3, bytes)) failures_.record("broadcast " + moved);
        const Chunk mine = balanced_chunk(n, p, rank);
        const Bytes own = testing::pattern(rank, 4, mine.count * element_size(type));
        Bytes gathered(bytes);
        client.allgather(own.data(), gathered.data(), n, type);
        for (int owner = 0; owner < p; ++owner) {
          const Chunk theirs = balanced_chunk(n, p, owner);
          const auto first = gathered.begin() + theirs.offset * element_size(type);
          if (Bytes(first, first + theirs.count * element_size(type)) !=
              testing::pattern(owner, 4, theirs.count * element_size(type))) {
            failures_.record("allgather " + moved);
          }
        }
      } catch (const ClientError& error) {
        failures_.record(moved + ": " + error.what());
      }
    }
  });
  failures_.expect_none();
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, ClusterCollectives, ::testing::Values(1, 3, 4, 8),
                         [](const auto& param_info) {
                           return "p" + std::to_string(param_info.param);
                         });

}  // namespace
}  // namespace gradsync
