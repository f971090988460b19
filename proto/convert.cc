#include "proto/convert.h"

#include <algorithm>
#include <cmath>
#include <string>
#include <vector>

#include "collective/algorithms.h"

namespace gradsync {

namespace {

template <typename ProtoEnum, typename CoreEnum>
ProtoEnum shifted_up(CoreEnum value) {
  return static_cast<ProtoEnum>(static_cast<int>(value) + 1);
}

// Core enum for a proto value, if it is one of `values`.
template <typename CoreEnum, std::size_t N>
std::optional<CoreEnum> shifted_down(int proto_value, const CoreEnum (&values)[N]) {
  for (CoreEnum value : values) {
    if (static_cast<int>(value) + 1 == proto_value) return value;
  }
  return std::nullopt;
}

}  // namespace

proto::DataType to_proto(DataType type) { return shifted_up<proto::DataType>(type); }
proto::ReduceOp to_proto(ReduceOp op) { return shifted_up<proto::ReduceOp>(op); }
proto::Collective to_proto(Collective collective) {
  return shifted_up<proto::Collective>(collective);
}
proto::Algorithm to_proto(Algorithm algorithm) { return shifted_up<proto::Algorithm>(algorithm); }

void to_proto(const Status& status, proto::Status& out) {
  out.set_code(static_cast<proto::Status::Code>(status.code()));
  out.set_message(status.message());
}

std::optional<DataType> from_proto(proto::DataType type) {
  return shifted_down(type, kAllDataTypes);
}
std::optional<ReduceOp> from_proto(proto::ReduceOp op) { return shifted_down(op, kAllReduceOps); }
std::optional<Collective> from_proto(proto::Collective collective) {
  return shifted_down(collective, kAllCollectives);
}
std::optional<Algorithm> from_proto(proto::Algorithm algorithm) {
  return shifted_down(algorithm, kAllAlgorithms);
}

Status from_proto(const proto::Status& status) {
  const int code = status.code();
  if (code < 0 || code > static_cast<int>(ErrorCode::internal)) {
    return Status(ErrorCode::internal,
                  "unknown status code " + std::to_string(code) + ": " + status.message());
  }
  return Status(static_cast<ErrorCode>(code), status.message());
}

void to_proto(const GroupPlan& plan, proto::GroupPlan& out) {
  out.set_generation(plan.generation);
  out.set_world_size(plan.world_size);
  out.set_measured(plan.measured);
  out.set_alpha_us(plan.network.alpha_us);
  out.set_beta_us_per_byte(plan.network.beta_us_per_byte);
  out.set_gamma_us_per_byte(plan.network.gamma_us_per_byte);
  if (plan.network.per_link()) {
    for (int from = 0; from < plan.world_size; ++from) {
      for (int to = 0; to < plan.world_size; ++to) {
        if (from == to) continue;
        const LinkCost link = plan.network.link(from, to);
        proto::LinkMeasurement& entry = *out.add_links();
        entry.set_from_rank(from);
        entry.set_to_rank(to);
        entry.set_alpha_us(link.alpha_us);
        entry.set_beta_us_per_byte(link.beta_us_per_byte);
      }
    }
  }
  for (double gamma : plan.gamma_us_per_byte) out.add_rank_gamma_us_per_byte(gamma);
  out.set_probe_ms(plan.probe_ms);
  out.set_calibration_ms(plan.calibration_ms);
  for (const CalibrationSample& sample : plan.calibration) {
    proto::CalibrationSample& entry = *out.add_calibration();
    entry.set_algorithm(to_proto(sample.algorithm));
    entry.set_bytes(sample.bytes);
    entry.set_measured_us(sample.measured_us);
    entry.set_modelled_latency_us(sample.modelled_latency_us);
    entry.set_modelled_transfer_us(sample.modelled_transfer_us);
    entry.set_low_us(sample.low_us);
    entry.set_high_us(sample.high_us);
    entry.set_repetitions(sample.repetitions);
  }
  for (const Threshold& threshold : plan.table.thresholds()) {
    proto::AlgorithmThreshold& entry = *out.add_algorithm_table();
    entry.set_collective(to_proto(threshold.collective));
    entry.set_min_bytes(threshold.min_bytes);
    entry.set_algorithm(to_proto(threshold.algorithm));
  }
  out.set_table_version(plan.table_version);
  for (const TableTrial& trial : plan.trials) {
    proto::TableTrial& entry = *out.add_trials();
    entry.set_size_log2(static_cast<std::uint32_t>(trial.size_log2));
    entry.set_algorithm(to_proto(trial.algorithm));
    entry.set_every(static_cast<std::uint32_t>(trial.every));
  }
  for (const TableChange& change : plan.history) {
    proto::TableChange& entry = *out.add_history();
    entry.set_version(change.version);
    entry.set_from_op(change.from_op);
    entry.set_why(change.why);
  }
  for (const int ranks : plan.local_ranks) out.add_local_ranks(ranks);
}

namespace {

Status bad_plan(const std::string& what) {
  return Status(ErrorCode::protocol_error, "bad group plan: " + what);
}

bool is_cost(double value) { return std::isfinite(value) && value >= 0; }

// The per-link table of a group of `p`: exactly one entry per pair of ranks and direction.
Status links_from_proto(const proto::GroupPlan& message, int p, NetworkModel& network) {
  if (message.links_size() != p * (p - 1)) {
    return bad_plan(std::to_string(message.links_size()) + " links in a group of " +
                    std::to_string(p) + ", not one per pair of ranks and direction");
  }
  network.world_size = p;
  network.links.assign(static_cast<std::size_t>(p) * p, LinkCost{});
  std::vector<bool> seen(network.links.size(), false);
  for (const proto::LinkMeasurement& link : message.links()) {
    const int from = link.from_rank();
    const int to = link.to_rank();
    if (from < 0 || from >= p || to < 0 || to >= p || from == to ||
        seen[static_cast<std::size_t>(from) * p + to]) {
      return bad_plan("a link from rank " + std::to_string(from) + " to rank " +
                      std::to_string(to) + " in a group of " + std::to_string(p) +
                      " (out of range, or listed twice)");
    }
    if (!is_cost(link.alpha_us()) || !is_cost(link.beta_us_per_byte())) {
      return bad_plan("the link from rank " + std::to_string(from) + " to rank " +
                      std::to_string(to) + " has a cost that is not >= 0");
    }
    const std::size_t index = static_cast<std::size_t>(from) * p + to;
    network.links[index] = {link.alpha_us(), link.beta_us_per_byte()};
    seen[index] = true;
  }
  for (int rank = 0; rank < p; ++rank) seen[static_cast<std::size_t>(rank) * p + rank] = true;
  if (std::find(seen.begin(), seen.end(), false) != seen.end()) {
    return bad_plan("the link table does not cover every pair of ranks");
  }
  return {};
}

Status calibration_from_proto(const proto::GroupPlan& message,
                              std::vector<CalibrationSample>& calibration) {
  for (const proto::CalibrationSample& entry : message.calibration()) {
    const auto algorithm = from_proto(entry.algorithm());
    if (!algorithm || !supports(Collective::allreduce, *algorithm)) {
      return bad_plan("a calibration sample names an algorithm that is not an all-reduce");
    }
    if (entry.bytes() == 0 || !is_cost(entry.measured_us()) ||
        !is_cost(entry.modelled_latency_us()) || !is_cost(entry.modelled_transfer_us()) ||
        !is_cost(entry.low_us()) || !is_cost(entry.high_us()) || entry.repetitions() < 0) {
      return bad_plan("a calibration sample of 0 bytes or with a time or count that is not >= 0");
    }
    calibration.push_back({*algorithm, entry.bytes(), entry.measured_us(),
                           entry.modelled_latency_us(), entry.modelled_transfer_us(),
                           entry.low_us(), entry.high_us(), entry.repetitions()});
  }
  return {};
}

// The algorithm table, its version, the trials that explore it and its history.
Status table_from_proto(const proto::GroupPlan& message, GroupPlan& plan) {
  std::vector<Threshold> thresholds;
  for (const proto::AlgorithmThreshold& entry : message.algorithm_table()) {
    const auto collective = from_proto(entry.collective());
    const auto algorithm = from_proto(entry.algorithm());
    if (!collective || !algorithm || !supports(*collective, *algorithm)) {
      return bad_plan("an algorithm table entry names an unknown collective or algorithm");
    }
    thresholds.push_back({*collective, entry.min_bytes(), *algorithm});
  }
  plan.table = AlgorithmTable(std::move(thresholds));
  plan.table_version = std::max<std::uint64_t>(message.table_version(), 1);
  for (const proto::TableTrial& entry : message.trials()) {
    const auto algorithm = from_proto(entry.algorithm());
    if (!algorithm || !supports(Collective::allreduce, *algorithm) || entry.size_log2() > 62 ||
        entry.every() < 2 || entry.every() > kMaxTrialEvery) {
      return bad_plan(
          "a table trial names an algorithm that is not an all-reduce, a size past "
          "2^62 bytes or a rate not of 1 in 2 to " +
          std::to_string(kMaxTrialEvery));
    }
    plan.trials.push_back(
        {static_cast<int>(entry.size_log2()), *algorithm, static_cast<int>(entry.every())});
  }
  if (message.history_size() > kMaxTableHistory) {
    return bad_plan(std::to_string(message.history_size()) + " table changes, more than " +
                    std::to_string(kMaxTableHistory));
  }
  for (const proto::TableChange& entry : message.history()) {
    plan.history.push_back({entry.version(), entry.from_op(), entry.why()});
  }
  return {};
}

// How many local ranks each of the `p` hosts has, if the message says.
Status local_ranks_from_proto(const proto::GroupPlan& message, int p,
                              std::vector<int>& local_ranks) {
  if (message.local_ranks_size() == 0) return {};
  local_ranks.assign(message.local_ranks().begin(), message.local_ranks().end());
  if (message.local_ranks_size() != p) {
    return bad_plan(std::to_string(message.local_ranks_size()) +
                    " hosts' local ranks in a group of " + std::to_string(p) + " hosts");
  }
  if (Status layout = check_layout(local_ranks); !layout.ok()) return bad_plan(layout.message());
  return {};
}

}  // namespace

Status from_proto(const proto::GroupPlan& message, GroupPlan& plan) {
  const int p = message.world_size();
  if (p < 1 || p > kMaxWorldSize) return bad_plan("world size " + std::to_string(p));
  if (!is_cost(message.alpha_us()) || !is_cost(message.beta_us_per_byte()) ||
      !is_cost(message.gamma_us_per_byte())) {
    return bad_plan("alpha, beta or gamma is not a number >= 0");
  }
  plan = GroupPlan{};
  plan.generation = message.generation();
  plan.world_size = p;
  plan.measured = message.measured();
  plan.network = NetworkModel::uniform(message.alpha_us(), message.beta_us_per_byte(),
                                       message.gamma_us_per_byte());
  if (message.links_size() > 0) {
    if (Status links = links_from_proto(message, p, plan.network); !links.ok()) return links;
  }
  plan.gamma_us_per_byte.assign(message.rank_gamma_us_per_byte().begin(),
                                message.rank_gamma_us_per_byte().end());
  plan.probe_ms = message.probe_ms();
  plan.calibration_ms = message.calibration_ms();
  if (Status calibration = calibration_from_proto(message, plan.calibration); !calibration.ok()) {
    return calibration;
  }
  if (Status table = table_from_proto(message, plan); !table.ok()) return table;
  return local_ranks_from_proto(message, plan.world_size, plan.local_ranks);
}

}  // namespace gradsync
