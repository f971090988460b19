#include "daemon/openings_per_address.h"

#include <gtest/gtest.h>

#include <vector>

namespace gradsync::daemon {
namespace {

using Openings = std::vector<std::unique_ptr<OpeningsPerAddress::Opening>>;

// Takes `count` places for `address`; how many it got.
int open(OpeningsPerAddress& quota, const std::string& address, int count, Openings& held) {
  int got = 0;
  for (int i = 0; i < count; ++i) {
    auto opening = quota.begin(address);
    if (!opening) continue;
    held.push_back(std::move(opening));
    ++got;
  }
  return got;
}

TEST(OpeningsPerAddress, BeforeTheGroupIsKnownNoAddressHasAShare) {
  auto quota = std::make_shared<OpeningsPerAddress>(2);
  Openings held;
  EXPECT_EQ(open(*quota, "10.0.0.9", 50, held), 50);
}

TEST(OpeningsPerAddress, AStrangerHasItsShareAndAMemberAddressNone) {
  auto quota = std::make_shared<OpeningsPerAddress>(2);
  Openings held;
  EXPECT_EQ(open(*quota, "10.0.0.9", 3, held), 3);  // before the plan
  quota->set_group_addresses({"10.0.0.1"});
  EXPECT_EQ(open(*quota, "10.0.0.9", 1, held), 0);  // its three still count
  EXPECT_EQ(open(*quota, "10.0.0.8", 5, held), 2);
  EXPECT_EQ(open(*quota, "10.0.0.1", 50, held), 50);
  held.clear();  // every opening ended: its place is given back
  EXPECT_EQ(open(*quota, "10.0.0.9", 5, held), 2);
}

}  // namespace
}  // namespace gradsync::daemon
