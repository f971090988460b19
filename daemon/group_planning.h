// The coordinator's making of a formed generation's plan, as a pure state machine beside
// Membership, which admits the members: the ranks' probe reports, then their calibration reports,
// in; the plan out to every member; then, while the generation runs, its table refined from the
// ranks' op times, one version at a time, switched at the op every rank is ready for. A generation
// with the members of the last measured one, at the same data addresses, keeps its plan instead of
// measuring again.
#pragma once

#include <chrono>
#include <cstdint>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "collective/cost_model.h"
#include "collective/group_plan.h"
#include "collective/status.h"
#include "daemon/table_refiner.h"
#include "gradsync.pb.h"

namespace gradsync::daemon {

using TimePoint = std::chrono::steady_clock::time_point;

// A first table forced to run `algorithm` for all-reduce from `from_bytes` on (--start-allreduce).
struct StartAllreduce {
  Algorithm algorithm = Algorithm::ring;
  std::uint64_t from_bytes = 0;
};

// MembershipConfig's part about the plan (see there).
struct PlanningConfig {
  std::optional<NetworkModel> network;
  std::chrono::milliseconds calibration_budget{0};
  int explore_every = 0;
  std::optional<StartAllreduce> start_allreduce;
};

// A member of a formed generation, as its join request said.
struct PlannedMember {
  std::string data_address;
  int local_ranks = 1;
};

class GroupPlanning {
 public:
  // idle: no generation formed, or it ended.
  enum class Step { idle, probing, calibrating, published };

  explicit GroupPlanning(PlanningConfig config) : config_(std::move(config)) {}

  // Generation `generation` formed with `members`, by rank. Returns whether its ranks probe their
  // links; if not, its plan is published at once (from the given model, or the last measured
  // plan when the members are the same).
  bool formed(std::uint64_t generation, const std::vector<PlannedMember>& members);
  // A running generation of `size` ranks taken back by a restarted coordinator: published, with a
  // plan this coordinator does not know, so nothing is refined.
  void adopted(std::uint64_t generation, int size);
  // The generation ended: every report and proposal of it is forgotten.
  void ended();

  // Rank `rank`'s messages; an error blames the sender.
  Status take_probe_report(int rank, const proto::ProbeReport& report);
  Status take_calibration_report(int rank, const proto::CalibrationReport& report);
  Status take_op_times(int rank, const proto::OpTimesReport& report, TimePoint now);
  Status take_table_ready(int rank, const proto::TableReady& ready, TimePoint now);

  Step step() const { return step_; }
  const GroupPlan& plan() const { return plan_; }
  // What to send to every member since the last call, in order.
  std::vector<proto::CoordinatorToWorker> take_messages() { return std::exchange(messages_, {}); }

 private:
  void publish();
  // Proposes the refiner's next table version, unless one is being settled or the last was
  // proposed less than kTableVersionInterval ago.
  void propose_table(TimePoint now);
  // Whether `rank` is one of the generation's (a spare, which holds none, reports nothing).
  bool holds(int rank) const { return rank >= 0 && rank < static_cast<int>(members_.size()); }
  void to_members(proto::CoordinatorToWorker message) { messages_.push_back(std::move(message)); }

  const PlanningConfig config_;
  Step step_ = Step::idle;
  std::uint64_t generation_ = 0;
  std::vector<PlannedMember> members_;  // by rank
  std::vector<std::optional<proto::ProbeReport>> probe_reports_;  // by rank
  std::vector<std::optional<proto::CalibrationReport>> calibration_reports_;
  proto::CalibrationRequest calibration_request_;
  GroupPlan plan_;
  // Published: the table's refinement, the version proposed and each rank's first op not started
  // (TableReady), until every rank has answered.
  std::optional<TableRefiner> refiner_;
  std::optional<GroupPlan> proposed_;
  std::vector<std::optional<std::uint64_t>> ready_;
  std::uint64_t last_from_op_ = 0;  // where the last version switched, in this generation
  TimePoint last_proposed_;         // when the last version was proposed
  // The last measured plan published, and its members' data addresses by rank: a generation
  // with the same members at the same ranks keeps it instead of measuring again.
  GroupPlan measured_plan_;
  std::vector<std::string> measured_addresses_;
  std::vector<proto::CoordinatorToWorker> messages_;
};

}  // namespace gradsync::daemon
