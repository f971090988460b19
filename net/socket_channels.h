// Data channels over connected non-blocking sockets, one per peer, waited on with poll(2).
#pragma once

#include <poll.h>

#include <vector>

#include "net/data_channels.h"
#include "net/unique_fd.h"

namespace gradsync::net {

class SocketChannels final : public DataChannels {
 public:
  // `sockets[r]` is the connection to rank r; an invalid one (this rank's own) is not connected.
  explicit SocketChannels(std::vector<UniqueFd> sockets);

  bool connected(int peer) const override;
  void disconnect(int peer) override;
  IoResult send(int peer, std::span<const iovec> parts) override;
  IoResult receive(int peer, std::byte* into, std::size_t room) override;
  int wait(std::span<const ChannelInterest> interests, std::span<ChannelEvents> events, int wake_fd,
           Deadline until, std::chrono::microseconds spin) override;

 private:
  std::vector<UniqueFd> sockets_;
  std::vector<pollfd> polls_;  // kept from wait to wait
};

}  // namespace gradsync::net
