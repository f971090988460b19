// The coordinator's side of a table refined from real ops (daemon/membership.h): op times in, a
// proposal to every rank, and once every rank has answered, the switch at an op past all their
// promises; an answer it did not ask for loses its sender.
#include <gtest/gtest.h>

#include "collective/algorithms.h"
#include "daemon/table_gate.h"
#include "proto/convert.h"
#include "support/membership_fixture.h"

namespace gradsync::daemon {
namespace {

class MembershipTableTest : public MembershipTest {
 protected:
  // A group of two from the model; returns the connection of each rank.
  std::vector<ConnectionId> formed() {
    start(2);
    join(1);
    join(2);
    std::vector<ConnectionId> by_rank(2);
    for (const auto& [id, rank] : assignments(new_actions())) by_rank[rank] = id;
    return by_rank;
  }

  // Rank `id`'s times of 1 MiB all-reduces: each algorithm's median, quartiles 5% either side.
  void times(ConnectionId id, const std::vector<std::pair<Algorithm, double>>& medians) {
    proto::WorkerToCoordinator message;
    proto::OpTimesReport& report = *message.mutable_op_times();
    report.set_generation(membership_->generation());
    for (const auto& [algorithm, median_us] : medians) {
      proto::OpTimes& entry = *report.add_times();
      entry.set_size_log2(20);
      entry.set_algorithm(to_proto(algorithm));
      entry.set_ops(32);
      entry.set_low_us(median_us * 0.95);
      entry.set_median_us(median_us);
      entry.set_high_us(median_us * 1.05);
    }
    membership_->received(id, message, now_);
  }

  void ready(ConnectionId id, std::uint64_t version, std::uint64_t next_op) {
    proto::WorkerToCoordinator message;
    message.mutable_table_ready()->set_generation(membership_->generation());
    message.mutable_table_ready()->set_version(version);
    message.mutable_table_ready()->set_next_op(next_op);
    membership_->received(id, message, now_);
  }
};

TEST_F(MembershipTableTest, ASwitchComesOnceEveryRankHasAnsweredPastAllTheirPromises) {
  const std::vector<ConnectionId> by_rank = formed();
  const Algorithm running = membership_->plan().table.lookup(Collective::allreduce, 1 << 20);
  const Algorithm faster = running == Algorithm::ring ? Algorithm::tree : Algorithm::ring;
  for (const ConnectionId id : by_rank) times(id, {{running, 1000}, {faster, 500}});
  std::vector<Action> actions = new_actions();
  EXPECT_EQ(sent(actions, &proto::CoordinatorToWorker::has_table_proposal), by_rank);
  for (const Action& action : actions) {
    if (action.message.has_table_proposal()) {
      EXPECT_EQ(action.message.table_proposal().version(), 2u);
    }
  }
  ready(by_rank[0], 2, 700);
  EXPECT_TRUE(sent(new_actions(), &proto::CoordinatorToWorker::has_table_switch).empty())
      << "rank 1 has not answered";
  ready(by_rank[1], 2, 650);
  actions = new_actions();
  EXPECT_EQ(sent(actions, &proto::CoordinatorToWorker::has_table_switch), by_rank);
  for (const Action& action : actions) {
    if (!action.message.has_table_switch()) continue;
    EXPECT_EQ(action.message.table_switch().from_op(), 700 + kTableLead);
    GroupPlan plan;
    ASSERT_TRUE(from_proto(action.message.table_switch().plan(), plan).ok());
    EXPECT_EQ(plan.table_version, 2u);
    EXPECT_EQ(plan.table.lookup(Collective::allreduce, 1 << 20), faster);
    EXPECT_EQ(plan.history.back().from_op, 700 + kTableLead);
  }
  EXPECT_EQ(membership_->plan().table_version, 2u);
  EXPECT_TRUE(closed(actions).empty());
}

TEST_F(MembershipTableTest, AnAnswerItDidNotAskForLosesItsSender) {
  const std::vector<ConnectionId> by_rank = formed();
  ready(by_rank[1], 2, 10);
  const std::vector<Action> actions = new_actions();
  EXPECT_NE(refusal(actions, by_rank[1]).find("did not propose"), std::string::npos)
      << refusal(actions, by_rank[1]);
}

TEST_F(MembershipTableTest, BadOpTimesLoseTheirSender) {
  const std::vector<ConnectionId> by_rank = formed();
  times(by_rank[0], {{Algorithm::bruck, 100}});
  const std::vector<Action> actions = new_actions();
  EXPECT_NE(refusal(actions, by_rank[0]).find("rank 0 sent bad op times"), std::string::npos)
      << refusal(actions, by_rank[0]);
}

}  // namespace
}  // namespace gradsync::daemon
