// The worker's client socket, accepted on the op thread's event loop, and who may use it: clients
// of the daemon's own user and root, and those the worker was told to serve (--client-uid,
// --client-gid); a process holds at most kMaxConnectionsPerClient connections. A client that may
// not is told why and its connection closed; the others are handed over with their credentials.
#pragma once

#include <asio/local/stream_protocol.hpp>
#include <asio/steady_timer.hpp>
#include <functional>
#include <memory>

#include "collective/status.h"
#include "net/socket.h"
#include "net/unique_fd.h"

namespace asio {
class io_context;
}

namespace gradsync::daemon {

// Connections of one client process: its library opens one; each costs the daemon a descriptor.
inline constexpr int kMaxConnectionsPerClient = 64;

// Why a client (`peer`) may not use the daemon of host `host`, which runs as `own_uid`; OK if it
// may. Another user's client, not named by `access`, was let in by hand (the socket file is the
// daemon user's, and the group's), and would read and write the group's tensors. A process may
// hold kMaxConnectionsPerClient connections. Asked only when they decide: whether the client is
// one of the supplementary members of `access.gid`, and how many connections its process holds.
Status client_refusal(const net::PeerCredentials& peer, const net::ClientAccess& access,
                      long own_uid, int host, const std::function<bool()>& in_access_group,
                      const std::function<long()>& held);

class ClientAcceptor {
 public:
  using Socket = asio::local::stream_protocol::socket;
  // A client that may use the daemon.
  using Take = std::function<void(Socket socket, const net::PeerCredentials& peer)>;
  // The connections process `pid` holds open to the daemon.
  using Held = std::function<long(int pid)>;

  ClientAcceptor(asio::io_context& io, net::UniqueFd listener, net::ClientAccess access, Take take,
                 Held held);

  // Accepts until stop(); `owner` keeps this acceptor and what `take` uses alive meanwhile.
  void start(std::shared_ptr<void> owner);
  // The host the daemon serves now, named to refused clients.
  void set_host(int host) { host_ = host; }
  void stop();

 private:
  void judge(Socket socket);

  asio::local::stream_protocol::acceptor acceptor_;
  asio::steady_timer backoff_;  // between accepts that failed
  const net::ClientAccess access_;
  const Take take_;
  const Held held_;
  int host_ = 0;
};

}  // namespace gradsync::daemon
