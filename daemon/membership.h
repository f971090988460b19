// The coordinator's membership logic (docs/architecture.md §7, §9, §10) as a pure state machine:
// events in (a connection opened, a message, a connection lost, the clock), actions out (send a
// message, close a connection). It admits workers, assigns ranks, keeps spares and aborts the
// generation when a member is lost or silent; restarted, it takes back the generation its workers
// still run. What the formed generation measures and publishes is GroupPlanning's
// (group_planning.h). No sockets, no threads and no clock of its own: the caller passes the time,
// so tests drive it with a fake one.
#pragma once

#include <chrono>
#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "collective/cost_model.h"
#include "collective/group_plan.h"
#include "collective/status.h"
#include "config/knobs.h"
#include "daemon/group_planning.h"
#include "gradsync.pb.h"
#include "net/group_secret.h"

namespace gradsync::daemon {

using ConnectionId = std::uint64_t;
inline constexpr ConnectionId kNoConnection = 0;  // the caller numbers connections from 1

struct MembershipConfig {
  int world_size = 1;  // the group's size; the first generation has every rank
  // How small a later generation may be (0: world_size): one forms with fewer members once no
  // more have joined within a heartbeat timeout of the first, and grows again, in a generation of
  // its own, when a worker joins it.
  int min_workers = 0;
  // Given: the algorithm table is built from it. Empty: the workers probe their links and the
  // table is built from what they measured.
  std::optional<NetworkModel> network;
  std::chrono::milliseconds heartbeat_timeout{knobs::kHeartbeatTimeoutMs.default_value};
  // How long, by the measured model, calibrating all-reduce may take once the links are probed;
  // 0: no calibration, the table comes from the α-β-γ model alone.
  std::chrono::milliseconds calibration_budget{knobs::kCalibrationMs.default_value};
  // The table's refinement from real ops (daemon/table_refiner.h): its trials' rate, 0 for none.
  int explore_every = knobs::kExploreEvery.default_value;
  std::optional<StartAllreduce> start_allreduce;
  // A connection that has not asked to join by then is closed: an idle stranger holds nothing.
  std::chrono::milliseconds join_timeout{10'000};
  // At most this many connections from one address that have not joined yet; past it, a new one
  // is closed at once, so that one host cannot hold every descriptor the coordinator has while its
  // connections wait out their join timeout. Well above the largest group one host starts on
  // loopback, whose workers all connect at once.
  int strangers_per_address = 128;
  // Given: a worker joins only with a proof that it knows it, and every assignment carries the
  // coordinator's proof. Empty: anyone may join.
  net::GroupSecret secret;
};

struct Action {
  enum class Kind { send, close };
  Kind kind = Kind::send;
  ConnectionId connection = 0;
  proto::CoordinatorToWorker message;  // send
  std::string reason;                  // close: why, for the log
};

class Membership {
 public:
  // What the coordinator waits for: members, then (unless given a model) probe reports, then
  // calibration reports (unless the budget allows none); then the plan is out, until a member is
  // lost. Then the next generation forms, from whoever joins (the survivors join again).
  // A worker that joins a complete group waits as a spare (at most as many as the group has ranks)
  // and takes a place in the next generation that needs one.
  // A coordinator that restarts while its group runs on is adopting from the first join that asks
  // to keep a running generation: once every rank of it is back, it is published again; a rank
  // that is not back within a heartbeat timeout is lost, and the next generation forms.
  enum class Stage { forming, adopting, probing, calibrating, published };

  explicit Membership(MembershipConfig config);

  void connected(ConnectionId connection, const std::string& from, TimePoint now);
  void received(ConnectionId connection, const proto::WorkerToCoordinator& message, TimePoint now);
  // The connection is gone (closed by the other side, unreadable, or too slow to take what it
  // is sent); `reason` says which.
  void disconnected(ConnectionId connection, const std::string& reason);
  // Closes connections whose deadline (join or heartbeat) has passed.
  void tick(TimePoint now);

  // The earliest deadline tick() must see; nullopt while nothing has one.
  std::optional<TimePoint> next_deadline() const;
  // The actions since the last call, in order.
  std::vector<Action> take_actions();

  Stage stage() const;
  // Ranks in the generation formed or adopted (0 before the first).
  int size() const { return static_cast<int>(by_rank_.size()); }
  std::uint64_t generation() const { return generation_; }
  // Workers that have joined (before the group forms) or hold a rank (after).
  int members() const;
  const GroupPlan& plan() const { return planning_.plan(); }

 private:
  struct Connection {
    std::string from;
    TimePoint deadline;  // join, then heartbeat
    std::optional<proto::JoinRequest> join;
    int rank = -1;          // once the group has formed
    std::string challenge;  // the nonce this connection's join must prove the secret over
    std::string nonce;      // the worker's, from its join request (a refused one too)
    // Kept as a spare: the Spares sent, and when the next is due (the join's spare_renewal_ms).
    std::uint64_t spare_renewals = 0;
    std::optional<TimePoint> renew_spare_at;
  };

  Status admit(ConnectionId id, Connection& connection, const proto::WorkerToCoordinator& first,
               TimePoint now);
  // A join that asks to keep the generation it runs (JoinRequest.running).
  Status admit_running(ConnectionId id, Connection& connection, const proto::JoinRequest& join,
                       TimePoint now);
  // Publishes the generation whose ranks have all come back.
  void adopt(TimePoint now);
  // Ends a generation smaller than the group for the newcomers that joined it.
  void grow();
  // Tells a worker that joined a complete group that it waits as a spare.
  void keep_as_spare(ConnectionId id, TimePoint now);
  // Sends spare `id` the next Spare, saying `why`, and sets when the one after it is due.
  void send_spare(ConnectionId id, const std::string& why, TimePoint now);
  // The fewest workers a generation may have; whether the joined ones may form one now.
  int smallest() const;
  bool may_form(TimePoint now) const;
  void refuse(ConnectionId id, const Status& why);
  // A member's message after its join; an error loses the member.
  Status take(const Connection& connection, const proto::WorkerToCoordinator& message,
              TimePoint now);
  void form_group(TimePoint now);
  // Ranks the joined workers (joined_): the rank each requested, then the members of the
  // generation before, in the order of their ranks there, then the others in order of arrival;
  // those past the group's size stay in joined_ as spares.
  void assign_ranks();
  // Sends every member its assignment: the peer table `peers`, which ranks are in by_rank_.
  void send_assignments(const google::protobuf::RepeatedPtrField<proto::Peer>& peers,
                        bool probe_links);
  // Sends every member what the plan's making has for them.
  void send_planning_messages();
  void send_to_members(const proto::CoordinatorToWorker& message);
  // Sends `message` to `id`; with a group secret, an assignment, a Spare or an abort carries this
  // connection's proof (join_proofs.h), as a worker takes none before its assignment without it.
  void send(ConnectionId id, proto::CoordinatorToWorker message);
  void close(ConnectionId id, const std::string& reason);
  // Drops a connection for `reason`: before the group forms it only leaves; after, the generation
  // is aborted and every member is told (end_generation).
  void lose(ConnectionId id, const std::string& reason);
  // Tells every member that the generation is over, `lost_ranks` lost for `reason`, and closes
  // their connections: the survivors join the next one, with whoever else joins, as new
  // connections.
  void end_generation(const std::vector<int>& lost_ranks, const std::string& reason);
  // The same for `why`, which names no lost rank when the group grows.
  void end_generation(const Status& why, const std::vector<int>& lost_ranks,
                      const std::string& lost_reason);

  const MembershipConfig config_;
  std::map<ConnectionId, Connection> connections_;
  // In order of arrival: until the group forms, and then the spares.
  std::vector<ConnectionId> joined_;
  std::vector<ConnectionId> by_rank_;  // once formed; kNoConnection for a rank not back yet
  // Formed: from Stage::probing on, as far as planning_ has made the generation's plan.
  enum class Phase { forming, adopting, formed };
  Phase phase_ = Phase::forming;
  std::uint64_t generation_ = 1;  // the one forming, adopting or formed
  // Adopting: the running generation's peer table, and when its missing ranks are lost.
  google::protobuf::RepeatedPtrField<proto::Peer> adopted_peers_;
  TimePoint adoption_deadline_;
  // Forming a generation after the first: when it may form with fewer than world_size members
  // (a heartbeat timeout after the first joined).
  std::optional<TimePoint> shrink_at_;
  std::uint64_t strangers_refused_ = 0;  // for the log: one line per thousand
  GroupPlanning planning_;               // of the generation formed (Stage::probing on)
  std::vector<Action> actions_;
};

}  // namespace gradsync::daemon
