#include "daemon/plan_builder.h"

#include <algorithm>
#include <cmath>
#include <map>
#include <string>
#include <utility>

#include "collective/algorithms.h"
#include "proto/convert.h"

namespace gradsync::daemon {

namespace {

bool usable(double value) { return std::isfinite(value) && value >= 0; }

}  // namespace

Status plan_from_reports(std::uint64_t generation, const std::vector<proto::ProbeReport>& reports,
                         GroupPlan& plan) {
  const int p = static_cast<int>(reports.size());
  const std::size_t pairs = static_cast<std::size_t>(p) * p;
  std::vector<double> alpha_sum(pairs, 0.0);
  std::vector<double> beta_sum(pairs, 0.0);
  std::vector<int> ends(pairs, 0);
  plan = GroupPlan{};
  plan.generation = generation;
  plan.world_size = p;
  plan.measured = true;
  for (int rank = 0; rank < p; ++rank) {
    const proto::ProbeReport& report = reports[rank];
    const auto bad = [rank](const std::string& what) {
      return Status(ErrorCode::protocol_error,
                    "rank " + std::to_string(rank) + " sent a bad probe report: " + what);
    };
    if (report.rank() != rank) return bad("it claims rank " + std::to_string(report.rank()));
    if (!usable(report.gamma_us_per_byte())) return bad("gamma is not a number >= 0");
    for (const proto::LinkMeasurement& link : report.links()) {
      const int peer = link.to_rank();
      if (link.from_rank() != rank || peer < 0 || peer >= p || peer == rank) {
        return bad("a link from rank " + std::to_string(link.from_rank()) + " to rank " +
                   std::to_string(peer));
      }
      if (!usable(link.alpha_us()) || !usable(link.beta_us_per_byte())) {
        return bad("the link to rank " + std::to_string(peer) + " has a cost that is not >= 0");
      }
      // Both directions, from this end's view; the other end adds its own.
      for (const std::size_t index :
           {static_cast<std::size_t>(rank) * p + peer, static_cast<std::size_t>(peer) * p + rank}) {
        alpha_sum[index] += link.alpha_us();
        beta_sum[index] += link.beta_us_per_byte();
        ++ends[index];
      }
    }
    plan.gamma_us_per_byte.push_back(report.gamma_us_per_byte());
    plan.probe_ms = std::max(plan.probe_ms, report.probe_ms());
  }
  NetworkModel& network = plan.network;
  // A single rank has no links to list.
  if (p > 1) {
    network.world_size = p;
    network.links.assign(pairs, LinkCost{});
  }
  for (int from = 0; from < p; ++from) {
    for (int to = 0; to < p; ++to) {
      if (from == to) continue;
      const std::size_t index = static_cast<std::size_t>(from) * p + to;
      if (ends[index] != 2) {
        return Status(ErrorCode::protocol_error,
                      "the probe reports do not measure the link between ranks " +
                          std::to_string(from) + " and " + std::to_string(to) + " from both ends");
      }
      network.links[index] = {alpha_sum[index] / 2, beta_sum[index] / 2};
      network.alpha_us = std::max(network.alpha_us, network.links[index].alpha_us);
      network.beta_us_per_byte =
          std::max(network.beta_us_per_byte, network.links[index].beta_us_per_byte);
    }
  }
  network.gamma_us_per_byte =
      *std::max_element(plan.gamma_us_per_byte.begin(), plan.gamma_us_per_byte.end());
  plan.table = build_table(plan);
  return {};
}

proto::CalibrationRequest calibration_request(const GroupPlan& plan,
                                              std::chrono::milliseconds budget) {
  constexpr double kTargetUsPerSize = 20'000;  // for the repetitions of one size's algorithms
  constexpr int kMinRepetitions = 2;
  constexpr int kMaxRepetitions = 10;
  constexpr double kContenderFactor = 1.5;
  constexpr double kAlwaysCalibrateUs = 5'000;
  proto::CalibrationRequest request;
  request.set_generation(plan.generation);
  if (plan.world_size < 2) return request;
  const double budget_us = std::chrono::duration<double, std::micro>(budget).count();
  double spent_us = 0;
  for (const std::uint64_t bytes : {4ull, 64ull << 10, 1ull << 20, 4ull << 20}) {
    const OpShape shape{Collective::allreduce, plan.world_size, bytes / 4, 4};
    std::vector<std::pair<Algorithm, double>> predictions;
    double best_us = INFINITY;
    for (Algorithm algorithm : algorithms_for(Collective::allreduce)) {
      predictions.emplace_back(algorithm, predicted_us(plan, shape, algorithm));
      best_us = std::min(best_us, predictions.back().second);
    }
    // Only the contenders where it saves time: an algorithm the model puts far behind at a size
    // where ops take milliseconds costs calibration time without changing any choice (its
    // prediction carries on from the smaller sizes). Small sizes run everything: there the
    // model's latencies are least sure.
    proto::CalibrationRequest::Size size;
    size.set_bytes(bytes);
    double once_us = 0;
    for (const auto& [algorithm, time_us] : predictions) {
      if (time_us > kContenderFactor * best_us && time_us > kAlwaysCalibrateUs) continue;
      size.add_algorithms(to_proto(algorithm));
      once_us += time_us;
    }
    const int repetitions =
        static_cast<int>(std::clamp(kTargetUsPerSize / std::max(once_us, 1.0),
                                    double{kMinRepetitions}, double{kMaxRepetitions}));
    spent_us += repetitions * once_us;
    if (spent_us > budget_us) break;
    size.set_repetitions(repetitions);
    *request.add_sizes() = size;
  }
  return request;
}

Status add_calibration(GroupPlan& plan, const std::vector<proto::CalibrationReport>& reports) {
  std::map<std::pair<Algorithm, std::uint64_t>, double> slowest;
  plan.calibration_ms = 0;
  for (std::size_t rank = 0; rank < reports.size(); ++rank) {
    plan.calibration_ms = std::max(plan.calibration_ms, reports[rank].calibration_ms());
    for (const proto::CalibrationSample& sample : reports[rank].samples()) {
      const auto algorithm = from_proto(sample.algorithm());
      if (!algorithm || !supports(Collective::allreduce, *algorithm) ||
          !usable(sample.measured_us())) {
        return Status(ErrorCode::protocol_error,
                      "rank " + std::to_string(rank) + " sent a bad calibration sample");
      }
      double& time = slowest[{*algorithm, sample.bytes()}];
      time = std::max(time, sample.measured_us());
    }
  }
  plan.calibration.clear();
  for (const auto& [key, measured_us] : slowest) {
    const auto& [algorithm, bytes] = key;
    const OpShape shape{Collective::allreduce, plan.world_size, bytes / 4, 4};
    const CostEstimate modelled = estimate_cost(shape, algorithm, plan.network);
    plan.calibration.push_back(
        {algorithm, bytes, measured_us, modelled.latency_us, modelled.transfer_us});
  }
  plan.table = build_table(plan);
  return {};
}

GroupPlan plan_from_model(std::uint64_t generation, int world_size, const NetworkModel& network) {
  GroupPlan plan;
  plan.generation = generation;
  plan.world_size = world_size;
  plan.network = network;
  plan.table = AlgorithmTable::build(world_size, network);
  return plan;
}

}  // namespace gradsync::daemon
