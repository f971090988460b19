#include "daemon/client_acceptor.h"

#include <spdlog/spdlog.h>
#include <unistd.h>

#include <asio/io_context.hpp>

#include "daemon/accept_loop.h"
#include "gradsync.pb.h"
#include "net/message_stream.h"
#include "proto/convert.h"

namespace gradsync::daemon {

namespace {

using asio::local::stream_protocol;

// Tells a client why it is not served, and closes its connection.
void refuse(stream_protocol::socket& socket, const Status& why) {
  spdlog::warn("refused a client: {}", why.message());
  proto::DaemonToClient refusal;
  to_proto(why, *refusal.mutable_refused());
  (void)net::send_message(socket.native_handle(), refusal,
                          net::Deadline::after(std::chrono::milliseconds(100)));
  asio::error_code ignored;
  socket.close(ignored);
}

}  // namespace

Status client_refusal(const net::PeerCredentials& peer, const net::ClientAccess& access,
                      long own_uid, int host, const std::function<bool()>& in_access_group,
                      const std::function<long()>& held) {
  const bool served = peer.uid == own_uid || peer.uid == 0 ||
                      (access.uid >= 0 && peer.uid == access.uid) ||
                      (access.gid >= 0 && (peer.gid == access.gid || in_access_group()));
  if (!served) {
    return Status(ErrorCode::unauthenticated,
                  "host " + std::to_string(host) + "'s daemon runs as uid " +
                      std::to_string(own_uid) + " and serves no client of uid " +
                      std::to_string(peer.uid) + " (pid " + std::to_string(peer.pid) +
                      "; --client-uid names one more user to serve, --client-gid a group)");
  }
  if (const long connections = held(); connections >= kMaxConnectionsPerClient) {
    return Status(ErrorCode::invalid_argument,
                  "pid " + std::to_string(peer.pid) + " already holds " +
                      std::to_string(connections) + " connections to host " +
                      std::to_string(host) + "'s daemon, as many as one process may");
  }
  return {};
}

ClientAcceptor::ClientAcceptor(asio::io_context& io, net::UniqueFd listener,
                               net::ClientAccess access, Take take, Held held)
    : acceptor_(io), backoff_(io), access_(access), take_(std::move(take)), held_(std::move(held)) {
  acceptor_.assign(stream_protocol(), listener.release());
}

void ClientAcceptor::start(std::shared_ptr<void> owner) {
  accept_forever(acceptor_, backoff_, "a client", std::move(owner),
                 [this](Socket socket) { judge(std::move(socket)); });
}

void ClientAcceptor::judge(Socket socket) {
  const int fd = socket.native_handle();
  const net::PeerCredentials peer = net::peer_credentials(fd);
  const Status refused = client_refusal(
      peer, access_, static_cast<long>(::geteuid()), host_,
      [&] { return net::peer_has_supplementary_group(fd, access_.gid); },
      [&] { return held_(peer.pid); });
  if (!refused.ok()) {
    refuse(socket, refused);
    return;
  }
  take_(std::move(socket), peer);
}

void ClientAcceptor::stop() {
  asio::error_code ignored;
  acceptor_.close(ignored);
  backoff_.cancel();
}

}  // namespace gradsync::daemon
