#include "collective/cost_model.h"

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <vector>

#include "collective/algorithms.h"
#include "collective/check.h"
#include "collective/math_util.h"

namespace gradsync {

NetworkModel NetworkModel::uniform(double alpha_us, double beta_us_per_byte,
                                   double gamma_us_per_byte) {
  NetworkModel network;
  network.alpha_us = alpha_us;
  network.beta_us_per_byte = beta_us_per_byte;
  network.gamma_us_per_byte = gamma_us_per_byte;
  return network;
}

LinkCost NetworkModel::link(int from, int to) const {
  if (links.empty()) return {alpha_us, beta_us_per_byte};
  GRADSYNC_CHECK_EQ(links.size(), static_cast<std::size_t>(world_size) * world_size);
  return links[static_cast<std::size_t>(from) * world_size + to];
}

namespace {

// One rank's time in one round, as the latencies it pays and the time its bytes take.
struct RoundTime {
  double latency_us = 0;
  double transfer_us = 0;  // bytes on the wire and bytes reduced
  double total() const { return latency_us + transfer_us; }
};

RoundTime round_time_on(int rank, const Round& round, const NetworkModel& network) {
  // Latencies and bytes each add up per direction; the busier direction sets the pace of each.
  double send_alpha = 0, send_beta = 0, recv_alpha = 0, recv_beta = 0, reduced = 0;
  for (const Send& send : round.sends) {
    const LinkCost link = network.link(rank, send.peer);
    send_alpha += link.alpha_us;
    send_beta += link.beta_us_per_byte * static_cast<double>(send.bytes());
  }
  for (const Recv& recv : round.recvs) {
    const LinkCost link = network.link(recv.peer, rank);
    recv_alpha += link.alpha_us;
    recv_beta += link.beta_us_per_byte * static_cast<double>(recv.bytes());
    if (recv.reduces()) reduced += static_cast<double>(recv.bytes());
  }
  return {std::max(send_alpha, recv_alpha),
          std::max(send_beta, recv_beta) + network.gamma_us_per_byte * reduced};
}

}  // namespace

CostEstimate estimate_cost(const OpShape& shape, Algorithm algorithm, const NetworkModel& network) {
  GRADSYNC_CHECK(!network.per_link() || network.world_size == shape.world_size);
  // One rank's schedule at a time keeps memory at O(rounds), not O(p · rounds), for large p.
  std::vector<RoundTime> round_time;  // the slowest rank's, per round
  CostEstimate estimate;
  for (int rank = 0; rank < shape.world_size; ++rank) {
    const Schedule schedule = build_schedule(shape, algorithm, rank);
    round_time.resize(schedule.rounds.size());
    std::uint64_t bytes_sent = 0;
    for (std::size_t t = 0; t < schedule.rounds.size(); ++t) {
      const Round& round = schedule.rounds[t];
      const RoundTime time = round_time_on(rank, round, network);
      if (time.total() > round_time[t].total()) round_time[t] = time;
      for (const Send& send : round.sends) bytes_sent += send.bytes();
    }
    estimate.max_bytes_sent = std::max(estimate.max_bytes_sent, bytes_sent);
  }
  estimate.rounds = static_cast<int>(round_time.size());
  for (const RoundTime& time : round_time) {
    estimate.latency_us += time.latency_us;
    estimate.transfer_us += time.transfer_us;
  }
  estimate.time_us = estimate.latency_us + estimate.transfer_us;
  return estimate;
}

std::vector<Candidate> estimate_candidates(const OpShape& shape, const NetworkModel& network) {
  std::vector<Candidate> candidates;
  for (Algorithm algorithm : algorithms_for(shape.collective)) {
    const CostEstimate estimate = estimate_cost(shape, algorithm, network);
    candidates.push_back({algorithm, estimate, estimate.time_us});
  }
  return candidates;
}

std::vector<Candidate> estimate_candidates(const OpShape& shape, const CostFunction& cost,
                                           const NetworkModel& network) {
  const NetworkModel tie_breaker =
      NetworkModel::uniform(network.alpha_us, network.beta_us_per_byte, network.gamma_us_per_byte);
  std::vector<Candidate> candidates;
  for (Algorithm algorithm : algorithms_for(shape.collective)) {
    CostEstimate estimate;
    estimate.time_us = cost(shape, algorithm);
    candidates.push_back(
        {algorithm, estimate, estimate_cost(shape, algorithm, tie_breaker).time_us});
  }
  return candidates;
}

Algorithm cheapest(const std::vector<Candidate>& candidates) {
  GRADSYNC_CHECK(!candidates.empty());
  double best = candidates.front().cost.time_us;
  for (const Candidate& candidate : candidates) best = std::min(best, candidate.cost.time_us);
  const auto tied = [best](const Candidate& candidate) {
    return candidate.cost.time_us <= best * (1 + kTieTolerance);
  };
  double best_modelled = INFINITY;
  for (const Candidate& candidate : candidates) {
    if (tied(candidate)) best_modelled = std::min(best_modelled, candidate.modelled_us);
  }
  for (const Candidate& candidate : candidates) {
    if (tied(candidate) && candidate.modelled_us <= best_modelled * (1 + kTieTolerance)) {
      return candidate.algorithm;
    }
  }
  return candidates.front().algorithm;  // only for NaN times
}

Algorithm choose_algorithm(const OpShape& shape, const NetworkModel& network) {
  return cheapest(estimate_candidates(shape, network));
}

double closed_form_time_us(Collective collective, Algorithm algorithm, int world_size, double bytes,
                           const NetworkModel& network) {
  GRADSYNC_CHECK(supports(collective, algorithm));
  const double p = world_size;
  const double alpha = network.alpha_us;
  const double beta = network.beta_us_per_byte;
  const double n = bytes;
  const double log_p = ceil_log2(world_size);
  const double core = floor_power_of_two(world_size);
  const double log_core = std::log2(core);
  const double fold = core == p ? 0.0 : 2.0 * (alpha + beta * n);
  switch (collective) {
    case Collective::allreduce:
      switch (algorithm) {
        case Algorithm::tree:
          return 2 * log_p * (alpha + beta * n);
        case Algorithm::hypercube:
          return fold + log_core * (alpha + beta * n);
        case Algorithm::ring:
          return 2 * (p - 1) * (alpha + beta * n / p);
        case Algorithm::halving_doubling:
          return fold + 2 * log_core * alpha + 2 * beta * n * (core - 1) / core;
        default:
          break;
      }
      break;
    case Collective::reduce_scatter:
    case Collective::allgather:
      return (p - 1) * (alpha + beta * n / p);
    case Collective::broadcast:
      return log_p * (alpha + beta * n);
    case Collective::alltoall:
    case Collective::alltoallv:  // as if every block were as long as the longest
      return algorithm == Algorithm::direct ? (p - 1) * (alpha + beta * n)
                                            : log_p * (alpha + beta * n * p / 2);
    case Collective::barrier:
      return log_p * alpha;
    case Collective::reduce:
      return algorithm == Algorithm::tree
                 ? log_p * (alpha + beta * n)
                 : (p - 1) * (alpha + beta * n / p) + (p - 1) * alpha + beta * n * (p - 1) / p;
    case Collective::gather:
    case Collective::scatter:
      return log_p * alpha + beta * n * (p - 1) / p;
  }
  std::abort();
}

}  // namespace gradsync
