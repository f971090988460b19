#include "net/message_stream.h"

#include <google/protobuf/message_lite.h>
#include <poll.h>
#include <sys/socket.h>

#include <algorithm>
#include <array>
#include <cerrno>
#include <cstring>
#include <string>
#include <vector>

#include "net/socket.h"

namespace gradsync::net {

namespace {

constexpr std::size_t kLengthPrefixBytes = 4;

std::array<std::byte, kLengthPrefixBytes> encode_length(std::uint32_t length) {
  return {std::byte(length & 0xff), std::byte((length >> 8) & 0xff),
          std::byte((length >> 16) & 0xff), std::byte((length >> 24) & 0xff)};
}

std::uint32_t decode_length(const std::array<std::byte, kLengthPrefixBytes>& bytes) {
  return std::to_integer<std::uint32_t>(bytes[0]) | std::to_integer<std::uint32_t>(bytes[1]) << 8 |
         std::to_integer<std::uint32_t>(bytes[2]) << 16 |
         std::to_integer<std::uint32_t>(bytes[3]) << 24;
}

// Room for the one descriptor a message may carry.
struct ControlBuffer {
  alignas(cmsghdr) char bytes[CMSG_SPACE(sizeof(int))] = {};
};

msghdr message_over(iovec& part, ControlBuffer& control) {
  msghdr header{};
  header.msg_iov = &part;
  header.msg_iovlen = 1;
  header.msg_control = control.bytes;
  header.msg_controllen = sizeof control.bytes;
  return header;
}

// Sends `bytes` with the descriptor as SCM_RIGHTS ancillary data on the first byte.
Status send_with_fd(int fd, std::span<const std::byte> bytes, int attached_fd, Deadline deadline) {
  iovec part{const_cast<std::byte*>(bytes.data()), bytes.size()};
  ControlBuffer control;
  msghdr header = message_over(part, control);
  cmsghdr* entry = CMSG_FIRSTHDR(&header);
  entry->cmsg_level = SOL_SOCKET;
  entry->cmsg_type = SCM_RIGHTS;
  entry->cmsg_len = CMSG_LEN(sizeof(int));
  std::memcpy(CMSG_DATA(entry), &attached_fd, sizeof(int));
  while (true) {
    const ssize_t sent = ::sendmsg(fd, &header, MSG_NOSIGNAL);
    if (sent > 0) return write_all(fd, bytes.subspan(static_cast<std::size_t>(sent)), deadline);
    if (errno != EAGAIN && errno != EINTR) {
      return Status(ErrorCode::peer_lost, std::string("cannot send: ") + std::strerror(errno));
    }
    pollfd wait{fd, POLLOUT, 0};
    if (::poll(&wait, 1, deadline.poll_timeout_ms()) == 0) {
      return Status(ErrorCode::deadline_exceeded, "sending timed out");
    }
  }
}

}  // namespace

Status frame_message(const google::protobuf::MessageLite& message, std::string& framed) {
  // The prefix and the body go out in one write, so that the reader wakes once per message.
  framed.assign(kLengthPrefixBytes, '\0');
  message.AppendToString(&framed);
  const std::size_t body_bytes = framed.size() - kLengthPrefixBytes;
  if (body_bytes > kMaxControlMessageBytes) {
    return Status(ErrorCode::internal,
                  "control message of " + std::to_string(body_bytes) + " bytes exceeds the limit");
  }
  const auto prefix = encode_length(static_cast<std::uint32_t>(body_bytes));
  std::memcpy(framed.data(), prefix.data(), prefix.size());
  return {};
}

Status send_message(int fd, const google::protobuf::MessageLite& message, Deadline deadline,
                    int attached_fd) {
  std::string framed;
  if (Status status = frame_message(message, framed); !status.ok()) return status;
  const auto bytes = std::as_bytes(std::span(framed.data(), framed.size()));
  return attached_fd >= 0 ? send_with_fd(fd, bytes, attached_fd, deadline)
                          : write_all(fd, bytes, deadline);
}

Status MessageReader::receive(google::protobuf::MessageLite& message, Deadline deadline,
                              UniqueFd* attached) {
  while (true) {
    const std::size_t available = end_ - begin_;
    std::size_t wanted = kLengthPrefixBytes;
    if (available >= kLengthPrefixBytes) {
      std::array<std::byte, kLengthPrefixBytes> prefix;
      std::memcpy(prefix.data(), buffer_.data() + begin_, prefix.size());
      const std::uint32_t length = decode_length(prefix);
      if (length > kMaxControlMessageBytes) {
        return Status(ErrorCode::protocol_error,
                      "a control message claims " + std::to_string(length) +
                          " bytes; the limit is " + std::to_string(kMaxControlMessageBytes));
      }
      wanted = kLengthPrefixBytes + length;
      if (available >= wanted) {
        const std::uint64_t first = stream_offset(begin_);
        while (!descriptors_.empty() && descriptors_.front().last_byte < first + wanted) {
          // Closed unless the caller wants it; one that came with an earlier message was not
          // wanted by it either.
          UniqueFd owned = std::move(descriptors_.front().fd);
          const bool ours = descriptors_.front().last_byte >= first;
          descriptors_.pop_front();
          if (ours && attached != nullptr) *attached = std::move(owned);
        }
        const bool parsed = message.ParseFromArray(buffer_.data() + begin_ + kLengthPrefixBytes,
                                                   static_cast<int>(length));
        begin_ += wanted;
        if (!parsed) {
          return Status(ErrorCode::protocol_error,
                        "a control message of " + std::to_string(length) + " bytes does not parse");
        }
        return {};
      }
    }
    if (Status status = read_more(wanted, deadline); !status.ok()) return status;
  }
}

// Waits, then reads what the socket has into the buffer, which has room for at least the
// `wanted` bytes the next message needs.
Status MessageReader::read_more(std::size_t wanted, Deadline deadline) {
  constexpr std::size_t kMinimumRead = 4 << 10;
  // (memmove from an empty vector's null data would be undefined, even for no bytes.)
  if (begin_ != end_) std::memmove(buffer_.data(), buffer_.data() + begin_, end_ - begin_);
  end_ -= begin_;
  begin_ = 0;
  buffer_.resize(std::max({buffer_.size(), wanted, kMinimumRead}));
  // A deadline already passed means "only what is there": a caller woken by its event loop
  // reads at once, where a poll first would cost it a system call per message.
  bool may_have_data = deadline.expired();
  while (true) {
    if (!may_have_data && !wait_readable(fd_, deadline)) {
      return Status(ErrorCode::deadline_exceeded, "no message arrived in time");
    }
    may_have_data = false;
    iovec part{buffer_.data() + end_, buffer_.size() - end_};
    ControlBuffer control;
    msghdr header = message_over(part, control);
    const ssize_t got = ::recvmsg(fd_, &header, MSG_CMSG_CLOEXEC | MSG_DONTWAIT);
    if (got == 0) return Status(ErrorCode::peer_lost, "connection closed by the other side");
    if (got < 0) {
      if (errno != EAGAIN && errno != EINTR) {
        return Status(ErrorCode::peer_lost,
                      std::string("connection lost: ") + std::strerror(errno));
      }
      if (deadline.expired()) {
        return Status(ErrorCode::deadline_exceeded, "no message arrived in time");
      }
      continue;
    }
    end_ += static_cast<std::size_t>(got);
    bytes_read_ += static_cast<std::uint64_t>(got);
    for (cmsghdr* entry = CMSG_FIRSTHDR(&header); entry != nullptr;
         entry = CMSG_NXTHDR(&header, entry)) {
      if (entry->cmsg_level == SOL_SOCKET && entry->cmsg_type == SCM_RIGHTS) {
        int received = -1;
        std::memcpy(&received, CMSG_DATA(entry), sizeof(int));
        descriptors_.push_back({bytes_read_ - 1, UniqueFd(received)});
      }
    }
    return {};
  }
}

}  // namespace gradsync::net
