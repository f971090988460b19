// Control messages through MessageReader over a unix socket pair: several messages per read, a
// descriptor that arrives behind other messages, and the bad streams a peer can send.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <unistd.h>

#include <array>
#include <span>
#include <string>
#include <thread>

#include "gradsync.pb.h"
#include "net/message_stream.h"
#include "net/socket.h"

namespace gradsync::net {
namespace {

struct SocketPair {
  UniqueFd writer;
  UniqueFd reader;
};

SocketPair socket_pair() {
  int fds[2];
  EXPECT_EQ(::socketpair(AF_UNIX, SOCK_STREAM | SOCK_NONBLOCK | SOCK_CLOEXEC, 0, fds), 0);
  return {UniqueFd(fds[0]), UniqueFd(fds[1])};
}

Deadline soon() { return Deadline::after(std::chrono::seconds(5)); }

proto::ClientToDaemon attach(std::uint64_t region_id) {
  proto::ClientToDaemon message;
  message.mutable_attach()->set_region_id(region_id);
  return message;
}

ino_t inode_of(int fd) {
  struct stat info {};
  EXPECT_EQ(::fstat(fd, &info), 0);
  return info.st_ino;
}

TEST(MessageReader, ReturnsQueuedMessagesInOrderWithTheirDescriptors) {
  SocketPair pair = socket_pair();
  int pipe_fds[2];
  ASSERT_EQ(::pipe(pipe_fds), 0);
  UniqueFd pipe_read(pipe_fds[0]);
  UniqueFd pipe_write(pipe_fds[1]);
  // All four are queued before the first read: the second carries a descriptor.
  ASSERT_TRUE(send_message(pair.writer.get(), attach(1), soon()).ok());
  ASSERT_TRUE(send_message(pair.writer.get(), attach(2), soon(), pipe_read.get()).ok());
  ASSERT_TRUE(send_message(pair.writer.get(), attach(3), soon()).ok());
  ASSERT_TRUE(send_message(pair.writer.get(), attach(4), soon()).ok());

  MessageReader reader(pair.reader.get());
  for (std::uint64_t id = 1; id <= 4; ++id) {
    proto::ClientToDaemon message;
    UniqueFd attached;
    ASSERT_TRUE(reader.receive(message, soon(), &attached).ok()) << id;
    EXPECT_EQ(message.attach().region_id(), id);
    EXPECT_EQ(attached.valid(), id == 2) << id;
    if (attached.valid()) {
      EXPECT_EQ(inode_of(attached.get()), inode_of(pipe_read.get()));
    }
  }
}

TEST(MessageReader, AssemblesAMessageLargerThanOneRead) {
  SocketPair pair = socket_pair();
  proto::ClientToDaemon big;
  big.mutable_submit()->set_name(std::string(200'000, 'x'));
  std::thread writer([&] { EXPECT_TRUE(send_message(pair.writer.get(), big, soon()).ok()); });
  MessageReader reader(pair.reader.get());
  proto::ClientToDaemon message;
  ASSERT_TRUE(reader.receive(message, soon()).ok());
  writer.join();
  EXPECT_EQ(message.submit().name(), big.submit().name());
}

// What a reader makes of `bytes` written raw into a fresh socket, the writer closed after them
// or left silently open.
Status receive_after_raw_bytes(std::span<const std::byte> bytes, bool close_writer,
                               Deadline deadline = soon()) {
  SocketPair pair = socket_pair();
  EXPECT_TRUE(write_all(pair.writer.get(), bytes, soon()).ok());
  if (close_writer) pair.writer.reset();
  proto::ClientToDaemon message;
  return MessageReader(pair.reader.get()).receive(message, deadline);
}

TEST(MessageReader, RejectsAnOversizedPrefixBeforeReadingTheBody) {
  const std::array<std::byte, 4> prefix = {std::byte{0xff}, std::byte{0xff}, std::byte{0xff},
                                           std::byte{0x7f}};
  const Status status = receive_after_raw_bytes(prefix, false);
  EXPECT_EQ(status.code(), ErrorCode::protocol_error);
  EXPECT_NE(status.message().find("the limit is"), std::string::npos) << status.message();
}

TEST(MessageReader, NamesABodyThatDoesNotParse) {
  const std::array<std::byte, 7> framed = {std::byte{3},   std::byte{0},    std::byte{0},
                                           std::byte{0},   std::byte{0xff}, std::byte{0xff},
                                           std::byte{0xff}};
  const Status status = receive_after_raw_bytes(framed, false);
  EXPECT_EQ(status.code(), ErrorCode::protocol_error);
  EXPECT_NE(status.message().find("3 bytes does not parse"), std::string::npos) << status.message();
}

TEST(MessageReader, ReportsAStreamClosedMidMessageAndASilentOne) {
  const std::array<std::byte, 6> half = {std::byte{9}, std::byte{0},    std::byte{0},
                                         std::byte{0}, std::byte{0x0a}, std::byte{0x00}};
  EXPECT_EQ(receive_after_raw_bytes(half, true).code(), ErrorCode::peer_lost);
  EXPECT_EQ(
      receive_after_raw_bytes({}, false, Deadline::after(std::chrono::milliseconds(50))).code(),
      ErrorCode::deadline_exceeded);
}

}  // namespace
}  // namespace gradsync::net
