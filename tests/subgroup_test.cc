// A subgroup's members as hosts and local ranks (collective/subgroup.h): every shape a list may
// take, and every list that is not a subgroup refused with the member that is wrong.
#include "collective/subgroup.h"

#include <gtest/gtest.h>

#include "collective/algorithms.h"

namespace gradsync {
namespace {

Subgroup planned(const HostLayout& group, const std::vector<int>& members, int host) {
  Subgroup subgroup;
  const Status status = plan_subgroup(group, members, host, subgroup);
  EXPECT_TRUE(status.ok()) << status.to_string();
  return subgroup;
}

std::string refusal(const HostLayout& group, const std::vector<int>& members) {
  Subgroup subgroup;
  const Status status = plan_subgroup(group, members, 0, subgroup);
  EXPECT_EQ(status.code(), ErrorCode::invalid_argument);
  return status.message();
}

TEST(Subgroup, OneRankPerHostTakesTheMembersHostsInTheirOrder) {
  const HostLayout group = HostLayout::flat(6);
  const Subgroup reversed = planned(group, {5, 3, 0}, 3);
  EXPECT_EQ(reversed.host_ranks, (std::vector<int>{5, 3, 0}));
  EXPECT_EQ(reversed.layout, HostLayout::flat(3));
  EXPECT_EQ(reversed.position, 1);
  EXPECT_EQ(reversed.locals, (std::vector<int>{0}));
  const Subgroup outside = planned(group, {5, 3, 0}, 4);
  EXPECT_EQ(outside.position, -1);
  EXPECT_TRUE(outside.locals.empty());
  const Subgroup single = planned(group, {2}, 2);
  EXPECT_EQ(single.layout.world_size(), 1);
  EXPECT_EQ(single.position, 0);
}

TEST(Subgroup, LocalRanksOfAHostAreItsMembersInTheSubgroupsOrder) {
  // Ranks 0 1 | 2 | 3 4 5.
  const HostLayout group({2, 1, 3});
  const Subgroup subgroup = planned(group, {5, 3, 1}, 2);
  EXPECT_EQ(subgroup.host_ranks, (std::vector<int>{2, 0}));
  EXPECT_EQ(subgroup.layout, HostLayout({2, 1}));
  EXPECT_EQ(subgroup.position, 0);
  EXPECT_EQ(subgroup.locals, (std::vector<int>{2, 0}));
  const Subgroup on_host_0 = planned(group, {5, 3, 1}, 0);
  EXPECT_EQ(on_host_0.position, 1);
  EXPECT_EQ(on_host_0.locals, (std::vector<int>{1}));
  // Non-contiguous ranks of one host, and every rank but one.
  EXPECT_EQ(planned(group, {3, 5}, 2).locals, (std::vector<int>{0, 2}));
  EXPECT_EQ(planned(group, {0, 1, 2, 3, 4}, 2).layout, HostLayout({2, 1, 2}));
}

TEST(Subgroup, AListThatIsNoSubgroupIsRefusedNamingTheMember) {
  const HostLayout group({2, 1, 3});
  EXPECT_NE(refusal(group, {}).find("subgroup []: a subgroup has at least one member"),
            std::string::npos);
  EXPECT_NE(refusal(group, {0, 6}).find("rank 6 is not a rank of a group of 6"), std::string::npos);
  EXPECT_NE(refusal(group, {-1}).find("rank -1 is not a rank"), std::string::npos);
  EXPECT_NE(refusal(group, {3, 2, 3}).find("subgroup [3, 2, 3]: rank 3 is named twice"),
            std::string::npos);
  EXPECT_NE(refusal(group, {3, 2, 4})
                .find("rank 4 is on host 2, whose other members are not "
                      "beside it in the order"),
            std::string::npos);
}

TEST(Subgroup, MembersOfOneHostAreItsLocalRanksInOrder) {
  EXPECT_EQ(members_on_host({7, 2, 4, 3}, 2, 3), (std::vector<int>{0, 2, 1}));
  EXPECT_TRUE(members_on_host({7, 8}, 2, 3).empty());
}

TEST(Subgroup, ASchedulesRanksAreRenamedAsTheGroupNamesThem) {
  const OpShape shape{Collective::allreduce, 3, 9, 4};
  const Schedule schedule = build_schedule(shape, Algorithm::ring, 1);
  const Schedule mapped = on_group_ranks(schedule, {6, 2, 4});
  EXPECT_EQ(mapped.rank, 2);
  ASSERT_EQ(mapped.rounds.size(), schedule.rounds.size());
  for (std::size_t round = 0; round < schedule.rounds.size(); ++round) {
    for (std::size_t send = 0; send < schedule.rounds[round].sends.size(); ++send) {
      // Rank 1 of a ring sends to 2 and receives from 0.
      EXPECT_EQ(mapped.rounds[round].sends[send].peer, 4);
    }
    for (const Recv& recv : mapped.rounds[round].recvs) EXPECT_EQ(recv.peer, 6);
  }
}

TEST(Subgroup, ItsNetworkIsTheLinksBetweenItsHosts) {
  NetworkModel network = NetworkModel::uniform(10, 0.001);
  network.world_size = 3;
  for (int from = 0; from < 3; ++from) {
    for (int to = 0; to < 3; ++to) network.links.push_back({1.0 + from * 3 + to, 0.01 * to});
  }
  const NetworkModel sub = subgroup_network(network, {2, 0});
  ASSERT_EQ(sub.world_size, 2);
  EXPECT_EQ(sub.link(0, 1).alpha_us, network.link(2, 0).alpha_us);
  EXPECT_EQ(sub.link(1, 0).alpha_us, network.link(0, 2).alpha_us);
  EXPECT_EQ(sub.link(1, 0).beta_us_per_byte, network.link(0, 2).beta_us_per_byte);
  EXPECT_EQ(subgroup_network(NetworkModel::uniform(10, 0.001), {2, 0}),
            NetworkModel::uniform(10, 0.001));
}

}  // namespace
}  // namespace gradsync
