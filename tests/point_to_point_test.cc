// The point-to-point engine over channels in memory (engine/point_to_point.h): two engines
// exchange messages of several segments, cut at every place by the channels; sizes that differ
// fail both ends naming both; a send that fails before its receive is posted fails the receive
// when it comes; and a hostile peer host's frames are skipped (bytes of a receive that failed,
// which never land in its region) or refused as a protocol error that fails only that host's
// messages (bytes of a receive never posted, past a receive's end or out of order; a ready with a
// payload, or for a rank the host does not hold; an end or an abort for ranks it does not hold; a
// collectives frame).
#include "engine/point_to_point.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <functional>
#include <optional>

#include "support/memory_channels.h"
#include "support/tensor_values.h"

namespace gradsync::engine {
namespace {

using testing::Bytes;

constexpr std::uint64_t kJob = 11;
constexpr std::uint64_t kStream = 22;

PointToPointOptions options_of(int host) {
  PointToPointOptions options;
  options.host = host;
  options.generation = 3;
  options.host_of_rank = {0, 1};  // rank r on host r
  options.segment_bytes = 1000;
  return options;
}

PostedMessage message(std::uint64_t id, Direction direction, Bytes& bytes, std::uint32_t tag = 0,
                      std::uint64_t count = 0) {
  PostedMessage posted;
  posted.id = id;
  posted.direction = direction;
  posted.key = {kJob, kStream, 0, 1, tag};
  posted.dtype = DataType::u8;
  posted.count = count > 0 ? count : bytes.size();
  posted.bytes = bytes.data();
  posted.deadline = net::Deadline::after(std::chrono::seconds(10));
  return posted;
}

// Runs both engines until `done` holds what `until` wants, or ten seconds pass.
void run_until(PointToPointEngine& a, PointToPointEngine& b, std::vector<MessageDone>& done,
               std::size_t until) {
  const auto deadline = net::Deadline::after(std::chrono::seconds(10));
  while (done.size() < until && !deadline.expired()) {
    for (PointToPointEngine* engine : {&a, &b}) {
      engine->progress(-1, net::Deadline::after(std::chrono::milliseconds(1)));
      for (MessageDone& one : engine->take_done()) done.push_back(std::move(one));
    }
  }
}

TEST(PointToPoint, MessagesOfSeveralSegmentsArriveWholeInTheOrderOfTheirTag) {
  testing::MemoryNetwork network(2, {4096, 333});
  PointToPointEngine sender(options_of(0), network.channels_of(0));
  PointToPointEngine receiver(options_of(1), network.channels_of(1));
  Bytes first = testing::pattern(0, 1, 10'000);
  Bytes second = testing::pattern(0, 2, 2'500);
  Bytes empty;
  Bytes into_first(first.size());
  Bytes into_second(second.size());
  Bytes into_empty;
  // The receiver posts tag 2 first; the sender sends tag 1 first.
  receiver.post(message(1, Direction::receive, into_second, 2));
  sender.post(message(2, Direction::send, first, 1));
  sender.post(message(3, Direction::send, second, 2));
  sender.post(message(4, Direction::send, empty, 1));
  receiver.post(message(5, Direction::receive, into_first, 1));
  receiver.post(message(6, Direction::receive, into_empty, 1));
  std::vector<MessageDone> done;
  run_until(sender, receiver, done, 6);
  ASSERT_EQ(done.size(), 6u);
  for (const MessageDone& one : done) EXPECT_TRUE(one.status.ok()) << one.status.to_string();
  EXPECT_EQ(into_first, first);
  EXPECT_EQ(into_second, second);
  EXPECT_EQ(sender.in_flight() + receiver.in_flight(), 0u);
}

// A send whose bytes go out in progress()'s first move is handed back then, not after the wait
// that follows: the caller would answer its client only when the wait ends.
TEST(PointToPoint, AMessageDoneBeforeTheWaitIsHandedBackWithoutWaiting) {
  testing::MemoryNetwork network(2, {});
  PointToPointEngine sender(options_of(0), network.channels_of(0));
  PointToPointEngine receiver(options_of(1), network.channels_of(1));
  Bytes out = testing::pattern(0, 1, 100);
  Bytes in(100);
  receiver.post(message(1, Direction::receive, in));
  receiver.progress(-1, net::Deadline::after(std::chrono::milliseconds(1)));  // the ready goes
  sender.progress(-1, net::Deadline::after(std::chrono::milliseconds(100)));  // and comes
  sender.post(message(2, Direction::send, out));
  const auto began = std::chrono::steady_clock::now();
  sender.progress(-1, net::Deadline::after(std::chrono::seconds(30)));
  EXPECT_LT(std::chrono::steady_clock::now() - began, std::chrono::seconds(15));
  const std::vector<MessageDone> done = sender.take_done();
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].status.ok()) << done[0].status.to_string();
}

// A send that fails before its receive is posted fails the receive at once when it comes.
TEST(PointToPoint, ASendThatFailedBeforeItsReceiveWasPostedFailsTheReceiveAtOnce) {
  testing::MemoryNetwork network(2, {});
  PointToPointEngine sender(options_of(0), network.channels_of(0));
  PointToPointEngine receiver(options_of(1), network.channels_of(1));
  Bytes out(10);
  PostedMessage send = message(1, Direction::send, out);
  send.deadline = net::Deadline::after(std::chrono::milliseconds(50));
  sender.post(send);
  std::vector<MessageDone> done;
  run_until(sender, receiver, done, 1);                                        // the send times out
  sender.progress(-1, net::Deadline::after(std::chrono::milliseconds(10)));    // its abort goes
  receiver.progress(-1, net::Deadline::after(std::chrono::milliseconds(10)));  // and comes
  Bytes in(10);
  receiver.post(message(2, Direction::receive, in));
  const std::vector<MessageDone> refused = receiver.take_done();
  ASSERT_EQ(refused.size(), 1u);
  EXPECT_EQ(refused[0].status.code(), ErrorCode::deadline_exceeded);
  EXPECT_NE(refused[0].status.message().find("rank 1 has not posted the receive"),
            std::string::npos)
      << refused[0].status.message();
}

TEST(PointToPoint, SizesThatDifferFailBothEndsNamingBoth) {
  testing::MemoryNetwork network(2, {});
  PointToPointEngine sender(options_of(0), network.channels_of(0));
  PointToPointEngine receiver(options_of(1), network.channels_of(1));
  Bytes out(4);
  Bytes in(8);
  sender.post(message(1, Direction::send, out));
  receiver.post(message(2, Direction::receive, in));
  std::vector<MessageDone> done;
  run_until(sender, receiver, done, 2);
  ASSERT_EQ(done.size(), 2u);
  for (const MessageDone& one : done) {
    EXPECT_EQ(one.status.code(), ErrorCode::mismatch);
    EXPECT_NE(one.status.message().find("rank 0 sends 4 u8, rank 1 receives 8 u8"),
              std::string::npos)
        << one.status.message();
  }
}

// Host 0's engine, with a receive from rank 1 posted, and the raw channels of host 1 to feed it
// frames as a hostile peer would.
class HostilePeer : public ::testing::Test {
 protected:
  HostilePeer()
      : network_(2, {}),
        engine_(options_of(0), network_.channels_of(0)),
        peer_(network_.channels_of(1)) {}

  // A receive on host 0 from rank 1 (the key's ranks swapped: rank 1 sends to rank 0).
  void post_receive(std::uint64_t id, Bytes& into) {
    PostedMessage posted = message(id, Direction::receive, into);
    posted.key.sender = 1;
    posted.key.receiver = 0;
    engine_.post(posted);
  }

  FrameHeader header(FrameKind kind, std::uint64_t number = 1) const {
    FrameHeader header;
    header.kind = kind;
    header.generation = 3;
    header.op = {kJob, kStream, number};
    header.descriptor.root = 1;  // the sender
    header.op_count = 0;         // the receiver
    header.descriptor.dtype = DataType::u8;
    return header;
  }

  void send_frame(FrameHeader header, const Bytes& payload) {
    header.length = payload.size();
    const EncodedHeader bytes = encode(header);
    ASSERT_TRUE(
        net::send_all(*peer_, 0, bytes, net::Deadline::after(std::chrono::seconds(1))).ok());
    ASSERT_TRUE(
        net::send_all(*peer_, 0, payload, net::Deadline::after(std::chrono::seconds(1))).ok());
  }

  std::vector<MessageDone> progress_until(std::size_t until) {
    std::vector<MessageDone> done;
    const auto deadline = net::Deadline::after(std::chrono::seconds(5));
    while (done.size() < until && !deadline.expired()) {
      engine_.progress(-1, net::Deadline::after(std::chrono::milliseconds(1)));
      for (MessageDone& one : engine_.take_done()) done.push_back(std::move(one));
    }
    return done;
  }

  testing::MemoryNetwork network_;
  PointToPointEngine engine_;
  std::unique_ptr<net::DataChannels> peer_;
};

// Fails the test unless exactly one message is done, failed with `code` and a reason holding
// `text`.
void expect_one_failure(const std::vector<MessageDone>& done, ErrorCode code,
                        const std::string& text) {
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status.code(), code) << done[0].status.to_string();
  EXPECT_NE(done[0].status.message().find(text), std::string::npos) << done[0].status.message();
}

TEST_F(HostilePeer, BytesOfAFailedReceiveAreSkippedAndNeverLandInItsRegion) {
  Bytes failing(10'000, std::byte{0xCD});
  PostedMessage posted = message(1, Direction::receive, failing);
  posted.key.sender = 1;
  posted.key.receiver = 0;
  posted.deadline = net::Deadline::after(std::chrono::milliseconds(100));
  engine_.post(posted);
  FrameHeader bytes = header(FrameKind::message);
  bytes.descriptor.count = 10'000;
  bytes.length = 10'000;
  // Half the frame, then the receive's deadline passes while the other half is due.
  const EncodedHeader head = encode(bytes);
  const auto soon = net::Deadline::after(std::chrono::seconds(1));
  ASSERT_TRUE(net::send_all(*peer_, 0, head, soon).ok());
  ASSERT_TRUE(net::send_all(*peer_, 0, Bytes(5'000, std::byte{1}), soon).ok());
  expect_one_failure(progress_until(1), ErrorCode::deadline_exceeded, "5000 of 10000 bytes came");
  ASSERT_TRUE(net::send_all(*peer_, 0, Bytes(5'000, std::byte{2}), soon).ok());
  // The next message of the key lands whole; the failed one's second half went nowhere.
  Bytes into(100);
  post_receive(2, into);
  FrameHeader next = header(FrameKind::message, 2);
  next.descriptor.count = 100;
  send_frame(next, testing::pattern(1, 0, 100));
  const std::vector<MessageDone> done = progress_until(1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_TRUE(done[0].status.ok()) << done[0].status.to_string();
  EXPECT_EQ(into, testing::pattern(1, 0, 100));
  EXPECT_EQ(std::count(failing.begin() + 5'000, failing.end(), std::byte{0xCD}), 5'000);
}

TEST_F(HostilePeer, BytesOfAReceiveNeverPostedAreAProtocolError) {
  Bytes into(100);
  post_receive(1, into);
  FrameHeader unasked = header(FrameKind::message, 7);
  unasked.descriptor.count = 100;
  send_frame(unasked, Bytes(100, std::byte{9}));
  expect_one_failure(progress_until(1), ErrorCode::peer_lost,
                     "whose receive this host has not posted");
}

TEST_F(HostilePeer, AReadyWithAPayloadIsAProtocolError) {
  Bytes into(10);
  post_receive(1, into);
  FrameHeader ready = header(FrameKind::ready);
  ready.descriptor.root = 0;  // rank 0, here, sends rank 1 a message
  ready.op_count = 1;
  send_frame(ready, Bytes(8));
  expect_one_failure(progress_until(1), ErrorCode::peer_lost, "a ready with 8 bytes of payload");
}

TEST_F(HostilePeer, AnEndForARankTheHostDoesNotHoldIsAProtocolError) {
  Bytes into(10);
  post_receive(1, into);
  FrameHeader end = header(FrameKind::end);
  end.descriptor.root = 0;  // rank 0 is this host's
  send_frame(end, Bytes(3));
  expect_one_failure(progress_until(1), ErrorCode::peer_lost, "an end for rank 0");
}

TEST_F(HostilePeer, AnAbortOfAMessageThatIsNotBetweenItsRanksAndOursIsAProtocolError) {
  Bytes into(10);
  post_receive(1, into);
  FrameHeader abort = header(FrameKind::abort);
  abort.descriptor.root = 0;  // from rank 0 to rank 0: both this host's
  abort.segment = static_cast<std::uint32_t>(ErrorCode::aborted);
  send_frame(abort, Bytes(3));
  expect_one_failure(progress_until(1), ErrorCode::peer_lost,
                     "which is not between that host's ranks and this host's");
}

TEST_F(HostilePeer, BytesPastTheReceivesEndFailItsHostsMessagesAsAProtocolError) {
  Bytes into(100);
  post_receive(1, into);
  FrameHeader bytes = header(FrameKind::message);
  bytes.descriptor.count = 100;
  bytes.offset = 50;  // not the next byte the receive waits for
  send_frame(bytes, Bytes(100));
  const std::vector<MessageDone> done = progress_until(1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status.code(), ErrorCode::peer_lost);
  EXPECT_NE(done[0].status.message().find("where this rank waits for byte 0 of 100 u8"),
            std::string::npos)
      << done[0].status.message();
}

TEST_F(HostilePeer, AReadyForARankTheHostDoesNotHoldIsAProtocolError) {
  Bytes into(10);
  post_receive(1, into);
  FrameHeader ready = header(FrameKind::ready);
  ready.descriptor.root = 1;  // rank 1, on the peer's host, as the sender of a ready to host 0
  ready.op_count = 0;
  send_frame(ready, {});
  const std::vector<MessageDone> done = progress_until(1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status.code(), ErrorCode::peer_lost);
  EXPECT_NE(done[0].status.message().find("which is not from that host's rank to this host's"),
            std::string::npos)
      << done[0].status.message();
}

TEST_F(HostilePeer, ACollectivesFrameOnThisLaneIsAProtocolError) {
  Bytes into(10);
  post_receive(1, into);
  send_frame(header(FrameKind::data), Bytes(10));
  const std::vector<MessageDone> done = progress_until(1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status.code(), ErrorCode::peer_lost);
  EXPECT_NE(done[0].status.message().find("a collectives frame on a point-to-point connection"),
            std::string::npos)
      << done[0].status.message();
}

TEST_F(HostilePeer, AMessageWhoseDeadlinePassesSaysWhatItWaitedFor) {
  Bytes into(10);
  PostedMessage posted = message(1, Direction::receive, into);
  posted.key.sender = 1;
  posted.key.receiver = 0;
  posted.deadline = net::Deadline::after(std::chrono::milliseconds(50));
  engine_.post(posted);
  const std::vector<MessageDone> done = progress_until(1);
  ASSERT_EQ(done.size(), 1u);
  EXPECT_EQ(done[0].status.code(), ErrorCode::deadline_exceeded);
  EXPECT_NE(done[0].status.message().find("rank 1 has not sent it"), std::string::npos)
      << done[0].status.message();
}

}  // namespace
}  // namespace gradsync::engine
