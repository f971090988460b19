#include "daemon/membership.h"

#include <spdlog/spdlog.h>

#include <algorithm>
#include <string>

#include "daemon/join_proofs.h"
#include "net/socket.h"
#include "proto/convert.h"

namespace gradsync::daemon {

namespace {

// The local ranks a worker serves, as its join says; a join without them serves one.
int local_ranks_of(const proto::JoinRequest& join) { return std::max(join.local_ranks(), 1); }

Status protocol_error(const std::string& message) {
  return Status(ErrorCode::protocol_error, message);
}

Status invalid(const std::string& message) { return Status(ErrorCode::invalid_argument, message); }

// The host of "HOST:PORT".
std::string host_of(const std::string& address) { return address.substr(0, address.rfind(':')); }

// However often a spare's join asks for word that it still is one: no join can make the
// coordinator send without pause.
constexpr std::chrono::milliseconds kMinSpareRenewal{10};

}  // namespace

Membership::Membership(MembershipConfig config)
    : config_(std::move(config)),
      planning_(PlanningConfig{config_.network, config_.calibration_budget, config_.explore_every,
                               config_.start_allreduce}) {}

Membership::Stage Membership::stage() const {
  if (phase_ == Phase::forming) return Stage::forming;
  if (phase_ == Phase::adopting) return Stage::adopting;
  switch (planning_.step()) {
    case GroupPlanning::Step::probing:
      return Stage::probing;
    case GroupPlanning::Step::calibrating:
      return Stage::calibrating;
    case GroupPlanning::Step::idle:
    case GroupPlanning::Step::published:
      break;
  }
  return Stage::published;
}

int Membership::members() const {
  if (phase_ == Phase::forming) return static_cast<int>(joined_.size());
  return static_cast<int>(std::count_if(by_rank_.begin(), by_rank_.end(),
                                        [](ConnectionId id) { return id != kNoConnection; }));
}

void Membership::connected(ConnectionId connection, const std::string& from, TimePoint now) {
  const std::string host = host_of(from);
  const auto strangers = std::count_if(connections_.begin(), connections_.end(), [&](auto& entry) {
    return !entry.second.join && host_of(entry.second.from) == host;
  });
  if (strangers >= config_.strangers_per_address) {
    const std::string reason = std::to_string(strangers) + " connections from " + host +
                               " have not joined yet, as many as one address may hold";
    if (strangers_refused_++ % 1000 == 0) {
      spdlog::warn("coordinator: refused a connection from {}: {} (logged once per 1000)", from,
                   reason);
    }
    actions_.push_back(Action{Action::Kind::close, connection, {}, reason});
    return;
  }
  Connection& opened = connections_[connection];
  opened.from = from;
  opened.deadline = now + config_.join_timeout;
  opened.challenge = net::make_nonce();
  proto::CoordinatorToWorker message;
  message.mutable_challenge()->set_nonce(opened.challenge);
  send(connection, message);
}

void Membership::received(ConnectionId id, const proto::WorkerToCoordinator& message,
                          TimePoint now) {
  const auto found = connections_.find(id);
  if (found == connections_.end()) return;  // closed already; a late message changes nothing
  Connection& connection = found->second;
  if (!connection.join) {
    if (message.has_join()) connection.nonce = message.join().nonce();
    if (Status status = admit(id, connection, message, now); !status.ok()) {
      spdlog::warn("coordinator: rejected a connection from {}: {}", connection.from,
                   status.message());
      refuse(id, status);
      return;
    }
    connection.deadline = now + config_.heartbeat_timeout;
    if (phase_ == Phase::forming && generation_ > 1 && !shrink_at_) {
      shrink_at_ = now + config_.heartbeat_timeout;
    }
    if (may_form(now)) {
      form_group(now);
    } else if (phase_ == Phase::adopting && members() == size()) {
      adopt(now);
    }
    return;
  }
  connection.deadline = now + config_.heartbeat_timeout;
  if (Status status = take(connection, message, now); !status.ok()) lose(id, status.message());
}

void Membership::disconnected(ConnectionId connection, const std::string& reason) {
  if (connections_.contains(connection)) lose(connection, reason);
}

int Membership::smallest() const {
  return config_.min_workers > 0 ? config_.min_workers : config_.world_size;
}

bool Membership::may_form(TimePoint now) const {
  const int joined = static_cast<int>(joined_.size());
  return phase_ == Phase::forming &&
         (joined >= config_.world_size ||
          (joined >= smallest() && shrink_at_.has_value() && now >= *shrink_at_));
}

void Membership::tick(TimePoint now) {
  if (may_form(now)) form_group(now);
  if (phase_ == Phase::adopting && adoption_deadline_ <= now) {
    std::vector<int> missing;
    for (int rank = 0; rank < size(); ++rank) {
      if (by_rank_[rank] == kNoConnection) missing.push_back(rank);
    }
    end_generation(missing, "not back at the restarted coordinator within " +
                                std::to_string(config_.heartbeat_timeout.count()) + " ms");
  }
  std::vector<std::pair<ConnectionId, std::string>> expired;
  for (const auto& [id, connection] : connections_) {
    if (connection.deadline > now) continue;
    expired.emplace_back(
        id, connection.join
                ? "no heartbeat for " + std::to_string(config_.heartbeat_timeout.count()) + " ms"
                : "no join request within " + std::to_string(config_.join_timeout.count()) + " ms");
  }
  // The first loss of a member ends the generation and closes the others' connections.
  for (const auto& [id, reason] : expired) {
    if (connections_.contains(id)) lose(id, reason);
  }
  std::vector<ConnectionId> due;
  for (const auto& [id, connection] : connections_) {
    if (connection.renew_spare_at && *connection.renew_spare_at <= now) due.push_back(id);
  }
  for (const ConnectionId id : due) {
    send_spare(id,
               "the group of " + std::to_string(config_.world_size) + " is complete: still a spare",
               now);
  }
}

std::optional<TimePoint> Membership::next_deadline() const {
  std::optional<TimePoint> earliest;
  for (const auto& [id, connection] : connections_) {
    if (!earliest || connection.deadline < *earliest) earliest = connection.deadline;
    if (connection.renew_spare_at && *connection.renew_spare_at < *earliest) {
      earliest = connection.renew_spare_at;
    }
  }
  if (phase_ == Phase::adopting && (!earliest || adoption_deadline_ < *earliest)) {
    earliest = adoption_deadline_;
  }
  const bool may_shrink =
      phase_ == Phase::forming && shrink_at_ && static_cast<int>(joined_.size()) >= smallest();
  if (may_shrink && (!earliest || *shrink_at_ < *earliest)) earliest = shrink_at_;
  return earliest;
}

std::vector<Action> Membership::take_actions() { return std::exchange(actions_, {}); }

Status Membership::admit(ConnectionId id, Connection& connection,
                         const proto::WorkerToCoordinator& first, TimePoint now) {
  if (!first.has_join()) return protocol_error("the first message is not a join request");
  if (!config_.secret.empty() &&
      !net::same_proof(first.join().challenge_response(),
                       join_proof(config_.secret, connection.challenge, first.join()))) {
    return Status(ErrorCode::unauthenticated,
                  "the join request does not prove the group secret (a worker without "
                  "--secret-file, or with another secret)");
  }
  net::HostPort address;
  if (Status status = net::parse_host_port(first.join().data_address(), address); !status.ok()) {
    return invalid("bad data address: " + status.message());
  }
  if (const int local_ranks = first.join().local_ranks();
      local_ranks < 0 || local_ranks > kMaxLocalRanks) {
    return invalid("serves " + std::to_string(local_ranks) + " local ranks, not 1 to " +
                   std::to_string(kMaxLocalRanks));
  }
  if (first.join().has_running()) return admit_running(id, connection, first.join(), now);
  // While a running generation is adopted, a newcomer waits: it is in the next generation if
  // that one does not come back whole. One that joins a generation smaller than the group makes
  // it grow.
  const bool formed = phase_ == Phase::formed;
  const bool grows = formed && size() < config_.world_size;
  if (formed && !grows && static_cast<int>(joined_.size()) >= config_.world_size) {
    return invalid("the group of " + std::to_string(config_.world_size) + " is complete and has " +
                   std::to_string(joined_.size()) + " spares");
  }
  const int requested = first.join().requested_rank();
  if (requested < -1 || requested >= config_.world_size) {
    return invalid("asks for rank " + std::to_string(requested) + " in a group of " +
                   std::to_string(config_.world_size));
  }
  for (const ConnectionId other : joined_) {
    if (requested >= 0 && connections_.at(other).join->requested_rank() == requested) {
      return invalid("asks for rank " + std::to_string(requested) + ", already taken");
    }
  }
  connection.join = first.join();
  joined_.push_back(id);
  spdlog::info("coordinator: {} joined ({} of {}), data address {}", connection.from,
               joined_.size(), config_.world_size, first.join().data_address());
  if (grows) {
    grow();
  } else if (formed) {
    keep_as_spare(id, now);
  }
  return {};
}

Status Membership::admit_running(ConnectionId id, Connection& connection,
                                 const proto::JoinRequest& join, TimePoint now) {
  const proto::Assignment& running = join.running();
  const std::string generation = "generation " + std::to_string(running.generation());
  // Only a coordinator that has run no group of its own yet can have been restarted under one.
  const bool first_back = phase_ == Phase::forming && generation_ == 1;
  if (!first_back && !(phase_ == Phase::adopting && running.generation() == generation_)) {
    return Status(ErrorCode::aborted, generation + " does not run here: this coordinator " +
                                          (phase_ == Phase::forming    ? "forms"
                                           : phase_ == Phase::adopting ? "takes back"
                                                                       : "runs") +
                                          " generation " + std::to_string(generation_) +
                                          "; join it as a new member");
  }
  const int world_size = running.world_size();
  if (world_size < smallest() || world_size > config_.world_size ||
      running.peers_size() != world_size || (!first_back && world_size != size())) {
    return invalid(generation + " runs " + std::to_string(world_size) + " ranks (" +
                   std::to_string(running.peers_size()) + " peers); this coordinator's group has " +
                   (smallest() < config_.world_size ? std::to_string(smallest()) + " to " : "") +
                   std::to_string(config_.world_size));
  }
  const int rank = running.rank();
  if (rank < 0 || rank >= world_size || running.peers(rank).data_address() != join.data_address()) {
    return invalid("rank " + std::to_string(rank) + " of " + generation +
                   " is not at the data address it joins with");
  }
  for (int peer = 0; peer < world_size; ++peer) {
    if (running.peers(peer).rank() != peer ||
        (!first_back &&
         running.peers(peer).data_address() != adopted_peers_[peer].data_address())) {
      return invalid("its peer table of " + generation +
                     " differs from that of the ranks back before it, at rank " +
                     std::to_string(peer));
    }
  }
  if (first_back) {
    phase_ = Phase::adopting;
    generation_ = running.generation();
    adopted_peers_ = running.peers();
    by_rank_.assign(world_size, kNoConnection);
    adoption_deadline_ = now + config_.heartbeat_timeout;
    spdlog::info("coordinator: rank {} runs {}; taking it back once every rank is (within {} ms)",
                 rank, generation, config_.heartbeat_timeout.count());
  } else if (by_rank_[rank] != kNoConnection) {
    return invalid("rank " + std::to_string(rank) + " of " + generation + " is back already");
  }
  connection.join = join;
  connection.rank = rank;
  by_rank_[rank] = id;
  spdlog::info("coordinator: rank {} of {} is back ({} of {}), from {}", rank, generation,
               members(), world_size, connection.from);
  return {};
}

void Membership::adopt(TimePoint now) {
  spdlog::info("coordinator: every rank of generation {} is back; it runs on", generation_);
  planning_.adopted(generation_, size());
  send_assignments(adopted_peers_, false);
  phase_ = Phase::formed;
  // A newcomer that waited makes a group smaller than its size grow, or waits as a spare.
  if (joined_.empty()) return;
  if (size() < config_.world_size) {
    grow();
    return;
  }
  for (const ConnectionId newcomer : joined_) keep_as_spare(newcomer, now);
}

void Membership::keep_as_spare(ConnectionId id, TimePoint now) {
  const std::string why = "the group of " + std::to_string(config_.world_size) +
                          " is complete: waiting as a spare (" + std::to_string(joined_.size()) +
                          " waiting)";
  spdlog::info("coordinator: {} {}", connections_.at(id).from, why);
  send_spare(id, why, now);
}

void Membership::send_spare(ConnectionId id, const std::string& why, TimePoint now) {
  Connection& connection = connections_.at(id);
  proto::CoordinatorToWorker message;
  message.mutable_spare()->set_why(why);
  message.mutable_spare()->set_renewal(++connection.spare_renewals);
  // A spare gives up a join timeout after the last word (join_handshake.h): it asks for word
  // often enough that one late word does not lose it.
  const std::chrono::milliseconds every(connection.join->spare_renewal_ms());
  connection.renew_spare_at.reset();
  if (every.count() > 0) connection.renew_spare_at = now + std::max(every, kMinSpareRenewal);
  send(id, std::move(message));
}

void Membership::grow() {
  end_generation(Status(ErrorCode::aborted, "generation " + std::to_string(generation_) +
                                                " ended: a worker joined, and the group of " +
                                                std::to_string(size()) + " grows"),
                 {}, "");
}

void Membership::refuse(ConnectionId id, const Status& why) {
  // The worker learns why at once, instead of seeing its connection close.
  proto::CoordinatorToWorker refusal;
  to_proto(why, *refusal.mutable_abort()->mutable_reason());
  send(id, refusal);
  close(id, why.message());
}

Status Membership::take(const Connection& connection, const proto::WorkerToCoordinator& message,
                        TimePoint now) {
  if (message.has_heartbeat()) return {};
  if (message.has_leave()) {
    return Status(ErrorCode::aborted, "it left: " + message.leave().reason().message());
  }
  Status status;
  if (message.has_probe_report()) {
    status = planning_.take_probe_report(connection.rank, message.probe_report());
  } else if (message.has_calibration_report()) {
    status = planning_.take_calibration_report(connection.rank, message.calibration_report());
  } else if (message.has_op_times()) {
    status = planning_.take_op_times(connection.rank, message.op_times(), now);
  } else if (message.has_table_ready()) {
    status = planning_.take_table_ready(connection.rank, message.table_ready(), now);
  } else {
    return protocol_error(message.has_join() ? "a second join request"
                                             : "a message other than a heartbeat");
  }
  send_planning_messages();
  return status;
}

void Membership::assign_ranks() {
  // The members of the generation before first, then the others in order of arrival; those past
  // the group's size stay spares.
  std::stable_sort(joined_.begin(), joined_.end(), [&](ConnectionId a, ConnectionId b) {
    return connections_.at(a).join->has_previous_rank() &&
           !connections_.at(b).join->has_previous_rank();
  });
  std::vector<ConnectionId> spares;
  if (static_cast<int>(joined_.size()) > config_.world_size) {
    spares.assign(joined_.begin() + config_.world_size, joined_.end());
    joined_.resize(config_.world_size);
  }
  const int ranks = static_cast<int>(joined_.size());
  std::vector<bool> taken(ranks, false);
  by_rank_.assign(ranks, kNoConnection);
  for (const ConnectionId id : joined_) {
    Connection& member = connections_.at(id);
    member.renew_spare_at.reset();  // a spare no more
    if (member.join->requested_rank() >= 0 && member.join->requested_rank() < ranks) {
      member.rank = member.join->requested_rank();
      taken[member.rank] = true;
      by_rank_[member.rank] = id;
    }
  }
  std::stable_sort(joined_.begin(), joined_.end(), [&](ConnectionId a, ConnectionId b) {
    const proto::JoinRequest& first = *connections_.at(a).join;
    const proto::JoinRequest& second = *connections_.at(b).join;
    return first.has_previous_rank() &&
           (!second.has_previous_rank() || first.previous_rank() < second.previous_rank());
  });
  int next = 0;
  for (const ConnectionId id : joined_) {
    Connection& member = connections_.at(id);
    if (member.rank >= 0) continue;
    while (taken[next]) ++next;
    member.rank = next;
    taken[next] = true;
    by_rank_[next] = id;
  }
  joined_ = std::move(spares);
}

void Membership::form_group(TimePoint now) {
  assign_ranks();
  shrink_at_.reset();
  for (const ConnectionId spare : joined_) keep_as_spare(spare, now);
  spdlog::info("coordinator: group formed, generation {}, {} of {} ranks; {}", generation_, size(),
               config_.world_size,
               config_.network ? "the algorithm table comes from the given model"
                               : "the workers are probing their links");
  google::protobuf::RepeatedPtrField<proto::Peer> peers;
  std::vector<PlannedMember> members;
  for (int rank = 0; rank < size(); ++rank) {
    const proto::JoinRequest& join = *connections_.at(by_rank_[rank]).join;
    proto::Peer& peer = *peers.Add();
    peer.set_rank(rank);
    peer.set_data_address(join.data_address());
    peer.set_local_ranks(local_ranks_of(join));
    members.push_back(PlannedMember{join.data_address(), local_ranks_of(join)});
  }
  phase_ = Phase::formed;
  // The plan may be published at once: the assignments go first.
  const bool probe_links = planning_.formed(generation_, members);
  send_assignments(peers, probe_links);
  send_planning_messages();
}

void Membership::send_assignments(const google::protobuf::RepeatedPtrField<proto::Peer>& peers,
                                  bool probe_links) {
  proto::CoordinatorToWorker message;
  proto::Assignment& assignment = *message.mutable_assignment();
  assignment.set_generation(generation_);
  assignment.set_world_size(size());
  assignment.set_probe_links(probe_links);
  *assignment.mutable_peers() = peers;
  for (int rank = 0; rank < size(); ++rank) {
    assignment.set_rank(rank);
    send(by_rank_[rank], message);
  }
}

void Membership::send_planning_messages() {
  for (const proto::CoordinatorToWorker& message : planning_.take_messages()) {
    send_to_members(message);
  }
}

void Membership::send_to_members(const proto::CoordinatorToWorker& message) {
  for (const ConnectionId id : by_rank_) {
    if (connections_.contains(id)) send(id, message);
  }
}

void Membership::send(ConnectionId id, proto::CoordinatorToWorker message) {
  if (!config_.secret.empty()) {
    const Connection& to = connections_.at(id);
    if (message.has_assignment()) {
      message.mutable_assignment()->set_proof(
          assignment_proof(config_.secret, to.challenge, to.nonce, message.assignment()));
    } else if (message.has_spare()) {
      message.mutable_spare()->set_proof(
          spare_proof(config_.secret, to.challenge, to.nonce, message.spare()));
    } else if (message.has_abort()) {
      message.mutable_abort()->set_proof(
          abort_proof(config_.secret, to.challenge, to.nonce, message.abort()));
    }
  }
  actions_.push_back(Action{Action::Kind::send, id, std::move(message), {}});
}

void Membership::close(ConnectionId id, const std::string& reason) {
  connections_.erase(id);
  actions_.push_back(Action{Action::Kind::close, id, {}, reason});
}

void Membership::lose(ConnectionId id, const std::string& reason) {
  const Connection lost = connections_.at(id);
  if (phase_ == Phase::forming || lost.rank < 0) {
    std::erase(joined_, id);
    if (lost.join) {
      spdlog::warn("coordinator: {} left before the group formed: {}", lost.from, reason);
    } else {
      spdlog::warn("coordinator: rejected a connection from {}: {}", lost.from, reason);
    }
    close(id, reason);
    return;
  }
  spdlog::warn("coordinator: lost rank {} ({}): {}", lost.rank, lost.from, reason);
  end_generation({lost.rank}, reason);
}

void Membership::end_generation(const std::vector<int>& lost_ranks, const std::string& reason) {
  std::string ranks;
  for (const int rank : lost_ranks) ranks += (ranks.empty() ? "" : ", ") + std::to_string(rank);
  end_generation(Status(ErrorCode::peer_lost,
                        (lost_ranks.size() == 1 ? "rank " : "ranks ") + ranks +
                            (lost_ranks.size() == 1 ? " was" : " were") + " lost (" + reason + ")"),
                 lost_ranks, reason);
}

void Membership::end_generation(const Status& why, const std::vector<int>& lost_ranks,
                                const std::string& lost_reason) {
  proto::CoordinatorToWorker message;
  proto::Abort& abort = *message.mutable_abort();
  abort.set_generation(generation_);
  for (const int rank : lost_ranks) abort.add_lost_ranks(rank);
  to_proto(why, *abort.mutable_reason());
  // The lost member too: one that sent something wrong, or stalled, is still listening, and
  // learns that it must join again.
  send_to_members(message);
  for (const int rank : lost_ranks) {
    if (connections_.contains(by_rank_[rank])) close(by_rank_[rank], lost_reason);
  }
  for (const ConnectionId member : by_rank_) {
    if (connections_.contains(member)) {
      close(member, "generation " + std::to_string(generation_) + " ended");
    }
  }
  spdlog::info("coordinator: generation {} ended; generation {} forms from the workers that join",
               generation_, generation_ + 1);
  by_rank_.clear();
  planning_.ended();
  phase_ = Phase::forming;
  ++generation_;
}

}  // namespace gradsync::daemon
