// A new table version's messages taken by a worker's table gate (daemon/table_messages.h): a
// proposal is answered with the first op not started; a switch for another group, or one the rank
// was not holding for, is an error (the rank then leaves its generation).
#include "daemon/table_messages.h"

#include <gtest/gtest.h>

#include "proto/convert.h"

namespace gradsync::daemon {
namespace {

proto::CoordinatorToWorker proposal(std::uint64_t generation, std::uint64_t version) {
  proto::CoordinatorToWorker message;
  message.mutable_table_proposal()->set_generation(generation);
  message.mutable_table_proposal()->set_version(version);
  return message;
}

proto::CoordinatorToWorker switch_to(std::uint64_t version, int world_size,
                                     std::uint64_t from_op) {
  GroupPlan plan;
  plan.generation = 1;
  plan.world_size = world_size;
  plan.table_version = version;
  plan.local_ranks.assign(world_size, 1);
  proto::CoordinatorToWorker message;
  message.mutable_table_switch()->set_from_op(from_op);
  to_proto(plan, *message.mutable_table_switch()->mutable_plan());
  return message;
}

TEST(TableMessages, AProposalIsAnsweredWithTheFirstOpNotStarted) {
  TableGate gate(std::chrono::milliseconds(1000));
  gate.reset(1);
  std::optional<GroupPlan> plan;
  for (std::uint64_t op = 0; op < 10; ++op) ASSERT_TRUE(gate.admit(op, plan).ok());
  std::optional<proto::WorkerToCoordinator> reply;
  ASSERT_TRUE(take_table_message(gate, 2, proposal(1, 2), reply).ok());
  ASSERT_TRUE(reply && reply->has_table_ready());
  EXPECT_EQ(reply->table_ready().generation(), 1u);
  EXPECT_EQ(reply->table_ready().version(), 2u);
  EXPECT_EQ(reply->table_ready().next_op(), 10u);

  reply.reset();
  ASSERT_TRUE(take_table_message(gate, 2, switch_to(2, 2, 10 + kTableLead), reply).ok());
  EXPECT_FALSE(reply) << "a switch needs no answer";
}

TEST(TableMessages, AProposalOfAnotherGenerationIsAnErrorAndNotAnswered) {
  TableGate gate(std::chrono::milliseconds(1000));
  gate.reset(1);
  std::optional<proto::WorkerToCoordinator> reply;
  EXPECT_EQ(take_table_message(gate, 2, proposal(2, 2), reply).code(), ErrorCode::protocol_error);
  EXPECT_FALSE(reply);
}

TEST(TableMessages, ASwitchForAnotherGroupOrOneTheRankWasNotHoldingForIsAnError) {
  TableGate gate(std::chrono::milliseconds(1000));
  gate.reset(1);
  std::optional<proto::WorkerToCoordinator> reply;
  ASSERT_TRUE(take_table_message(gate, 2, proposal(1, 2), reply).ok());
  const Status other_group = take_table_message(gate, 2, switch_to(2, 3, kTableLead), reply);
  EXPECT_EQ(other_group.code(), ErrorCode::protocol_error);
  EXPECT_EQ(other_group.message(), "a table version for 3 ranks");
  const Status too_early = take_table_message(gate, 2, switch_to(2, 2, kTableLead - 1), reply);
  EXPECT_EQ(too_early.code(), ErrorCode::protocol_error);
  EXPECT_TRUE(gate.unsettled()) << "neither was taken";
}

}  // namespace
}  // namespace gradsync::daemon
