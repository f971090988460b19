#include "daemon/table_gate.h"

#include <string>

namespace gradsync::daemon {

void TableGate::reset(std::uint64_t generation) {
  std::lock_guard lock(mutex_);
  generation_ = generation;
  next_op_ = 0;
  proposed_version_.reset();
  decided_.clear();
  cancelled_ = false;
  settled_.notify_all();
}

void TableGate::cancel() {
  std::lock_guard lock(mutex_);
  cancelled_ = true;
  settled_.notify_all();
}

Status TableGate::propose(std::uint64_t generation, std::uint64_t version, std::uint64_t& next_op) {
  std::lock_guard lock(mutex_);
  if (generation != generation_ || proposed_version_) {
    return Status(ErrorCode::protocol_error,
                  "the coordinator proposed table version " + std::to_string(version) +
                      " of generation " + std::to_string(generation) +
                      " while this rank runs generation " + std::to_string(generation_) +
                      (proposed_version_ ? " and settles another version" : ""));
  }
  proposed_version_ = version;
  hold_from_ = next_op_ + kTableLead;
  next_op = next_op_;
  return {};
}

Status TableGate::decide(std::uint64_t from_op, const GroupPlan& plan) {
  std::lock_guard lock(mutex_);
  if (!proposed_version_ || plan.table_version != *proposed_version_ ||
      plan.generation != generation_ || from_op < hold_from_ ||
      (!decided_.empty() && from_op <= decided_.back().first)) {
    return Status(ErrorCode::protocol_error,
                  "the coordinator switched to table version " +
                      std::to_string(plan.table_version) + " from op " + std::to_string(from_op) +
                      ", which this rank was not holding for (it holds from op " +
                      std::to_string(hold_from_) + ")");
  }
  proposed_version_.reset();
  decided_.emplace_back(from_op, plan);
  settled_.notify_all();
  return {};
}

bool TableGate::unsettled() const {
  std::lock_guard lock(mutex_);
  return proposed_version_.has_value();
}

Status TableGate::admit(std::uint64_t op_id, std::optional<GroupPlan>& plan) {
  std::unique_lock lock(mutex_);
  if (proposed_version_ && op_id >= hold_from_) {
    const std::uint64_t version = *proposed_version_;
    if (!settled_.wait_for(lock, wait_limit_, [&] { return !proposed_version_ || cancelled_; })) {
      return Status(ErrorCode::deadline_exceeded,
                    "the coordinator proposed table version " + std::to_string(version) +
                        " and did not say within " + std::to_string(wait_limit_.count()) +
                        " ms from which op it runs");
    }
    if (proposed_version_) {
      return Status(ErrorCode::aborted, "the coordinator was lost while it settled table version " +
                                            std::to_string(version));
    }
  }
  while (!decided_.empty() && op_id >= decided_.front().first) {
    plan = std::move(decided_.front().second);
    decided_.pop_front();
  }
  next_op_ = op_id + 1;
  return {};
}

}  // namespace gradsync::daemon
