// The coordinator's Asio shell around its Membership state machine: one io_context on one thread,
// an acceptor, and per connection a reader, a queue of outgoing messages with one write in flight,
// and a deadline on that queue. Every event is handed to the state machine and its actions are
// carried out; its next deadline drives one timer.
#include "daemon/coordinator.h"

#include <spdlog/spdlog.h>

#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/signal_set.hpp>
#include <asio/steady_timer.hpp>
#include <map>
#include <memory>

#include "daemon/accept_loop.h"
#include "daemon/membership.h"
#include "daemon/outbox.h"
#include "daemon/ready_file.h"
#include "net/message_stream.h"

namespace gradsync::daemon {

namespace {

using asio::ip::tcp;

constexpr int kMessagesPerWakeup = 64;
// What the kernel may hold for one connection (it doubles this): without a bound it grows its
// send buffer to megabytes for a member that reads nothing, and the send deadline (take()) would
// never see that member fall behind.
constexpr int kSendBufferBytes = 64 << 10;

struct Connection {
  Connection(ConnectionId id_in, tcp::socket socket_in, std::chrono::milliseconds send_timeout,
             Outbox<tcp::socket>::Failed failed, Outbox<tcp::socket>::Sent sent)
      : id(id_in),
        socket(std::move(socket_in)),
        reader(socket.native_handle()),
        outbox(socket, send_timeout, std::move(failed), std::move(sent)) {}

  ConnectionId id;
  tcp::socket socket;
  net::MessageReader reader;
  Outbox<tcp::socket> outbox;
  bool closing = false;  // the state machine is done with it: flush the outbox, then close
};

class CoordinatorServer {
 public:
  explicit CoordinatorServer(const CoordinatorConfig& config)
      : config_(config),
        membership_(config.membership),
        acceptor_(io_),
        accept_backoff_(io_),
        tick_(io_),
        signals_(io_, SIGINT, SIGTERM) {}

  int run() {
    net::UniqueFd listener;
    if (Status status = net::listen_tcp(config_.listen, listener); !status.ok()) {
      spdlog::error("coordinator: {}", status.message());
      return 2;
    }
    const net::HostPort bound = net::local_address(listener.get());
    const bool v6 = net::is_ipv6_socket(listener.get());
    acceptor_.assign(v6 ? tcp::v6() : tcp::v4(), listener.release());
    spdlog::info("coordinator listening on {}:{} for a group of {}", config_.listen.host,
                 bound.port, config_.membership.world_size);
    if (!config_.ready_file.empty()) {
      const std::string address = config_.listen.host + ":" + std::to_string(bound.port);
      if (Status status = write_ready_file(config_.ready_file, address); !status.ok()) {
        spdlog::error("coordinator: {}", status.message());
        return 2;
      }
    }
    signals_.async_wait([this](const asio::error_code& error, int signal) {
      if (error) return;
      spdlog::info("coordinator: stopping on signal {}", signal);
      io_.stop();
    });
    accept();
    io_.run();
    return 0;
  }

 private:
  // The server outlives its event loop.
  void accept() {
    accept_forever(acceptor_, accept_backoff_, "a connection to the coordinator", nullptr,
                   [this](tcp::socket socket) { take(std::move(socket)); });
  }

  void take(tcp::socket socket) {
    const std::string from = net::peer_address(socket.native_handle()).to_string();
    asio::error_code ignored;
    socket.set_option(asio::socket_base::send_buffer_size(kSendBufferBytes), ignored);
    const ConnectionId id = next_id_++;
    // A member that takes no bytes of what it is sent for a heartbeat timeout is dropped, as one
    // that sends none would be: a member busy for a while is given the same time to read as to
    // beat. The others are not kept waiting for it.
    auto connection = std::make_shared<Connection>(
        id, std::move(socket), config_.membership.heartbeat_timeout,
        [this, id](const std::string& why) {
          if (const auto found = connections_.find(id); found != connections_.end()) {
            drop(found->second, why);
          }
        },
        [this, id] {
          const auto found = connections_.find(id);
          if (found != connections_.end() && found->second->closing &&
              found->second->outbox.empty()) {
            destroy(found->second);
          }
        });
    connections_[connection->id] = connection;
    membership_.connected(connection->id, from, std::chrono::steady_clock::now());
    read(connection);
    apply();
  }

  void read(const std::shared_ptr<Connection>& connection) {
    connection->socket.async_wait(tcp::socket::wait_read,
                                  [this, connection](const asio::error_code& error) {
                                    if (error || connection->closing) return;
                                    take_messages(connection);
                                  });
  }

  // Hands the state machine what the socket has, then waits for more. At most
  // kMessagesPerWakeup at a time: a member that streams cannot starve the timers and the other
  // members; the rest is taken after them.
  void take_messages(const std::shared_ptr<Connection>& connection) {
    for (int taken = 0; taken < kMessagesPerWakeup; ++taken) {
      proto::WorkerToCoordinator message;
      const Status status = connection->reader.receive(message, net::Deadline(net::Clock::now()));
      if (status.code() == ErrorCode::deadline_exceeded) {
        read(connection);
        return;
      }
      if (!status.ok()) {
        membership_.disconnected(connection->id, status.message());
        apply();
        return;
      }
      membership_.received(connection->id, message, std::chrono::steady_clock::now());
      apply();
      if (connection->closing) return;
    }
    asio::post(io_, [this, connection] {
      if (!connection->closing) take_messages(connection);
    });
  }

  // Carries out the state machine's actions and sets the timer to its next deadline.
  void apply() {
    for (Action& action : membership_.take_actions()) {
      const auto found = connections_.find(action.connection);
      if (found == connections_.end()) continue;
      const std::shared_ptr<Connection> connection = found->second;
      if (action.kind == Action::Kind::close) {
        spdlog::debug("coordinator: closing connection {}: {}", action.connection, action.reason);
        connection->closing = true;
        if (connection->outbox.empty()) destroy(connection);
        continue;
      }
      std::string framed;
      if (Status status = net::frame_message(action.message, framed); !status.ok()) {
        spdlog::error("coordinator: {}", status.message());
        continue;
      }
      connection->outbox.push(std::move(framed), connection);
    }
    if (const auto deadline = membership_.next_deadline()) {
      tick_.expires_at(*deadline);
      tick_.async_wait([this](const asio::error_code& error) {
        if (error) return;
        membership_.tick(std::chrono::steady_clock::now());
        apply();
      });
    } else {
      tick_.cancel();
    }
  }

  // The connection cannot be written to: the state machine hears of it, then it is closed
  // without waiting for its queue.
  void drop(const std::shared_ptr<Connection>& connection, const std::string& reason) {
    if (connection->closing) {
      // The state machine is done with it (a generation that ended, say): only its last messages
      // are lost.
      spdlog::warn("coordinator: gave up on the last messages to connection {}: {}", connection->id,
                   reason);
    }
    membership_.disconnected(connection->id, reason);
    apply();
    destroy(connection);
  }

  void destroy(const std::shared_ptr<Connection>& connection) {
    connection->closing = true;
    connection->outbox.cancel();
    asio::error_code ignored;
    connection->socket.close(ignored);
    connections_.erase(connection->id);
  }

  const CoordinatorConfig config_;
  asio::io_context io_{1};
  Membership membership_;
  tcp::acceptor acceptor_;
  asio::steady_timer accept_backoff_;
  asio::steady_timer tick_;
  asio::signal_set signals_;
  std::map<ConnectionId, std::shared_ptr<Connection>> connections_;
  ConnectionId next_id_ = 1;
};

}  // namespace

int run_coordinator(const CoordinatorConfig& config) { return CoordinatorServer(config).run(); }

}  // namespace gradsync::daemon
