// The op thread's watch (daemon/op_thread_watch.h): between ops the op thread may be silent for
// the slack, in an op until the slack past the op's deadline; past that, it is stuck, and the
// watch says where. A time the whole process was stopped does not count.
#include "daemon/op_thread_watch.h"

#include <gtest/gtest.h>

namespace gradsync::daemon {
namespace {

using std::chrono::milliseconds;
using std::chrono::seconds;

TEST(OpThreadWatch, BetweenOpsTheOpThreadMayBeSilentForTheSlack) {
  OpThreadWatch watch(milliseconds(1000));
  const auto now = OpThreadWatch::Clock::now();
  watch.alive();
  EXPECT_FALSE(watch.stuck(now));
  EXPECT_FALSE(watch.stuck(now + milliseconds(900)));
  const auto stuck = watch.stuck(now + milliseconds(2600));
  ASSERT_TRUE(stuck);
  EXPECT_NE(stuck->find("its op thread has answered nothing for 2.6 s"), std::string::npos)
      << *stuck;
}

TEST(OpThreadWatch, InAnOpTheOpThreadHasUntilTheSlackPastTheOpsDeadline) {
  OpThreadWatch watch(milliseconds(1000));
  const auto now = OpThreadWatch::Clock::now();
  watch.op_began(now + seconds(60));
  EXPECT_FALSE(watch.stuck(now + seconds(30)));
  EXPECT_FALSE(watch.stuck(now + milliseconds(60'900)));
  const auto stuck = watch.stuck(now + milliseconds(62'500));
  ASSERT_TRUE(stuck);
  EXPECT_NE(stuck->find("its op thread is still in an op 2.5 s past the op's deadline"),
            std::string::npos)
      << *stuck;

  // Once the op has ended, the slack counts from then.
  watch.op_ended();
  EXPECT_FALSE(watch.stuck(OpThreadWatch::Clock::now() + milliseconds(900)));
  EXPECT_TRUE(watch.stuck(OpThreadWatch::Clock::now() + seconds(2)));
}

TEST(OpThreadWatch, ATimeTheWholeProcessWasStoppedIsExcused) {
  OpThreadWatch watch(milliseconds(1000));
  const auto now = OpThreadWatch::Clock::now();
  watch.alive();
  watch.excuse(seconds(5));
  EXPECT_FALSE(watch.stuck(now + milliseconds(5900)));
  EXPECT_TRUE(watch.stuck(now + milliseconds(6100)));

  watch.op_began(now + seconds(60));
  watch.excuse(seconds(5));
  EXPECT_FALSE(watch.stuck(now + milliseconds(65'900)));
  EXPECT_TRUE(watch.stuck(now + milliseconds(66'100)));
}

}  // namespace
}  // namespace gradsync::daemon
