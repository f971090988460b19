#include "daemon/group_planning.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/plan_builder.h"
#include "daemon/table_gate.h"
#include "proto/convert.h"

namespace gradsync::daemon {

namespace {

Status protocol_error(const std::string& message) {
  return Status(ErrorCode::protocol_error, message);
}

// Records a report of rank `rank` into `slots`; `all` receives every rank's once the last is in.
template <typename Report>
void collect(int rank, const Report& report, std::vector<std::optional<Report>>& slots,
             std::optional<std::vector<Report>>& all) {
  slots[rank] = report;
  std::vector<Report> reports;
  for (const auto& slot : slots) {
    if (!slot) return;
    reports.push_back(*slot);
  }
  all = std::move(reports);
}

}  // namespace

bool GroupPlanning::formed(std::uint64_t generation, const std::vector<PlannedMember>& members) {
  generation_ = generation;
  members_ = members;
  std::vector<std::string> addresses;
  for (const PlannedMember& member : members) addresses.push_back(member.data_address);
  const bool same_members = !config_.network && addresses == measured_addresses_;
  probe_reports_.assign(members.size(), std::nullopt);
  calibration_reports_.assign(members.size(), std::nullopt);
  step_ = Step::probing;
  if (config_.network) {
    plan_ = plan_from_model(generation_, static_cast<int>(members.size()), *config_.network);
    publish();
  } else if (same_members) {
    spdlog::info(
        "coordinator: generation {} has the members of generation {} at the same ranks: "
        "it keeps their plan, nothing is measured again",
        generation_, measured_plan_.generation);
    plan_ = measured_plan_;
    plan_.generation = generation_;
    publish();
  }
  return !config_.network && !same_members;
}

void GroupPlanning::adopted(std::uint64_t generation, int size) {
  generation_ = generation;
  plan_ = GroupPlan{};
  plan_.generation = generation;
  plan_.world_size = size;
  step_ = Step::published;
}

void GroupPlanning::ended() {
  step_ = Step::idle;
  members_.clear();
  probe_reports_.clear();
  calibration_reports_.clear();
  refiner_.reset();
  proposed_.reset();
  last_from_op_ = 0;
  plan_ = GroupPlan{};
}

Status GroupPlanning::take_probe_report(int rank, const proto::ProbeReport& report) {
  if (step_ != Step::probing || !holds(rank) || probe_reports_[rank].has_value()) {
    return protocol_error("a probe report the coordinator did not ask for");
  }
  if (Status check = check_probe_report(report, generation_, rank,
                                        static_cast<int>(probe_reports_.size()));
      !check.ok()) {
    return check;
  }
  std::optional<std::vector<proto::ProbeReport>> reports;
  collect(rank, report, probe_reports_, reports);
  if (!reports) return {};
  plan_ = plan_from_reports(generation_, *reports);
  calibration_request_ = calibration_request(plan_, config_.calibration_budget);
  if (calibration_request_.sizes().empty()) {
    publish();
    return {};
  }
  step_ = Step::calibrating;
  spdlog::info("coordinator: links probed in {:.0f} ms; calibrating all-reduce at {} sizes",
               plan_.probe_ms, calibration_request_.sizes_size());
  proto::CoordinatorToWorker message;
  *message.mutable_calibration_request() = calibration_request_;
  to_members(std::move(message));
  return {};
}

Status GroupPlanning::take_calibration_report(int rank, const proto::CalibrationReport& report) {
  if (step_ != Step::calibrating || !holds(rank) || calibration_reports_[rank].has_value()) {
    return protocol_error("a calibration report the coordinator did not ask for");
  }
  if (Status check = check_calibration_report(report, calibration_request_, rank); !check.ok()) {
    return check;
  }
  std::optional<std::vector<proto::CalibrationReport>> reports;
  collect(rank, report, calibration_reports_, reports);
  if (!reports) return {};
  add_calibration(plan_, *reports);
  publish();
  return {};
}

void GroupPlanning::publish() {
  step_ = Step::published;
  if (config_.start_allreduce && plan_.history.empty()) {
    const StartAllreduce& start = *config_.start_allreduce;
    plan_.table = plan_.table.with(Collective::allreduce, start.from_bytes, ~0ull, start.algorithm);
    plan_.history.push_back({plan_.table_version, 0,
                             "--start-allreduce: " + std::string(name(start.algorithm)) + " from " +
                                 std::to_string(start.from_bytes) + " B"});
  }
  plan_.local_ranks.clear();
  for (const PlannedMember& member : members_) plan_.local_ranks.push_back(member.local_ranks);
  refiner_.emplace(plan_, config_.explore_every);
  proposed_.reset();
  if (plan_.measured) {
    measured_plan_ = plan_;
    measured_addresses_.clear();
    for (const PlannedMember& member : members_) {
      measured_addresses_.push_back(member.data_address);
    }
  }
  spdlog::info("coordinator: generation {} plan ({}):\n{}", plan_.generation,
               plan_.measured
                   ? "probing took " + std::to_string(plan_.probe_ms) + " ms, calibration " +
                         std::to_string(plan_.calibration_ms) + " ms"
                   : std::string("from the given model"),
               describe(plan_));
  proto::CoordinatorToWorker message;
  to_proto(plan_, *message.mutable_plan());
  to_members(std::move(message));
}

Status GroupPlanning::take_op_times(int rank, const proto::OpTimesReport& report, TimePoint now) {
  // An adopted generation runs a table this coordinator does not know: it is not refined.
  if (step_ != Step::published || !refiner_) return {};
  if (!holds(rank)) return protocol_error("op times from a worker that holds no rank");
  if (Status status = refiner_->take(rank, report); !status.ok()) return status;
  propose_table(now);
  return {};
}

void GroupPlanning::propose_table(TimePoint now) {
  // Few versions: a coordinator lost while one is unsettled ends the generation (table_gate.h).
  if (proposed_ || now - last_proposed_ < kTableVersionInterval) return;
  proposed_ = refiner_->next();
  if (!proposed_) return;
  last_proposed_ = now;
  ready_.assign(members_.size(), std::nullopt);
  proto::CoordinatorToWorker message;
  message.mutable_table_proposal()->set_generation(generation_);
  message.mutable_table_proposal()->set_version(proposed_->table_version);
  to_members(std::move(message));
}

Status GroupPlanning::take_table_ready(int rank, const proto::TableReady& ready, TimePoint now) {
  if (step_ != Step::published || !proposed_ || !holds(rank) ||
      ready.generation() != generation_ || ready.version() != proposed_->table_version ||
      ready_[rank]) {
    return protocol_error("an answer to a table version the coordinator did not propose");
  }
  ready_[rank] = ready.next_op();
  std::uint64_t from_op = 0;
  for (const auto& next_op : ready_) {
    if (!next_op) return {};
    from_op = std::max(from_op, *next_op);
  }
  // Past every rank's promise: none has started an op there, or will before it hears this; and
  // past the last version's, which a rank may not have reached yet.
  from_op = std::max(from_op + kTableLead, last_from_op_ + 1);
  last_from_op_ = from_op;
  GroupPlan plan = std::move(*proposed_);
  proposed_.reset();
  plan.history.back().from_op = from_op;
  spdlog::info("coordinator: generation {} runs table version {} from op {}: {}", generation_,
               plan.table_version, from_op, plan.history.back().why);
  proto::CoordinatorToWorker message;
  message.mutable_table_switch()->set_from_op(from_op);
  to_proto(plan, *message.mutable_table_switch()->mutable_plan());
  to_members(std::move(message));
  refiner_->switched(plan);
  if (plan_.measured) measured_plan_ = plan;
  plan_ = std::move(plan);
  propose_table(now);
  return {};
}

}  // namespace gradsync::daemon
