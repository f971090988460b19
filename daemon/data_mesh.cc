#include "daemon/data_mesh.h"

#include <spdlog/spdlog.h>

#include <chrono>

#include "engine/frame.h"

namespace gradsync::daemon {

namespace {

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

// Reads a hello and names the rank it comes from, or says why it is not one of ours.
Status receive_hello(int fd, const MeshPlan& plan, int& rank) {
  engine::EncodedHeader bytes;
  if (Status status = net::read_exact(fd, bytes, net::Deadline::after(kHelloTimeout));
      !status.ok()) {
    return Status(ErrorCode::protocol_error, "no hello: " + status.message());
  }
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

}  // namespace

Status form_data_mesh(const MeshPlan& plan, int listener, net::Deadline deadline,
                      std::vector<net::UniqueFd>& sockets) {
  sockets.clear();
  sockets.resize(plan.world_size);
  for (int peer = 0; peer < plan.rank; ++peer) {
    // The lower rank may still be starting.
    if (Status status = net::connect_tcp_retrying(plan.peers[peer], deadline, sockets[peer]);
        !status.ok()) {
      return Status(ErrorCode::peer_lost, "cannot reach rank " + std::to_string(peer) + " at " +
                                              plan.peers[peer].to_string() + ": " +
                                              status.message());
    }
    net::tune_for_data_plane(sockets[peer].get());
    if (Status hello = send_hello(sockets[peer].get(), plan, deadline); !hello.ok()) return hello;
  }
  int missing = plan.world_size - 1 - plan.rank;
  while (missing > 0) {
    net::UniqueFd connection;
    if (Status status = net::accept_connection(listener, deadline, connection); !status.ok()) {
      return Status(ErrorCode::peer_lost,
                    std::to_string(missing) + " higher ranks never connected: " + status.message());
    }
    int rank = -1;
    const Status hello = receive_hello(connection.get(), plan, rank);
    const std::string from = net::peer_address(connection.get()).to_string();
    if (!hello.ok()) {
      spdlog::warn("rejected a data connection from {}: {}", from, hello.message());
      continue;
    }
    if (sockets[rank].valid()) {
      spdlog::warn("rejected a second data connection claiming rank {} from {}", rank, from);
      continue;
    }
    net::tune_for_data_plane(connection.get());
    sockets[rank] = std::move(connection);
    --missing;
  }
  return {};
}

IntruderGuard::IntruderGuard(int listener, MeshPlan plan)
    : listener_(listener), plan_(std::move(plan)), thread_([this] { run(); }) {}

IntruderGuard::~IntruderGuard() {
  stopping_ = true;
  thread_.join();
}

void IntruderGuard::run() {
  while (!stopping_) {
    net::UniqueFd connection;
    if (!net::accept_connection(listener_, net::Deadline::after(std::chrono::milliseconds(200)),
                                connection)
             .ok()) {
      continue;
    }
    const std::string from = net::peer_address(connection.get()).to_string();
    int rank = -1;
    const Status hello = receive_hello(connection.get(), plan_, rank);
    spdlog::warn(
        "rejected a data connection from {}: {}", from,
        hello.ok() ? "rank " + std::to_string(rank) + " is already connected" : hello.message());
  }
}

}  // namespace gradsync::daemon
