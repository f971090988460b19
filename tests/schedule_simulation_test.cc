// Every builder, run in the simulator on real bytes, over many world sizes and element counts
// (docs/architecture.md §15). The simulator itself fails on unmatched transfers, bad ranges and
// ranks whose replicated results differ; these tests add the closed-form expected values.
#include <gtest/gtest.h>

#include <algorithm>
#include <set>
#include <string>
#include <vector>

#include "collective/algorithms.h"
#include "collective/math_util.h"
#include "collective/simulator.h"
#include "support/tensor_values.h"

namespace gradsync {
namespace {

using testing::Bytes;

const std::vector<int> kWorldSizes = {1,  2,  3,  4,  5,  6,  7,  8,  9,  10, 11,
                                      12, 13, 14, 15, 16, 17, 31, 32, 33, 64};

std::vector<std::uint64_t> element_counts(int p) {
  const auto n = static_cast<std::uint64_t>(p);
  const std::set<std::uint64_t> counts = {0, 1, n - 1, n, n + 1, 1000, 4099};
  return {counts.begin(), counts.end()};
}

Bytes slice(const Bytes& bytes, const Span& span) {
  return Bytes(bytes.begin() + static_cast<std::ptrdiff_t>(span.offset),
               bytes.begin() + static_cast<std::ptrdiff_t>(span.end()));
}

std::string describe(const OpShape& shape, Algorithm algorithm) {
  return std::string(name(shape.collective)) + "/" + std::string(name(algorithm)) +
         " p=" + std::to_string(shape.world_size) + " n=" + std::to_string(shape.count) +
         " root=" + std::to_string(shape.root);
}

struct Case {
  Collective collective;
  Algorithm algorithm;
};

std::string case_name(const ::testing::TestParamInfo<std::tuple<Case, int>>& info) {
  const auto& [c, p] = info.param;
  return std::string(name(c.collective)) + "_" + std::string(name(c.algorithm)) + "_p" +
         std::to_string(p);
}

class ScheduleSimulation : public ::testing::TestWithParam<std::tuple<Case, int>> {
 protected:
  Collective collective() const { return std::get<0>(GetParam()).collective; }
  Algorithm algorithm() const { return std::get<0>(GetParam()).algorithm; }
  int world_size() const { return std::get<1>(GetParam()); }
  // The roots of a collective that has one: rank 0, the last and one between, by count.
  int root_for(std::uint64_t n) const {
    if (!has_root(collective())) return 0;
    return static_cast<int>(n % 3 == 0 ? 0 : n % 3 == 1 ? world_size() - 1 : world_size() / 2);
  }

  // Runs the op for every count, dtype and op; `fill` and `check` give inputs and expectations.
  void run_reductions() {
    const int p = world_size();
    for (std::uint64_t n : element_counts(p)) {
      for (DataType type : kAllDataTypes) {
        for (ReduceOp op : kAllReduceOps) {
          if (!why_op_cannot_reduce(type, op).empty()) continue;
          const OpShape shape{collective(), p, n, element_size(type), root_for(n)};
          SCOPED_TRACE(describe(shape, algorithm()) + " " + std::string(name(type)) + " " +
                       std::string(name(op)));
          const auto schedules = build_all_ranks(shape, algorithm());
          std::vector<RankBuffers> buffers(p);
          for (int r = 0; r < p; ++r) buffers[r].data = testing::contribution(type, op, r, n);
          const SimulationReport report = simulate(schedules, buffers, type, op);
          ASSERT_TRUE(report.status.ok()) << report.status.to_string();
          const Bytes expected = testing::expected_reduction(type, op, p, n);
          for (int r = 0; r < p; ++r) {
            const Span& result = schedules[r].result;
            ASSERT_EQ(slice(buffers[r].data, result), slice(expected, result)) << "rank " << r;
          }
        }
      }
    }
  }
};

TEST_P(ScheduleSimulation, ProducesTheClosedFormResult) {
  const int p = world_size();
  switch (collective()) {
    case Collective::allreduce:
    case Collective::reduce_scatter:
    case Collective::reduce:
      run_reductions();
      return;
    default:
      break;
  }
  for (std::uint64_t n : element_counts(p)) {
    for (DataType type : {DataType::u8, DataType::bf16, DataType::f32, DataType::f64}) {
      const std::size_t size = element_size(type);
      std::set<int> roots = {0};
      if (has_root(collective())) roots = {0, p / 2, p - 1};
      for (int root : roots) {
        const OpShape shape{collective(), p, n, size, root};
        SCOPED_TRACE(describe(shape, algorithm()) + " " + std::string(name(type)));
        const auto schedules = build_all_ranks(shape, algorithm());
        std::vector<RankBuffers> buffers(p);
        std::vector<Bytes> expected(p);
        const std::uint64_t bytes = data_bytes(shape);
        for (int r = 0; r < p; ++r) {
          // Bytes a rank does not own start as garbage, so a missed transfer shows.
          buffers[r].data = Bytes(bytes, std::byte{0xCD});
          buffers[r].output = Bytes(output_bytes(shape), std::byte{0xCD});
          switch (collective()) {
            case Collective::allgather: {
              const Chunk own = balanced_chunk(n, p, r);
              const Bytes mine = testing::pattern(r, 0, own.count * size);
              std::copy(mine.begin(), mine.end(), buffers[r].data.begin() + own.offset * size);
              expected[r].resize(bytes);
              for (int owner = 0; owner < p; ++owner) {
                const Chunk chunk = balanced_chunk(n, p, owner);
                const Bytes theirs = testing::pattern(owner, 0, chunk.count * size);
                std::copy(theirs.begin(), theirs.end(), expected[r].begin() + chunk.offset * size);
              }
              break;
            }
            case Collective::broadcast:
              if (r == root) buffers[r].data = testing::pattern(root, 0, bytes);
              expected[r] = testing::pattern(root, 0, bytes);
              break;
            case Collective::gather: {
              const Chunk own = balanced_chunk(n, p, r);
              const Bytes mine = testing::pattern(r, 0, own.count * size);
              std::copy(mine.begin(), mine.end(), buffers[r].data.begin() + own.offset * size);
              if (r != root) break;  // the result is the root's alone
              for (int owner = 0; owner < p; ++owner) {
                const Bytes theirs =
                    testing::pattern(owner, 0, balanced_chunk(n, p, owner).count * size);
                expected[r].insert(expected[r].end(), theirs.begin(), theirs.end());
              }
              break;
            }
            case Collective::scatter:
              if (r == root) {
                buffers[r].data.clear();
                for (int owner = 0; owner < p; ++owner) {
                  const Bytes theirs =
                      testing::pattern(owner, 0, balanced_chunk(n, p, owner).count * size);
                  buffers[r].data.insert(buffers[r].data.end(), theirs.begin(), theirs.end());
                }
              }
              expected[r] = testing::pattern(r, 0, balanced_chunk(n, p, r).count * size);
              break;
            case Collective::alltoall: {
              const std::uint64_t block = n * size;
              for (int j = 0; j < p; ++j) {
                const Bytes sent = testing::pattern(r, j, block);
                std::copy(sent.begin(), sent.end(), buffers[r].data.begin() + j * block);
              }
              for (int i = 0; i < p; ++i) {
                const Bytes received = testing::pattern(i, r, block);
                expected[r].insert(expected[r].end(), received.begin(), received.end());
              }
              break;
            }
            default:
              break;
          }
        }
        const SimulationReport report = simulate(schedules, buffers, type, ReduceOp::sum);
        ASSERT_TRUE(report.status.ok()) << report.status.to_string();
        for (int r = 0; r < p; ++r) {
          const Span& result = schedules[r].result;
          const Bytes& actual =
              result.buffer == BufferId::output ? buffers[r].output : buffers[r].data;
          ASSERT_EQ(slice(actual, result), expected[r]) << "rank " << r;
        }
      }
    }
  }
}

// The longest message of a round sets the round's time, so no rank may carry more than one element
// beyond any other. A binomial gather or scatter carries the chunks of a subtree instead, whose
// size the tree sets: there the root's link must carry every other rank's chunk exactly once.
TEST_P(ScheduleSimulation, MessagesOfARoundDifferByAtMostOneElement) {
  const int p = world_size();
  if (collective() == Collective::gather || collective() == Collective::scatter) {
    for (std::uint64_t n : element_counts(p)) {
      for (int root : {0, p - 1}) {
        const OpShape shape{collective(), p, n, 4, root};
        const Schedule schedule = build_schedule(shape, algorithm(), root);
        std::uint64_t carried = 0;
        for (const Round& round : schedule.rounds) {
          for (const Send& send : round.sends) carried += send.bytes();
          for (const Recv& recv : round.recvs) carried += recv.bytes();
        }
        EXPECT_EQ(carried, 4 * (n - balanced_chunk(n, p, root).count))
            << describe(shape, algorithm());
      }
    }
    return;
  }
  for (std::uint64_t n : element_counts(p)) {
    const OpShape shape{collective(), p, n, 4};
    const auto schedules = build_all_ranks(shape, algorithm());
    for (std::size_t t = 0; t < schedules[0].rounds.size(); ++t) {
      std::uint64_t shortest = UINT64_MAX;
      std::uint64_t longest = 0;
      for (const Schedule& schedule : schedules) {
        ASSERT_EQ(schedule.rounds.size(), schedules[0].rounds.size());
        for (const Send& send : schedule.rounds[t].sends) {
          shortest = std::min(shortest, send.bytes());
          longest = std::max(longest, send.bytes());
        }
      }
      if (longest > 0) {
        EXPECT_LE(longest - shortest, 4u) << describe(shape, algorithm()) << " round " << t;
      }
    }
  }
}

std::vector<Case> all_cases() {
  std::vector<Case> cases;
  for (Collective collective : kAllCollectives) {
    // No data: see BarrierSimulation. Splits of their own: see alltoallv_test.
    if (collective == Collective::barrier || collective == Collective::alltoallv) continue;
    for (Algorithm algorithm : algorithms_for(collective)) cases.push_back({collective, algorithm});
  }
  return cases;
}

INSTANTIATE_TEST_SUITE_P(AllBuilders, ScheduleSimulation,
                         ::testing::Combine(::testing::ValuesIn(all_cases()),
                                            ::testing::ValuesIn(kWorldSizes)),
                         case_name);

TEST(BarrierSimulation, EveryRankHearsFromEveryRankThroughTheSignals) {
  for (int p : kWorldSizes) {
    const auto schedules =
        build_all_ranks({Collective::barrier, p, 0, 1}, Algorithm::dissemination);
    // heard[r]: the ranks whose arrival rank r has learnt of, directly or relayed.
    std::vector<std::set<int>> heard(p);
    for (int r = 0; r < p; ++r) heard[r] = {r};
    for (std::size_t t = 0; t < schedules[0].rounds.size(); ++t) {
      const auto before = heard;
      for (int r = 0; r < p; ++r) {
        for (const Send& send : schedules[r].rounds[t].sends) {
          heard[send.peer].insert(before[r].begin(), before[r].end());
        }
      }
    }
    for (int r = 0; r < p; ++r) EXPECT_EQ(heard[r].size(), static_cast<std::size_t>(p)) << p;
  }
}

TEST(BarrierSimulation, EveryRankSignalsAndHearsOncePerRound) {
  for (int p : kWorldSizes) {
    const auto schedules =
        build_all_ranks({Collective::barrier, p, 0, 1}, Algorithm::dissemination);
    std::vector<RankBuffers> buffers(p);
    const SimulationReport report = simulate(schedules, buffers, DataType::u8, ReduceOp::sum);
    ASSERT_TRUE(report.status.ok()) << report.status.to_string();
    for (int r = 0; r < p; ++r) {
      EXPECT_EQ(report.traffic[r].messages_sent, static_cast<std::uint64_t>(ceil_log2(p)));
      EXPECT_EQ(report.traffic[r].messages_received, static_cast<std::uint64_t>(ceil_log2(p)));
      EXPECT_EQ(report.traffic[r].bytes_sent, 0u);
    }
  }
}

}  // namespace
}  // namespace gradsync
