// The coordinator's plan (daemon/plan_builder.h): probe reports combined into per-link costs, the
// calibration request within its budget, calibration reports folded in, and the plan's trip through
// protobuf, with a clear error for every malformed input.
#include "daemon/plan_builder.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "collective/plan_choice.h"
#include "net/message_stream.h"
#include "proto/convert.h"

namespace gradsync::daemon {
namespace {

// Every rank measured every link at `alpha` and `beta`, but rank `odd` measured its link to
// `odd_peer` at three times that (so the link's mean is twice).
std::vector<proto::ProbeReport> reports(int p, double alpha, double beta, int odd = -1,
                                        int odd_peer = -1) {
  std::vector<proto::ProbeReport> result(p);
  for (int rank = 0; rank < p; ++rank) {
    result[rank].set_generation(1);
    result[rank].set_rank(rank);
    result[rank].set_gamma_us_per_byte(0.0001 * (rank + 1));
    result[rank].set_probe_ms(10.0 * rank);
    for (int peer = 0; peer < p; ++peer) {
      if (peer == rank) continue;
      const double scale = rank == odd && peer == odd_peer ? 3.0 : 1.0;
      proto::LinkMeasurement& link = *result[rank].add_links();
      link.set_from_rank(rank);
      link.set_to_rank(peer);
      link.set_alpha_us(alpha * scale);
      link.set_beta_us_per_byte(beta * scale);
    }
  }
  return result;
}

TEST(PlanBuilder, ALinkTakesTheSmallerAlphaAndTheMeanBetaOfItsTwoEnds) {
  const auto probes = reports(4, 10.0, 0.001, 1, 3);
  for (int rank = 0; rank < 4; ++rank) {
    ASSERT_TRUE(check_probe_report(probes[rank], 1, rank, 4).ok()) << rank;
  }
  const GroupPlan plan = plan_from_reports(1, probes);
  EXPECT_TRUE(plan.measured);
  EXPECT_EQ(plan.world_size, 4);
  EXPECT_EQ(plan.network.link(1, 3), (LinkCost{10.0, 0.002}));
  EXPECT_EQ(plan.network.link(3, 1), (LinkCost{10.0, 0.002}));
  EXPECT_EQ(plan.network.link(0, 2), (LinkCost{10.0, 0.001}));
  EXPECT_DOUBLE_EQ(plan.network.alpha_us, 10.0) << "the slowest link, for links not listed";
  EXPECT_DOUBLE_EQ(plan.network.beta_us_per_byte, 0.002);
  EXPECT_DOUBLE_EQ(plan.network.gamma_us_per_byte, 0.0004) << "the slowest rank's";
  EXPECT_EQ(plan.gamma_us_per_byte.size(), 4u);
  EXPECT_DOUBLE_EQ(plan.probe_ms, 30.0);
  EXPECT_FALSE(plan.table.thresholds().empty());
}

TEST(PlanBuilder, AGroupTooLargeForALinkTableGetsItsSlowestLinkEverywhere) {
  const GroupPlan plan = plan_from_reports(1, reports(kMaxPerLinkRanks + 1, 10.0, 0.001, 0, 1));
  EXPECT_FALSE(plan.network.per_link());
  EXPECT_DOUBLE_EQ(plan.network.alpha_us, 10.0);
  EXPECT_DOUBLE_EQ(plan.network.beta_us_per_byte, 0.002);
}

// The plan goes to every worker as one control message, at every world size a group may have:
// the largest is the largest group that still lists its links.
TEST(PlanBuilder, TheLargestPlanFitsInAControlMessage) {
  const GroupPlan plan = plan_from_reports(1, reports(kMaxPerLinkRanks, 10.0, 0.001, 0, 1));
  proto::GroupPlan message;
  to_proto(plan, message);
  EXPECT_LT(message.ByteSizeLong(), net::kMaxControlMessageBytes);
  GroupPlan decoded;
  ASSERT_TRUE(from_proto(message, decoded).ok());
  EXPECT_TRUE(decoded.network.per_link());
  EXPECT_EQ(decoded.world_size, kMaxPerLinkRanks);
}

// The message check_probe_report gives rank `rank`'s `report` in a group of 3.
std::string probe_error(const proto::ProbeReport& report, int rank) {
  const Status status = check_probe_report(report, 1, rank, 3);
  EXPECT_EQ(status.code(), ErrorCode::protocol_error);
  return status.message();
}

TEST(PlanBuilder, ABadProbeReportIsRefusedNamingItsSender) {
  const auto good = reports(3, 10.0, 0.001);
  auto report = good[2];
  report.mutable_links()->RemoveLast();
  EXPECT_NE(probe_error(report, 2).find("rank 2 sent a bad probe report: it measures 1 links"),
            std::string::npos);
  report = good[1];
  report.set_rank(2);
  EXPECT_NE(probe_error(report, 1).find("rank 1 sent a bad probe report: it is rank 2's"),
            std::string::npos);
  report = good[1];
  report.set_generation(9);
  EXPECT_NE(probe_error(report, 1).find("of generation 9"), std::string::npos);
  report = good[0];
  report.mutable_links(0)->set_to_rank(7);
  EXPECT_NE(probe_error(report, 0).find("a link from rank 0 to rank 7"), std::string::npos);
  report = good[0];
  report.mutable_links(1)->set_to_rank(report.links(0).to_rank());
  EXPECT_NE(probe_error(report, 0).find("listed twice"), std::string::npos);
  report = good[2];
  report.mutable_links(0)->set_beta_us_per_byte(-1.0);
  EXPECT_NE(probe_error(report, 2).find("not >= 0"), std::string::npos);
  report = good[0];
  report.set_gamma_us_per_byte(std::nan(""));
  EXPECT_NE(probe_error(report, 0).find("gamma"), std::string::npos);
}

TEST(PlanBuilder, CalibratesAsFarAsTheBudgetAllowsAndRepeatsSmallSizesMore) {
  const GroupPlan plan = plan_from_reports(1, reports(4, 10.0, 0.001));
  const proto::CalibrationRequest all = calibration_request(plan, std::chrono::seconds(60));
  ASSERT_EQ(all.sizes_size(), 5);
  EXPECT_EQ(all.sizes(0).bytes(), 4u);
  EXPECT_EQ(all.sizes(1).bytes(), 4u << 10);
  EXPECT_EQ(all.sizes(4).bytes(), 4u << 20);
  EXPECT_GT(all.sizes(0).repetitions(), all.sizes(4).repetitions());
  EXPECT_GE(all.sizes(4).repetitions(), 3);
  // At 4 B every algorithm is a contender; at 4 MiB the tree (4 rounds of the whole vector) and
  // the hypercube (2 rounds of it and 2 reductions of it) are not.
  EXPECT_EQ(all.sizes(0).algorithms_size(), 4);
  const auto& large = all.sizes(4).algorithms();
  EXPECT_EQ(std::count(large.begin(), large.end(), proto::ALGORITHM_TREE), 0);
  EXPECT_EQ(std::count(large.begin(), large.end(), proto::ALGORITHM_HYPERCUBE), 0);
  EXPECT_EQ(std::count(large.begin(), large.end(), proto::ALGORITHM_RING), 1);
  EXPECT_EQ(std::count(large.begin(), large.end(), proto::ALGORITHM_HALVING_DOUBLING), 1);
  // Even where reducing costs nothing (a LAN), the hypercube's 2 vectors against the
  // bandwidth-optimal 1.5 put it behind: the model is optimistic about it there.
  auto lan = reports(4, 10.0, 0.001);
  for (proto::ProbeReport& report : lan) report.set_gamma_us_per_byte(1e-6);
  const proto::CalibrationRequest on_lan =
      calibration_request(plan_from_reports(1, lan), std::chrono::seconds(60));
  ASSERT_EQ(on_lan.sizes_size(), 5);
  const auto& lan_large = on_lan.sizes(4).algorithms();
  EXPECT_EQ(std::count(lan_large.begin(), lan_large.end(), proto::ALGORITHM_HYPERCUBE), 0);
  EXPECT_EQ(std::count(lan_large.begin(), lan_large.end(), proto::ALGORITHM_RING), 1);
  // 4 MiB at 1 GB/s takes milliseconds per algorithm: a 5 ms budget stops before it.
  const proto::CalibrationRequest some = calibration_request(plan, std::chrono::milliseconds(5));
  EXPECT_GT(some.sizes_size(), 0);
  EXPECT_LT(some.sizes_size(), 5);
  EXPECT_EQ(calibration_request(plan, std::chrono::milliseconds(0)).sizes_size(), 0);

  const GroupPlan single = plan_from_reports(1, reports(1, 10.0, 0.001));
  EXPECT_EQ(calibration_request(single, std::chrono::seconds(60)).sizes_size(), 0)
      << "one rank has nothing to calibrate";
}

// Per repetition the slowest rank's time, then the median over repetitions: what a benchmark row
// reports. A rank's own best (900 and 1100 here) would make the op look faster than it ran.
TEST(PlanBuilder, CalibrationTakesTheMedianOfTheSlowestRanksAndRefusesWhatWasNotAskedFor) {
  GroupPlan plan = plan_from_reports(1, reports(2, 10.0, 0.001));
  proto::CalibrationRequest request;
  request.set_generation(1);
  proto::CalibrationRequest::Size& size = *request.add_sizes();
  size.set_bytes(1 << 20);
  size.set_repetitions(3);
  size.add_algorithms(proto::ALGORITHM_RING);
  std::vector<proto::CalibrationReport> calibration(2);
  for (int rank = 0; rank < 2; ++rank) {
    calibration[rank].set_generation(1);
    calibration[rank].set_rank(rank);
    calibration[rank].set_calibration_ms(5.0 + rank);
    proto::CalibrationSample& sample = *calibration[rank].add_samples();
    sample.set_algorithm(proto::ALGORITHM_RING);
    sample.set_bytes(1 << 20);
    for (const double time_us :
         rank == 0 ? std::vector{900.0, 2000.0, 1000.0} : std::vector{1500.0, 1200.0, 1100.0}) {
      sample.add_repetition_us(time_us);
    }
    ASSERT_TRUE(check_calibration_report(calibration[rank], request, rank).ok()) << rank;
  }
  add_calibration(plan, calibration);
  ASSERT_EQ(plan.calibration.size(), 1u);
  EXPECT_EQ(plan.calibration[0].algorithm, Algorithm::ring);
  EXPECT_DOUBLE_EQ(plan.calibration[0].measured_us, 1500.0);
  EXPECT_GT(plan.calibration[0].modelled_latency_us, 0.0);
  EXPECT_GT(plan.calibration[0].modelled_transfer_us, 0.0);
  EXPECT_DOUBLE_EQ(plan.calibration_ms, 6.0);

  const auto refused = [&](const proto::CalibrationReport& report) {
    const Status status = check_calibration_report(report, request, 1);
    EXPECT_EQ(status.code(), ErrorCode::protocol_error);
    return status.message();
  };
  proto::CalibrationReport report = calibration[1];
  report.mutable_samples(0)->set_algorithm(proto::ALGORITHM_TREE);
  EXPECT_NE(refused(report).find("rank 1 sent a bad calibration report: a sample of algorithm"),
            std::string::npos);
  report = calibration[1];
  report.mutable_samples(0)->set_bytes(0);
  EXPECT_NE(refused(report).find("not asked for"), std::string::npos);
  report = calibration[1];
  *report.add_samples() = report.samples(0);
  EXPECT_NE(refused(report).find("not asked for"), std::string::npos) << "a sample twice";
  report = calibration[1];
  report.clear_samples();
  EXPECT_NE(refused(report).find("0 samples, not 1"), std::string::npos);
  report = calibration[1];
  report.mutable_samples(0)->set_repetition_us(1, 0.0);
  EXPECT_NE(refused(report).find("not a number > 0"), std::string::npos);
  report = calibration[1];
  report.mutable_samples(0)->mutable_repetition_us()->RemoveLast();
  EXPECT_NE(refused(report).find("a sample with 2 repetitions, not 3"), std::string::npos);
}

// Two algorithms calibrated at 4 MiB on p = 4, taking turns for 15 repetitions. Every rank reports
// `ratio[i]` times the model choice's time for `contender` in repetition i, and each repetition is
// slowed as a whole by `drift[i]` (another process on the host). The model choice takes half its
// model's time: the algorithms not timed, priced at their model's, are slower.
GroupPlan calibrated(Algorithm model_choice, Algorithm contender, const std::vector<double>& ratio,
                     const std::vector<double>& drift) {
  constexpr std::uint64_t kBytes = 4ull << 20;
  GroupPlan plan = plan_from_reports(1, reports(4, 50.0, 0.001));
  proto::CalibrationRequest request;
  request.set_generation(1);
  proto::CalibrationRequest::Size& size = *request.add_sizes();
  size.set_bytes(kBytes);
  size.set_repetitions(static_cast<int>(ratio.size()));
  size.add_algorithms(to_proto(model_choice));
  size.add_algorithms(to_proto(contender));
  const double base_us =
      estimate_cost({Collective::allreduce, 4, kBytes / 4, 4}, model_choice, plan.network).time_us /
      2;
  std::vector<proto::CalibrationReport> calibration(4);
  for (int rank = 0; rank < 4; ++rank) {
    calibration[rank].set_generation(1);
    calibration[rank].set_rank(rank);
    for (const Algorithm algorithm : {model_choice, contender}) {
      proto::CalibrationSample& sample = *calibration[rank].add_samples();
      sample.set_algorithm(to_proto(algorithm));
      sample.set_bytes(kBytes);
      for (std::size_t i = 0; i < ratio.size(); ++i) {
        sample.add_repetition_us(base_us * drift[i] * (algorithm == contender ? ratio[i] : 1.0) *
                                 (1.0 - 0.01 * rank));
      }
    }
    EXPECT_TRUE(check_calibration_report(calibration[rank], request, rank).ok());
  }
  add_calibration(plan, calibration);
  return plan;
}

const std::vector<double> kDrift = {1.0, 2.0, 0.7, 1.5, 1.0, 0.8, 1.9, 1.1,
                                    0.6, 1.3, 1.0, 2.2, 0.9, 1.2, 1.0};

// The model's order between the ring and the hypercube at 4 MiB is a matter of bytes: the
// hypercube moves log₂p·n per rank, the ring 2n(p − 1)/p. A calibration that has the hypercube
// faster by its median, but only in about half the repetitions, is noise and changes nothing;
// one that has it faster in every repetition, through drift that doubles whole repetitions, is
// evidence.
TEST(PlanBuilder, NoiseDoesNotFlipABandwidthBoundChoiceAndAConsistentAdvantageDoes) {
  constexpr std::uint64_t kBytes = 4ull << 20;
  const Algorithm model_choice = choose_algorithm(plan_from_reports(1, reports(4, 50.0, 0.001)),
                                                  {Collective::allreduce, 4, kBytes / 4, 4})
                                     .algorithm;
  ASSERT_NE(model_choice, Algorithm::hypercube);
  // Sorted, the ratios' median is 0.9: by medians alone the hypercube is 10% faster.
  const std::vector<double> noise = {0.80, 1.15, 0.85, 1.12, 0.88, 1.10, 0.90, 0.90,
                                     1.20, 0.87, 1.18, 0.86, 1.16, 0.89, 1.14};
  GroupPlan noisy = calibrated(model_choice, Algorithm::hypercube, noise, kDrift);
  const OpShape shape{Collective::allreduce, 4, kBytes / 4, 4};
  ASSERT_LT(predicted_range(noisy, shape, Algorithm::hypercube).median_us,
            0.95 * predicted_range(noisy, shape, model_choice).median_us)
      << "by medians, beyond the 5% tie";
  const AlgorithmChoice kept = choose_algorithm(noisy, shape);
  EXPECT_EQ(kept.algorithm, model_choice);
  EXPECT_EQ(kept.basis, ChoiceBasis::model);
  ASSERT_TRUE(kept.overruled.has_value());
  EXPECT_EQ(*kept.overruled, Algorithm::hypercube) << "faster by its median, within the spread";
  EXPECT_EQ(noisy.table.lookup(Collective::allreduce, kBytes), model_choice);

  std::vector<double> consistent;
  for (std::size_t i = 0; i < kDrift.size(); ++i)
    consistent.push_back(0.85 + 0.004 * static_cast<double>(i % 5));
  GroupPlan clear = calibrated(model_choice, Algorithm::hypercube, consistent, kDrift);
  const AlgorithmChoice taken = choose_algorithm(clear, shape);
  EXPECT_EQ(taken.algorithm, Algorithm::hypercube);
  EXPECT_EQ(taken.basis, ChoiceBasis::measured);
  EXPECT_EQ(clear.table.lookup(Collective::allreduce, kBytes), Algorithm::hypercube);
  EXPECT_NE(explain(taken).find("measured: hypercube"), std::string::npos) << explain(taken);
}

// What slowed a whole repetition slowed every algorithm in it: it is taken out of the quartiles.
TEST(PlanBuilder, DriftThatHitsEveryAlgorithmOfARepetitionIsNoSpread) {
  const std::vector<double> ratio(kDrift.size(), 0.9);
  const GroupPlan plan = calibrated(Algorithm::ring, Algorithm::tree, ratio, kDrift);
  ASSERT_EQ(plan.calibration.size(), 2u);
  for (const CalibrationSample& sample : plan.calibration) {
    EXPECT_EQ(sample.repetitions, 15);
    EXPECT_NEAR(sample.high_us / sample.low_us, 1.0, 1e-9) << name(sample.algorithm);
    EXPECT_LE(sample.low_us, sample.measured_us);
    EXPECT_GE(sample.high_us, sample.measured_us);
  }
  const auto measured = [&plan](Algorithm algorithm) {
    for (const CalibrationSample& sample : plan.calibration) {
      if (sample.algorithm == algorithm) return sample.measured_us;
    }
    return 0.0;
  };
  EXPECT_NEAR(measured(Algorithm::tree) / measured(Algorithm::ring), 0.9, 1e-9);
}

TEST(PlanBuilder, APlanSurvivesProtobufAndABrokenOneIsRefused) {
  GroupPlan plan = plan_from_reports(7, reports(3, 10.0, 0.001, 0, 2));
  plan.calibration.push_back({Algorithm::tree, 4096, 80.0, 30.0, 10.0, 70.0, 95.0, 7});
  plan.table = build_table(plan);
  proto::GroupPlan message;
  to_proto(plan, message);
  GroupPlan back;
  ASSERT_TRUE(from_proto(message, back).ok());
  EXPECT_EQ(back, plan);

  GroupPlan with_local_ranks = plan;
  with_local_ranks.local_ranks = {2, 1, 3};
  proto::GroupPlan layout_message;
  to_proto(with_local_ranks, layout_message);
  ASSERT_TRUE(from_proto(layout_message, back).ok());
  EXPECT_EQ(host_layout(back), HostLayout({2, 1, 3}));
  proto::GroupPlan short_layout = layout_message;
  short_layout.mutable_local_ranks()->RemoveLast();
  EXPECT_NE(from_proto(short_layout, back).message().find("2 hosts' local ranks in a group of 3"),
            std::string::npos);
  proto::GroupPlan zero_ranks = layout_message;
  zero_ranks.set_local_ranks(1, 0);
  EXPECT_NE(from_proto(zero_ranks, back).message().find("host 1 serves 0 local ranks"),
            std::string::npos);

  proto::GroupPlan partial = message;
  partial.mutable_links()->RemoveLast();
  EXPECT_NE(from_proto(partial, back).message().find("5 links in a group of 3"), std::string::npos);
  proto::GroupPlan twice = message;
  *twice.mutable_links(0) = twice.links(1);
  EXPECT_NE(from_proto(twice, back).message().find("listed twice"), std::string::npos);
  proto::GroupPlan huge = message;
  huge.set_world_size(1 << 30);
  EXPECT_NE(from_proto(huge, back).message().find("world size 1073741824"), std::string::npos);
  proto::GroupPlan negative = message;
  negative.mutable_links(2)->set_alpha_us(-3.0);
  EXPECT_NE(from_proto(negative, back).message().find("not >= 0"), std::string::npos);
  proto::GroupPlan empty_sample = message;
  empty_sample.mutable_calibration(0)->set_bytes(0);
  EXPECT_EQ(from_proto(empty_sample, back).code(), ErrorCode::protocol_error);
  proto::GroupPlan negative_quartile = message;
  negative_quartile.mutable_calibration(0)->set_low_us(-1.0);
  EXPECT_NE(from_proto(negative_quartile, back).message().find("time or count that is not >= 0"),
            std::string::npos);
  proto::GroupPlan negative_count = message;
  negative_count.mutable_calibration(0)->set_repetitions(-2);
  EXPECT_EQ(from_proto(negative_count, back).code(), ErrorCode::protocol_error);
  proto::GroupPlan stray = message;
  stray.mutable_links(0)->set_from_rank(3);
  EXPECT_NE(from_proto(stray, back).message().find("a link from rank 3"), std::string::npos);
  proto::GroupPlan empty = message;
  empty.set_world_size(0);
  EXPECT_EQ(from_proto(empty, back).code(), ErrorCode::protocol_error);
  proto::GroupPlan unsupported = message;
  unsupported.mutable_algorithm_table(0)->set_algorithm(proto::ALGORITHM_PROBE);
  EXPECT_EQ(from_proto(unsupported, back).code(), ErrorCode::protocol_error);
}

}  // namespace
}  // namespace gradsync::daemon
