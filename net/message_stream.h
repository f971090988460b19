// Control messages on a stream socket: a 4-byte little-endian length, then a serialized protobuf.
// The length is checked against a hard limit before anything is allocated, and a unix socket can
// carry one file descriptor with a message (a client's shared-memory region).
#pragma once

#include <cstddef>
#include <cstdint>
#include <deque>
#include <string>
#include <vector>

#include "collective/status.h"
#include "net/deadline.h"
#include "net/unique_fd.h"

namespace google::protobuf {
class MessageLite;
}

namespace gradsync::net {

inline constexpr std::uint32_t kMaxControlMessageBytes = 1 << 20;

// The message as it goes on the wire: length prefix and body; fails past the size limit.
Status frame_message(const google::protobuf::MessageLite& message, std::string& framed);

Status send_message(int fd, const google::protobuf::MessageLite& message, Deadline deadline,
                    int attached_fd = -1);

// Reads the control messages of one stream socket through a buffer: a message, and any queued
// behind it, comes in one wait and one read, where reading the prefix and the body apart costs
// four system calls (about a microsecond each on a virtual machine). The reader owns what it has
// buffered, so a socket has exactly one reader for its whole life.
class MessageReader {
 public:
  explicit MessageReader(int fd) : fd_(fd) {}

  // ErrorCode::protocol_error for an oversized or unparsable message; `attached` (if given)
  // receives a descriptor sent with the message.
  Status receive(google::protobuf::MessageLite& message, Deadline deadline,
                 UniqueFd* attached = nullptr);
  // Whether bytes of a next message are already read: an event loop must not wait for the
  // socket before it has taken them.
  bool buffered() const { return begin_ != end_; }

 private:
  // A descriptor and where it came: the kernel ends a read with the message that carried one,
  // so it belongs to the message holding the last byte of that read (a stream offset).
  struct Descriptor {
    std::uint64_t last_byte;
    UniqueFd fd;
  };

  Status read_more(std::size_t wanted, Deadline deadline);
  std::uint64_t stream_offset(std::size_t index) const { return bytes_read_ - (end_ - index); }

  int fd_;
  std::vector<std::byte> buffer_;
  std::size_t begin_ = 0;  // the unconsumed bytes are [begin_, end_)
  std::size_t end_ = 0;
  std::uint64_t bytes_read_ = 0;
  std::deque<Descriptor> descriptors_;
};

}  // namespace gradsync::net
