// The probe schedules (collective/link_probe.h): the tournament meets every pair exactly once, and
// the ping-pong and exchange schedules are valid and move what they say, for any world size.
#include "collective/link_probe.h"

#include <gtest/gtest.h>

#include <set>
#include <utility>
#include <vector>

#include "collective/simulator.h"
#include "collective/validate.h"

namespace gradsync {
namespace {

class LinkProbe : public ::testing::TestWithParam<int> {};

TEST_P(LinkProbe, TheTournamentMeetsEveryPairOnceAndPairsAreMutual) {
  const int p = GetParam();
  std::set<std::pair<int, int>> met;
  for (int round = 0; round < tournament_rounds(p); ++round) {
    int idle = 0;
    for (int rank = 0; rank < p; ++rank) {
      const int partner = tournament_partner(rank, p, round);
      if (partner < 0) {
        ++idle;
        continue;
      }
      ASSERT_NE(partner, rank);
      ASSERT_LT(partner, p);
      EXPECT_EQ(tournament_partner(partner, p, round), rank) << "round " << round;
      if (rank < partner) {
        EXPECT_TRUE(met.insert({rank, partner}).second) << rank << "-" << partner;
      }
    }
    EXPECT_EQ(idle, p % 2) << "round " << round;
  }
  EXPECT_EQ(met.size(), static_cast<std::size_t>(p) * (p - 1) / 2);
}

TEST_P(LinkProbe, ProbeSchedulesMatchBetweenPartnersAndMoveWhatTheySay) {
  const int p = GetParam();
  constexpr int kRoundTrips = 3;
  for (const std::uint64_t bytes : {0ull, 8ull, 100'000ull}) {
    for (int round = 0; round < tournament_rounds(p); ++round) {
      for (const bool bulk : {false, true}) {
        std::vector<Schedule> schedules;
        std::vector<RankBuffers> buffers(p);
        for (int rank = 0; rank < p; ++rank) {
          const int partner = tournament_partner(rank, p, round);
          schedules.push_back(bulk ? bulk_exchange_schedule(rank, p, partner, bytes)
                                   : ping_pong_schedule(rank, p, partner, kRoundTrips, bytes));
          const Status valid = validate(schedules.back());
          ASSERT_TRUE(valid.ok()) << valid.message();
          buffers[rank].data.assign(bytes, static_cast<std::byte>(rank + 1));
        }
        const SimulationReport report = simulate(schedules, buffers, DataType::u8, ReduceOp::sum);
        ASSERT_TRUE(report.status.ok()) << report.status.message();
        for (int rank = 0; rank < p; ++rank) {
          const int partner = tournament_partner(rank, p, round);
          // A round trip is one message each way; an exchange is one message each way at once.
          const std::uint64_t messages = partner < 0 ? 0 : (bulk ? 1 : kRoundTrips);
          const RankTraffic& traffic = report.traffic[rank];
          EXPECT_EQ(traffic.messages_sent, messages) << "rank " << rank;
          EXPECT_EQ(traffic.messages_received, messages) << "rank " << rank;
          EXPECT_EQ(traffic.bytes_sent, messages * bytes) << "rank " << rank;
          EXPECT_EQ(traffic.bytes_received, messages * bytes) << "rank " << rank;
          // The sender's tensor is left as it was: probes only read it.
          EXPECT_EQ(buffers[rank].data,
                    std::vector<std::byte>(bytes, static_cast<std::byte>(rank + 1)));
        }
      }
    }
  }
}

INSTANTIATE_TEST_SUITE_P(WorldSizes, LinkProbe, ::testing::Values(1, 2, 3, 4, 5, 7, 8, 16, 17),
                         [](const auto& param_info) {
                           return "p" + std::to_string(param_info.param);
                         });

}  // namespace
}  // namespace gradsync
