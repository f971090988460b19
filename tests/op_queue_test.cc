// The op queue between a client and its daemon: ops and results pass in order, each side learns
// when the other sleeps, and the daemon's end refuses a count of published ops that it cannot
// follow and never reads past a name's slot.
#include "net/op_queue.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cstring>
#include <memory>
#include <string>

namespace gradsync::net {
namespace {

struct Queue {
  Queue() : memory(std::make_unique<OpQueueLayout>()), client(bytes()), daemon(bytes()) {}
  std::byte* bytes() { return reinterpret_cast<std::byte*>(memory.get()); }
  std::unique_ptr<OpQueueLayout> memory;  // value-initialised: all counters and flags 0
  OpQueueClientEnd client;
  OpQueueDaemonEnd daemon;
};

QueuedOp op_with_id(std::uint64_t id) {
  QueuedOp op{};
  op.request_id = id;
  return op;
}

TEST(OpQueue, OpsAndResultsPassInOrderAroundTheSlotsMoreThanOnce) {
  Queue queue;
  constexpr std::uint64_t kOps = 3 * kOpQueueSlots + 5;
  std::uint64_t answered = 0;
  for (std::uint64_t id = 1; id <= kOps; ++id) {
    EXPECT_FALSE(queue.client.publish(op_with_id(id)));  // the daemon is awake
    QueuedOp taken{};
    bool got = false;
    ASSERT_TRUE(queue.daemon.take(taken, got).ok());
    ASSERT_TRUE(got);
    EXPECT_EQ(taken.request_id, id);
    EXPECT_FALSE(queue.daemon.publish({id, 0, 2, 1.5}));  // the client is awake
    queue.client.take_results([&](const QueuedResult& result) {
      EXPECT_EQ(result.request_id, ++answered);
      EXPECT_EQ(result.algorithm, 2);
    });
  }
  EXPECT_EQ(answered, kOps);
  QueuedOp none{};
  bool got = true;
  EXPECT_TRUE(queue.daemon.take(none, got).ok());
  EXPECT_FALSE(got);
  EXPECT_FALSE(queue.daemon.has_ops());
}

// Once per sleep: the first publication after a side raised its flag rings, the next does not.
TEST(OpQueue, EachSideRingsOnceWhenTheOtherSaidItSleeps) {
  Queue queue;
  queue.daemon.set_asleep(true);
  EXPECT_TRUE(queue.client.publish(op_with_id(1)));
  EXPECT_FALSE(queue.client.publish(op_with_id(2)));
  EXPECT_TRUE(queue.daemon.has_ops());  // seen after the flag: the daemon wakes on its own too
  queue.daemon.set_asleep(false);
  EXPECT_FALSE(queue.client.publish(op_with_id(3)));

  queue.client.fall_asleep();
  EXPECT_TRUE(queue.daemon.publish({1, 0, 0, 0}));
  EXPECT_FALSE(queue.daemon.publish({2, 0, 0, 0}));
  EXPECT_FALSE(queue.client.wake());  // the daemon took the flag down: a doorbell is coming
  queue.client.fall_asleep();
  EXPECT_TRUE(queue.client.wake());  // nothing published meanwhile: no doorbell
  EXPECT_FALSE(queue.daemon.publish({3, 0, 0, 0}));
}

TEST(OpQueue, TheClientWaitsWhenEverySlotHoldsAnOpNotAnswered) {
  Queue queue;
  for (std::uint64_t id = 1; id <= kOpQueueSlots; ++id) {
    EXPECT_FALSE(queue.client.full());
    queue.client.publish(op_with_id(id));
  }
  EXPECT_TRUE(queue.client.full());
  QueuedOp taken{};
  bool got = false;
  ASSERT_TRUE(queue.daemon.take(taken, got).ok());
  queue.daemon.publish({taken.request_id, 0, 0, 0});
  EXPECT_TRUE(queue.client.full());  // until the client has read the result
  queue.client.take_results([](const QueuedResult&) {});
  EXPECT_FALSE(queue.client.full());
}

// A hostile client writes the counter itself: ahead by more than the slots, or behind what the
// daemon has taken. Either would have the daemon read slots nobody wrote, or ops without end.
TEST(OpQueue, ACountOfPublishedOpsTheDaemonCannotFollowIsRefused) {
  for (const std::uint64_t published :
       {std::uint64_t{kOpQueueSlots + 1}, std::uint64_t{1} << 40, ~std::uint64_t{0}}) {
    Queue queue;
    std::atomic_ref(queue.memory->submitted).store(published);
    QueuedOp op{};
    bool got = true;
    const Status refused = queue.daemon.take(op, got);
    EXPECT_EQ(refused.code(), ErrorCode::protocol_error);
    EXPECT_NE(refused.message().find("ops published where the daemon has taken 0"),
              std::string::npos)
        << refused.message();
    EXPECT_FALSE(got);
  }
  // Behind: two taken, then the client says one.
  Queue queue;
  queue.client.publish(op_with_id(1));
  queue.client.publish(op_with_id(2));
  QueuedOp op{};
  bool got = false;
  ASSERT_TRUE(queue.daemon.take(op, got).ok());
  ASSERT_TRUE(queue.daemon.take(op, got).ok());
  std::atomic_ref(queue.memory->submitted).store(1);
  EXPECT_EQ(queue.daemon.take(op, got).code(), ErrorCode::protocol_error);
}

TEST(OpQueue, ANameThatFillsItsSlotIsCutInsideIt) {
  Queue queue;
  QueuedOp op = op_with_id(1);
  std::memset(op.name, 'x', sizeof op.name);  // no terminating NUL
  queue.client.publish(op);
  QueuedOp taken{};
  bool got = false;
  ASSERT_TRUE(queue.daemon.take(taken, got).ok());
  EXPECT_EQ(std::string(taken.name), std::string(kQueuedNameBytes - 1, 'x'));
}

}  // namespace
}  // namespace gradsync::net
