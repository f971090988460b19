// Control messages on a stream socket: a 4-byte little-endian length, then a serialized protobuf.
// The length is checked against a hard limit before anything is allocated, and a unix socket can
// carry one file descriptor with a message (a client's shared-memory region).
#pragma once

#include <cstdint>

#include "collective/status.h"
#include "net/deadline.h"
#include "net/unique_fd.h"

namespace google::protobuf {
class MessageLite;
}

namespace gradsync::net {

inline constexpr std::uint32_t kMaxControlMessageBytes = 1 << 20;

Status send_message(int fd, const google::protobuf::MessageLite& message, Deadline deadline,
                    int attached_fd = -1);

// ErrorCode::protocol_error for an oversized or unparsable message; `attached` (if given) receives
// a descriptor sent with the message.
Status receive_message(int fd, google::protobuf::MessageLite& message, Deadline deadline,
                       UniqueFd* attached = nullptr);

}  // namespace gradsync::net
