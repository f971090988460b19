#include "daemon/join_handshake.h"

#include <spdlog/spdlog.h>

#include <algorithm>

#include "daemon/join_proofs.h"
#include "proto/convert.h"

namespace gradsync::daemon {

namespace {

// A spare may wait for a place as long as the group lives, but never longer than its join timeout
// on a coordinator that stays silent: it asks for word this many times per join timeout, and each
// restarts the timeout, so that a late word or two still finds it there.
constexpr int kSpareRenewalsPerJoinTimeout = 4;
// The other ranks' probing, then the coordinator's answer.
constexpr auto kPlanTimeout = std::chrono::milliseconds(60'000);

Status unexpected(const std::string& wanted) {
  return Status(ErrorCode::protocol_error, "the coordinator sent something other than " + wanted);
}

}  // namespace

bool same_group(const proto::Assignment& a, const proto::Assignment& b) {
  if (a.generation() != b.generation() || a.rank() != b.rank() ||
      a.world_size() != b.world_size() || a.peers_size() != b.peers_size()) {
    return false;
  }
  for (int peer = 0; peer < a.peers_size(); ++peer) {
    if (a.peers(peer).rank() != b.peers(peer).rank() ||
        a.peers(peer).data_address() != b.peers(peer).data_address()) {
      return false;
    }
  }
  return true;
}

JoinHandshake::JoinHandshake(const JoinSettings& settings, int previous_rank,
                             std::optional<proto::Assignment> running, TimePoint deadline)
    : settings_(settings),
      previous_rank_(previous_rank),
      running_(std::move(running)),
      deadline_(deadline) {}

JoinHandshake JoinHandshake::to_form(const JoinSettings& settings, int previous_rank) {
  return JoinHandshake(settings, previous_rank, std::nullopt, TimePoint());
}

JoinHandshake JoinHandshake::to_take_back(const JoinSettings& settings,
                                          const proto::Assignment& running, TimePoint deadline) {
  return JoinHandshake(settings, running.rank(), running, deadline);
}

Status JoinHandshake::challenged(const proto::CoordinatorToWorker& first, const std::string& host,
                                 std::uint16_t data_port, proto::WorkerToCoordinator& message) {
  if (step_ != Step::challenge || !first.has_challenge()) return unexpected("a challenge");
  challenge_ = first.challenge().nonce();
  proto::JoinRequest& join = *message.mutable_join();
  join.set_data_address((host.find(':') != std::string::npos ? "[" + host + "]" : host) + ":" +
                        std::to_string(data_port));
  join.set_requested_rank(settings_.requested_rank);
  join.set_local_ranks(settings_.local_ranks);
  if (previous_rank_ >= 0) join.set_previous_rank(previous_rank_);
  if (running_) {
    proto::Assignment& kept = *join.mutable_running();
    kept = *running_;
    kept.clear_proof();
  } else {
    join.set_spare_renewal_ms(
        static_cast<std::uint32_t>(settings_.join_timeout.count() / kSpareRenewalsPerJoinTimeout));
  }
  join.set_nonce(net::make_nonce());
  if (!settings_.secret.empty()) {
    join.set_challenge_response(join_proof(settings_.secret, challenge_, join));
  }
  nonce_ = join.nonce();
  step_ = Step::answer;
  return {};
}

Awaited JoinHandshake::awaited(TimePoint now) const {
  switch (step_) {
    case Step::challenge:
      return {"a challenge", settings_.join_timeout};
    case Step::answer:
      if (!running_) return {"the group to form", settings_.join_timeout};
      return {"the coordinator to take the group back",
              std::max(std::chrono::duration_cast<std::chrono::milliseconds>(deadline_ - now),
                       std::chrono::milliseconds(1))};
    case Step::spare:
      return {"a place in the group, or the word of the coordinator at " + settings_.coordinator +
                  " that this worker is still kept as a spare (--join-timeout-ms)",
              settings_.join_timeout};
    case Step::plan:
    case Step::calibrated:
      return {"the group's plan", kPlanTimeout};
    case Step::done:
    case Step::ended:
      break;
  }
  return {"nothing more", std::chrono::milliseconds(0)};
}

Status JoinHandshake::answered(const proto::CoordinatorToWorker& message) {
  if (step_ != Step::answer && step_ != Step::spare) return unexpected("an assignment");
  if (message.has_abort()) return take_abort(message.abort());
  if (!running_ && message.has_spare()) return take_spare(message.spare());
  if (!message.has_assignment()) return unexpected("an assignment");
  if (Status status = check_proof(
          message.assignment().proof(),
          [&] {
            return assignment_proof(settings_.secret, challenge_, nonce_, message.assignment());
          },
          "assignment");
      !status.ok()) {
    return status;
  }
  if (running_) {
    if (!same_group(message.assignment(), *running_)) {
      return Status(ErrorCode::protocol_error,
                    "the coordinator handed back another assignment than generation " +
                        std::to_string(running_->generation()) + "'s");
    }
    assignment_ = message.assignment();
    step_ = Step::done;
    return {};
  }
  if (Status status = check_to_form(message.assignment()); !status.ok()) return status;
  assignment_ = message.assignment();
  step_ = Step::plan;
  return {};
}

Status JoinHandshake::take_spare(const proto::Spare& spare) {
  if (Status status = check_proof(
          spare.proof(), [&] { return spare_proof(settings_.secret, challenge_, nonce_, spare); },
          "word that this worker is a spare");
      !status.ok()) {
    return status;
  }
  // One replayed on the connection would keep the worker waiting as long as the replays last.
  if (spare.renewal() <= renewal_) {
    return Status(ErrorCode::protocol_error, "the coordinator at " + settings_.coordinator +
                                                 " sent spare renewal " +
                                                 std::to_string(spare.renewal()) +
                                                 " after renewal " + std::to_string(renewal_));
  }
  if (step_ == Step::answer) {
    spdlog::info(
        "worker: {} (this worker gives up {} ms after the coordinator's last word that it "
        "still is one)",
        spare.why(), settings_.join_timeout.count());
  } else {
    spdlog::debug("worker: still a spare (renewal {})", spare.renewal());
  }
  renewal_ = spare.renewal();
  step_ = Step::spare;
  return {};
}

Status JoinHandshake::take_abort(const proto::Abort& abort) {
  Status said = from_proto(abort.reason());
  if (said.ok()) said = Status(ErrorCode::aborted, "the coordinator aborted without a reason");
  if (Status status = check_proof(
          abort.proof(), [&] { return abort_proof(settings_.secret, challenge_, nonce_, abort); },
          "abort");
      !status.ok()) {
    return Status(status.code(), status.message() + "; it said: " + said.message());
  }
  step_ = Step::ended;
  return said;
}

Status JoinHandshake::check_proof(const std::string& proof,
                                  const std::function<std::string()>& expected,
                                  const std::string& what) const {
  if (settings_.secret.empty() || net::same_proof(proof, expected())) return {};
  return Status(ErrorCode::unauthenticated,
                "the coordinator at " + settings_.coordinator +
                    " does not prove the group secret in its " + what +
                    " (one without --secret-file, or with another secret)");
}

Status JoinHandshake::check_to_form(const proto::Assignment& assignment) {
  if (Status status = mesh_plan_from(assignment, mesh_plan_); !status.ok()) return status;
  const int counted = mesh_plan_.layout.local_ranks(mesh_plan_.rank);
  if (counted != settings_.local_ranks) {
    return Status(ErrorCode::protocol_error,
                  "the coordinator counts " + std::to_string(counted) +
                      " local ranks for this worker, which serves " +
                      std::to_string(settings_.local_ranks));
  }
  return {};
}

Status JoinHandshake::planned(const proto::CoordinatorToWorker& message, bool& calibrate) {
  calibrate = false;
  if (step_ == Step::plan && message.has_calibration_request()) {
    calibrate = true;
    step_ = Step::calibrated;
    return {};
  }
  if ((step_ != Step::plan && step_ != Step::calibrated) || !message.has_plan()) {
    return unexpected("the group's plan");
  }
  plan_message_ = message.plan();
  if (Status status = from_proto(plan_message_, plan_); !status.ok()) return status;
  if (plan_.world_size != mesh_plan_.world_size || plan_.generation != mesh_plan_.generation) {
    return Status(ErrorCode::protocol_error,
                  "the coordinator sent a plan for " + std::to_string(plan_.world_size) +
                      " ranks of generation " + std::to_string(plan_.generation));
  }
  step_ = Step::done;
  return {};
}

}  // namespace gradsync::daemon
