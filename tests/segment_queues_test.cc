// The rules that say which segment of an op may move, checked on real schedules with no channel:
// what a later round must wait for, when a round is done, which frames stay unread and which
// received segments are held.
#include "engine/segment_queues.h"

#include <gtest/gtest.h>

#include <vector>

#include "collective/algorithms.h"

namespace gradsync::engine {
namespace {

constexpr std::size_t kFloat = 4;

// Buffers for a schedule, and its queues over them.
struct Queued {
  explicit Queued(Schedule built, std::uint64_t segment_bytes)
      : schedule(std::move(built)),
        data(schedule.size_of(BufferId::data)),
        scratch(schedule.size_of(BufferId::scratch)),
        queues(schedule, schedule.shape.world_size, segment_bytes,
               OpMemory{data.data(), nullptr, scratch.data()}) {}

  Schedule schedule;
  std::vector<std::byte> data;
  std::vector<std::byte> scratch;
  SegmentQueues queues;
};

TEST(SegmentQueues, ASegmentOfALaterRoundWaitsOnlyForTheReceiveThatWritesItsBytes) {
  // Ring all-reduce at p = 2: rank 0 reduces its chunk in round 0 and sends it on in round 1.
  Queued op(ring_allreduce(0, 2, 8, kFloat), 8);
  ASSERT_EQ(op.schedule.rounds.size(), 2u);
  ASSERT_EQ(op.schedule.rounds[1].sends[0].spans[0], op.schedule.rounds[0].recvs[0].spans[0]);
  op.queues.begin_round(0);
  // Each 16-byte message is two segments, and round 1 is queued early behind round 0.
  ASSERT_EQ(op.queues.outgoing(1).size(), 4u);
  ASSERT_EQ(op.queues.incoming(1).size(), 4u);
  op.queues.sent(1);
  op.queues.sent(1);
  EXPECT_EQ(op.queues.outgoing(1).front().round, 1u);
  EXPECT_FALSE(op.queues.may_send_next(1)) << "its bytes are still to be reduced";
  op.queues.received(1);
  EXPECT_TRUE(op.queues.may_send_next(1)) << "its first 8 bytes are final";
}

TEST(SegmentQueues, TheRoundIsDoneOnceNoQueueStartsWithOneOfItsSegments) {
  Queued op(ring_allreduce(0, 2, 8, kFloat), 8);
  op.queues.begin_round(0);
  EXPECT_FALSE(op.queues.round_done());
  op.queues.sent(1);
  op.queues.sent(1);
  op.queues.received(1);
  EXPECT_FALSE(op.queues.round_done());
  op.queues.received(1);
  EXPECT_TRUE(op.queues.round_done());
  op.queues.begin_round(1);
  EXPECT_FALSE(op.queues.round_done());
}

TEST(SegmentQueues, AZeroLengthMessageIsOneEmptySegment) {
  Queued op(ring_allreduce(0, 2, 0, kFloat), 8);
  op.queues.begin_round(0);
  ASSERT_EQ(op.queues.outgoing(1).size(), 1u);
  EXPECT_EQ(op.queues.outgoing(1).front().length, 0u);
  ASSERT_EQ(op.queues.incoming(1).size(), 1u);
  EXPECT_EQ(op.queues.incoming(1).front().length, 0u);
}

TEST(SegmentQueues, WhereEveryMessageIsOneSegmentNoRoundIsQueuedEarly) {
  Queued op(ring_allreduce(0, 2, 8, kFloat), 64);
  op.queues.begin_round(0);
  EXPECT_EQ(op.queues.outgoing(1).size(), 1u);
  EXPECT_TRUE(op.queues.frame_waits(1, 1)) << "round 1 is not queued";
  EXPECT_FALSE(op.queues.frame_waits(1, 0));
  EXPECT_TRUE(op.queues.expects_more_from(1));
}

TEST(SegmentQueues, AFrameOfARoundQueuedEarlyWaitsUntilItsBytesAreFree) {
  // Round 1 receives a copy into the chunk that round 0 sends: not before it is sent.
  Queued op(ring_allreduce(0, 2, 8, kFloat), 8);
  ASSERT_EQ(op.schedule.rounds[1].recvs[0].spans[0], op.schedule.rounds[0].sends[0].spans[0]);
  op.queues.begin_round(0);
  op.queues.received(1);
  op.queues.received(1);
  EXPECT_TRUE(op.queues.frame_waits(1, 1)) << "round 0 still sends the bytes it lands on";
  op.queues.sent(1);
  EXPECT_FALSE(op.queues.frame_waits(1, 1));
}

TEST(SegmentQueues, AReceiveIntoBytesTheSameRoundSendsIsHeldUntilTheyAreOut) {
  // A hypercube exchange at p = 2 reduces what it receives into the very bytes it sends.
  Queued op(hypercube_allreduce(0, 2, 4, kFloat), 64);
  op.queues.begin_round(0);
  const InSegment& received = op.queues.incoming(1).front();
  EXPECT_TRUE(op.queues.lands_on_unsent_bytes(received));
  op.queues.sent(1);
  EXPECT_FALSE(op.queues.lands_on_unsent_bytes(received));
}

TEST(SegmentQueues, APeerNoLaterRoundHearsFromIsExpectedNoMore) {
  Queued op(ring_allreduce(0, 2, 8, kFloat), 64);
  op.queues.begin_round(0);
  op.queues.sent(1);
  op.queues.received(1);
  op.queues.begin_round(1);
  EXPECT_TRUE(op.queues.expects_more_from(1));
  op.queues.received(1);
  EXPECT_FALSE(op.queues.expects_more_from(1));
}

TEST(SegmentQueues, HoldingASegmentMayUnblockMore) {
  Queued op(hypercube_allreduce(0, 2, 4, kFloat), 64);
  op.queues.begin_round(0);
  EXPECT_FALSE(op.queues.may_unblock_more());
  op.queues.hold(1);
  EXPECT_TRUE(op.queues.holding(1));
  EXPECT_TRUE(op.queues.may_unblock_more());
  op.queues.release(1);
  EXPECT_FALSE(op.queues.may_unblock_more());
}

}  // namespace
}  // namespace gradsync::engine
