#include "net/asio_channels.h"

#include <sys/socket.h>
#include <unistd.h>

#include <asio/generic/stream_protocol.hpp>
#include <asio/io_context.hpp>
#include <asio/posix/stream_descriptor.hpp>
#include <optional>

namespace gradsync::net {

namespace {

using Socket = asio::generic::stream_protocol::socket;

class AsioChannels final : public DataChannels {
 public:
  explicit AsioChannels(std::vector<UniqueFd> sockets) : sockets_(sockets.size()) {
    for (std::size_t r = 0; r < sockets.size(); ++r) {
      if (!sockets[r].valid()) continue;
      sockaddr_storage address{};
      socklen_t length = sizeof address;
      ::getsockname(sockets[r].get(), reinterpret_cast<sockaddr*>(&address), &length);
      const int protocol = address.ss_family == AF_UNIX ? 0 : IPPROTO_TCP;
      sockets_[r].emplace(context_);
      sockets_[r]->assign(asio::generic::stream_protocol(address.ss_family, protocol),
                          sockets[r].release());
      sockets_[r]->non_blocking(true);
    }
  }

  bool connected(int peer) const override { return sockets_[peer].has_value(); }
  void disconnect(int peer) override { sockets_[peer].reset(); }

  IoResult send(int peer, std::span<const iovec> parts) override {
    buffers_.clear();
    for (const iovec& part : parts) buffers_.emplace_back(part.iov_base, part.iov_len);
    asio::error_code error;
    const std::size_t sent = sockets_[peer]->write_some(buffers_, error);
    if (error == asio::error::would_block) return {IoOutcome::would_block};
    if (error) return {IoOutcome::failed, 0, error.value()};
    return {IoOutcome::done, sent};
  }

  IoResult receive(int peer, std::byte* into, std::size_t room) override {
    asio::error_code error;
    const std::size_t count = sockets_[peer]->read_some(asio::buffer(into, room), error);
    if (error == asio::error::would_block) return {IoOutcome::would_block};
    if (error == asio::error::eof) return {IoOutcome::closed};
    if (error) return {IoOutcome::failed, 0, error.value()};
    return {IoOutcome::done, count};
  }

  int wait(std::span<const ChannelInterest> interests, std::span<ChannelEvents> events, int wake_fd,
           Deadline until, std::chrono::microseconds spin) override {
    context_.restart();
    int pending = 0;
    int ready = 0;
    const auto on = [&](bool ChannelEvents::*event, ChannelEvents& where) {
      ++pending;
      return [&, event](const asio::error_code& error) {
        --pending;
        if (error) return;
        if (!(where.readable || where.writable || where.hung_up)) ++ready;
        where.*event = true;
      };
    };
    for (std::size_t i = 0; i < interests.size(); ++i) {
      events[i] = {};
      Socket& socket = *sockets_[interests[i].peer];
      if (interests[i].read)
        socket.async_wait(Socket::wait_read, on(&ChannelEvents::readable, events[i]));
      if (interests[i].write)
        socket.async_wait(Socket::wait_write, on(&ChannelEvents::writable, events[i]));
      socket.async_wait(Socket::wait_error, on(&ChannelEvents::hung_up, events[i]));
    }
    ChannelEvents woken;
    if (wake_fd >= 0) {
      if (wake_fd != wake_fd_) {
        wake_.emplace(context_, ::dup(wake_fd));
        wake_fd_ = wake_fd;
      }
      wake_->async_wait(asio::posix::stream_descriptor::wait_read,
                        on(&ChannelEvents::readable, woken));
    }
    const auto spin_until = Clock::now() + spin;
    while (ready == 0 && Clock::now() < spin_until) context_.poll();
    while (ready == 0 && !until.expired()) context_.run_one_until(until.when());
    context_.poll();
    for (const ChannelInterest& interest : interests) sockets_[interest.peer]->cancel();
    if (wake_) wake_->cancel();
    while (pending > 0) context_.run_one();
    for (ChannelEvents& found : events) {
      if (found.hung_up) found.readable = true;
    }
    return ready;
  }

 private:
  asio::io_context context_;
  std::vector<std::optional<Socket>> sockets_;
  std::optional<asio::posix::stream_descriptor> wake_;  // a duplicate of the last wake_fd
  int wake_fd_ = -1;
  std::vector<asio::const_buffer> buffers_;
};

}  // namespace

std::unique_ptr<DataChannels> make_asio_channels(std::vector<UniqueFd> sockets) {
  return std::make_unique<AsioChannels>(std::move(sockets));
}

}  // namespace gradsync::net
