// Bytes and rounds per rank against the closed forms of docs/architecture.md §3.2, where those are
// exact.
#include <gtest/gtest.h>

#include <cstring>

#include "collective/algorithms.h"
#include "collective/math_util.h"
#include "collective/simulator.h"

namespace gradsync {
namespace {

std::vector<std::byte> floats(std::initializer_list<float> values) {
  std::vector<std::byte> bytes(values.size() * sizeof(float));
  std::memcpy(bytes.data(), values.begin(), bytes.size());
  return bytes;
}

SimulationReport run(const OpShape& shape, Algorithm algorithm) {
  const auto schedules = build_all_ranks(shape, algorithm);
  std::vector<RankBuffers> buffers(shape.world_size);
  for (auto& rank : buffers) {
    rank.data.resize(data_bytes(shape));
    rank.output.resize(output_bytes(shape));
  }
  return simulate(schedules, buffers, DataType::f32, ReduceOp::sum);
}

TEST(ScheduleTraffic, SeedExampleRingOfFourSumsAndSendsSixElementsEach) {
  const auto schedules = build_all_ranks({Collective::allreduce, 4, 4, 4}, Algorithm::ring);
  std::vector<RankBuffers> buffers(4);
  buffers[0].data = floats({1, 2, 3, 4});
  buffers[1].data = floats({10, 20, 30, 40});
  buffers[2].data = floats({100, 200, 300, 400});
  buffers[3].data = floats({1000, 2000, 3000, 4000});
  const SimulationReport report = simulate(schedules, buffers, DataType::f32, ReduceOp::sum);
  ASSERT_TRUE(report.status.ok()) << report.status.to_string();
  for (int r = 0; r < 4; ++r) {
    EXPECT_EQ(buffers[r].data, floats({1111, 2222, 3333, 4444})) << "rank " << r;
    EXPECT_EQ(report.traffic[r].bytes_sent, 6 * sizeof(float)) << "rank " << r;
  }
}

TEST(ScheduleTraffic, RingOfEightOverEightThousandElements) {
  const OpShape shape{Collective::allreduce, 8, 8000, 4};
  EXPECT_EQ(build_schedule(shape, Algorithm::ring, 0).rounds.size(), 14u);
  const SimulationReport report = run(shape, Algorithm::ring);
  ASSERT_TRUE(report.status.ok()) << report.status.to_string();
  for (const RankTraffic& traffic : report.traffic) EXPECT_EQ(traffic.bytes_sent, 14000u * 4);
}

TEST(ScheduleTraffic, RingAllreduceSendsTwoNTimesPMinusOneOverP) {
  for (int p : {1, 2, 3, 5, 8, 12, 17, 64}) {
    const std::uint64_t n = 960u * static_cast<std::uint64_t>(p);
    const SimulationReport report = run({Collective::allreduce, p, n, 4}, Algorithm::ring);
    ASSERT_TRUE(report.status.ok()) << report.status.to_string();
    for (const RankTraffic& traffic : report.traffic) {
      EXPECT_EQ(traffic.bytes_sent, 2 * (p - 1) * n / p * 4) << "p=" << p;
      EXPECT_EQ(traffic.messages_sent, 2u * (p - 1)) << "p=" << p;
    }
  }
}

TEST(ScheduleTraffic, HalvingDoublingSendsTheRingsBytesInLogarithmicRounds) {
  for (int p : {2, 4, 8, 16, 32, 64}) {
    const std::uint64_t n = 1024;
    const OpShape shape{Collective::allreduce, p, n, 4};
    EXPECT_EQ(build_schedule(shape, Algorithm::halving_doubling, 0).rounds.size(),
              2u * ceil_log2(p));
    const SimulationReport report = run(shape, Algorithm::halving_doubling);
    ASSERT_TRUE(report.status.ok()) << report.status.to_string();
    for (const RankTraffic& traffic : report.traffic) {
      EXPECT_EQ(traffic.bytes_sent, 2 * (p - 1) * n / p * 4) << "p=" << p;
    }
  }
}

TEST(ScheduleTraffic, HypercubeSendsTheWholeVectorOncePerDimension) {
  for (int p : {2, 4, 8, 16, 32, 64}) {
    const SimulationReport report = run({Collective::allreduce, p, 1000, 4}, Algorithm::hypercube);
    ASSERT_TRUE(report.status.ok()) << report.status.to_string();
    for (const RankTraffic& traffic : report.traffic) {
      EXPECT_EQ(traffic.bytes_sent, static_cast<std::uint64_t>(ceil_log2(p)) * 4000) << p;
    }
  }
}

TEST(ScheduleTraffic, FoldingCostsTwoExtraRounds) {
  for (int p : {3, 5, 6, 7, 12, 33}) {
    const int core_rounds = ceil_log2(floor_power_of_two(p));
    const OpShape shape{Collective::allreduce, p, 100, 4};
    EXPECT_EQ(build_schedule(shape, Algorithm::hypercube, 0).rounds.size(), core_rounds + 2u) << p;
    EXPECT_EQ(build_schedule(shape, Algorithm::halving_doubling, 0).rounds.size(),
              2u * core_rounds + 2u)
        << p;
  }
}

TEST(ScheduleTraffic, TreeRootSendsAndReceivesOncePerLevel) {
  for (int p : {2, 5, 8, 33}) {
    const SimulationReport report = run({Collective::allreduce, p, 10, 4}, Algorithm::tree);
    ASSERT_TRUE(report.status.ok()) << report.status.to_string();
    const auto levels = static_cast<std::uint64_t>(ceil_log2(p));
    EXPECT_EQ(report.traffic[0].messages_received, levels) << p;
    EXPECT_EQ(report.traffic[0].messages_sent, levels) << p;
  }
}

TEST(ScheduleTraffic, AlltoallDirectSendsEveryOtherBlockOnce) {
  for (int p : {1, 2, 3, 8, 17}) {
    const SimulationReport report = run({Collective::alltoall, p, 5, 4}, Algorithm::direct);
    ASSERT_TRUE(report.status.ok()) << report.status.to_string();
    for (const RankTraffic& traffic : report.traffic) {
      EXPECT_EQ(traffic.messages_sent, static_cast<std::uint64_t>(p - 1));
      EXPECT_EQ(traffic.bytes_sent, static_cast<std::uint64_t>(p - 1) * 5 * 4);
    }
  }
}

TEST(ScheduleTraffic, BruckMovesHalfTheBlocksPerRoundInLogarithmicRounds) {
  for (int p : {2, 4, 8, 16, 32}) {
    const SimulationReport report = run({Collective::alltoall, p, 3, 4}, Algorithm::bruck);
    ASSERT_TRUE(report.status.ok()) << report.status.to_string();
    const auto rounds = static_cast<std::uint64_t>(ceil_log2(p));
    for (const RankTraffic& traffic : report.traffic) {
      EXPECT_EQ(traffic.messages_sent, rounds);
      EXPECT_EQ(traffic.bytes_sent, rounds * (p / 2) * 3 * 4);
    }
  }
}

}  // namespace
}  // namespace gradsync
