// The fixture of the membership state machine's tests (daemon/membership.h): a fake clock, no
// sockets; workers join, beat and report through it, and the actions are read back.
#pragma once

#include <gtest/gtest.h>

#include <chrono>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "daemon/join_proofs.h"
#include "daemon/membership.h"

namespace gradsync::daemon {

class MembershipTest : public ::testing::Test {
 protected:
  // A group of `world_size` whose table comes from a given model (no probing), unless `probe`.
  // Later generations may have `min_workers` (0: every rank).
  void start(int world_size, bool probe = false, const std::string& secret = "",
             int min_workers = 0) {
    MembershipConfig config;
    config.min_workers = min_workers;
    if (!secret.empty()) config.secret = net::GroupSecret(secret);
    config.world_size = world_size;
    config.heartbeat_timeout = std::chrono::milliseconds(3000);
    config.join_timeout = std::chrono::milliseconds(10'000);
    config.calibration_budget = std::chrono::milliseconds(0);
    if (!probe) config.network = NetworkModel::uniform(10.0, 0.001);
    membership_.emplace(config);
  }

  // Connection `id` opens, takes its challenge, and asks to join (for `rank`, or any), proving
  // `secret` if one is given; as the member that held `previous_rank` in the generation before.
  // With `running`, as its rank, asking a restarted coordinator to take that generation back.
  void join(ConnectionId id, int rank = -1, const std::string& secret = "", int previous_rank = -1,
            const proto::Assignment* running = nullptr) {
    membership_->connected(id, "10.0.0." + std::to_string(id) + ":1", now_);
    for (Action& action : membership_->take_actions()) {
      if (action.connection == id && action.message.has_challenge()) {
        challenges_[id] = action.message.challenge().nonce();
      } else {
        kept_.push_back(std::move(action));
      }
    }
    ASSERT_EQ(challenges_[id].size(), net::kNonceBytes) << "no challenge for connection " << id;
    proto::WorkerToCoordinator message;
    proto::JoinRequest& request = *message.mutable_join();
    request.set_data_address(data_addresses_.contains(id)
                                 ? data_addresses_[id]
                                 : "127.0.0.1:" + std::to_string(5000 + id));
    request.set_requested_rank(rank);
    request.set_nonce("nonce of worker " + std::to_string(id));
    if (previous_rank >= 0) request.set_previous_rank(previous_rank);
    request.set_spare_renewal_ms(spare_renewal_ms_);
    if (running != nullptr) {
      *request.mutable_running() = *running;
      request.set_data_address(running->peers(running->rank()).data_address());
    }
    if (!secret.empty()) {
      request.set_challenge_response(
          join_proof(net::GroupSecret(secret), challenges_[id], request));
    }
    membership_->received(id, message, now_);
  }

  // The state machine's actions since the last call, but the challenges join() took.
  std::vector<Action> new_actions() {
    std::vector<Action> all = std::move(kept_);
    kept_.clear();
    for (Action& action : membership_->take_actions()) all.push_back(std::move(action));
    return all;
  }

  void heartbeat(ConnectionId id) {
    proto::WorkerToCoordinator message;
    message.mutable_heartbeat();
    membership_->received(id, message, now_);
  }

  void advance(std::chrono::milliseconds by) {
    now_ += by;
    membership_->tick(now_);
  }

  // The ranks that the assignments sent since the last call give each connection.
  std::map<ConnectionId, int> assignments(const std::vector<Action>& actions) {
    std::map<ConnectionId, int> ranks;
    for (const Action& action : actions) {
      if (action.kind == Action::Kind::send && action.message.has_assignment()) {
        ranks[action.connection] = action.message.assignment().rank();
      }
    }
    return ranks;
  }

  static std::vector<ConnectionId> sent(const std::vector<Action>& actions,
                                        bool (proto::CoordinatorToWorker::*has)() const) {
    std::vector<ConnectionId> to;
    for (const Action& action : actions) {
      if (action.kind == Action::Kind::send && (action.message.*has)()) {
        to.push_back(action.connection);
      }
    }
    return to;
  }

  // Why `id` was refused: the reason of the abort it was sent before its connection closed; empty
  // when it was not.
  static std::string refusal(const std::vector<Action>& actions, ConnectionId id) {
    std::string reason;
    bool closed = false;
    for (const Action& action : actions) {
      if (action.connection != id) continue;
      if (action.kind == Action::Kind::send && action.message.has_abort()) {
        reason = action.message.abort().reason().message();
      }
      closed |= action.kind == Action::Kind::close;
    }
    return closed ? reason : "";
  }

  static std::vector<ConnectionId> closed(const std::vector<Action>& actions) {
    std::vector<ConnectionId> ids;
    for (const Action& action : actions) {
      if (action.kind == Action::Kind::close) ids.push_back(action.connection);
    }
    return ids;
  }

  std::optional<Membership> membership_;
  TimePoint now_{std::chrono::seconds(1000)};
  std::map<ConnectionId, std::string> challenges_;
  // A connection's data address when it is not 127.0.0.1:(5000 + id): a worker that joins again.
  std::map<ConnectionId, std::string> data_addresses_;
  // How often the joins from now on ask for word while they are spares (0: never).
  std::uint32_t spare_renewal_ms_ = 0;
  std::vector<Action> kept_;
};

}  // namespace gradsync::daemon
