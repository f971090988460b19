#include "net/message_stream.h"

#include <google/protobuf/message_lite.h>
#include <poll.h>
#include <sys/socket.h>

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

// Reads the length prefix, picking up a descriptor that came with its first byte.
Status receive_prefix(int fd, std::array<std::byte, kLengthPrefixBytes>& prefix, Deadline deadline,
                      UniqueFd* attached) {
  std::size_t have = 0;
  while (have < prefix.size()) {
    iovec part{prefix.data() + have, prefix.size() - have};
    ControlBuffer control;
    msghdr header = message_over(part, control);
    const ssize_t got = ::recvmsg(fd, &header, MSG_CMSG_CLOEXEC);
    if (got > 0) {
      for (cmsghdr* entry = CMSG_FIRSTHDR(&header); entry != nullptr;
           entry = CMSG_NXTHDR(&header, entry)) {
        if (entry->cmsg_level == SOL_SOCKET && entry->cmsg_type == SCM_RIGHTS) {
          int received = -1;
          std::memcpy(&received, CMSG_DATA(entry), sizeof(int));
          UniqueFd owned(received);  // closed unless the caller wants it
          if (attached != nullptr) *attached = std::move(owned);
        }
      }
      have += static_cast<std::size_t>(got);
      continue;
    }
    if (got == 0) return Status(ErrorCode::peer_lost, "connection closed by the other side");
    if (errno != EAGAIN && errno != EINTR) {
      return Status(ErrorCode::peer_lost, std::string("connection lost: ") + std::strerror(errno));
    }
    if (!wait_readable(fd, deadline)) {
      return Status(ErrorCode::deadline_exceeded, "no message arrived in time");
    }
  }
  return {};
}

}  // namespace

Status send_message(int fd, const google::protobuf::MessageLite& message, Deadline deadline,
                    int attached_fd) {
  // The prefix and the body go out in one write, so that the reader wakes once per message.
  std::string framed(kLengthPrefixBytes, '\0');
  message.AppendToString(&framed);
  const std::size_t body_bytes = framed.size() - kLengthPrefixBytes;
  if (body_bytes > kMaxControlMessageBytes) {
    return Status(ErrorCode::internal,
                  "control message of " + std::to_string(body_bytes) + " bytes exceeds the limit");
  }
  const auto prefix = encode_length(static_cast<std::uint32_t>(body_bytes));
  std::memcpy(framed.data(), prefix.data(), prefix.size());
  const auto bytes = std::as_bytes(std::span(framed.data(), framed.size()));
  return attached_fd >= 0 ? send_with_fd(fd, bytes, attached_fd, deadline)
                          : write_all(fd, bytes, deadline);
}

Status receive_message(int fd, google::protobuf::MessageLite& message, Deadline deadline,
                       UniqueFd* attached) {
  std::array<std::byte, kLengthPrefixBytes> prefix;
  if (Status status = receive_prefix(fd, prefix, deadline, attached); !status.ok()) return status;
  const std::uint32_t length = decode_length(prefix);
  if (length > kMaxControlMessageBytes) {
    return Status(ErrorCode::protocol_error, "a control message claims " + std::to_string(length) +
                                                 " bytes; the limit is " +
                                                 std::to_string(kMaxControlMessageBytes));
  }
  std::vector<std::byte> body(length);
  if (Status status = read_exact(fd, body, deadline); !status.ok()) return status;
  if (!message.ParseFromArray(body.data(), static_cast<int>(length))) {
    return Status(ErrorCode::protocol_error,
                  "a control message of " + std::to_string(length) + " bytes does not parse");
  }
  return {};
}

}  // namespace gradsync::net
