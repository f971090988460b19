#include "daemon/data_mesh.h"

#include <poll.h>
#include <spdlog/spdlog.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <asio/io_context.hpp>
#include <asio/ip/tcp.hpp>
#include <asio/post.hpp>
#include <asio/read.hpp>
#include <asio/steady_timer.hpp>
#include <chrono>
#include <mutex>

#include "collective/group_plan.h"
#include "engine/frame.h"

namespace gradsync::daemon {

namespace {

using asio::ip::tcp;
using engine::FrameHeader;
using engine::FrameKind;

constexpr auto kHelloTimeout = std::chrono::seconds(2);

Status send_hello(int fd, const MeshPlan& plan, net::Deadline deadline) {
  FrameHeader hello;
  hello.kind = FrameKind::hello;
  hello.generation = plan.generation;
  hello.op_id = static_cast<std::uint64_t>(plan.rank);
  hello.descriptor.count = static_cast<std::uint64_t>(plan.world_size);
  return net::write_all(fd, engine::encode(hello), deadline);
}

// Names the rank a hello comes from, or says why it is not one of ours.
Status check_hello(const engine::EncodedHeader& bytes, const MeshPlan& plan, int& rank) {
  FrameHeader hello;
  if (Status status = engine::decode(bytes, hello); !status.ok()) return status;
  if (hello.kind != FrameKind::hello) {
    return Status(ErrorCode::protocol_error, "the first frame is not a hello");
  }
  if (hello.generation != plan.generation ||
      hello.descriptor.count != static_cast<std::uint64_t>(plan.world_size)) {
    return Status(ErrorCode::protocol_error,
                  "hello for generation " + std::to_string(hello.generation) + " of " +
                      std::to_string(hello.descriptor.count) + " ranks; this group is generation " +
                      std::to_string(plan.generation) + " of " + std::to_string(plan.world_size));
  }
  if (hello.op_id <= static_cast<std::uint64_t>(plan.rank) ||
      hello.op_id >= static_cast<std::uint64_t>(plan.world_size)) {
    return Status(ErrorCode::protocol_error, "hello from rank " + std::to_string(hello.op_id) +
                                                 ", which does not connect to rank " +
                                                 std::to_string(plan.rank));
  }
  rank = static_cast<int>(hello.op_id);
  return {};
}

// A connection whose hello is still being read.
struct Arrival {
  Arrival(tcp::socket socket_in, std::string from_in)
      : socket(std::move(socket_in)), from(std::move(from_in)), deadline(socket.get_executor()) {}
  tcp::socket socket;
  std::string from;
  engine::EncodedHeader hello{};
  asio::steady_timer deadline;
};

}  // namespace

struct DataPort::Loop : std::enable_shared_from_this<DataPort::Loop> {
  Loop(asio::io_context& io, net::UniqueFd listener) : acceptor(io), backoff(io) {
    const bool v6 = net::is_ipv6_socket(listener.get());
    acceptor.assign(v6 ? tcp::v6() : tcp::v4(), listener.release());
  }

  void accept() {
    acceptor.async_accept(
        [self = shared_from_this()](const asio::error_code& error, tcp::socket socket) {
          if (error == asio::error::operation_aborted) return;
          if (error) {
            // The descriptor limit, say: wait rather than spin on it.
            spdlog::warn("cannot accept a data connection: {}", error.message());
            self->backoff.expires_after(std::chrono::milliseconds(100));
            self->backoff.async_wait([self](const asio::error_code& waited) {
              if (!waited) self->accept();
            });
            return;
          }
          std::string from = net::peer_address(socket.native_handle()).to_string();
          self->read_hello(std::make_shared<Arrival>(std::move(socket), std::move(from)));
          self->accept();
        });
  }

  void read_hello(const std::shared_ptr<Arrival>& arrival) {
    arrival->deadline.expires_after(kHelloTimeout);
    arrival->deadline.async_wait([arrival](const asio::error_code& error) {
      if (error) return;
      asio::error_code ignored;
      arrival->socket.close(ignored);
    });
    asio::async_read(
        arrival->socket, asio::buffer(arrival->hello),
        [self = shared_from_this(), arrival](const asio::error_code& error, std::size_t) {
          arrival->deadline.cancel();
          self->take(arrival, error);
        });
  }

  void take(const std::shared_ptr<Arrival>& arrival, const asio::error_code& error) {
    std::lock_guard lock(mutex);
    if (!error && !planned) {
      // A higher rank that got its assignment first: its hello is judged once ours is here.
      if (early.size() < static_cast<std::size_t>(kMaxWorldSize)) {
        early.push_back(arrival);
        return;
      }
      spdlog::warn("rejected a data connection from {}: {} hellos already wait for the group",
                   arrival->from, early.size());
      return;
    }
    take_hello(*arrival, error);
  }

  // The hellos that came before the plan.
  void take_early() {
    std::lock_guard lock(mutex);
    for (const auto& arrival : early) take_hello(*arrival, {});
    early.clear();
  }

  void take_hello(Arrival& arrival, const asio::error_code& error) {
    int rank = -1;
    Status hello =
        error ? Status(ErrorCode::protocol_error,
                       error == asio::error::operation_aborted
                           ? "no hello within " + std::to_string(kHelloTimeout.count()) + " s"
                           : "no hello: " + error.message())
              : check_hello(arrival.hello, plan, rank);
    if (hello.ok() && (formed || accepted[rank].valid())) {
      hello = Status(ErrorCode::protocol_error,
                     "rank " + std::to_string(rank) + " is already connected");
    }
    // The hello timer may have closed the socket in the same round as the read completed.
    asio::error_code closed;
    const int fd = hello.ok() ? arrival.socket.release(closed) : -1;
    if (hello.ok() && closed) {
      hello = Status(ErrorCode::protocol_error,
                     "no hello within " + std::to_string(kHelloTimeout.count()) + " s");
    }
    if (!hello.ok()) {
      spdlog::warn("rejected a data connection from {}: {}", arrival.from, hello.message());
      return;  // closed with the arrival
    }
    accepted[rank] = net::UniqueFd(fd);
    net::tune_for_data_plane(accepted[rank].get());
    if (--missing == 0) signal_all_arrived();
  }

  tcp::acceptor acceptor;
  asio::steady_timer backoff;

  void signal_all_arrived() const {
    const std::uint64_t one = 1;
    (void)!::write(all_arrived.get(), &one, sizeof one);
  }

  std::mutex mutex;  // guards what the forming thread reads and writes
  MeshPlan plan;
  bool planned = false;                         // whether `plan` is set
  std::vector<std::shared_ptr<Arrival>> early;  // hellos read before `plan` was set
  net::UniqueFd all_arrived{
      ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK)};  // readable once none is missing
  std::vector<net::UniqueFd> accepted;            // by rank: the higher ranks
  int missing = 0;
  bool formed = false;  // from then on, every connection is turned away
};

DataPort::DataPort(asio::io_context& io, net::UniqueFd listener)
    : loop_(std::make_shared<Loop>(io, std::move(listener))) {
  // From the start, not only once the group has formed: strangers that connect earlier are read
  // and closed on their own deadlines instead of filling the listen queue.
  asio::post(io, [loop = loop_] { loop->accept(); });
}

DataPort::~DataPort() {
  asio::post(loop_->acceptor.get_executor(), [loop = loop_] {
    asio::error_code ignored;
    loop->acceptor.close(ignored);
    loop->backoff.cancel();
  });
}

Status DataPort::form_mesh(const MeshPlan& plan, net::Deadline deadline, int cancel_fd,
                           std::vector<net::UniqueFd>& sockets) {
  {
    std::lock_guard lock(loop_->mutex);
    loop_->plan = plan;
    loop_->planned = true;
    loop_->accepted.clear();
    loop_->accepted.resize(plan.world_size);
    loop_->missing = plan.world_size - 1 - plan.rank;
    if (loop_->missing == 0) loop_->signal_all_arrived();
  }
  asio::post(loop_->acceptor.get_executor(), [loop = loop_] { loop->take_early(); });
  sockets.clear();
  sockets.resize(plan.world_size);
  for (int peer = 0; peer < plan.rank; ++peer) {
    // The lower rank may still be starting.
    if (Status status =
            net::connect_tcp_retrying(plan.peers[peer], deadline, sockets[peer], cancel_fd);
        !status.ok()) {
      if (status.code() == ErrorCode::aborted) return status;
      return Status(ErrorCode::peer_lost, "cannot reach rank " + std::to_string(peer) + " at " +
                                              plan.peers[peer].to_string() + ": " +
                                              status.message());
    }
    net::tune_for_data_plane(sockets[peer].get());
    if (Status hello = send_hello(sockets[peer].get(), plan, deadline); !hello.ok()) return hello;
  }
  // The higher ranks connect on the event loop, which signals `all_arrived` once the last has.
  if (Status waited = net::wait_unless_cancelled(loop_->all_arrived.get(), POLLIN, deadline,
                                                 cancel_fd, "forming the data mesh");
      waited.code() == ErrorCode::aborted) {
    return waited;
  }
  std::unique_lock lock(loop_->mutex);
  loop_->formed = true;
  if (loop_->missing > 0) {
    return Status(ErrorCode::peer_lost,
                  std::to_string(loop_->missing) + " higher ranks never connected");
  }
  for (int peer = plan.rank + 1; peer < plan.world_size; ++peer) {
    sockets[peer] = std::move(loop_->accepted[peer]);
  }
  return {};
}

}  // namespace gradsync::daemon
