// A worker's data port and the forming of its data connections: a rank connects to every lower
// rank and accepts every higher one, twice, once per lane (the collectives' connection and the
// point-to-point messages'), each connection opened by a hello frame (generation, rank, world
// size, lane). The port is served on the worker's control event loop for the worker's whole life:
// every connection's hello is read with a deadline of its own while others are read, so idle or
// slow strangers delay nobody; one that does not open with a valid hello from an expected rank,
// from that rank's address, proving the group secret if there is one, is logged and closed, and
// once the mesh has formed every new connection is turned away. Once the plan is known, an address
// other than the group's may be opening at most 128 connections at once (OpeningsPerAddress).
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "collective/status.h"
#include "daemon/mesh_plan.h"
#include "net/deadline.h"
#include "net/group_secret.h"
#include "net/socket.h"

namespace asio {
class io_context;
}

namespace gradsync::daemon {

// What a data connection carries. Point-to-point messages travel apart from the collectives: a
// send's bytes may wait for their receiver while both ranks run collectives.
enum class Lane : std::uint8_t { collectives = 0, point_to_point = 1 };
inline constexpr std::uint32_t kLanes = 2;

// A rank's connections, by lane and peer rank (its own: invalid).
struct MeshSockets {
  std::vector<net::UniqueFd> collectives;
  std::vector<net::UniqueFd> point_to_point;

  static MeshSockets for_world(int world_size) {
    MeshSockets sockets;
    sockets.collectives.resize(world_size);
    sockets.point_to_point.resize(world_size);
    return sockets;
  }
  std::vector<net::UniqueFd>& of(Lane lane) {
    return lane == Lane::collectives ? collectives : point_to_point;
  }
};

class DataPort {
 public:
  // Takes the listening socket and serves it on `io`; hellos that arrive before form_mesh() are
  // judged once it has the plan. With a group secret, both ends of every connection prove it.
  DataPort(asio::io_context& io, net::UniqueFd listener, net::GroupSecret secret);
  ~DataPort();

  // Blocks the calling thread until this rank is connected to every other rank of `plan` on every
  // lane, the deadline passes, or `cancel_fd` becomes readable (then ErrorCode::aborted).
  Status form_mesh(const MeshPlan& plan, net::Deadline deadline, int cancel_fd,
                   MeshSockets& sockets);

  // The generation formed by the last form_mesh() has ended: hellos are kept again until the next
  // plan comes.
  void expect_new_plan();

 private:
  struct Loop;  // the part that lives on the event loop

  std::shared_ptr<Loop> loop_;
};

}  // namespace gradsync::daemon
