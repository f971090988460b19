#include "daemon/plan_builder.h"

#include <algorithm>
#include <cmath>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>

#include "collective/algorithms.h"
#include "collective/plan_choice.h"
#include "collective/quantile.h"
#include "proto/convert.h"

namespace gradsync::daemon {

namespace {

bool usable(double value) { return std::isfinite(value) && value >= 0; }

}  // namespace

Status check_probe_report(const proto::ProbeReport& report, std::uint64_t generation, int rank,
                          int world_size) {
  const auto bad = [rank](const std::string& what) {
    return Status(ErrorCode::protocol_error,
                  "rank " + std::to_string(rank) + " sent a bad probe report: " + what);
  };
  if (report.generation() != generation || report.rank() != rank) {
    return bad("it is rank " + std::to_string(report.rank()) + "'s of generation " +
               std::to_string(report.generation()));
  }
  if (!usable(report.gamma_us_per_byte())) return bad("gamma is not a number >= 0");
  std::vector<bool> measured(static_cast<std::size_t>(world_size), false);
  for (const proto::LinkMeasurement& link : report.links()) {
    const int peer = link.to_rank();
    if (link.from_rank() != rank || peer < 0 || peer >= world_size || peer == rank ||
        measured[peer]) {
      return bad("a link from rank " + std::to_string(link.from_rank()) + " to rank " +
                 std::to_string(peer) + " (out of range, or listed twice)");
    }
    if (!usable(link.alpha_us()) || !usable(link.beta_us_per_byte())) {
      return bad("the link to rank " + std::to_string(peer) + " has a cost that is not >= 0");
    }
    measured[peer] = true;
  }
  if (report.links_size() != world_size - 1) {
    return bad("it measures " + std::to_string(report.links_size()) + " links, not " +
               std::to_string(world_size - 1));
  }
  return {};
}

GroupPlan plan_from_reports(std::uint64_t generation,
                            const std::vector<proto::ProbeReport>& reports) {
  const int p = static_cast<int>(reports.size());
  GroupPlan plan;
  plan.generation = generation;
  plan.world_size = p;
  plan.measured = true;
  // Both ends of a link report it. β: the mean of the two. α: the smaller, since both ends time
  // the same round trips and a larger time means that end was descheduled while it measured.
  std::vector<LinkCost> links(static_cast<std::size_t>(p) * p,
                              LinkCost{std::numeric_limits<double>::infinity(), 0});
  for (const proto::ProbeReport& report : reports) {
    for (const proto::LinkMeasurement& link : report.links()) {
      for (const std::size_t index :
           {static_cast<std::size_t>(link.from_rank()) * p + link.to_rank(),
            static_cast<std::size_t>(link.to_rank()) * p + link.from_rank()}) {
        links[index].alpha_us = std::min(links[index].alpha_us, link.alpha_us());
        links[index].beta_us_per_byte += link.beta_us_per_byte() / 2;
      }
    }
    plan.gamma_us_per_byte.push_back(report.gamma_us_per_byte());
    plan.probe_ms = std::max(plan.probe_ms, report.probe_ms());
  }
  for (int rank = 0; rank < p; ++rank) links[static_cast<std::size_t>(rank) * p + rank] = {};
  NetworkModel& network = plan.network;
  for (int from = 0; from < p; ++from) {
    for (int to = 0; to < p; ++to) {
      if (from == to) continue;
      const LinkCost& link = links[static_cast<std::size_t>(from) * p + to];
      network.alpha_us = std::max(network.alpha_us, link.alpha_us);
      network.beta_us_per_byte = std::max(network.beta_us_per_byte, link.beta_us_per_byte);
    }
  }
  // A single rank has no links to list; a large group's would not fit in one control message, so
  // it gets the slowest link's cost on every link.
  if (p > 1 && p <= kMaxPerLinkRanks) {
    network.world_size = p;
    network.links = std::move(links);
  }
  network.gamma_us_per_byte =
      *std::max_element(plan.gamma_us_per_byte.begin(), plan.gamma_us_per_byte.end());
  plan.table = build_table(plan);
  return plan;
}

proto::CalibrationRequest calibration_request(const GroupPlan& plan,
                                              std::chrono::milliseconds budget) {
  constexpr double kTargetUsPerSize = 30'000;  // for the repetitions of one size's algorithms
  constexpr int kMinRepetitions = 5;
  constexpr int kMaxRepetitions = 15;
  constexpr double kContenderFactor = 1.3;
  constexpr double kAlwaysCalibrateUs = 5'000;
  proto::CalibrationRequest request;
  request.set_generation(plan.generation);
  if (plan.world_size < 2) return request;
  const double budget_us = std::chrono::duration<double, std::micro>(budget).count();
  double spent_us = 0;
  for (const std::uint64_t bytes : {4ull, 4ull << 10, 64ull << 10, 1ull << 20, 4ull << 20}) {
    const OpShape shape{Collective::allreduce, plan.world_size, bytes / 4, 4};
    std::vector<std::pair<Algorithm, double>> predictions;
    double best_us = INFINITY;
    for (Algorithm algorithm : algorithms_for(Collective::allreduce)) {
      predictions.emplace_back(algorithm, predicted_us(plan, shape, algorithm));
      best_us = std::min(best_us, predictions.back().second);
    }
    // Only the contenders where it saves time: an algorithm the model puts far behind at a size
    // where ops take milliseconds costs calibration time without changing any choice (its
    // prediction carries on from the smaller sizes). The model errs the other way for those it
    // puts behind: on the emulated LAN the hypercube (1.33x at 4 MiB) took 1.3-1.7x its
    // prediction. Small sizes run everything: there the model's latencies are least sure.
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
    spent_us += (repetitions + 1) * once_us;  // and the untimed op before them
    if (spent_us > budget_us) break;
    size.set_repetitions(repetitions);
    *request.add_sizes() = size;
  }
  return request;
}

Status check_calibration_report(const proto::CalibrationReport& report,
                                const proto::CalibrationRequest& request, int rank) {
  const auto bad = [rank](const std::string& what) {
    return Status(ErrorCode::protocol_error,
                  "rank " + std::to_string(rank) + " sent a bad calibration report: " + what);
  };
  if (report.generation() != request.generation() || report.rank() != rank) {
    return bad("it is rank " + std::to_string(report.rank()) + "'s of generation " +
               std::to_string(report.generation()));
  }
  // Exactly the requested (algorithm, size) pairs, each once, with a time per repetition.
  std::map<std::pair<int, std::uint64_t>, int> repetitions;
  for (const proto::CalibrationRequest::Size& size : request.sizes()) {
    for (const int algorithm : size.algorithms()) {
      repetitions[{algorithm, size.bytes()}] = size.repetitions();
    }
  }
  std::set<std::pair<int, std::uint64_t>> seen;
  for (const proto::CalibrationSample& sample : report.samples()) {
    const std::pair<int, std::uint64_t> key{sample.algorithm(), sample.bytes()};
    const auto found = repetitions.find(key);
    if (found == repetitions.end() || !seen.insert(key).second) {
      return bad("a sample of algorithm " + std::to_string(sample.algorithm()) + " at " +
                 std::to_string(sample.bytes()) + " bytes that was not asked for");
    }
    if (sample.repetition_us_size() != found->second) {
      return bad("a sample with " + std::to_string(sample.repetition_us_size()) +
                 " repetitions, not " + std::to_string(found->second));
    }
    for (const double time_us : sample.repetition_us()) {
      if (!(usable(time_us) && time_us > 0)) return bad("a sample whose time is not a number > 0");
    }
  }
  if (report.samples_size() != static_cast<int>(repetitions.size())) {
    return bad("it has " + std::to_string(report.samples_size()) + " samples, not " +
               std::to_string(repetitions.size()));
  }
  return {};
}

// An op lasts until its slowest rank is done, and a benchmark row is the median over its
// iterations of that: the same statistic here, so that the planner compares what users see.
// The algorithms of a size ran interleaved, one repetition of each and then the next, so what
// slowed a whole repetition (another process, a busy core) is drift that hit them all alike, not
// the spread of one: each repetition's times are divided by their geometric mean over the
// algorithms, relative to the median of those means, before the quartiles are taken. For two
// algorithms, their interquartile ranges then part only if one was faster in three repetitions of
// four (choose_algorithm's test for a clear difference).
void add_calibration(GroupPlan& plan, const std::vector<proto::CalibrationReport>& reports) {
  std::map<std::uint64_t, std::map<Algorithm, std::vector<double>>> slowest;  // by size
  plan.calibration_ms = 0;
  for (const proto::CalibrationReport& report : reports) {
    plan.calibration_ms = std::max(plan.calibration_ms, report.calibration_ms());
    for (const proto::CalibrationSample& sample : report.samples()) {
      std::vector<double>& times = slowest[sample.bytes()][*from_proto(sample.algorithm())];
      times.resize(std::max<std::size_t>(times.size(), sample.repetition_us_size()));
      for (int i = 0; i < sample.repetition_us_size(); ++i) {
        times[i] = std::max(times[i], sample.repetition_us(i));
      }
    }
  }
  plan.calibration.clear();
  for (const auto& [bytes, by_algorithm] : slowest) {
    std::size_t repetitions = std::numeric_limits<std::size_t>::max();
    for (const auto& [algorithm, times] : by_algorithm) {
      repetitions = std::min(repetitions, times.size());
    }
    if (repetitions == 0) continue;
    std::vector<double> drift(repetitions, 1.0);
    if (by_algorithm.size() >= 2) {
      for (std::size_t i = 0; i < repetitions; ++i) {
        double log_sum = 0;
        for (const auto& [algorithm, times] : by_algorithm) log_sum += std::log(times[i]);
        drift[i] = std::exp(log_sum / static_cast<double>(by_algorithm.size()));
      }
      const double typical = quantile(drift, 0.5);
      for (double& factor : drift) factor /= typical;
    }
    for (const auto& [algorithm, times] : by_algorithm) {
      std::vector<double> steady(repetitions);
      for (std::size_t i = 0; i < repetitions; ++i) steady[i] = times[i] / drift[i];
      const OpShape shape{Collective::allreduce, plan.world_size, bytes / 4, 4};
      const CostEstimate modelled = estimate_cost(shape, algorithm, plan.network);
      plan.calibration.push_back({algorithm, bytes, quantile(steady, 0.5), modelled.latency_us,
                                  modelled.transfer_us, quantile(steady, 0.25),
                                  quantile(steady, 0.75), static_cast<int>(repetitions)});
    }
  }
  plan.table = build_table(plan);
}

GroupPlan plan_from_model(std::uint64_t generation, int world_size, const NetworkModel& network) {
  GroupPlan plan;
  plan.generation = generation;
  plan.world_size = world_size;
  plan.network = network;
  plan.table = build_table(plan);
  return plan;
}

}  // namespace gradsync::daemon
