// Data channels in memory, for running the engine with no socket (docs/architecture.md §2). A test
// chooses how many bytes one direction holds and how many one send or receive may move, so that
// frames arrive cut at every place and every sender meets a full channel.
#pragma once

#include <condition_variable>
#include <cstddef>
#include <deque>
#include <limits>
#include <memory>
#include <mutex>
#include <vector>

#include "net/data_channels.h"

namespace gradsync::testing {

struct MemoryLimits {
  std::size_t capacity = 64 << 10;  // bytes one direction of a channel holds
  std::size_t bytes_per_call = std::numeric_limits<std::size_t>::max();
};

class MemoryNetwork {
 public:
  MemoryNetwork(int world_size, MemoryLimits limits);

  // Rank `rank`'s channels to every other rank; the network must outlive them.
  std::unique_ptr<net::DataChannels> channels_of(int rank);

 private:
  friend class MemoryChannels;

  // One direction of a channel, from one rank to another.
  struct Pipe {
    std::deque<std::byte> bytes;
    bool sender_closed = false;    // what is in `bytes` is the last
    bool receiver_closed = false;  // nothing sent any more is read
  };

  Pipe& pipe(int from, int to) { return pipes_[static_cast<std::size_t>(from * world_size_ + to)]; }

  const int world_size_;
  const MemoryLimits limits_;
  std::mutex mutex_;
  std::condition_variable changed_;
  std::vector<Pipe> pipes_;
};

}  // namespace gradsync::testing
