// The coordinator's membership state machine (daemon/membership.h) driven with a fake clock and no
// sockets: formation and rank assignment, joins it must refuse, heartbeat expiry and the abort
// that reaches every member, the next generation formed from whoever joins then, idle connections
// closed at their join deadline, and the plan published once every report is in.
#include "daemon/membership.h"

#include <gtest/gtest.h>

#include "proto/convert.h"
#include "support/membership_fixture.h"

namespace gradsync::daemon {
namespace {

using std::chrono::milliseconds;

TEST_F(MembershipTest, FormsOnceEveryWorkerHasJoinedGivingRequestedRanksFirst) {
  start(3);
  join(1);
  join(2, 0);
  EXPECT_EQ(membership_->stage(), Membership::Stage::forming);
  EXPECT_TRUE(new_actions().empty());
  join(3);
  const std::vector<Action> actions = new_actions();
  EXPECT_EQ(assignments(actions), (std::map<ConnectionId, int>{{1, 1}, {2, 0}, {3, 2}}));
  // Given a model, the plan goes out with the assignment.
  EXPECT_EQ(sent(actions, &proto::CoordinatorToWorker::has_plan),
            (std::vector<ConnectionId>{2, 1, 3}));
  EXPECT_EQ(membership_->stage(), Membership::Stage::published);
}

TEST_F(MembershipTest, RefusesATakenRankABadAddressANonJoinAndALateJoiner) {
  start(2);
  join(1, 1);
  join(2, 1);  // taken
  membership_->connected(3, "stranger", now_);
  proto::WorkerToCoordinator heartbeat_first;
  heartbeat_first.mutable_heartbeat();
  membership_->received(3, heartbeat_first, now_);
  membership_->connected(4, "bad address", now_);
  proto::WorkerToCoordinator bad;
  bad.mutable_join()->set_data_address("no port here");
  membership_->received(4, bad, now_);
  EXPECT_EQ(closed(new_actions()), (std::vector<ConnectionId>{2, 3, 4}));
  join(5);
  EXPECT_EQ(membership_->stage(), Membership::Stage::published);
  new_actions();
  join(6);  // the group is complete: a spare
  EXPECT_TRUE(closed(new_actions()).empty());
  EXPECT_EQ(membership_->stage(), Membership::Stage::published);
}

// A worker that says it serves more local ranks than a daemon may, or fewer than none, is refused:
// the count sizes every rank's layout of the group.
TEST_F(MembershipTest, RefusesAJoinWhoseLocalRanksAreOutOfRange) {
  start(2);
  for (const ConnectionId id : {1, 2}) {
    membership_->connected(id, "10.0.0.9:1", now_);
    proto::WorkerToCoordinator message;
    proto::JoinRequest& request = *message.mutable_join();
    request.set_data_address("127.0.0.1:" + std::to_string(5000 + id));
    request.set_requested_rank(-1);
    request.set_local_ranks(id == 1 ? kMaxLocalRanks + 1 : -1);
    membership_->received(id, message, now_);
  }
  EXPECT_EQ(closed(new_actions()), (std::vector<ConnectionId>{1, 2}));
  EXPECT_EQ(membership_->stage(), Membership::Stage::forming);
}

TEST_F(MembershipTest, ClosesAConnectionThatNeverAsksToJoinAtItsDeadline) {
  start(2);
  membership_->connected(1, "idle", now_);
  EXPECT_EQ(sent(new_actions(), &proto::CoordinatorToWorker::has_challenge),
            (std::vector<ConnectionId>{1}));
  join(2);
  for (int beat = 0; beat < 4; ++beat) {
    advance(milliseconds(2000));
    heartbeat(2);
  }
  advance(milliseconds(1999));
  EXPECT_TRUE(new_actions().empty());
  advance(milliseconds(1));
  EXPECT_EQ(closed(new_actions()), (std::vector<ConnectionId>{1}));
  EXPECT_EQ(membership_->members(), 1);
}

// One address holds at most strangers_per_address connections that have not joined: past them a
// new one is closed at once, saying why, while workers from elsewhere still join; once the idle
// ones have met their join deadline, that address may connect again.
TEST_F(MembershipTest, OneAddressHoldsAtMostItsShareOfConnectionsThatHaveNotJoined) {
  start(3);
  const int share = MembershipConfig{}.strangers_per_address;
  const auto from_stranger = [](ConnectionId id) { return "10.9.9.9:" + std::to_string(id); };
  for (ConnectionId id = 100; id < 100 + static_cast<ConnectionId>(share); ++id) {
    membership_->connected(id, from_stranger(id), now_);
  }
  EXPECT_TRUE(closed(new_actions()).empty());
  membership_->connected(99, from_stranger(99), now_);
  std::vector<Action> actions = new_actions();
  ASSERT_EQ(closed(actions), (std::vector<ConnectionId>{99}));
  EXPECT_EQ(actions.back().reason, std::to_string(share) +
                                       " connections from 10.9.9.9 have not joined yet, as many "
                                       "as one address may hold");
  join(1);
  join(2);
  EXPECT_EQ(membership_->members(), 2);
  for (int beat = 0; beat < 5; ++beat) {
    advance(milliseconds(2000));
    heartbeat(1);
    heartbeat(2);
  }
  EXPECT_EQ(closed(new_actions()).size(), static_cast<std::size_t>(share));
  membership_->connected(98, from_stranger(98), now_);
  EXPECT_EQ(sent(new_actions(), &proto::CoordinatorToWorker::has_challenge),
            (std::vector<ConnectionId>{98}));
}

// With a group secret: a join without the proof, with another secret's, or with a proof made for
// another challenge (a replay) is refused with UNAUTHENTICATED and closed, and changes nothing;
// every assignment carries the coordinator's proof over both nonces and the rank it assigns.
TEST_F(MembershipTest, WithASecretOnlyWorkersThatProveItJoin) {
  const std::string secret = "the group's secret, 32 bytes....";
  start(2, false, secret);
  join(1, -1);
  join(2, -1, "another secret, also long enough");
  join(3, -1, secret);
  const std::vector<Action> refused = new_actions();
  EXPECT_EQ(closed(refused), (std::vector<ConnectionId>{1, 2}));
  for (const Action& action : refused) {
    if (action.kind != Action::Kind::send) continue;
    ASSERT_TRUE(action.message.has_abort());
    EXPECT_EQ(from_proto(action.message.abort().reason()).code(), ErrorCode::unauthenticated);
    // Proven over the refused join: its worker takes a refusal only so (join_handshake.h).
    EXPECT_TRUE(
        net::same_proof(action.message.abort().proof(),
                        abort_proof(net::GroupSecret(secret), challenges_[action.connection],
                                    "nonce of worker " + std::to_string(action.connection),
                                    action.message.abort())));
  }
  EXPECT_EQ(membership_->members(), 1);
  // A replay: connection 3's request, proof and all, on another connection.
  membership_->connected(4, "replayer", now_);
  new_actions();
  proto::WorkerToCoordinator replay;
  proto::JoinRequest& request = *replay.mutable_join();
  request.set_data_address("127.0.0.1:5003");
  request.set_requested_rank(-1);
  request.set_nonce("nonce of worker 3");
  request.set_challenge_response(join_proof(net::GroupSecret(secret), challenges_[3], request));
  membership_->received(4, replay, now_);
  EXPECT_EQ(closed(new_actions()), (std::vector<ConnectionId>{4}));
  join(5, -1, secret);
  const std::vector<Action> formed = new_actions();
  ASSERT_EQ(assignments(formed).size(), 2u);
  for (const Action& action : formed) {
    if (!action.message.has_assignment()) continue;
    const proto::Assignment& assignment = action.message.assignment();
    EXPECT_TRUE(net::same_proof(
        assignment.proof(),
        assignment_proof(net::GroupSecret(secret), challenges_[action.connection],
                         "nonce of worker " + std::to_string(action.connection), assignment)));
  }
}

TEST_F(MembershipTest, AWorkerSilentBeforeTheGroupFormsOnlyLeavesIt) {
  start(3);
  join(1);
  join(2);
  advance(milliseconds(2000));
  heartbeat(1);
  advance(milliseconds(1000));  // 2 has been silent for 3 s
  EXPECT_EQ(closed(new_actions()), (std::vector<ConnectionId>{2}));
  EXPECT_EQ(membership_->members(), 1);
  join(3);
  join(4);
  EXPECT_EQ(assignments(new_actions()), (std::map<ConnectionId, int>{{1, 0}, {3, 1}, {4, 2}}));
}

TEST_F(MembershipTest, AMemberSilentForTheHeartbeatTimeoutEndsTheGenerationForEveryone) {
  start(3);
  join(1);
  join(2);
  join(3);
  new_actions();
  EXPECT_EQ(membership_->next_deadline(), now_ + milliseconds(3000));
  advance(milliseconds(2500));
  heartbeat(1);
  heartbeat(3);
  advance(milliseconds(499));
  EXPECT_TRUE(new_actions().empty());
  advance(milliseconds(1));
  const std::vector<Action> actions = new_actions();
  EXPECT_EQ(sent(actions, &proto::CoordinatorToWorker::has_abort),
            (std::vector<ConnectionId>{1, 2, 3}));
  // The lost member first; the survivors join the next generation on new connections.
  EXPECT_EQ(closed(actions), (std::vector<ConnectionId>{2, 1, 3}));
  EXPECT_EQ(membership_->stage(), Membership::Stage::forming);
  EXPECT_EQ(membership_->generation(), 2u);
  const proto::Abort& abort = actions.front().message.abort();
  EXPECT_EQ(abort.generation(), 1u);
  EXPECT_EQ(abort.lost_ranks(0), 1);
  EXPECT_EQ(abort.reason().message(), "rank 1 was lost (no heartbeat for 3000 ms)");
  // A connection of the generation that ended changes nothing more.
  membership_->disconnected(1, "closed");
  EXPECT_TRUE(new_actions().empty());
}

// After a loss the next generation forms from the survivors, who join again, and a replacement:
// the survivors keep the order of their ranks before (compacted), newcomers come after them, and
// every assignment names generation 2. The ended generation's ranks hold nothing: a worker that
// stalled joins again like any other.
TEST_F(MembershipTest, TheNextGenerationFormsFromSurvivorsAndNewcomers) {
  start(3);
  join(1);
  join(2);
  join(3);
  new_actions();
  membership_->disconnected(1, "connection closed");  // rank 0
  new_actions();
  join(10);             // a replacement, first to arrive
  join(11, -1, "", 2);  // rank 2 of generation 1
  join(12, -1, "", 1);  // rank 1 of generation 1
  const std::vector<Action> actions = new_actions();
  EXPECT_EQ(assignments(actions), (std::map<ConnectionId, int>{{12, 0}, {11, 1}, {10, 2}}));
  for (const Action& action : actions) {
    if (action.message.has_assignment()) {
      EXPECT_EQ(action.message.assignment().generation(), 2u);
    }
  }
  EXPECT_EQ(membership_->stage(), Membership::Stage::published);
  EXPECT_EQ(membership_->plan().generation, 2u);
}

// Two members silent at once: the first one's loss ends the generation (and closes the other's
// connection), once; the second is not lost again (a fuzzer found the state machine throwing).
TEST_F(MembershipTest, MembersSilentAtOnceEndTheGenerationOnce) {
  start(3);
  join(1);
  join(2);
  join(3);
  new_actions();
  advance(milliseconds(3000));
  const std::vector<Action> actions = new_actions();
  EXPECT_EQ(sent(actions, &proto::CoordinatorToWorker::has_abort).size(), 3u);
  EXPECT_EQ(closed(actions), (std::vector<ConnectionId>{1, 2, 3}));
  EXPECT_EQ(membership_->generation(), 2u);
}

TEST_F(MembershipTest, AMemberThatSendsSomethingUnexpectedAbortsTheGroup) {
  start(2);
  join(1);
  join(2);
  new_actions();
  proto::WorkerToCoordinator second_join;
  second_join.mutable_join()->set_data_address("127.0.0.1:1");
  membership_->received(2, second_join, now_);
  const std::vector<Action> actions = new_actions();
  ASSERT_FALSE(actions.empty());
  EXPECT_EQ(actions.front().message.abort().reason().message(),
            "rank 1 was lost (a second join request)");
  EXPECT_EQ(closed(actions), (std::vector<ConnectionId>{2, 1}));
}

TEST_F(MembershipTest, AMemberThatLeavesEndsTheGenerationSayingWhy) {
  start(3);
  join(1);
  join(2);
  join(3);
  new_actions();
  proto::WorkerToCoordinator leave;
  leave.mutable_leave()->mutable_reason()->set_message("its op thread is stuck");
  membership_->received(3, leave, now_);
  const std::vector<Action> actions = new_actions();
  EXPECT_EQ(sent(actions, &proto::CoordinatorToWorker::has_abort),
            (std::vector<ConnectionId>{1, 2, 3}));
  EXPECT_EQ(actions.front().message.abort().reason().message(),
            "rank 2 was lost (it left: its op thread is stuck)");
  EXPECT_EQ(membership_->stage(), Membership::Stage::forming);
  EXPECT_EQ(membership_->generation(), 2u);
}

// Connection `id`, rank `rank` of a group of 2, reports what it measured.
void report_probe(Membership& membership, ConnectionId id, int rank, TimePoint now) {
  proto::WorkerToCoordinator message;
  proto::ProbeReport& report = *message.mutable_probe_report();
  report.set_generation(membership.generation());
  report.set_rank(rank);
  report.set_gamma_us_per_byte(0.0001);
  proto::LinkMeasurement& link = *report.add_links();
  link.set_from_rank(rank);
  link.set_to_rank(1 - rank);
  link.set_alpha_us(20.0);
  link.set_beta_us_per_byte(0.001);
  membership.received(id, message, now);
}

TEST_F(MembershipTest, PublishesThePlanOnceEveryProbeReportIsIn) {
  start(2, /*probe=*/true);
  join(1);
  join(2);
  EXPECT_EQ(membership_->stage(), Membership::Stage::probing);
  EXPECT_TRUE(sent(new_actions(), &proto::CoordinatorToWorker::has_plan).empty());
  for (ConnectionId id : {1, 2}) {
    report_probe(*membership_, id, static_cast<int>(id) - 1, now_);
    EXPECT_EQ(membership_->stage(),
              id == 1 ? Membership::Stage::probing : Membership::Stage::published);
  }
  EXPECT_EQ(sent(new_actions(), &proto::CoordinatorToWorker::has_plan),
            (std::vector<ConnectionId>{1, 2}));
  EXPECT_EQ(membership_->plan().world_size, 2);
}

TEST_F(MembershipTest, TheSameMembersAtTheSameRanksKeepTheirPlanAndMeasureNothing) {
  start(2, /*probe=*/true);
  join(1);
  join(2);
  report_probe(*membership_, 1, 0, now_);
  report_probe(*membership_, 2, 1, now_);
  const GroupPlan first = membership_->plan();
  ASSERT_TRUE(first.measured);
  proto::WorkerToCoordinator leave;
  leave.mutable_leave();
  membership_->received(2, leave, now_);
  new_actions();

  // Both come back, from the same data addresses, as the ranks they held.
  data_addresses_[11] = "127.0.0.1:5001";
  data_addresses_[12] = "127.0.0.1:5002";
  join(11, -1, "", 0);
  join(12, -1, "", 1);
  std::vector<Action> actions = new_actions();
  EXPECT_EQ(assignments(actions), (std::map<ConnectionId, int>{{11, 0}, {12, 1}}));
  for (const Action& action : actions) {
    if (action.message.has_assignment()) {
      EXPECT_FALSE(action.message.assignment().probe_links());
    }
  }
  EXPECT_EQ(sent(actions, &proto::CoordinatorToWorker::has_plan),
            (std::vector<ConnectionId>{11, 12}));
  GroupPlan kept = membership_->plan();
  EXPECT_EQ(kept.generation, 2u);
  kept.generation = first.generation;
  EXPECT_EQ(kept, first);

  // A member at another address: every link is measured again.
  membership_->received(12, leave, now_);
  new_actions();
  data_addresses_[21] = "127.0.0.1:5001";
  join(21, -1, "", 0);
  join(22, -1, "", 1);
  actions = new_actions();
  EXPECT_TRUE(sent(actions, &proto::CoordinatorToWorker::has_plan).empty());
  EXPECT_EQ(membership_->stage(), Membership::Stage::probing);
}

TEST_F(MembershipTest, ASpareThatSendsAMembersReportIsDroppedAndTheGroupGoesOn) {
  start(2, /*probe=*/true);
  join(1);
  join(2);
  join(3);  // a spare: it holds no rank, and reports nothing
  new_actions();
  report_probe(*membership_, 3, 0, now_);
  std::vector<Action> actions = new_actions();
  EXPECT_EQ(closed(actions), (std::vector<ConnectionId>{3}));
  for (const Action& action : actions) {
    if (action.kind == Action::Kind::close) {
      EXPECT_EQ(action.reason, "a probe report the coordinator did not ask for");
    }
  }
  EXPECT_EQ(membership_->stage(), Membership::Stage::probing);
  report_probe(*membership_, 1, 0, now_);
  report_probe(*membership_, 2, 1, now_);
  EXPECT_EQ(membership_->stage(), Membership::Stage::published);
  EXPECT_EQ(membership_->generation(), 1u);
}

}  // namespace
}  // namespace gradsync::daemon
