// How a group's places are filled (daemon/membership.h). One that may shrink
// (MembershipConfig::min_workers): after a loss the next generation forms with fewer ranks once no
// more have joined within a heartbeat timeout of the first, never with fewer than the minimum, and
// grows again, in a generation of its own, when a worker joins it; the first generation always has
// every rank. A complete group keeps newcomers as spares, who fill the places of lost members, and
// tells each again, proving the group secret, as often as its join asks, until it has a place.
#include <gtest/gtest.h>

#include "daemon/join_proofs.h"
#include "daemon/membership.h"
#include "support/membership_fixture.h"

namespace gradsync::daemon {
namespace {

using std::chrono::milliseconds;

// The world size of the assignments among `actions`, or 0 when there are none.
int assigned_size(const std::vector<Action>& actions) {
  for (const Action& action : actions) {
    if (action.message.has_assignment()) return action.message.assignment().world_size();
  }
  return 0;
}

class MembershipResizeTest : public MembershipTest {
 protected:
  // Forms generation 1 of 4 (connections 1-4 as ranks 0-3), then loses rank 2.
  void form_four_and_lose_rank_two(int min_workers) {
    start(4, false, "", min_workers);
    for (ConnectionId id = 1; id <= 4; ++id) join(id, static_cast<int>(id) - 1);
    ASSERT_EQ(membership_->stage(), Membership::Stage::published);
    membership_->disconnected(3, "connection closed by the other side");
    new_actions();
    ASSERT_EQ(membership_->generation(), 2u);
  }

  // Lets `total` pass in steps of at most 500 ms, every connection of `beating` beating after each.
  void pass(milliseconds total, const std::vector<ConnectionId>& beating) {
    for (milliseconds passed(0); passed < total;) {
      const milliseconds step = std::min(milliseconds(500), total - passed);
      advance(step);
      passed += step;
      for (const ConnectionId id : beating) heartbeat(id);
    }
  }
};

TEST_F(MembershipResizeTest, AfterALossASmallerGenerationFormsOnceNoMoreJoinWithinAHeartbeat) {
  form_four_and_lose_rank_two(3);
  // The survivors join again, asking for their ranks as before.
  join(11, 0, "", 0);
  pass(milliseconds(100), {11});
  join(12, 1, "", 1);
  join(14, 3, "", 3);
  pass(milliseconds(2899), {11, 12, 14});
  EXPECT_EQ(membership_->stage(), Membership::Stage::forming);
  EXPECT_TRUE(new_actions().empty());
  advance(milliseconds(1));
  const std::vector<Action> formed = new_actions();
  // Rank 3 is no rank of a group of 3: it takes the first free one.
  EXPECT_EQ(assignments(formed), (std::map<ConnectionId, int>{{11, 0}, {12, 1}, {14, 2}}));
  EXPECT_EQ(assigned_size(formed), 3);
  EXPECT_EQ(membership_->size(), 3);
  EXPECT_EQ(membership_->plan().world_size, 3);

  // A worker that joins makes it grow: generation 2 ends for it, and generation 3 has every rank.
  join(20, 2);
  const std::vector<Action> ended = new_actions();
  EXPECT_EQ(sent(ended, &proto::CoordinatorToWorker::has_abort),
            (std::vector<ConnectionId>{11, 12, 14}));
  for (const Action& action : ended) {
    if (!action.message.has_abort()) continue;
    EXPECT_EQ(action.message.abort().reason().message(),
              "generation 2 ended: a worker joined, and the group of 3 grows");
    EXPECT_EQ(action.message.abort().lost_ranks_size(), 0);
  }
  EXPECT_EQ(closed(ended), (std::vector<ConnectionId>{11, 12, 14}));
  join(21, 0, "", 0);
  join(22, 1, "", 1);
  join(24, 3, "", 2);
  const std::vector<Action> grown = new_actions();
  EXPECT_EQ(assignments(grown), (std::map<ConnectionId, int>{{21, 0}, {22, 1}, {20, 2}, {24, 3}}));
  EXPECT_EQ(assigned_size(grown), 4);
  EXPECT_EQ(membership_->generation(), 3u);
}

TEST_F(MembershipResizeTest, NeverFewerThanTheMinimum) {
  form_four_and_lose_rank_two(4);
  join(11, -1, "", 0);
  join(12, -1, "", 1);
  join(14, -1, "", 3);
  pass(milliseconds(60'000), {11, 12, 14});
  EXPECT_EQ(membership_->stage(), Membership::Stage::forming);
  EXPECT_TRUE(assignments(new_actions()).empty());
  join(15);  // a replacement
  EXPECT_EQ(assigned_size(new_actions()), 4);
}

TEST_F(MembershipResizeTest, TheFirstGenerationHasEveryRank) {
  start(4, false, "", 2);
  join(1);
  join(2);
  join(3);
  pass(milliseconds(60'000), {1, 2, 3});
  EXPECT_EQ(membership_->stage(), Membership::Stage::forming);
  join(4);
  EXPECT_EQ(assigned_size(new_actions()), 4);
}

TEST_F(MembershipResizeTest, ACompleteGroupKeepsNewcomersAsSparesWhoFillALostPlace) {
  start(2);
  join(1);
  join(2);
  new_actions();
  join(3);
  join(4);
  std::vector<Action> actions = new_actions();
  EXPECT_EQ(sent(actions, &proto::CoordinatorToWorker::has_spare),
            (std::vector<ConnectionId>{3, 4}));
  EXPECT_TRUE(closed(actions).empty());
  join(5);  // as many spares as ranks: no more
  EXPECT_NE(refusal(new_actions(), 5).find("the group of 2 is complete and has 2 spares"),
            std::string::npos);
  EXPECT_EQ(membership_->generation(), 1u);

  // Rank 1 is lost; its survivor and the first spare form generation 2 at once, the other spare
  // waits on.
  membership_->disconnected(2, "connection closed by the other side");
  new_actions();
  join(6, -1, "", 0);
  actions = new_actions();
  EXPECT_EQ(assignments(actions), (std::map<ConnectionId, int>{{6, 0}, {3, 1}}));
  EXPECT_EQ(sent(actions, &proto::CoordinatorToWorker::has_spare), (std::vector<ConnectionId>{4}));
  EXPECT_EQ(membership_->generation(), 2u);
}

TEST_F(MembershipResizeTest, ASpareHearsAgainAsOftenAsItsJoinAsksUntilItHasAPlace) {
  const std::string secret = "the group's secret, 32 bytes....";
  const auto spares = [&](const std::vector<Action>& actions) {
    std::vector<std::uint64_t> renewals;
    for (const Action& action : actions) {
      if (!action.message.has_spare()) continue;
      EXPECT_EQ(action.connection, 3u);
      const proto::Spare& spare = action.message.spare();
      EXPECT_TRUE(net::same_proof(
          spare.proof(),
          spare_proof(net::GroupSecret(secret), challenges_[3], "nonce of worker 3", spare)));
      renewals.push_back(spare.renewal());
    }
    return renewals;
  };
  start(2, false, secret);
  join(1, -1, secret);
  join(2, -1, secret);
  new_actions();
  spare_renewal_ms_ = 1000;
  join(3, -1, secret);
  EXPECT_EQ(spares(new_actions()), (std::vector<std::uint64_t>{1}));
  EXPECT_EQ(membership_->next_deadline(), now_ + milliseconds(1000));
  pass(milliseconds(999), {1, 2, 3});
  EXPECT_TRUE(spares(new_actions()).empty());
  pass(milliseconds(1), {1, 2, 3});
  EXPECT_EQ(spares(new_actions()), (std::vector<std::uint64_t>{2}));
  pass(milliseconds(2000), {1, 2, 3});
  EXPECT_EQ(spares(new_actions()), (std::vector<std::uint64_t>{3, 4}));

  // Rank 1 is lost: while the next generation forms, the spare still hears; once it has rank 1's
  // place, no more.
  membership_->disconnected(2, "connection closed by the other side");
  pass(milliseconds(1000), {3});
  EXPECT_EQ(spares(new_actions()), (std::vector<std::uint64_t>{5}));
  join(6, -1, secret, 0);
  EXPECT_EQ(assignments(new_actions()), (std::map<ConnectionId, int>{{6, 0}, {3, 1}}));
  pass(milliseconds(5000), {6, 3});
  EXPECT_TRUE(spares(new_actions()).empty());
}

}  // namespace
}  // namespace gradsync::daemon
