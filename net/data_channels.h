// A rank's connections to the other ranks of its group, as the engine uses them
// (docs/architecture.md §2): non-blocking sends and receives on each, and one wait over all of
// them. In a group they are TCP sockets (socket_channels.h); a test can run the engine over
// channels in memory. The engine knows what a frame means; an implementation knows only how bytes
// move.
#pragma once

#include <sys/uio.h>

#include <chrono>
#include <cstddef>
#include <cstdint>
#include <span>

#include "collective/status.h"
#include "net/deadline.h"

namespace gradsync::net {

enum class IoOutcome : std::uint8_t {
  done,         // `bytes` moved, at least one
  would_block,  // nothing can move without waiting
  closed,       // the peer closed the connection (receive only)
  failed,       // `error` says why
};

struct IoResult {
  IoOutcome outcome = IoOutcome::done;
  std::size_t bytes = 0;
  int error = 0;  // an errno value, when failed
};

// What a wait watches on the channel to one peer.
struct ChannelInterest {
  int peer = -1;
  bool read = false;
  bool write = false;
};

// What a wait found on that channel. Readable includes closed: the next receive says which.
struct ChannelEvents {
  bool readable = false;
  bool writable = false;
  bool hung_up = false;  // closed, or failed
};

class DataChannels {
 public:
  virtual ~DataChannels() = default;

  virtual bool connected(int peer) const = 0;
  // Closes the channel to `peer` for good: its stream can no longer be trusted.
  virtual void disconnect(int peer) = 0;

  virtual IoResult send(int peer, std::span<const iovec> parts) = 0;
  virtual IoResult receive(int peer, std::byte* into, std::size_t room) = 0;

  // Waits until a channel is ready as `interests` ask, `wake_fd` (unless -1) is readable, or
  // `until` passes, busy-polling for up to `spin` before blocking: waking a blocked thread costs
  // tens of microseconds on small machines, more than a whole small message takes. Fills one
  // `events` entry per interest; returns how many entries, `wake_fd` included, are ready: 0 at
  // the deadline, -1 with errno set when the wait itself failed.
  virtual int wait(std::span<const ChannelInterest> interests, std::span<ChannelEvents> events,
                   int wake_fd, Deadline until, std::chrono::microseconds spin) = 0;
};

// Sends all of `bytes` to `peer`, waiting for room as needed, by `deadline`.
Status send_all(DataChannels& channels, int peer, std::span<const std::byte> bytes,
                Deadline deadline);

}  // namespace gradsync::net
