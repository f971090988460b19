// A worker's generations as its op thread sees them (daemon/generation_lifecycle.h), driven with a
// fake clock: a generation forms, its coordinator is lost and found again, it ends and the worker
// joins the next as the rank it held, or exits when it must not; a loss of a channel that is not
// the served one changes nothing.
#include "daemon/generation_lifecycle.h"

#include <gtest/gtest.h>

namespace gradsync::daemon {
namespace {

using std::chrono::milliseconds;
using Kind = LifecycleStep::Kind;
using Stage = GenerationLifecycle::Stage;

proto::Assignment assignment(std::uint64_t generation, int rank) {
  proto::Assignment assignment;
  assignment.set_generation(generation);
  assignment.set_rank(rank);
  assignment.set_world_size(4);
  return assignment;
}

LossFacts running_on() { return LossFacts{}; }

LossFacts aborted() {
  LossFacts facts;
  facts.aborted = true;
  return facts;
}

class GenerationLifecycleTest : public ::testing::Test {
 protected:
  GenerationLifecycle lifecycle_{LifecycleConfig{true, milliseconds(3000)}};
  GenerationLifecycle::TimePoint now_ = GenerationLifecycle::TimePoint() + std::chrono::hours(1);
};

TEST_F(GenerationLifecycleTest, AGenerationThatEndsIsFollowedByAJoinAsTheRankItHeld) {
  EXPECT_EQ(lifecycle_.stage(), Stage::forming);
  lifecycle_.formed(assignment(3, 2), 7);
  EXPECT_EQ(lifecycle_.stage(), Stage::serving);

  const LifecycleStep lost = lifecycle_.channel_lost(7, aborted(), now_);
  EXPECT_EQ(lost.kind, Kind::end_generation) << "the coordinator ended the generation";
  EXPECT_TRUE(lost.raise.ok()) << "the abort is raised already";

  const LifecycleStep next = lifecycle_.ended(Status(ErrorCode::peer_lost, "rank 1 was lost"));
  EXPECT_EQ(next.kind, Kind::form_next);
  EXPECT_EQ(next.previous_rank, 2);
  EXPECT_EQ(lifecycle_.stage(), Stage::forming);

  lifecycle_.formed(assignment(4, 1), 9);
  EXPECT_EQ(lifecycle_.stage(), Stage::serving);
  EXPECT_EQ(lifecycle_.rank(), 1);
  EXPECT_EQ(lifecycle_.channel_lost(7, aborted(), now_).kind, Kind::none)
      << "the channel of the generation before";
  EXPECT_EQ(lifecycle_.channel_lost(9, aborted(), now_).kind, Kind::end_generation);
}

TEST_F(GenerationLifecycleTest, ALostCoordinatorIsFoundAgainWhileTheGenerationRunsOn) {
  lifecycle_.formed(assignment(3, 2), 7);
  const LifecycleStep lost = lifecycle_.channel_lost(7, running_on(), now_);
  ASSERT_EQ(lost.kind, Kind::reattach);
  EXPECT_EQ(lost.running.generation(), 3u);
  EXPECT_EQ(lost.running.rank(), 2);
  EXPECT_EQ(lost.deadline, now_ + milliseconds(3000)) << "the coordinator timeout from the loss";
  EXPECT_EQ(lifecycle_.stage(), Stage::reattaching);
  EXPECT_EQ(lifecycle_.channel_lost(7, running_on(), now_).kind, Kind::none)
      << "one loss, one reattachment";

  lifecycle_.taken_back(8);
  EXPECT_EQ(lifecycle_.stage(), Stage::serving);
  EXPECT_EQ(lifecycle_.channel_lost(7, running_on(), now_).kind, Kind::none);
  EXPECT_EQ(lifecycle_.channel_lost(8, running_on(), now_).kind, Kind::reattach)
      << "the new channel is the served one";
}

TEST_F(GenerationLifecycleTest, AGenerationNoCoordinatorTakesBackEnds) {
  lifecycle_.formed(assignment(3, 2), 7);
  ASSERT_EQ(lifecycle_.channel_lost(7, running_on(), now_).kind, Kind::reattach);
  EXPECT_EQ(lifecycle_.not_taken_back(false).kind, Kind::end_generation);
  EXPECT_EQ(lifecycle_.ended(Status(ErrorCode::aborted, "no coordinator")).previous_rank, 2);
}

TEST_F(GenerationLifecycleTest, AStoppingWorkerActsOnNoLoss) {
  lifecycle_.formed(assignment(3, 2), 7);
  LossFacts stopping = aborted();
  stopping.stopping = true;
  EXPECT_EQ(lifecycle_.channel_lost(7, stopping, now_).kind, Kind::none);
  ASSERT_EQ(lifecycle_.channel_lost(7, running_on(), now_).kind, Kind::reattach);
  EXPECT_EQ(lifecycle_.not_taken_back(true).kind, Kind::none);
}

TEST_F(GenerationLifecycleTest, ACoordinatorLostWhileATableVersionIsUnsettledEndsTheGeneration) {
  lifecycle_.formed(assignment(3, 2), 7);
  LossFacts unsettled;
  unsettled.table_unsettled = true;
  const LifecycleStep lost = lifecycle_.channel_lost(7, unsettled, now_);
  EXPECT_EQ(lost.kind, Kind::end_generation);
  EXPECT_EQ(lost.raise.code(), ErrorCode::aborted);
  EXPECT_EQ(lost.raise.message(),
            "lost the coordinator while it settled a new table version: the ranks may not agree "
            "from which op it runs");
}

TEST(GenerationLifecycle, WithoutRejoinAGenerationThatEndsEndsTheWorker) {
  GenerationLifecycle lifecycle(LifecycleConfig{false, milliseconds(3000)});
  lifecycle.formed(assignment(3, 2), 7);
  const LifecycleStep next = lifecycle.ended(Status(ErrorCode::peer_lost, "rank 1 was lost"));
  EXPECT_EQ(next.kind, Kind::exit);
  EXPECT_EQ(next.failure,
            "worker rank 2: generation 3 ended (rank 1 was lost); not joining again (--no-rejoin)");
  EXPECT_EQ(lifecycle.stage(), Stage::ended);
  EXPECT_EQ(lifecycle.channel_lost(7, aborted(), {}).kind, Kind::none);
}

TEST(GenerationLifecycle, ANextGenerationThatCannotFormEndsTheWorker) {
  GenerationLifecycle lifecycle(LifecycleConfig{true, milliseconds(3000)});
  const LifecycleStep step =
      lifecycle.formation_failed(Status(ErrorCode::unauthenticated, "the coordinator lies"));
  EXPECT_EQ(step.kind, Kind::exit);
  EXPECT_EQ(step.failure, "worker: the coordinator lies");
}

}  // namespace
}  // namespace gradsync::daemon
