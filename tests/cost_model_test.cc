#include "collective/cost_model.h"

#include <gtest/gtest.h>

#include <cmath>

#include "collective/algorithms.h"

namespace gradsync {
namespace {

// The seed's parameters: α = 20 µs, β = 0.0001 µs/byte (10 GB/s), p = 64.
const NetworkModel kSeedNetwork = NetworkModel::uniform(20.0, 0.0001);

OpShape allreduce_of(std::uint64_t bytes, int p = 64) {
  return {Collective::allreduce, p, bytes / 4, 4};
}

double rounded_us(std::uint64_t bytes, Algorithm algorithm) {
  return std::round(estimate_cost(allreduce_of(bytes), algorithm, kSeedNetwork).time_us);
}

TEST(CostModel, ReproducesTheSeedTable) {
  EXPECT_EQ(rounded_us(1'000, Algorithm::tree), 241);
  EXPECT_EQ(rounded_us(1'000, Algorithm::hypercube), 121);
  EXPECT_EQ(rounded_us(1'000, Algorithm::ring), 2520);
  EXPECT_EQ(rounded_us(1'000'000, Algorithm::tree), 1440);
  EXPECT_EQ(rounded_us(1'000'000, Algorithm::hypercube), 720);
  EXPECT_EQ(rounded_us(1'000'000, Algorithm::ring), 2717);
  EXPECT_EQ(rounded_us(100'000'000, Algorithm::tree), 120240);
  EXPECT_EQ(rounded_us(100'000'000, Algorithm::hypercube), 60120);
  EXPECT_EQ(rounded_us(100'000'000, Algorithm::ring), 22208);
}

TEST(CostModel, HypercubeAndRingCrossAtAboutSixMegabytesForSixtyFourRanks) {
  // Bisect on whole f32 elements for the smallest size where the ring is no slower.
  std::uint64_t low = 1'000'000;     // hypercube wins here
  std::uint64_t high = 100'000'000;  // ring wins here
  const auto ring_wins = [](std::uint64_t bytes) {
    return estimate_cost(allreduce_of(bytes), Algorithm::ring, kSeedNetwork).time_us <=
           estimate_cost(allreduce_of(bytes), Algorithm::hypercube, kSeedNetwork).time_us;
  };
  ASSERT_FALSE(ring_wins(low));
  ASSERT_TRUE(ring_wins(high));
  while (high - low > 4) {
    const std::uint64_t middle = (low + high) / 2 / 4 * 4;
    (ring_wins(middle) ? high : low) = middle;
  }
  // Closed form: 6(α + βn) = 126(α + βn/64)  ⇒  n = 120α / (4.03125β) ≈ 5.953 MB.
  EXPECT_NEAR(static_cast<double>(high), 5.953e6, 0.005e6);
}

TEST(CostModel, AgreesWithTheClosedFormsWhereTheyAreExact) {
  const NetworkModel network = NetworkModel::uniform(7.5, 0.002);
  for (int p : {1, 2, 3, 4, 5, 6, 7, 8, 12, 16, 17, 32, 33, 64}) {
    // Divisible by p and by every power of two up to 64, so every chunk has the same length.
    const std::uint64_t count = 64ull * 3 * 5 * 7 * 11 * 17;
    if (count % static_cast<std::uint64_t>(p) != 0) continue;
    const OpShape shape{Collective::allreduce, p, count, 4};
    for (Algorithm algorithm : algorithms_for(Collective::allreduce)) {
      const double bytes = static_cast<double>(count * 4);
      EXPECT_NEAR(estimate_cost(shape, algorithm, network).time_us,
                  closed_form_time_us(Collective::allreduce, algorithm, p, bytes, network),
                  1e-6 * bytes)
          << name(algorithm) << " p=" << p;
    }
  }
}

TEST(CostModel, OtherCollectivesAgreeWithTheirClosedForms) {
  const NetworkModel network = NetworkModel::uniform(10.0, 0.001);
  for (int p : {2, 4, 8, 16}) {
    const std::uint64_t count = 1024;
    const double bytes = count * 4.0;
    for (Collective collective : {Collective::reduce_scatter, Collective::allgather,
                                  Collective::broadcast, Collective::alltoall, Collective::barrier,
                                  Collective::reduce, Collective::gather, Collective::scatter}) {
      for (Algorithm algorithm : algorithms_for(collective)) {
        const OpShape shape{collective, p, count, collective == Collective::barrier ? 1u : 4u};
        EXPECT_NEAR(estimate_cost(shape, algorithm, network).time_us,
                    closed_form_time_us(collective, algorithm, p,
                                        collective == Collective::barrier ? 0.0 : bytes, network),
                    1e-9 * bytes)
            << name(collective) << "/" << name(algorithm) << " p=" << p;
      }
    }
  }
}

TEST(CostModel, ChoosesTheHypercubeForShortVectorsAndABandwidthOptimalOneForLong) {
  EXPECT_EQ(choose_algorithm(allreduce_of(1'000), kSeedNetwork), Algorithm::hypercube);
  // Past 6(α + βn) = 12α + 2βn·63/64, i.e. n ≈ 298 kB, Rabenseifner's halved messages win; it
  // beats the ring at every size here, paying 2·log₂p latencies instead of 2(p−1) for the same
  // bytes.
  EXPECT_EQ(choose_algorithm(allreduce_of(250'000), kSeedNetwork), Algorithm::hypercube);
  EXPECT_EQ(choose_algorithm(allreduce_of(350'000), kSeedNetwork), Algorithm::halving_doubling);
  EXPECT_EQ(choose_algorithm(allreduce_of(100'000'000), kSeedNetwork), Algorithm::halving_doubling);
  EXPECT_EQ(choose_algorithm({Collective::alltoall, 64, 1, 4}, kSeedNetwork), Algorithm::bruck);
  EXPECT_EQ(choose_algorithm({Collective::alltoall, 64, 1 << 20, 4}, kSeedNetwork),
            Algorithm::direct);
}

// Calibrated times within 5% of each other leave the choice to the model. At 4 MiB (p = 4, a
// LAN-like α and β) it puts the tree's 4 whole vectors far behind, and the ring and
// halving-doubling level (the earlier wins); at 4 B it prefers the hypercube's 2 rounds to the
// tree's and halving-doubling's 4.
TEST(CostModel, ATieInCalibratedTimesGoesToTheModelsChoice) {
  const NetworkModel lan = NetworkModel::uniform(50.0, 0.008);
  const auto times = [](double tree, double hypercube, double ring, double halving_doubling) {
    return [=](const OpShape&, Algorithm algorithm) {
      switch (algorithm) {
        case Algorithm::tree:
          return tree;
        case Algorithm::hypercube:
          return hypercube;
        case Algorithm::ring:
          return ring;
        default:
          return halving_doubling;
      }
    };
  };
  const auto choice = [&](std::uint64_t bytes, const CostFunction& cost) {
    return cheapest(estimate_candidates(allreduce_of(bytes, 4), cost, lan));
  };
  EXPECT_EQ(choice(4 << 20, times(7000, 9000, 7200, 7300)), Algorithm::ring);
  EXPECT_EQ(choice(4 << 20, times(7000, 9000, 7400, 7300)), Algorithm::halving_doubling);
  EXPECT_EQ(choice(4 << 20, times(7000, 9000, 7300, 7200)), Algorithm::ring);
  EXPECT_EQ(choice(4 << 20, times(7000, 9000, 7400, 7400)), Algorithm::tree)
      << "beyond the tolerance the time decides";
  EXPECT_EQ(choice(4, times(100, 100, 120, 100)), Algorithm::hypercube);
}

TEST(CostModel, ASingleRankCostsNothing) {
  for (Algorithm algorithm : algorithms_for(Collective::allreduce)) {
    EXPECT_EQ(estimate_cost(allreduce_of(4000, 1), algorithm, kSeedNetwork).time_us, 0.0);
  }
}

// A per-link network of p ranks whose links all cost the same, but for those touching `slow`.
NetworkModel links_with_slow_rank(int p, double alpha, double beta, int slow, double slow_beta) {
  NetworkModel network = NetworkModel::uniform(alpha, beta);
  network.world_size = p;
  network.links.assign(static_cast<std::size_t>(p) * p, LinkCost{alpha, beta});
  for (int other = 0; other < p; ++other) {
    network.links[static_cast<std::size_t>(slow) * p + other].beta_us_per_byte = slow_beta;
    network.links[static_cast<std::size_t>(other) * p + slow].beta_us_per_byte = slow_beta;
  }
  return network;
}

TEST(CostModel, PerLinkCostsEqualTheUniformModelWhenEveryLinkIsTheSame) {
  for (int p : {2, 3, 4, 7, 8}) {
    const NetworkModel uniform = NetworkModel::uniform(12.0, 0.003);
    const NetworkModel per_link = links_with_slow_rank(p, 12.0, 0.003, 0, 0.003);
    ASSERT_TRUE(per_link.per_link());
    for (Algorithm algorithm : algorithms_for(Collective::allreduce)) {
      for (std::uint64_t count : {0ull, 1ull, 1000ull, 123457ull}) {
        const OpShape shape{Collective::allreduce, p, count, 4};
        EXPECT_DOUBLE_EQ(estimate_cost(shape, algorithm, per_link).time_us,
                         estimate_cost(shape, algorithm, uniform).time_us)
            << name(algorithm) << " p=" << p << " count=" << count;
      }
    }
  }
}

TEST(CostModel, ASlowLinkSlowsTheRoundsThatUseItAndMovesTheSwitchToSmallerSizes) {
  const int p = 4;
  const NetworkModel fast = links_with_slow_rank(p, 50.0, 0.008, 2, 0.008);
  const NetworkModel slowed = links_with_slow_rank(p, 50.0, 0.008, 2, 0.08);
  const OpShape shape{Collective::allreduce, p, 1 << 20, 4};
  for (Algorithm algorithm : algorithms_for(Collective::allreduce)) {
    EXPECT_GT(estimate_cost(shape, algorithm, slowed).time_us,
              estimate_cost(shape, algorithm, fast).time_us * 5)
        << name(algorithm) << ": every algorithm uses rank 2 in its bandwidth rounds";
  }
  // The smallest size from which the latency-optimal hypercube is no longer chosen.
  const auto switch_point = [](const NetworkModel& network) {
    for (std::uint64_t bytes = 4; bytes <= (1ull << 30); bytes *= 2) {
      if (choose_algorithm({Collective::allreduce, 4, bytes / 4, 4}, network) !=
          Algorithm::hypercube) {
        return bytes;
      }
    }
    return std::uint64_t{0};
  };
  ASSERT_GT(switch_point(fast), 0u);
  EXPECT_LT(switch_point(slowed), switch_point(fast));
}

TEST(CostModel, GammaPricesTheBytesARoundReduces) {
  const NetworkModel without = NetworkModel::uniform(10.0, 0.001);
  const NetworkModel with = NetworkModel::uniform(10.0, 0.001, 0.0005);
  // p = 4, 4000 elements: the ring reduces three chunks of 1000 f32 on every rank; the hypercube
  // reduces the whole 16000 bytes twice.
  const OpShape shape{Collective::allreduce, 4, 4000, 4};
  EXPECT_DOUBLE_EQ(estimate_cost(shape, Algorithm::ring, with).time_us -
                       estimate_cost(shape, Algorithm::ring, without).time_us,
                   3 * 4000 * 0.0005);
  EXPECT_DOUBLE_EQ(estimate_cost(shape, Algorithm::hypercube, with).time_us -
                       estimate_cost(shape, Algorithm::hypercube, without).time_us,
                   2 * 16000 * 0.0005);
  // Data movement reduces nothing.
  const OpShape gather{Collective::allgather, 4, 4000, 4};
  EXPECT_DOUBLE_EQ(estimate_cost(gather, Algorithm::ring, with).time_us,
                   estimate_cost(gather, Algorithm::ring, without).time_us);
}

}  // namespace
}  // namespace gradsync
