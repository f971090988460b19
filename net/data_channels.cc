#include "net/data_channels.h"

#include <cerrno>
#include <cstring>
#include <string>

namespace gradsync::net {

Status send_all(DataChannels& channels, int peer, std::span<const std::byte> bytes,
                Deadline deadline) {
  while (!bytes.empty()) {
    const iovec part{const_cast<std::byte*>(bytes.data()), bytes.size()};
    const IoResult sent = channels.send(peer, std::span(&part, 1));
    switch (sent.outcome) {
      case IoOutcome::done:
        bytes = bytes.subspan(sent.bytes);
        continue;
      case IoOutcome::would_block: {
        const ChannelInterest interest{peer, false, true};
        ChannelEvents events;
        const int ready = channels.wait(std::span(&interest, 1), std::span(&events, 1), -1,
                                        deadline, std::chrono::microseconds(0));
        if (ready < 0 && errno != EINTR) {
          return Status(ErrorCode::internal, std::string("wait failed: ") + std::strerror(errno));
        }
        if (ready == 0) return Status(ErrorCode::deadline_exceeded, "no room to send in time");
        if (events.hung_up) return Status(ErrorCode::peer_lost, "connection closed");
        continue;
      }
      case IoOutcome::closed:
        return Status(ErrorCode::peer_lost, "connection closed");
      case IoOutcome::failed:
        return Status(ErrorCode::peer_lost,
                      std::string("sending failed: ") + std::strerror(sent.error));
    }
  }
  return {};
}

}  // namespace gradsync::net
