#include "support/memory_channels.h"

#include <poll.h>

#include <algorithm>
#include <cerrno>

namespace gradsync::testing {

class MemoryChannels final : public net::DataChannels {
 public:
  MemoryChannels(MemoryNetwork& network, int rank) : network_(network), rank_(rank) {}

  bool connected(int peer) const override {
    std::lock_guard lock(network_.mutex_);
    return peer != rank_ && !network_.pipe(rank_, peer).sender_closed;
  }

  // Like closing a socket: the peer reads what was sent before, then the end of the stream; what
  // it sends from now on is refused.
  void disconnect(int peer) override {
    std::lock_guard lock(network_.mutex_);
    network_.pipe(rank_, peer).sender_closed = true;
    MemoryNetwork::Pipe& incoming = network_.pipe(peer, rank_);
    incoming.receiver_closed = true;
    incoming.bytes.clear();
    network_.changed_.notify_all();
  }

  net::IoResult send(int peer, std::span<const iovec> parts) override {
    std::lock_guard lock(network_.mutex_);
    MemoryNetwork::Pipe& pipe = network_.pipe(rank_, peer);
    if (pipe.sender_closed) return {net::IoOutcome::failed, 0, EBADF};
    if (pipe.receiver_closed) return {net::IoOutcome::failed, 0, EPIPE};
    std::size_t budget =
        std::min(network_.limits_.capacity - pipe.bytes.size(), network_.limits_.bytes_per_call);
    if (budget == 0) return {net::IoOutcome::would_block};
    std::size_t sent = 0;
    for (const iovec& part : parts) {
      const auto* bytes = static_cast<const std::byte*>(part.iov_base);
      const std::size_t count = std::min(budget, part.iov_len);
      pipe.bytes.insert(pipe.bytes.end(), bytes, bytes + count);
      sent += count;
      budget -= count;
    }
    network_.changed_.notify_all();
    return {net::IoOutcome::done, sent};
  }

  net::IoResult receive(int peer, std::byte* into, std::size_t room) override {
    std::lock_guard lock(network_.mutex_);
    MemoryNetwork::Pipe& pipe = network_.pipe(peer, rank_);
    if (pipe.receiver_closed) return {net::IoOutcome::failed, 0, EBADF};
    if (pipe.bytes.empty()) {
      return {pipe.sender_closed ? net::IoOutcome::closed : net::IoOutcome::would_block};
    }
    const std::size_t count = std::min({room, pipe.bytes.size(), network_.limits_.bytes_per_call});
    std::copy_n(pipe.bytes.begin(), count, into);
    pipe.bytes.erase(pipe.bytes.begin(), pipe.bytes.begin() + static_cast<std::ptrdiff_t>(count));
    network_.changed_.notify_all();
    return {net::IoOutcome::done, count};
  }

  // Spinning buys nothing here: every change notifies the waiters at once. The wake descriptor is
  // looked at every millisecond.
  int wait(std::span<const net::ChannelInterest> interests, std::span<net::ChannelEvents> events,
           int wake_fd, net::Deadline until, std::chrono::microseconds) override {
    std::unique_lock lock(network_.mutex_);
    while (true) {
      int ready = 0;
      for (std::size_t i = 0; i < interests.size(); ++i) {
        events[i] = events_on(interests[i]);
        if (events[i].readable || events[i].writable || events[i].hung_up) ++ready;
      }
      if (wake_fd >= 0) {
        pollfd wake{wake_fd, POLLIN, 0};
        if (::poll(&wake, 1, 0) > 0) ++ready;
      }
      if (ready > 0 || until.expired()) return ready;
      const auto slice = net::Clock::now() + std::chrono::milliseconds(1);
      network_.changed_.wait_until(lock, std::min(slice, until.when()));
    }
  }

 private:
  net::ChannelEvents events_on(const net::ChannelInterest& interest) const {
    const MemoryNetwork::Pipe& in = network_.pipe(interest.peer, rank_);
    const MemoryNetwork::Pipe& out = network_.pipe(rank_, interest.peer);
    const bool hung_up = in.sender_closed || out.receiver_closed;
    return {interest.read && (!in.bytes.empty() || hung_up),
            interest.write && (out.bytes.size() < network_.limits_.capacity || hung_up), hung_up};
  }

  MemoryNetwork& network_;
  const int rank_;
};

MemoryNetwork::MemoryNetwork(int world_size, MemoryLimits limits)
    : world_size_(world_size),
      limits_(limits),
      pipes_(static_cast<std::size_t>(world_size * world_size)) {}

std::unique_ptr<net::DataChannels> MemoryNetwork::channels_of(int rank) {
  return std::make_unique<MemoryChannels>(*this, rank);
}

}  // namespace gradsync::testing
