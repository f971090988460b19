// Global ranks of hosts that serve several local ranks: host-major, any mix of counts.
#include "collective/host_layout.h"

#include <gtest/gtest.h>

namespace gradsync {
namespace {

TEST(HostLayout, RanksAreHostMajor) {
  const HostLayout layout({2, 1, 3});
  EXPECT_EQ(layout.hosts(), 3);
  EXPECT_EQ(layout.world_size(), 6);
  EXPECT_EQ(layout.most_local_ranks(), 3);
  EXPECT_FALSE(layout.flat());
  const std::vector<int> first = {0, 2, 3};
  const std::vector<int> host_of = {0, 0, 1, 2, 2, 2};
  for (int host = 0; host < 3; ++host) EXPECT_EQ(layout.first_rank(host), first[host]);
  for (int rank = 0; rank < 6; ++rank) EXPECT_EQ(layout.host_of(rank), host_of[rank]) << rank;
  EXPECT_EQ(layout.describe(), "3 hosts x 2, 1, 3 local ranks");
}

TEST(HostLayout, OneRankPerHostIsTheFlatGroup) {
  const HostLayout layout = HostLayout::flat(4);
  EXPECT_TRUE(layout.flat());
  EXPECT_EQ(layout.world_size(), 4);
  for (int rank = 0; rank < 4; ++rank) EXPECT_EQ(layout.host_of(rank), rank);
  EXPECT_EQ(layout.describe(), "4 hosts x 1 local rank");
  EXPECT_EQ(HostLayout({4, 4}).describe(), "2 hosts x 4 local ranks");
}

TEST(HostLayout, ACheckNamesTheHostWhoseCountIsWrong) {
  EXPECT_TRUE(check_layout({1, 64, 3}).ok());
  const Status zero = check_layout({2, 0});
  EXPECT_EQ(zero.code(), ErrorCode::invalid_argument);
  EXPECT_NE(zero.message().find("host 1 serves 0 local ranks, not 1 to 64"), std::string::npos)
      << zero.message();
  const Status too_many = check_layout(std::vector<int>(17, 64));
  EXPECT_NE(too_many.message().find("1088 ranks in all, more than a group may have (1024)"),
            std::string::npos)
      << too_many.message();
}

}  // namespace
}  // namespace gradsync
