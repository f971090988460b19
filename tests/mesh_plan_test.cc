// A worker checks every field of its assignment before it sizes or indexes anything with it.
#include "daemon/mesh_plan.h"

#include <gtest/gtest.h>

#include <functional>

#include "collective/group_plan.h"

namespace gradsync::daemon {
namespace {

proto::Assignment assignment_of(int p, int rank) {
  proto::Assignment assignment;
  assignment.set_generation(1);
  assignment.set_rank(rank);
  assignment.set_world_size(p);
  for (int r = 0; r < p; ++r) {
    proto::Peer& peer = *assignment.add_peers();
    peer.set_rank(r);
    peer.set_data_address("127.0.0.1:" + std::to_string(5000 + r));
  }
  return assignment;
}

TEST(MeshPlan, AGoodAssignmentGivesEveryRanksAddress) {
  proto::Assignment assignment = assignment_of(3, 1);
  std::swap(*assignment.mutable_peers(0), *assignment.mutable_peers(2));  // any order
  MeshPlan plan;
  ASSERT_TRUE(mesh_plan_from(assignment, plan).ok());
  EXPECT_EQ(plan.rank, 1);
  EXPECT_EQ(plan.world_size, 3);
  EXPECT_EQ(plan.generation, 1u);
  ASSERT_EQ(plan.peers.size(), 3u);
  EXPECT_EQ(plan.peers[2].to_string(), "127.0.0.1:5002");
  EXPECT_EQ(plan.layout, HostLayout::flat(3));  // no local ranks listed: one each
}

TEST(MeshPlan, EachWorkersLocalRanksMakeTheLayout) {
  proto::Assignment assignment = assignment_of(3, 1);
  assignment.mutable_peers(0)->set_local_ranks(2);
  assignment.mutable_peers(2)->set_local_ranks(3);
  MeshPlan plan;
  ASSERT_TRUE(mesh_plan_from(assignment, plan).ok());
  EXPECT_EQ(plan.layout, HostLayout({2, 1, 3}));
}

// Each lie is refused with a protocol error naming what is wrong; before the check, a world size
// of 2^31 - 1 sized a peer table with it, a negative one threw, and a rank outside the group or
// a peer table with a hole was used as it was.
TEST(MeshPlan, EveryBadFieldIsRefusedNamingIt) {
  const std::vector<std::pair<std::function<void(proto::Assignment&)>, std::string>> lies = {
      {[](auto& a) { a.set_world_size(0x7fffffff); }, "world size of 2147483647, not 1 to 1024"},
      {[](auto& a) { a.set_world_size(-4); }, "world size of -4"},
      {[](auto& a) { a.set_world_size(kMaxWorldSize + 1); }, "world size of 1025"},
      {[](auto& a) { a.set_rank(4); }, "gives this worker rank 4 in a group of 4"},
      {[](auto& a) { a.set_rank(-1); }, "gives this worker rank -1"},
      {[](auto& a) { a.set_generation(0); }, "has no generation"},
      {[](auto& a) { a.mutable_peers()->RemoveLast(); }, "lists 3 peers in a group of 4"},
      {[](auto& a) { a.mutable_peers(3)->set_rank(1); }, "lists rank 1 twice"},
      {[](auto& a) { a.mutable_peers(3)->set_rank(9); }, "lists rank 9, outside the group"},
      {[](auto& a) { a.mutable_peers(3)->set_rank(-2); }, "lists rank -2, outside the group"},
      {[](auto& a) { a.mutable_peers(2)->set_data_address("nowhere"); },
       "gives rank 2 a bad data address"},
      {[](auto& a) { a.mutable_peers(2)->set_data_address("127.0.0.1:99999"); },
       "gives rank 2 a bad data address"},
      {[](auto& a) { a.mutable_peers(1)->set_local_ranks(-3); },
       "is wrong: host 1 serves -3 local ranks, not 1 to 64"},
      {[](auto& a) { a.mutable_peers(1)->set_local_ranks(65); },
       "is wrong: host 1 serves 65 local ranks"},
  };
  for (const auto& [lie, expected] : lies) {
    proto::Assignment assignment = assignment_of(4, 2);
    lie(assignment);
    MeshPlan plan;
    const Status status = mesh_plan_from(assignment, plan);
    EXPECT_EQ(status.code(), ErrorCode::protocol_error) << expected;
    EXPECT_NE(status.message().find("the coordinator's assignment "), std::string::npos);
    EXPECT_NE(status.message().find(expected), std::string::npos) << status.message();
  }
}

}  // namespace
}  // namespace gradsync::daemon
