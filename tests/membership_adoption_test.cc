// A coordinator restarted under a running group (daemon/membership.h, Stage::adopting): it takes
// the generation back once every rank has come back with it, keeping the generation and the ranks;
// a rank not back within a heartbeat timeout ends that generation and the next forms; a join that
// cannot belong to it is refused, saying why, and a forged one does not pass the secret's proof.
#include <gtest/gtest.h>

#include "daemon/membership.h"
#include "support/membership_fixture.h"

namespace gradsync::daemon {
namespace {

using std::chrono::milliseconds;

// What rank `rank` of generation `generation` of a group of `world_size` holds.
proto::Assignment running(std::uint64_t generation, int rank, int world_size) {
  proto::Assignment assignment;
  assignment.set_generation(generation);
  assignment.set_rank(rank);
  assignment.set_world_size(world_size);
  for (int peer = 0; peer < world_size; ++peer) {
    proto::Peer& entry = *assignment.add_peers();
    entry.set_rank(peer);
    entry.set_data_address("127.0.0.1:" + std::to_string(6000 + peer));
  }
  return assignment;
}

TEST_F(MembershipTest, ARestartedCoordinatorTakesBackTheGenerationItsWorkersRun) {
  start(3);
  const proto::Assignment rank2 = running(7, 2, 3);
  join(11, -1, "", -1, &rank2);
  EXPECT_EQ(membership_->stage(), Membership::Stage::adopting);
  EXPECT_EQ(membership_->generation(), 7u);
  const proto::Assignment rank0 = running(7, 0, 3);
  join(12, -1, "", -1, &rank0);
  join(13);  // a newcomer: it waits while the running generation may come back
  EXPECT_TRUE(new_actions().empty());
  EXPECT_EQ(membership_->members(), 2);
  const proto::Assignment rank1 = running(7, 1, 3);
  join(14, -1, "", -1, &rank1);

  const std::vector<Action> actions = new_actions();
  EXPECT_EQ(assignments(actions), (std::map<ConnectionId, int>{{11, 2}, {12, 0}, {14, 1}}));
  for (const Action& action : actions) {
    if (!action.message.has_assignment()) continue;
    const proto::Assignment& assignment = action.message.assignment();
    EXPECT_EQ(assignment.generation(), 7u);
    EXPECT_EQ(assignment.world_size(), 3);
    EXPECT_FALSE(assignment.probe_links());  // nothing is measured again
    ASSERT_EQ(assignment.peers_size(), 3);
    for (int peer = 0; peer < 3; ++peer) {
      EXPECT_EQ(assignment.peers(peer).data_address(), rank0.peers(peer).data_address());
    }
  }
  EXPECT_TRUE(sent(actions, &proto::CoordinatorToWorker::has_plan).empty());
  // The newcomer who waited is a spare of the complete group.
  EXPECT_EQ(sent(actions, &proto::CoordinatorToWorker::has_spare), (std::vector<ConnectionId>{13}));
  EXPECT_EQ(membership_->stage(), Membership::Stage::published);
  EXPECT_EQ(membership_->generation(), 7u);

  // It runs on as any generation does: a silent member ends it.
  advance(milliseconds(2000));
  heartbeat(11);
  heartbeat(12);
  advance(milliseconds(1001));
  const std::vector<Action> ended = new_actions();
  EXPECT_EQ(sent(ended, &proto::CoordinatorToWorker::has_abort),
            (std::vector<ConnectionId>{12, 14, 11}));
  EXPECT_EQ(membership_->generation(), 8u);
}

TEST_F(MembershipTest, ARankNotBackWithinAHeartbeatTimeoutEndsTheRunningGeneration) {
  const std::string secret = "the group's secret, 32 bytes....";
  start(3, false, secret);
  const proto::Assignment rank0 = running(4, 0, 3);
  const proto::Assignment rank2 = running(4, 2, 3);
  join(1, -1, secret, -1, &rank0);
  join(2, -1, secret, -1, &rank2);
  join(3, -1, secret);  // a newcomer
  advance(milliseconds(2000));
  heartbeat(1);
  heartbeat(2);
  heartbeat(3);
  advance(milliseconds(999));
  EXPECT_EQ(membership_->stage(), Membership::Stage::adopting);
  EXPECT_TRUE(new_actions().empty());

  advance(milliseconds(1));
  const std::vector<Action> ended = new_actions();
  EXPECT_EQ(sent(ended, &proto::CoordinatorToWorker::has_abort), (std::vector<ConnectionId>{1, 2}));
  for (const Action& action : ended) {
    if (!action.message.has_abort()) continue;
    EXPECT_EQ(action.message.abort().generation(), 4u);
    EXPECT_EQ(action.message.abort().lost_ranks_size(), 1);
    EXPECT_EQ(action.message.abort().lost_ranks(0), 1);
    EXPECT_NE(action.message.abort().reason().message().find(
                  "rank 1 was lost (not back at the restarted coordinator within 3000 ms)"),
              std::string::npos)
        << action.message.abort().reason().message();
    // They have no assignment of this coordinator's yet: only its proof makes them end the
    // generation they run (join_handshake.h).
    EXPECT_TRUE(
        net::same_proof(action.message.abort().proof(),
                        abort_proof(net::GroupSecret(secret), challenges_[action.connection],
                                    "nonce of worker " + std::to_string(action.connection),
                                    action.message.abort())));
  }
  EXPECT_EQ(closed(ended), (std::vector<ConnectionId>{1, 2}));
  EXPECT_EQ(membership_->stage(), Membership::Stage::forming);
  EXPECT_EQ(membership_->generation(), 5u);

  // The survivors join generation 5 as the ranks they held, with the newcomer who waited; ranks
  // are compacted in the order of the old ones.
  join(4, -1, secret, 2);
  join(5, -1, secret, 0);
  const std::vector<Action> formed = new_actions();
  EXPECT_EQ(assignments(formed), (std::map<ConnectionId, int>{{5, 0}, {4, 1}, {3, 2}}));
  for (const Action& action : formed) {
    if (action.message.has_assignment()) {
      EXPECT_EQ(action.message.assignment().generation(), 5u);
    }
  }
}

TEST_F(MembershipTest, RefusesRunningGenerationsItCannotTakeBack) {
  // A coordinator that runs a group of its own knows of no other.
  start(2);
  join(1);
  join(2);
  ASSERT_EQ(membership_->stage(), Membership::Stage::published);
  new_actions();
  const proto::Assignment stranger = running(1, 0, 2);
  join(3, -1, "", -1, &stranger);
  EXPECT_NE(refusal(new_actions(), 3)
                .find("generation 1 does not run here: this coordinator runs "
                      "generation 1; join it as a new member"),
            std::string::npos);

  start(3);
  const proto::Assignment rank0 = running(4, 0, 3);
  join(1, -1, "", -1, &rank0);
  new_actions();
  const proto::Assignment later = running(5, 1, 3);
  join(2, -1, "", -1, &later);
  const proto::Assignment smaller = running(4, 1, 2);
  join(3, -1, "", -1, &smaller);
  proto::Assignment elsewhere = running(4, 1, 3);
  elsewhere.mutable_peers(2)->set_data_address("127.0.0.1:9");
  join(4, -1, "", -1, &elsewhere);
  join(5, -1, "", -1, &rank0);
  proto::Assignment misnumbered = running(4, 1, 3);
  misnumbered.mutable_peers(0)->set_rank(1);
  join(6, -1, "", -1, &misnumbered);
  const std::vector<Action> actions = new_actions();
  const std::vector<std::pair<ConnectionId, std::string>> expected = {
      {2, "generation 5 does not run here: this coordinator takes back generation 4"},
      {3, "generation 4 runs 2 ranks (2 peers); this coordinator's group has 3"},
      {4,
       "its peer table of generation 4 differs from that of the ranks back before it, at rank 2"},
      {5, "rank 0 of generation 4 is back already"},
      {6, "differs from that of the ranks back before it, at rank 0"},
  };
  for (const auto& [id, reason] : expected) {
    EXPECT_NE(refusal(actions, id).find(reason), std::string::npos)
        << "connection " << id << ": " << refusal(actions, id);
  }
  EXPECT_EQ(membership_->stage(), Membership::Stage::adopting);
  EXPECT_EQ(membership_->members(), 1);
}

TEST_F(MembershipTest, WithASecretTheJoinProofCoversTheRunningGeneration) {
  const std::string secret = "a group secret of enough bytes";
  start(2, false, secret);
  membership_->connected(1, "10.0.0.1:1", now_);
  std::string challenge;
  for (const Action& action : membership_->take_actions()) {
    if (action.message.has_challenge()) challenge = action.message.challenge().nonce();
  }
  proto::WorkerToCoordinator message;
  proto::JoinRequest& request = *message.mutable_join();
  *request.mutable_running() = running(3, 0, 2);
  request.set_data_address(request.running().peers(0).data_address());
  request.set_requested_rank(-1);
  request.set_nonce("nonce of worker 1");
  request.set_challenge_response(join_proof(net::GroupSecret(secret), challenge, request));
  // Someone on the path moves rank 1 elsewhere.
  request.mutable_running()->mutable_peers(1)->set_data_address("10.9.9.9:1");
  membership_->received(1, message, now_);
  EXPECT_NE(refusal(membership_->take_actions(), 1).find("does not prove the group secret"),
            std::string::npos);
  EXPECT_EQ(membership_->stage(), Membership::Stage::forming);

  // Unchanged, the same join is taken.
  const proto::Assignment rank1 = running(3, 1, 2);
  join(2, -1, secret, -1, &rank1);
  EXPECT_EQ(membership_->stage(), Membership::Stage::adopting);
}

}  // namespace
}  // namespace gradsync::daemon
