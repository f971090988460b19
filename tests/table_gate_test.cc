// Where a new table version takes effect on a worker (daemon/table_gate.h): at the op the
// coordinator names, past every rank's promise; an op at the promise waits for the decision, and
// no longer than the wait limit or the coordinator.
#include "daemon/table_gate.h"

#include <gtest/gtest.h>

#include <thread>

namespace gradsync::daemon {
namespace {

GroupPlan version(std::uint64_t table_version, std::uint64_t generation = 1) {
  GroupPlan plan;
  plan.generation = generation;
  plan.world_size = 2;
  plan.table_version = table_version;
  return plan;
}

TEST(TableGate, ANewVersionRunsFromTheNamedOpOn) {
  TableGate gate(std::chrono::milliseconds(5000));
  gate.reset(1);
  std::optional<GroupPlan> plan;
  for (std::uint64_t op = 100; op < 110; ++op) ASSERT_TRUE(gate.admit(op, plan).ok());
  EXPECT_FALSE(plan.has_value());
  std::uint64_t next_op = 0;
  ASSERT_TRUE(gate.propose(1, 2, next_op).ok());
  EXPECT_EQ(next_op, 110u) << "the first op not started";
  EXPECT_TRUE(gate.unsettled());
  // Below the promise, ops run on at once, with the table they had.
  for (std::uint64_t op = 110; op < 110 + kTableLead; ++op) {
    ASSERT_TRUE(gate.admit(op, plan).ok());
    EXPECT_FALSE(plan.has_value());
  }
  ASSERT_TRUE(gate.decide(200, version(2)).ok());
  EXPECT_FALSE(gate.unsettled());
  for (std::uint64_t op = 110 + kTableLead; op < 200; ++op) {
    ASSERT_TRUE(gate.admit(op, plan).ok());
    ASSERT_FALSE(plan.has_value()) << "op " << op << " is before the switch";
  }
  ASSERT_TRUE(gate.admit(200, plan).ok());
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->table_version, 2u);
  plan.reset();
  ASSERT_TRUE(gate.admit(201, plan).ok());
  EXPECT_FALSE(plan.has_value()) << "handed over once";
}

TEST(TableGate, AnOpAtThePromiseWaitsForTheDecision) {
  TableGate gate(std::chrono::milliseconds(5000));
  gate.reset(1);
  std::uint64_t next_op = 0;
  ASSERT_TRUE(gate.propose(1, 2, next_op).ok());
  std::thread coordinator([&gate] {
    std::this_thread::sleep_for(std::chrono::milliseconds(100));
    EXPECT_TRUE(gate.decide(kTableLead + 5, version(2)).ok());
  });
  std::optional<GroupPlan> plan;
  const auto start = std::chrono::steady_clock::now();
  ASSERT_TRUE(gate.admit(kTableLead, plan).ok());
  EXPECT_GE(std::chrono::steady_clock::now() - start, std::chrono::milliseconds(90));
  EXPECT_FALSE(plan.has_value()) << "op " << kTableLead << " is before the switch";
  coordinator.join();
}

TEST(TableGate, AnUndecidedVersionFailsTheOpAfterTheWaitLimitOrWhenTheCoordinatorIsLost) {
  TableGate gate(std::chrono::milliseconds(50));
  gate.reset(1);
  std::uint64_t next_op = 0;
  ASSERT_TRUE(gate.propose(1, 2, next_op).ok());
  std::optional<GroupPlan> plan;
  const Status late = gate.admit(kTableLead, plan);
  EXPECT_EQ(late.code(), ErrorCode::deadline_exceeded);
  EXPECT_NE(late.message().find("did not say within 50 ms"), std::string::npos) << late.message();
  gate.cancel();
  const Status lost = gate.admit(kTableLead, plan);
  EXPECT_EQ(lost.code(), ErrorCode::aborted);
  EXPECT_NE(lost.message().find("lost while it settled table version 2"), std::string::npos);
  EXPECT_TRUE(gate.unsettled()) << "the generation cannot go on";
  EXPECT_TRUE(gate.admit(kTableLead - 1, plan).ok()) << "below the promise, nothing waits";
}

TEST(TableGate, AVersionSettledBeforeTheLastTookEffectFollowsIt) {
  TableGate gate(std::chrono::milliseconds(5000));
  gate.reset(1);
  std::uint64_t next_op = 0;
  ASSERT_TRUE(gate.propose(1, 2, next_op).ok());
  ASSERT_TRUE(gate.decide(100, version(2)).ok());
  ASSERT_TRUE(gate.propose(1, 3, next_op).ok()) << "while version 2 waits for its op";
  EXPECT_EQ(gate.decide(100, version(3)).code(), ErrorCode::protocol_error)
      << "not past version 2's op";
  ASSERT_TRUE(gate.decide(101, version(3)).ok());
  std::optional<GroupPlan> plan;
  for (std::uint64_t op = 0; op < 100; ++op) {
    ASSERT_TRUE(gate.admit(op, plan).ok());
    ASSERT_FALSE(plan.has_value());
  }
  ASSERT_TRUE(gate.admit(100, plan).ok());
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->table_version, 2u);
  plan.reset();
  ASSERT_TRUE(gate.admit(101, plan).ok());
  ASSERT_TRUE(plan.has_value());
  EXPECT_EQ(plan->table_version, 3u);
}

TEST(TableGate, ADecisionItDidNotHoldForIsRefused) {
  TableGate gate(std::chrono::milliseconds(5000));
  gate.reset(3);
  std::optional<GroupPlan> plan;
  for (std::uint64_t op = 0; op < 10; ++op) ASSERT_TRUE(gate.admit(op, plan).ok());
  std::uint64_t next_op = 0;
  EXPECT_EQ(gate.decide(500, version(2, 3)).code(), ErrorCode::protocol_error) << "no proposal";
  EXPECT_EQ(gate.propose(2, 2, next_op).code(), ErrorCode::protocol_error) << "old generation";
  ASSERT_TRUE(gate.propose(3, 2, next_op).ok());
  EXPECT_EQ(gate.propose(3, 3, next_op).code(), ErrorCode::protocol_error) << "one at a time";
  const Status early = gate.decide(10 + kTableLead - 1, version(2, 3));
  EXPECT_EQ(early.code(), ErrorCode::protocol_error);
  EXPECT_NE(early.message().find("was not holding for"), std::string::npos) << early.message();
  EXPECT_EQ(gate.decide(500, version(7, 3)).code(), ErrorCode::protocol_error) << "another version";
  EXPECT_EQ(gate.decide(500, version(2, 4)).code(), ErrorCode::protocol_error) << "generation";
  EXPECT_TRUE(gate.decide(10 + kTableLead, version(2, 3)).ok());
  gate.reset(4);
  EXPECT_FALSE(gate.unsettled());
  ASSERT_TRUE(gate.admit(10 + kTableLead, plan).ok());
  EXPECT_FALSE(plan.has_value()) << "a new generation forgets the old one's versions";
}

}  // namespace
}  // namespace gradsync::daemon
