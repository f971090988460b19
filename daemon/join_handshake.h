// A worker's side of joining its coordinator, as a pure state machine, one per connection: the
// coordinator's messages in, in the order they come (its challenge, perhaps word that the worker
// waits as a spare, the assignment, a calibration request, the plan), each checked against what
// this step may take; out, the join request to send and what the worker waits for next, for how
// long. A worker joins to form a generation (as a newcomer, or as the rank it held in the one that
// ended), or to ask a coordinator to take back the generation it still runs. The caller does the
// waiting and what lies between the steps (forming the data mesh, probing, calibrating).
//
// Until the assignment has proven the coordinator, everything it sends comes here, an abort
// included (ControlChannel::proven()), and with a group secret every answer that changes what the
// worker does must prove it (join_proofs.h): a stranger at the coordinator's address could
// otherwise keep a worker waiting as a spare, or end the generation it asks to have taken back.
// An answer refused counts as the connection's loss: a join to form fails, a take-back is tried
// again (generation_former.h).
#pragma once

#include <chrono>
#include <functional>
#include <optional>
#include <string>

#include "collective/group_plan.h"
#include "collective/status.h"
#include "daemon/mesh_plan.h"
#include "gradsync.pb.h"
#include "net/group_secret.h"

namespace gradsync::daemon {

// What every join of this worker says and checks.
struct JoinSettings {
  std::string coordinator;  // its address, for errors
  int requested_rank = -1;
  int local_ranks = 1;  // the local ranks this worker serves
  net::GroupSecret secret;
  std::chrono::milliseconds join_timeout{0};  // for the assignment of a generation that forms
};

// What the worker waits for next, and for how long.
struct Awaited {
  std::string what;
  std::chrono::milliseconds timeout{0};
};

// Whether two assignments give the same rank of the same generation of the same group.
bool same_group(const proto::Assignment& a, const proto::Assignment& b);

class JoinHandshake {
 public:
  using TimePoint = std::chrono::steady_clock::time_point;

  // Joins to form a generation: as a newcomer (`previous_rank` -1) or as the rank held in the
  // generation that ended.
  static JoinHandshake to_form(const JoinSettings& settings, int previous_rank);
  // Joins to ask the coordinator to take `running` back, which this worker still runs, until
  // `deadline`.
  static JoinHandshake to_take_back(const JoinSettings& settings, const proto::Assignment& running,
                                    TimePoint deadline);

  // The coordinator's first message, its challenge: `join` receives the join request, which
  // gives this worker's data port at `host` (the address the coordinator sees, or the one it is
  // told to advertise) and proves the group secret over the challenge if there is one.
  Status challenged(const proto::CoordinatorToWorker& first, const std::string& host,
                    std::uint16_t data_port, proto::WorkerToCoordinator& join);

  // What the worker waits for now, as of `now`.
  Awaited awaited(TimePoint now) const;

  // The coordinator's answer to the join. OK and not yet assigned(): the worker waits on as a
  // spare, for a place or the coordinator's next word that it still is one (each restarts the
  // join timeout). Each answer is checked: that the coordinator proves the group secret; a Spare,
  // that it comes after the last; an assignment to form, that it is one a mesh can be formed of,
  // for this worker's local ranks; to take back, that it is the running one. A proven abort fails
  // with the coordinator's reason, and ended() says so.
  Status answered(const proto::CoordinatorToWorker& message);
  bool assigned() const { return step_ >= Step::plan && step_ != Step::ended; }
  // The coordinator refused the join, or ended the group it was asked to take back, and proved it.
  bool ended() const { return step_ == Step::ended; }
  const proto::Assignment& assignment() const { return assignment_; }
  const MeshPlan& mesh_plan() const { return mesh_plan_; }

  // Once the mesh has formed (and the links are probed if the assignment asks): the coordinator's
  // next message, a calibration request (then `calibrate` is set: the worker calibrates, reports,
  // and passes the message after it here) or the group's plan, checked against the mesh.
  Status planned(const proto::CoordinatorToWorker& message, bool& calibrate);
  const GroupPlan& plan() const { return plan_; }
  const proto::GroupPlan& plan_message() const { return plan_message_; }

 private:
  enum class Step { challenge, answer, spare, plan, calibrated, done, ended };

  JoinHandshake(const JoinSettings& settings, int previous_rank,
                std::optional<proto::Assignment> running, TimePoint deadline);

  // With a group secret, the coordinator must prove it knows it too, in `what` it sent: OK when
  // `proof` is the one `expected` makes, or there is no secret.
  Status check_proof(const std::string& proof, const std::function<std::string()>& expected,
                     const std::string& what) const;
  Status check_to_form(const proto::Assignment& assignment);
  Status take_spare(const proto::Spare& spare);
  Status take_abort(const proto::Abort& abort);

  const JoinSettings settings_;
  const int previous_rank_;
  const std::optional<proto::Assignment> running_;  // to take back
  const TimePoint deadline_;                        // to take back
  Step step_ = Step::challenge;
  std::string challenge_;  // the coordinator's, and this worker's nonce, of the join
  std::string nonce_;
  std::uint64_t renewal_ = 0;  // the last Spare's
  proto::Assignment assignment_;
  MeshPlan mesh_plan_;
  proto::GroupPlan plan_message_;
  GroupPlan plan_;
};

}  // namespace gradsync::daemon
