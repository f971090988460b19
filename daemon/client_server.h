// Serves the local clients of a worker on its unix socket, on the worker's op thread's event loop:
// a hello, the group's plan on request, shared-memory regions handed over once each, and ops,
// which run on that thread as they are read (a hand-off to another thread would cost every op a
// wake-up). Ops come through each connection's op queue in shared memory (net/op_queue.h), which
// the server spins on for a while after serving one, and their results go back the same way; an
// op may also come as a request on the socket, answered there (the library sends none). The daemon
// serves one or more local ranks (--local-ranks); a client says which it is in its hello. One
// client at a time submits ops for each local rank (its op stream: ops pair across ranks by their
// place in it); a second is refused with an error naming the first, while read-only connections (a
// hello, the plan) are always served; a client of another user is refused unless the worker was
// told to serve that user. Once every local rank has submitted its next op, they run as one. A
// local rank that does not submit its op within the op's timeout, or whose client leaves first,
// fails that op on every rank, and its own op at that place fails when it comes. A client that
// sends something malformed is told why (or, if its stream is unreadable, disconnected); the daemon
// and the other clients carry on. When the group moves to a new generation, a client's ops fail
// with GROUP_CHANGED until it has sent a hello again (Client::group()) and so taken note of its new
// rank and world size: no op of a stream is paired across generations.
#pragma once

#include <chrono>
#include <functional>
#include <memory>
#include <vector>

#include "collective/status.h"
#include "gradsync.pb.h"
#include "net/shared_memory.h"
#include "net/socket.h"
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
  int local_rank = 0;
  bool queued = false;  // it came through the client's op queue: answered there (and a failure's
                        // reason on the socket)
};

// The ops at one place of every local rank's stream, which the worker runs as one op.
struct LocalOps {
  std::vector<PendingOp> ops;  // by local rank; those of `missing` left out
  Status missing;              // why some local rank's op will not come; the op then fails
};

// Runs the ops to completion and returns their clients' replies, in the order of `ops.ops`;
// called with no other op running.
using OpRunner = std::function<std::vector<proto::DaemonToClient>(const LocalOps&)>;
// The worker's part of a status reply; the server adds what it knows of its clients.
using StatusSource = std::function<proto::DaemonStatus()>;

class ClientServer {
 public:
  // Starts accepting on `io`. Clients of the daemon's own user and root are served, and those
  // `access` names; any other is refused with the reason. `hello` is local rank 0's;
  // its local_ranks says how many the daemon serves, its spin_us how long the server spins on
  // the clients' op queues after serving one before it sleeps.
  ClientServer(asio::io_context& io, net::UniqueFd listener, net::ClientAccess access,
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
