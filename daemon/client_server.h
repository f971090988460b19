// Serves the local clients of a worker on its unix socket, on the worker's op thread's event loop:
// a hello, the group's plan on request, shared-memory regions handed over once each, and ops,
// which run on that thread as their requests are read (a hand-off to another thread would cost
// every op a wake-up). One client at a time submits ops for the rank (its op stream: ops pair
// across ranks by their place in it); a second is refused with an error naming the first, while
// read-only connections (a hello, the plan) are always served; a client of another user is
// refused unless the worker was told to serve that user. A client that sends something
// malformed is told why (or, if its stream is unreadable, disconnected); the daemon and the other
// clients carry on. When the group moves to a new generation, a client's ops fail with
// GROUP_CHANGED until it has sent a hello again (Client::group()) and so taken note of its new rank
// and world size: no op of a stream is paired across generations.
#pragma once

#include <chrono>
#include <functional>
#include <memory>

#include "gradsync.pb.h"
#include "net/shared_memory.h"
#include "net/unique_fd.h"

namespace asio {
class io_context;
}

namespace gradsync::daemon {

class ClientSession;

struct PendingOp {
  std::shared_ptr<ClientSession> session;
  proto::SubmitOp op;
  std::shared_ptr<net::SharedRegion> region;  // null for ops without bytes or an unknown region
  std::uint64_t stream_sequence = 0;          // 1 for the submitting client's first op, and so on
};

// Runs one op to completion and returns the client's reply; called with no other op running.
using OpRunner = std::function<proto::DaemonToClient(const PendingOp&)>;
// The worker's part of a status reply; the server adds what it knows of its clients.
using StatusSource = std::function<proto::DaemonStatus()>;

class ClientServer {
 public:
  // Starts accepting on `io`. Clients of the daemon's own user and root are served, and those of
  // `client_uid` unless it is -1; any other is refused with the reason.
  ClientServer(asio::io_context& io, net::UniqueFd listener, int client_uid,
               proto::DaemonHello hello, proto::GroupPlan plan, OpRunner run, StatusSource status);
  ~ClientServer();

  // The generation ended: a hello is answered once the next one has formed. On the op thread.
  void generation_ended();
  // The group's next generation, with this rank's new hello and plan. On the op thread.
  void new_generation(proto::DaemonHello hello, proto::GroupPlan plan);
  // The generation's plan has a new table version. On the op thread.
  void new_plan(proto::GroupPlan plan);

 private:
  struct State;
  std::shared_ptr<State> state_;
};

}  // namespace gradsync::daemon
