// A worker's data port and the forming of its data connections: a rank connects to every lower
// rank and accepts every higher one, each connection opened by a hello frame (generation, rank,
// world size). The port is served on the worker's control event loop for the worker's whole life:
// every connection's hello is read with a deadline of its own while others are read, so idle or
// slow strangers delay nobody; one that does not open with a valid hello from an expected rank,
// from that rank's address, proving the group secret if there is one, is logged and closed, and
// once the mesh has formed every new connection is turned away. Once the plan is known, an address
// other than the group's may be opening at most 128 connections at once (OpeningsPerAddress).
#pragma once

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

class DataPort {
 public:
  // Takes the listening socket and serves it on `io`; hellos that arrive before form_mesh() are
  // judged once it has the plan. With a group secret, both ends of every connection prove it.
  DataPort(asio::io_context& io, net::UniqueFd listener, net::GroupSecret secret);
  ~DataPort();

  // Blocks the calling thread until this rank is connected to every other rank of `plan`
  // (`sockets[r]`, invalid for this rank), the deadline passes, or `cancel_fd` becomes readable
  // (then ErrorCode::aborted).
  Status form_mesh(const MeshPlan& plan, net::Deadline deadline, int cancel_fd,
                   std::vector<net::UniqueFd>& sockets);

  // The generation formed by the last form_mesh() has ended: hellos are kept again until the next
  // plan comes.
  void expect_new_plan();

 private:
  struct Loop;  // the part that lives on the event loop

  std::shared_ptr<Loop> loop_;
};

}  // namespace gradsync::daemon
