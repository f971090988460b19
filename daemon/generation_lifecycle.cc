#include "daemon/generation_lifecycle.h"

namespace gradsync::daemon {

void GenerationLifecycle::formed(const proto::Assignment& assignment, std::uint64_t channel) {
  assignment_ = assignment;
  stage_ = Stage::serving;
  served_channel_ = channel;
}

void GenerationLifecycle::taken_back(std::uint64_t channel) {
  stage_ = Stage::serving;
  served_channel_ = channel;
}

LifecycleStep GenerationLifecycle::formation_failed(const Status& why) {
  stage_ = Stage::ended;
  LifecycleStep step;
  step.kind = LifecycleStep::Kind::exit;
  step.failure = "worker: " + why.message();
  return step;
}

LifecycleStep GenerationLifecycle::channel_lost(std::uint64_t channel, const LossFacts& facts,
                                                TimePoint now) {
  LifecycleStep step;
  if (stage_ != Stage::serving || channel != served_channel_ || facts.stopping) return step;
  served_channel_ = 0;
  if (!facts.aborted && facts.table_unsettled) {
    step.raise = Status(ErrorCode::aborted,
                        "lost the coordinator while it settled a new table version: the ranks "
                        "may not agree from which op it runs");
  }
  if (facts.aborted || !step.raise.ok()) {
    step.kind = LifecycleStep::Kind::end_generation;
    return step;
  }
  stage_ = Stage::reattaching;
  step.kind = LifecycleStep::Kind::reattach;
  step.running = assignment_;
  step.deadline = now + config_.coordinator_timeout;
  return step;
}

LifecycleStep GenerationLifecycle::not_taken_back(bool stopping) {
  LifecycleStep step;
  if (stage_ != Stage::reattaching || stopping) return step;
  step.kind = LifecycleStep::Kind::end_generation;
  return step;
}

LifecycleStep GenerationLifecycle::ended(const Status& why) {
  stage_ = Stage::ended;
  served_channel_ = 0;
  LifecycleStep step;
  if (!config_.rejoin) {
    step.kind = LifecycleStep::Kind::exit;
    step.failure = "worker rank " + std::to_string(assignment_.rank()) + ": generation " +
                   std::to_string(assignment_.generation()) + " ended (" + why.message() +
                   "); not joining again (--no-rejoin)";
    return step;
  }
  stage_ = Stage::forming;
  step.kind = LifecycleStep::Kind::form_next;
  step.previous_rank = assignment_.rank();
  return step;
}

}  // namespace gradsync::daemon
