#include "daemon/measured_network.h"

#include <algorithm>
#include <cmath>
#include <string>

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
  network.world_size = p;
  network.links.assign(pairs, LinkCost{});
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
  plan.table = AlgorithmTable::build(p, network);
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
