#include "net/socket_channels.h"

#include <sys/socket.h>

#include <cerrno>

namespace gradsync::net {

SocketChannels::SocketChannels(std::vector<UniqueFd> sockets) : sockets_(std::move(sockets)) {}

bool SocketChannels::connected(int peer) const { return sockets_[peer].valid(); }

void SocketChannels::disconnect(int peer) { sockets_[peer].reset(); }

namespace {

bool would_block(int error) { return error == EAGAIN || error == EWOULDBLOCK || error == EINTR; }

}  // namespace

IoResult SocketChannels::send(int peer, std::span<const iovec> parts) {
  msghdr message{};
  message.msg_iov = const_cast<iovec*>(parts.data());
  message.msg_iovlen = parts.size();
  const ssize_t sent = ::sendmsg(sockets_[peer].get(), &message, MSG_NOSIGNAL);
  if (sent > 0) return {IoOutcome::done, static_cast<std::size_t>(sent)};
  if (sent < 0 && !would_block(errno)) return {IoOutcome::failed, 0, errno};
  return {IoOutcome::would_block};
}

IoResult SocketChannels::receive(int peer, std::byte* into, std::size_t room) {
  const ssize_t count = ::recv(sockets_[peer].get(), into, room, 0);
  if (count > 0) return {IoOutcome::done, static_cast<std::size_t>(count)};
  if (count == 0) return {IoOutcome::closed};
  if (!would_block(errno)) return {IoOutcome::failed, 0, errno};
  return {IoOutcome::would_block};
}

int SocketChannels::wait(std::span<const ChannelInterest> interests,
                         std::span<ChannelEvents> events, int wake_fd, Deadline until,
                         std::chrono::microseconds spin) {
  polls_.clear();
  for (const ChannelInterest& interest : interests) {
    const short wanted =
        static_cast<short>((interest.read ? POLLIN : 0) | (interest.write ? POLLOUT : 0));
    polls_.push_back({sockets_[interest.peer].get(), wanted, 0});
  }
  if (wake_fd >= 0) polls_.push_back({wake_fd, POLLIN, 0});
  int ready = 0;
  const auto spin_until = Clock::now() + spin;
  while (ready == 0 && Clock::now() < spin_until) ready = ::poll(polls_.data(), polls_.size(), 0);
  if (ready == 0) ready = ::poll(polls_.data(), polls_.size(), until.poll_timeout_ms());
  if (ready <= 0) return ready;
  for (std::size_t i = 0; i < interests.size(); ++i) {
    const short happened = polls_[i].revents;
    events[i] = {(happened & (POLLIN | POLLHUP | POLLERR)) != 0, (happened & POLLOUT) != 0,
                 (happened & (POLLHUP | POLLERR)) != 0};
  }
  return ready;
}

}  // namespace gradsync::net
