// The simulator must catch every way a schedule can be wrong, with a message that says where.
#include <gtest/gtest.h>

#include "collective/algorithms.h"
#include "collective/simulator.h"
#include "collective/validate.h"

namespace gradsync {
namespace {

class SimulatorErrors : public ::testing::Test {
 protected:
  // A correct ring all-reduce of 8 f32 over 4 ranks, for the tests to break.
  void SetUp() override {
    schedules_ = build_all_ranks({Collective::allreduce, 4, 8, 4}, Algorithm::ring);
    buffers_.resize(4);
    for (auto& rank : buffers_) rank.data.assign(32, std::byte{1});
  }

  Status simulate_all() {
    return simulate(schedules_, buffers_, DataType::f32, ReduceOp::sum).status;
  }

  std::vector<Schedule> schedules_;
  std::vector<RankBuffers> buffers_;
};

TEST_F(SimulatorErrors, TheUnbrokenScheduleRuns) { EXPECT_TRUE(simulate_all().ok()); }

TEST_F(SimulatorErrors, AReceiveThatNoSendMatches) {
  schedules_[0].rounds[2].sends.clear();  // rank 0 stops sending to rank 1 in round 2
  const Status status = simulate_all();
  EXPECT_EQ(status.message(), "round 2: rank 1 expects a message from rank 0, which sends it none");
}

TEST_F(SimulatorErrors, ASendThatNobodyReceives) {
  schedules_[1].rounds[0].recvs.clear();
  EXPECT_EQ(simulate_all().message(),
            "round 0: rank 0 sends 8 bytes to rank 1, which does not receive them");
}

TEST_F(SimulatorErrors, LengthsThatDiffer) {
  schedules_[3].rounds[1].recvs[0].spans[0].length = 4;
  EXPECT_EQ(simulate_all().message(),
            "round 1: rank 3 expects a message from rank 2 of 4 bytes, which sends 8");
}

TEST_F(SimulatorErrors, ASpanOutsideItsBuffer) {
  schedules_[2].rounds[4].sends[0].spans[0].offset = 32;
  EXPECT_EQ(simulate_all().message(),
            "rank 2: round 4: a send from data[32, 40) lies outside the 32-byte data buffer");
}

TEST_F(SimulatorErrors, ASpanThatSplitsAnElement) {
  schedules_[2].rounds[0].recvs[0].spans[0].offset = 2;
  EXPECT_EQ(simulate_all().message(),
            "rank 2: round 0: a receive into data[2, 10) splits an element of 4 bytes");
}

TEST_F(SimulatorErrors, APeerOutsideTheGroup) {
  schedules_[1].rounds[0].sends[0].peer = 4;
  EXPECT_EQ(simulate_all().message(), "rank 1: round 0: peer 4 is not a rank of a group of 4");
}

// Rank 0's round 3 sends data[0, 8): a receive may land there only at its message's offset 0.
TEST_F(SimulatorErrors, AReceiveOntoWhatTheRoundSendsAtAnotherOffset) {
  Round& round = schedules_[0].rounds[3];
  round.recvs[0].spans[0] = {BufferId::data, 4, 8};
  EXPECT_EQ(simulate_all().message(),
            "rank 0: round 3: a receive lands on data[4, 12), which the round sends, at another "
            "offset of its message than it is sent from");
}

TEST_F(SimulatorErrors, RanksThatEndWithDifferentResults) {
  // Rank 1 drops its last all-gather receive and rank 0 the matching send: every transfer still
  // matches, but rank 1 keeps a stale chunk.
  schedules_[0].rounds[5].sends.clear();
  schedules_[1].rounds[5].recvs.clear();
  EXPECT_EQ(simulate_all().message(),
            "rank 1 ends with a result that differs from rank 0's at byte 16");
}

TEST_F(SimulatorErrors, RankCountsThatDisagree) {
  schedules_[3].rounds.pop_back();
  EXPECT_EQ(simulate_all().message(), "rank 3 has 5 rounds, rank 0 has 6");
}

TEST_F(SimulatorErrors, SchedulesForAnotherOp) {
  schedules_[2] = build_schedule({Collective::allreduce, 4, 8, 4}, Algorithm::hypercube, 2);
  EXPECT_EQ(simulate_all().message(), "rank 2's schedule is for another op than rank 0's");
}

TEST_F(SimulatorErrors, BuffersOfTheWrongSize) {
  buffers_[1].data.resize(28);
  EXPECT_EQ(simulate_all().message(), "rank 1's buffers are not the size its schedule needs");
}

TEST(Validate, AResultOutsideTheBuffer) {
  Schedule schedule = build_schedule({Collective::allreduce, 2, 2, 4}, Algorithm::ring, 0);
  schedule.result.length = 12;
  EXPECT_EQ(validate(schedule).message(),
            "rank 0: after the last round: the result data[0, 12) lies outside the 8-byte data "
            "buffer");
}

}  // namespace
}  // namespace gradsync
