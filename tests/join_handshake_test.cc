// A worker's side of joining its coordinator (daemon/join_handshake.h), without a socket: the join
// request it sends for the challenge, what it waits for and how long, and the coordinator's answers
// it takes or refuses (an assignment, a Spare or an abort without the secret's proof, a Spare
// replayed, an assignment for other local ranks, a plan for another group, another generation than
// the one to take back).
#include "daemon/join_handshake.h"

#include <gtest/gtest.h>

#include "daemon/join_proofs.h"
#include "daemon/plan_builder.h"
#include "proto/convert.h"

namespace gradsync::daemon {
namespace {

using std::chrono::milliseconds;

JoinSettings settings(const std::string& secret = "") {
  JoinSettings settings;
  settings.coordinator = "10.0.0.1:7000";
  settings.requested_rank = -1;
  settings.local_ranks = 2;
  if (!secret.empty()) settings.secret = net::GroupSecret(secret);
  settings.join_timeout = milliseconds(60'000);
  return settings;
}

proto::CoordinatorToWorker challenge() {
  proto::CoordinatorToWorker message;
  message.mutable_challenge()->set_nonce("the coordinator's nonce");
  return message;
}

// Generation 5 of two workers that serve `local_ranks` each; this one is rank 1.
proto::CoordinatorToWorker assignment(int local_ranks = 2) {
  proto::CoordinatorToWorker message;
  proto::Assignment& assignment = *message.mutable_assignment();
  assignment.set_generation(5);
  assignment.set_rank(1);
  assignment.set_world_size(2);
  for (int rank = 0; rank < 2; ++rank) {
    proto::Peer& peer = *assignment.add_peers();
    peer.set_rank(rank);
    peer.set_data_address("10.0.0." + std::to_string(2 + rank) + ":7100");
    peer.set_local_ranks(local_ranks);
  }
  return message;
}

proto::CoordinatorToWorker plan(int world_size, std::uint64_t generation) {
  proto::CoordinatorToWorker message;
  to_proto(plan_from_model(generation, world_size, NetworkModel::uniform(10.0, 0.001)),
           *message.mutable_plan());
  return message;
}

// Takes the challenge; returns the join request sent.
proto::JoinRequest join(JoinHandshake& handshake, const std::string& host = "10.0.0.3") {
  proto::WorkerToCoordinator message;
  EXPECT_TRUE(handshake.challenged(challenge(), host, 7100, message).ok());
  return message.join();
}

TEST(JoinHandshake, TheJoinRequestGivesTheDataPortAndTheRankHeldAndProvesTheSecret) {
  JoinHandshake handshake = JoinHandshake::to_form(settings("the secret"), 3);
  const proto::JoinRequest request = join(handshake);
  EXPECT_EQ(request.data_address(), "10.0.0.3:7100");
  EXPECT_EQ(request.previous_rank(), 3);
  EXPECT_EQ(request.requested_rank(), -1);
  EXPECT_EQ(request.local_ranks(), 2);
  EXPECT_FALSE(request.has_running());
  EXPECT_EQ(request.challenge_response(),
            join_proof(net::GroupSecret("the secret"), "the coordinator's nonce", request));

  JoinHandshake newcomer = JoinHandshake::to_form(settings(), -1);
  const proto::JoinRequest first = join(newcomer, "::1");
  EXPECT_EQ(first.data_address(), "[::1]:7100");
  EXPECT_FALSE(first.has_previous_rank());
  EXPECT_TRUE(first.challenge_response().empty()) << "no secret, no proof";
}

TEST(JoinHandshake, ACoordinatorThatSpeaksFirstWithoutAChallengeIsRefused) {
  JoinHandshake handshake = JoinHandshake::to_form(settings(), -1);
  proto::WorkerToCoordinator message;
  const Status status = handshake.challenged(assignment(), "10.0.0.3", 7100, message);
  EXPECT_EQ(status.code(), ErrorCode::protocol_error);
  EXPECT_EQ(status.message(), "the coordinator sent something other than a challenge");
}

// Word that the worker waits as a spare: renewal `renewal`, proven with `secret` for `request`
// unless it is empty.
proto::CoordinatorToWorker spare(std::uint64_t renewal, const std::string& secret = "",
                                 const proto::JoinRequest& request = {}) {
  proto::CoordinatorToWorker message;
  message.mutable_spare()->set_why("the group of 2 is complete");
  message.mutable_spare()->set_renewal(renewal);
  if (!secret.empty()) {
    message.mutable_spare()->set_proof(spare_proof(
        net::GroupSecret(secret), "the coordinator's nonce", request.nonce(), message.spare()));
  }
  return message;
}

// The coordinator's refusal, proven like spare().
proto::CoordinatorToWorker refusal(const std::string& secret = "",
                                   const proto::JoinRequest& request = {}) {
  proto::CoordinatorToWorker message;
  message.mutable_abort()->mutable_reason()->set_code(proto::Status::ABORTED);
  message.mutable_abort()->mutable_reason()->set_message("generation 5 does not run here");
  if (!secret.empty()) {
    message.mutable_abort()->set_proof(abort_proof(
        net::GroupSecret(secret), "the coordinator's nonce", request.nonce(), message.abort()));
  }
  return message;
}

TEST(JoinHandshake, ASpareWaitsAJoinTimeoutAfterEachWordOfItsCoordinator) {
  JoinHandshake handshake = JoinHandshake::to_form(settings(), -1);
  EXPECT_EQ(join(handshake).spare_renewal_ms(), 15'000u) << "four words per join timeout";
  const auto now = JoinHandshake::TimePoint();
  EXPECT_EQ(handshake.awaited(now).what, "the group to form");
  EXPECT_EQ(handshake.awaited(now).timeout, milliseconds(60'000));
  ASSERT_TRUE(handshake.answered(spare(1)).ok());
  EXPECT_FALSE(handshake.assigned());
  // Each word starts the join timeout again: the caller waits anew for the next.
  EXPECT_EQ(handshake.awaited(now).what,
            "a place in the group, or the word of the coordinator at 10.0.0.1:7000 that this "
            "worker is still kept as a spare (--join-timeout-ms)");
  EXPECT_EQ(handshake.awaited(now).timeout, milliseconds(60'000));
  ASSERT_TRUE(handshake.answered(spare(2)).ok());
  EXPECT_EQ(handshake.awaited(now + std::chrono::hours(1)).timeout, milliseconds(60'000));
  // A word replayed would keep it waiting as long as the replays last.
  const Status replayed = handshake.answered(spare(2));
  EXPECT_EQ(replayed.code(), ErrorCode::protocol_error);
  EXPECT_EQ(replayed.message(),
            "the coordinator at 10.0.0.1:7000 sent spare renewal 2 after renewal 2");
  ASSERT_TRUE(handshake.answered(assignment()).ok());
  EXPECT_TRUE(handshake.assigned());
  EXPECT_EQ(handshake.mesh_plan().rank, 1);
  EXPECT_EQ(handshake.mesh_plan().layout.world_size(), 4);
  EXPECT_EQ(handshake.awaited(now).what, "the group's plan");
}

TEST(JoinHandshake, AnAssignmentWithoutTheCoordinatorsProofOfTheSecretIsRefused) {
  JoinHandshake impostor = JoinHandshake::to_form(settings("the secret"), -1);
  join(impostor);
  const Status status = impostor.answered(assignment());
  EXPECT_EQ(status.code(), ErrorCode::unauthenticated);
  EXPECT_NE(status.message().find("the coordinator at 10.0.0.1:7000 does not prove the group "
                                  "secret"),
            std::string::npos)
      << status.message();
  EXPECT_FALSE(impostor.assigned());

  JoinHandshake handshake = JoinHandshake::to_form(settings("the secret"), -1);
  const proto::JoinRequest request = join(handshake);
  proto::CoordinatorToWorker proven = assignment();
  proven.mutable_assignment()->set_proof(assignment_proof(net::GroupSecret("the secret"),
                                                          "the coordinator's nonce",
                                                          request.nonce(), proven.assignment()));
  EXPECT_TRUE(handshake.answered(proven).ok());
  EXPECT_TRUE(handshake.assigned());
}

TEST(JoinHandshake, AWorkerWithASecretWaitsAsASpareOnlyOnTheCoordinatorsProof) {
  JoinHandshake impostor = JoinHandshake::to_form(settings("the secret"), -1);
  const proto::JoinRequest request = join(impostor);
  const Status unproven = impostor.answered(spare(1));
  EXPECT_EQ(unproven.code(), ErrorCode::unauthenticated);
  EXPECT_EQ(unproven.message(),
            "the coordinator at 10.0.0.1:7000 does not prove the group secret in its word that "
            "this worker is a spare (one without --secret-file, or with another secret)");
  EXPECT_EQ(impostor.answered(spare(1, "another secret", request)).code(),
            ErrorCode::unauthenticated);
  proto::JoinRequest other_join = request;
  other_join.set_nonce("another worker's nonce");
  EXPECT_EQ(impostor.answered(spare(1, "the secret", other_join)).code(),
            ErrorCode::unauthenticated)
      << "proven for another join";
  proto::CoordinatorToWorker tampered = spare(1, "the secret", request);
  tampered.mutable_spare()->set_renewal(2);
  EXPECT_EQ(impostor.answered(tampered).code(), ErrorCode::unauthenticated);
  EXPECT_EQ(impostor.awaited(JoinHandshake::TimePoint()).what, "the group to form")
      << "no refused word made it a spare";

  JoinHandshake handshake = JoinHandshake::to_form(settings("the secret"), -1);
  const proto::JoinRequest proven_join = join(handshake);
  ASSERT_TRUE(handshake.answered(spare(1, "the secret", proven_join)).ok());
  ASSERT_TRUE(handshake.answered(spare(2, "the secret", proven_join)).ok());
  EXPECT_EQ(handshake.answered(spare(3)).code(), ErrorCode::unauthenticated)
      << "every word, not only the first";
}

TEST(JoinHandshake, AnAbortBeforeTheAssignmentEndsTheJoinOnlyWithTheCoordinatorsProof) {
  JoinHandshake impostor = JoinHandshake::to_form(settings("the secret"), -1);
  const proto::JoinRequest request = join(impostor);
  const Status unproven = impostor.answered(refusal("another secret", request));
  EXPECT_EQ(unproven.code(), ErrorCode::unauthenticated);
  EXPECT_EQ(unproven.message(),
            "the coordinator at 10.0.0.1:7000 does not prove the group secret in its abort (one "
            "without --secret-file, or with another secret); it said: generation 5 does not run "
            "here");
  EXPECT_FALSE(impostor.ended());

  JoinHandshake handshake = JoinHandshake::to_form(settings("the secret"), -1);
  const proto::JoinRequest proven_join = join(handshake);
  const Status ended = handshake.answered(refusal("the secret", proven_join));
  EXPECT_EQ(ended.code(), ErrorCode::aborted);
  EXPECT_EQ(ended.message(), "generation 5 does not run here");
  EXPECT_TRUE(handshake.ended());
  EXPECT_FALSE(handshake.assigned());

  JoinHandshake without_secret = JoinHandshake::to_form(settings(), -1);
  join(without_secret);
  EXPECT_EQ(without_secret.answered(refusal()).message(), "generation 5 does not run here");
  EXPECT_TRUE(without_secret.ended());
}

TEST(JoinHandshake, NoTableVersionNorPlanAnswersAJoin) {
  JoinHandshake handshake = JoinHandshake::to_form(settings(), -1);
  join(handshake);
  proto::CoordinatorToWorker proposal;
  proposal.mutable_table_proposal()->set_generation(5);
  EXPECT_EQ(handshake.answered(proposal).message(),
            "the coordinator sent something other than an assignment");
  EXPECT_EQ(handshake.answered(plan(2, 5)).message(),
            "the coordinator sent something other than an assignment");
  EXPECT_FALSE(handshake.assigned());
}

TEST(JoinHandshake, AnAssignmentThatCountsOtherLocalRanksForThisWorkerIsRefused) {
  JoinHandshake handshake = JoinHandshake::to_form(settings(), -1);
  join(handshake);
  const Status status = handshake.answered(assignment(3));
  EXPECT_EQ(status.code(), ErrorCode::protocol_error);
  EXPECT_EQ(status.message(),
            "the coordinator counts 3 local ranks for this worker, which serves 2");
  EXPECT_FALSE(handshake.assigned());
}

TEST(JoinHandshake, ThePlanMayFollowOneCalibrationAndMustBeOfTheAssignedGroup) {
  JoinHandshake handshake = JoinHandshake::to_form(settings(), -1);
  join(handshake);
  ASSERT_TRUE(handshake.answered(assignment()).ok());
  proto::CoordinatorToWorker calibration;
  calibration.mutable_calibration_request();
  bool calibrate = false;
  ASSERT_TRUE(handshake.planned(calibration, calibrate).ok());
  EXPECT_TRUE(calibrate);
  EXPECT_EQ(handshake.planned(calibration, calibrate).message(),
            "the coordinator sent something other than the group's plan")
      << "one calibration";
  const Status other = handshake.planned(plan(4, 5), calibrate);
  EXPECT_EQ(other.code(), ErrorCode::protocol_error);
  EXPECT_EQ(other.message(), "the coordinator sent a plan for 4 ranks of generation 5");

  JoinHandshake direct = JoinHandshake::to_form(settings(), -1);
  join(direct);
  ASSERT_TRUE(direct.answered(assignment()).ok());
  ASSERT_TRUE(direct.planned(plan(2, 5), calibrate).ok());
  EXPECT_FALSE(calibrate);
  EXPECT_EQ(direct.plan().world_size, 2);
  EXPECT_EQ(direct.plan_message().generation(), 5u);
}

TEST(JoinHandshake, TakingBackWantsTheRunningAssignmentBackBeforeTheDeadline) {
  const proto::Assignment running = assignment().assignment();
  const auto now = JoinHandshake::TimePoint() + std::chrono::hours(1);
  JoinHandshake handshake =
      JoinHandshake::to_take_back(settings(), running, now + milliseconds(2500));
  const proto::JoinRequest request = join(handshake);
  ASSERT_TRUE(request.has_running());
  EXPECT_EQ(request.running().generation(), 5u);
  EXPECT_TRUE(request.running().proof().empty()) << "the proof is the coordinator's to make";
  EXPECT_EQ(request.previous_rank(), 1);
  EXPECT_EQ(handshake.awaited(now).what, "the coordinator to take the group back");
  EXPECT_EQ(handshake.awaited(now).timeout, milliseconds(2500));
  EXPECT_EQ(handshake.awaited(now + milliseconds(4000)).timeout, milliseconds(1))
      << "past the deadline, a last look";

  EXPECT_EQ(handshake.answered(spare(1)).message(),
            "the coordinator sent something other than an assignment");
  EXPECT_EQ(request.spare_renewal_ms(), 0u) << "a worker that runs a generation is no spare";
  proto::CoordinatorToWorker other = assignment();
  other.mutable_assignment()->set_generation(6);
  EXPECT_EQ(handshake.answered(other).message(),
            "the coordinator handed back another assignment than generation 5's");
  EXPECT_FALSE(handshake.assigned());
  ASSERT_TRUE(handshake.answered(assignment()).ok());
  EXPECT_TRUE(handshake.assigned());
}

TEST(JoinHandshake, TakingBackEndsTheGroupOnlyOnTheCoordinatorsProvenWord) {
  const proto::Assignment running = assignment().assignment();
  const auto deadline = JoinHandshake::TimePoint() + milliseconds(2500);
  JoinHandshake impostor = JoinHandshake::to_take_back(settings("the secret"), running, deadline);
  join(impostor);
  EXPECT_EQ(impostor.answered(refusal()).code(), ErrorCode::unauthenticated);
  EXPECT_FALSE(impostor.ended()) << "the generation runs on; the caller tries again";

  JoinHandshake handshake = JoinHandshake::to_take_back(settings("the secret"), running, deadline);
  const proto::JoinRequest request = join(handshake);
  EXPECT_EQ(handshake.answered(refusal("the secret", request)).code(), ErrorCode::aborted);
  EXPECT_TRUE(handshake.ended());
}

TEST(JoinHandshake, TwoAssignmentsAreOfTheSameGroupOnlyWithTheSamePeersAtTheSameRanks) {
  const proto::Assignment a = assignment().assignment();
  proto::Assignment b = a;
  EXPECT_TRUE(same_group(a, b));
  b.mutable_peers(0)->set_data_address("10.0.0.9:7100");
  EXPECT_FALSE(same_group(a, b));
  b = a;
  b.set_rank(0);
  EXPECT_FALSE(same_group(a, b));
}

}  // namespace
}  // namespace gradsync::daemon
