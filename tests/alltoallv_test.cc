// Alltoallv (docs/architecture.md §3.2): the direct exchange of a splits matrix, run in the
// simulator on real bytes at every p from 1 to 17 with random splits (zeros and counts smaller
// than p among them), and the client library's check that every pair's two ends agree.
#include <gtest/gtest.h>

#include <algorithm>
#include <random>
#include <vector>

#include "client/alltoallv_splits.h"
#include "collective/algorithms.h"
#include "collective/simulator.h"
#include "support/tensor_values.h"

namespace gradsync {
namespace {

using testing::Bytes;

// Splits up to `most` elements, about a third of them zero.
std::vector<std::uint64_t> random_splits(int p, std::uint64_t most, std::mt19937& random) {
  std::vector<std::uint64_t> splits(static_cast<std::size_t>(p) * p);
  std::uniform_int_distribution<std::uint64_t> count(0, most);
  for (auto& split : splits) split = random() % 3 == 0 ? 0 : count(random);
  return splits;
}

TEST(AlltoallvSimulation, EveryBlockLandsInItsPlaceAtEveryWorldSize) {
  std::mt19937 random(42);
  for (int p = 1; p <= 17; ++p) {
    for (const std::uint64_t most : {0ull, 1ull, static_cast<unsigned long long>(p), 1000ull}) {
      for (const std::size_t size : {std::size_t{1}, std::size_t{4}}) {
        const OpShape shape = alltoallv_shape(p, random_splits(p, most, random), size);
        SCOPED_TRACE("p=" + std::to_string(p) + " most=" + std::to_string(most) +
                     " element size=" + std::to_string(size));
        const auto schedules = build_all_ranks(shape, Algorithm::direct);
        std::vector<RankBuffers> buffers(p);
        std::vector<Bytes> expected(p);
        for (int r = 0; r < p; ++r) {
          for (int to = 0; to < p; ++to) {
            const Bytes sent = testing::pattern(r, to, split(shape, r, to) * size);
            buffers[r].data.insert(buffers[r].data.end(), sent.begin(), sent.end());
          }
          for (int from = 0; from < p; ++from) {
            const Bytes received = testing::pattern(from, r, split(shape, from, r) * size);
            expected[r].insert(expected[r].end(), received.begin(), received.end());
          }
          ASSERT_EQ(buffers[r].data.size(), data_bytes(shape, r));
          // Output bytes start as garbage, so a missed block shows.
          buffers[r].output = Bytes(output_bytes(shape, r), std::byte{0xCD});
        }
        const SimulationReport report = simulate(schedules, buffers, DataType::u8, ReduceOp::sum);
        ASSERT_TRUE(report.status.ok()) << report.status.to_string();
        for (int r = 0; r < p; ++r) {
          EXPECT_EQ(schedules[r].result.buffer, BufferId::output);
          ASSERT_EQ(buffers[r].output, expected[r]) << "rank " << r;
        }
      }
    }
  }
}

TEST(AlltoallvSimulation, EveryRankHasTheSameNumberOfRoundsAndEachPairOneMessage) {
  std::mt19937 random(7);
  const int p = 6;
  const OpShape shape = alltoallv_shape(p, random_splits(p, 50, random), 4);
  for (const Schedule& schedule : build_all_ranks(shape, Algorithm::direct)) {
    EXPECT_EQ(schedule.rounds.size(), static_cast<std::size_t>(p - 1));
    std::vector<int> sent_to(p, 0);
    for (const Round& round : schedule.rounds) {
      for (const Send& send : round.sends) {
        ++sent_to[send.peer];
        EXPECT_EQ(send.bytes(), 4 * split(shape, schedule.rank, send.peer));
      }
    }
    for (int peer = 0; peer < p; ++peer) EXPECT_EQ(sent_to[peer], peer == schedule.rank ? 0 : 1);
  }
}

TEST(AlltoallvSplits, RowsThatAgreeMakeTheMatrixOfSendCounts) {
  // Rank 0 sends {1, 2} and expects {1, 3}; rank 1 sends {3, 4} and expects {2, 4}.
  const std::vector<std::uint64_t> rows = {1, 2, 1, 3, 3, 4, 2, 4};
  std::vector<std::uint64_t> splits;
  ASSERT_TRUE(splits_from_rows(rows, 2, splits).ok());
  EXPECT_EQ(splits, (std::vector<std::uint64_t>{1, 2, 3, 4}));
  EXPECT_EQ(splits_row(std::vector<std::uint64_t>{1, 2}, std::vector<std::uint64_t>{1, 3}),
            (std::vector<std::uint64_t>{1, 2, 1, 3}));
}

TEST(AlltoallvSplits, CountsThatDisagreeNameEachPairFromBothEnds) {
  // Rank 0 sends rank 1 two elements; rank 1 expects five from it.
  const std::vector<std::uint64_t> rows = {1, 2, 1, 3, 3, 4, 5, 4};
  std::vector<std::uint64_t> splits;
  const Status status = splits_from_rows(rows, 2, splits);
  ASSERT_FALSE(status.ok());
  EXPECT_EQ(status.code(), ErrorCode::invalid_argument);
  EXPECT_NE(status.message().find("1 pair of ranks: rank 0 sends 2 elements to rank 1, which "
                                  "expects 5"),
            std::string::npos)
      << status.message();
}

TEST(AlltoallvSplits, ManyDisagreeingPairsAreCountedAndTheFirstFewNamed) {
  const int p = 5;
  std::vector<std::uint64_t> rows(static_cast<std::size_t>(2 * p * p), 0);
  for (int r = 0; r < p; ++r) rows[static_cast<std::size_t>(2 * p * r + (r + 1) % p)] = 1;
  std::vector<std::uint64_t> splits;
  const Status status = splits_from_rows(rows, p, splits);
  ASSERT_FALSE(status.ok());
  EXPECT_NE(status.message().find("for 5 pairs"), std::string::npos) << status.message();
  EXPECT_EQ(std::count(status.message().begin(), status.message().end(), ';'), 2)
      << status.message();
}

}  // namespace
}  // namespace gradsync
